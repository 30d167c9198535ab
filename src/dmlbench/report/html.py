"""One self-contained HTML report: figures inlined as SVG, tables, every run's spec.

No script or style is fetched from anywhere, so the file works offline and can be
mailed or archived as is. Each section is one (task, sweep) pair; each figure is
titled with task, division, hardware and date; every table row links to the run's
resolved spec and environment at the end of the page.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

import dmlbench
from dmlbench.report import analysis, figures
from dmlbench.report.formats import fmt, seconds
from dmlbench.report.prices import Price
from dmlbench.report.tables import PREDICTION_COLUMNS, scaling_columns
from dmlbench.results.records import CommRun, RunRecord


@dataclass
class Section:
    task: str
    sweep: str
    title: str
    runs: pd.DataFrame
    table: pd.DataFrame
    evals: pd.DataFrame
    figures: dict[str, Figure] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kind: str = "training"  # training runs, "comm" micro-benchmarks, or "predicted"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", f"{self.task}-{self.sweep}").strip("-").lower()


def _hardware(runs: pd.DataFrame) -> str:
    hosts = runs[["host", "cpu_model", "cores"]].drop_duplicates()
    if len(hosts) > 1:
        return f"{hosts['host'].nunique()} hosts"
    host = hosts.iloc[0]
    cpu = re.sub(r"\s+", " ", str(host["cpu_model"]).replace("(R)", "").replace("(TM)", ""))
    return f"{cpu}, {int(host['cores'])} cores" if pd.notna(host["cores"]) else cpu


def section_title(runs: pd.DataFrame) -> str:
    division = "+".join(sorted(set(runs["division"])))
    date = str(runs["created_at"].max())[:10]
    return f"{runs['task'].iloc[0]} · {division} division · {_hardware(runs)} · {date}"


def build_sections(
    runs: Sequence[RunRecord],
    *,
    budget_s: float | None = None,
    price: Price | None = None,
) -> list[Section]:
    frame = analysis.runs_frame(runs)
    if frame.empty:
        return []
    evals = analysis.evals_frame(runs)
    table = analysis.scaling_table(
        frame,
        budget_s=budget_s,
        evals=evals,
        price_per_worker_hour=price.per_worker_hour if price else None,
    )
    sections = []
    for (task, sweep), members in frame.groupby(analysis.GROUP, sort=False):
        rows = table[(table["task"] == task) & (table["sweep"] == sweep)]
        section = Section(
            task=str(task),
            sweep=str(sweep),
            title=section_title(members),
            runs=members,
            table=rows.reset_index(drop=True),
            evals=evals[evals["run_id"].isin(members["run_id"])],
        )
        section.notes = _notes(section)
        section.figures = _figures(section, price)
        sections.append(section)
    return sections


def _notes(section: Section) -> list[str]:
    notes = []
    over = section.runs[section.runs["oversubscribed"]]
    if not over.empty:
        cores = int(over["cores"].max())
        counts = ", ".join(str(n) for n in sorted(set(over["workers"])))
        notes.append(
            f"Oversubscribed: {counts} workers ran on a machine with {cores} cores (the "
            "recorded core count), so workers shared cores and their times say more about "
            "the machine than about scaling."
        )
    failed = section.runs[~section.runs["status"].isin(["success", "target_not_reached"])]
    if not failed.empty:
        notes.append(
            f"{len(failed)} run(s) failed or were interrupted; they are listed below and left "
            "out of the timings."
        )
    missed = section.runs[section.runs["status"] == "target_not_reached"]
    if not missed.empty:
        notes.append(
            f"{len(missed)} run(s) finished without reaching the target; they count as not "
            "converged (shown as k/n reached) and are excluded from time-to-accuracy means."
        )
    modes = set(section.table["scaling"]) - {"none"}
    if modes:
        notes.append(
            f"Scaling: {', '.join(sorted(modes))}. Speedup and efficiency are against "
            f"{int(section.table['baseline_workers'].min())} worker(s), the smallest count "
            "present."
        )
    return notes


def _figures(section: Section, price: Price | None) -> dict[str, Figure]:
    table, title = section.table, section.title
    finished = table[table["finished"] > 0]
    made: dict[str, Figure] = {}
    if finished.empty:
        return made
    made["speedup"] = figures.speedup(finished, title)
    made["efficiency"] = figures.efficiency(finished, title)
    made["time-to-accuracy"] = figures.time_to_accuracy(finished, title)
    if not section.evals.empty:
        target = section.runs["target"].dropna()
        made["curves"] = figures.curves(
            section.evals, finished, float(target.iloc[0]) if len(target) else None, title
        )
    made["phases"] = figures.phases(finished, title)
    if price is not None:
        made["cost"] = figures.cost(finished, price.label, title)
    return made


def svg_of(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg") :], flags=re.S)
    size = re.compile(r'<svg([^>]*?) width="[^"]*" height="[^"]*"')
    return size.sub(r'<svg\1 class="plot-svg"', svg, count=1)  # scales with the page


def save_pngs(sections: Sequence[Section], folder: Path, dpi: int = 200) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for section in sections:
        for name, fig in section.figures.items():
            path = folder / f"{section.slug}-{name}.png"
            fig.savefig(path, dpi=dpi)
            paths.append(path)
    return paths


def _scaling_table_html(table: pd.DataFrame, budget_s: float | None) -> str:
    columns = scaling_columns(table, budget_s)
    head = "".join(f"<th>{html.escape(title)}</th>" for title, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(fn(row)))}</td>" for _, fn in columns) + "</tr>"
        for _, row in table.iterrows()
    )
    aat = f" AAT: best accuracy within {budget_s:g} s." if budget_s is not None else ""
    return (
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        "</table></div>"
        f'<p class="caption">Means over finished runs; TTA over runs that reached the target.'
        f"{aat} * oversubscribed.</p>"
    )


def _runs_table_html(runs: pd.DataFrame) -> str:
    head = ("<tr><th>run</th><th>N</th><th>seed</th><th>status</th><th>TTA s</th>"
            "<th>best</th><th>epochs</th><th>step ms</th><th>comm max</th><th>started</th>"
            "</tr>")  # fmt: skip
    rows = []
    for _, run in runs.sort_values(["workers", "seed", "created_at"]).iterrows():
        rid = html.escape(run["run_id"])
        status = html.escape(run["status"])
        rows.append(
            f'<tr class="status-{status}"><td><a href="#run-{rid}">{rid}</a></td>'
            f"<td>{run['workers']}</td><td>{run['seed']}</td><td>{status}</td>"
            f"<td>{seconds(run['tta_s'])}</td><td>{fmt(run['best_metric'], '.2%')}</td>"
            f"<td>{fmt(run['epochs'], '.1f')}</td>"
            f"<td>{fmt(1000 * run['step_time_s'] if pd.notna(run['step_time_s']) else None)}"
            f"</td><td>{fmt(run['comm_ratio_max'], '.1%')}</td>"
            f"<td>{html.escape(str(run['created_at']))}</td></tr>"
        )
    return (
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{''.join(rows)}</tbody>"
        "</table></div>"
    )


def comm_section(comm_runs: Sequence[CommRun]) -> Section | None:
    """The communication micro-benchmarks as one section (figure + table)."""
    frame = analysis.comm_frame(comm_runs)
    if frame.empty:
        return None
    first = comm_runs[0]
    hosts = pd.DataFrame([{"host": r.host, "cpu_model": r.cpu_model, "cores": r.cores}
                          for r in comm_runs])  # fmt: skip
    title = (f"{first.op} micro-benchmark · {_hardware(hosts)} · "
             f"{max(r.created_at for r in comm_runs)[:10]}")  # fmt: skip
    section = Section("communication", "micro-benchmarks", title, frame, frame, pd.DataFrame(),
                      kind="comm")  # fmt: skip
    section.figures = {"allreduce": figures.comm_bandwidth(frame, title)}
    return section


def _comm_html(section: Section) -> str:
    frame = section.runs
    head = ("<tr><th>run</th><th>backend</th><th>N</th><th>network</th><th>size B</th>"
            "<th>iter</th><th>latency µs</th><th>min µs</th><th>max µs</th>"
            "<th>algbw MB/s</th><th>busbw MB/s</th></tr>")  # fmt: skip
    body = "".join(
        f"<tr><td>{html.escape(r['run_id'])}</td><td>{html.escape(r['backend'])}</td>"
        f"<td>{r['workers']}</td><td>{html.escape(r['network'])}</td><td>{r['bytes']:,}</td>"
        f"<td>{r['iterations']}</td><td>{r['latency_s'] * 1e6:,.1f}</td>"
        f"<td>{r['latency_min_s'] * 1e6:,.1f}</td><td>{r['latency_max_s'] * 1e6:,.1f}</td>"
        f"<td>{r['algbw'] / 1e6:,.2f}</td><td>{r['busbw'] / 1e6:,.2f}</td></tr>"
        for _, r in frame.iterrows()
    )
    figs = "".join(
        f"<figure class='plot wide' id='{section.slug}-{name}'>{svg_of(fig)}</figure>"
        for name, fig in section.figures.items()
    )
    return (
        f"<section id='{section.slug}'><h2>Communication micro-benchmarks</h2>"
        f"<p class='meta'>{html.escape(section.title)}. busbw = algbw × 2(n−1)/n "
        "(NCCL-tests' definition); latency is the median over repeats, a repeat lasting as "
        f"long as its slowest rank.</p><div class='grid'>{figs}</div>"
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{body}</tbody></table></div>"
        "</section>"
    )


def prediction_sections(predictions: Sequence[dict[str, Any]]) -> list[Section]:
    """One section per task simulated: predicted speedup vs workers per network."""
    sections = []
    for result in predictions:
        rows = pd.DataFrame(result["predictions"])
        if rows.empty:
            continue
        calibration = result["calibration"]
        title = (
            f"{result['task']} · predicted by the performance model · calibrated on "
            f"{calibration['runs']} run(s) · {str(result.get('created_at', ''))[:10]}"
        )
        section = Section(result["task"], "predicted", title, rows, rows, pd.DataFrame(),
                          kind="predicted")  # fmt: skip
        section.figures = {
            "predicted-speedup": figures.predicted_speedup(result["predictions"], title)
        }
        assumed = not rows["epochs_measured"].all()
        section.notes = [
            f"Compute {calibration['compute_step_s'] * 1e3:.2f} ms per step measured at "
            f"{calibration['workers']} worker(s); {calibration['gradient_bytes'] / 1e6:.2f} MB "
            "of gradients per step."
            + (" Epochs to the target are assumed where marked *." if assumed else "")
        ]
        sections.append(section)
    return sections


def _prediction_html(section: Section) -> str:
    head = "<tr>" + "".join(f"<th>{title}</th>" for title, _ in PREDICTION_COLUMNS) + "</tr>"
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell(r))}</td>" for _, cell in PREDICTION_COLUMNS)
        + "</tr>"
        for _, r in section.runs.iterrows()
    )  # fmt: skip
    figs = "".join(
        f"<figure class='plot' id='{section.slug}-{name}'>{svg_of(fig)}</figure>"
        for name, fig in section.figures.items()
    )
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in section.notes)
    return (
        f"<section id='{section.slug}'><h2>{html.escape(section.task)} · predicted scaling</h2>"
        f"<p class='meta'>{html.escape(section.title)}</p>{notes}<div class='grid'>{figs}</div>"
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{body}</tbody></table></div>"
        "</section>"
    )


def _run_details(run: RunRecord) -> str:
    rid = html.escape(run.run_id)
    parts = {
        "resolved spec": run.spec,
        "differs from the reference recipe": run.deviations,
        "environment": run.environment,
    }
    blocks = "".join(
        f"<h4>{name}</h4><pre>{html.escape(json.dumps(value, indent=2, default=str))}</pre>"
        for name, value in parts.items()
    )
    error = f"<p>error: {html.escape(run.error)}</p>" if run.error else ""
    return (
        f'<details id="run-{rid}"><summary>{rid} · {html.escape(run.task)} · '
        f"{run.workers} workers · seed {run.seed} · {html.escape(run.status)}"
        f"</summary>{error}<p>run folder: <code>{html.escape(run.run_dir)}</code>; "
        f"re-run with <code>dmlbench run --config {html.escape(run.run_dir)}/spec.json"
        f"</code></p>{blocks}</details>"
    )


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1100px;padding:0 1rem;color:#222;line-height:1.4}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1rem}
figure.plot{margin:0;border:1px solid #eee;border-radius:6px;padding:.5rem}
figure.wide{grid-column:1/-1}
.plot-svg{width:100%;height:auto;display:block}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0;width:100%}
th,td{border-bottom:1px solid #eee;padding:.25rem .5rem;text-align:right;white-space:nowrap}
th{background:#fafafa}td:first-child,th:first-child{text-align:left}
.caption,.meta{color:#666;font-size:.85rem}.note{background:#fff6e5;border-left:4px solid
#f0a020;padding:.4rem .8rem;margin:.4rem 0}tr.status-failed td,tr.status-interrupted td{
color:#b00}pre{background:#f7f7f7;padding:.5rem;overflow:auto;font-size:.8rem}
.scroll{overflow-x:auto}details{margin:.3rem 0}summary{cursor:pointer}
"""

# Counts the figures the browser actually laid out; tests read these attributes.
RENDER_CHECK = """
(function(){var figs=document.querySelectorAll('figure.plot'),ok=0;
figs.forEach(function(f){var s=f.querySelector('svg');if(!s)return;var r=s.getBoundingClientRect();
if(r.width>100&&r.height>50&&s.querySelectorAll('path,use,text').length>10)ok++;});
document.body.setAttribute('data-figures',figs.length);
document.body.setAttribute('data-rendered',ok);})();
"""


def render_html(
    sections: Sequence[Section],
    runs: Sequence[RunRecord],
    *,
    store: str,
    budget_s: float | None,
    price: Price | None,
    comm: Section | None = None,
    predicted: Sequence[Section] = (),
) -> str:
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>dmlbench report · {len(runs)} runs</title><style>{STYLE}</style></head><body>",
        "<h1>dmlbench report</h1>",
        f"<p class='meta'>{len(runs)} runs from <code>{html.escape(store)}</code>; generated "
        f"{datetime.now(UTC).isoformat(timespec='seconds')} by dmlbench {dmlbench.__version__}."
        + (f" Cost: {html.escape(price.label)} ({html.escape(price.source)})." if price else "")
        + "</p>",
    ]
    if not sections:
        out.append("<p>No runs stored yet: run <code>dmlbench sweep FILE</code> first.</p>")
    out.append("<ul>" + "".join(
        f"<li><a href='#{s.slug}'>{html.escape(s.task)} · {html.escape(s.sweep)}</a> "
        f"({len(s.runs)} runs)</li>" for s in sections) + "</ul>")  # fmt: skip
    for section in sections:
        out.append(f"<section id='{section.slug}'><h2>{html.escape(section.task)} · "
                   f"{html.escape(section.sweep)}</h2>")  # fmt: skip
        out.append(f"<p class='meta'>{html.escape(section.title)}</p>")
        out.extend(f"<p class='note'>{html.escape(n)}</p>" for n in section.notes)
        out.append("<div class='grid'>")
        for name, fig in section.figures.items():
            wide = " wide" if name == "curves" else ""
            out.append(f"<figure class='plot{wide}' id='{section.slug}-{name}'>{svg_of(fig)}"
                       "</figure>")  # fmt: skip
        out.append("</div><h3>Scaling table</h3>")
        out.append(_scaling_table_html(section.table, budget_s))
        out.append("<h3>Runs</h3>")
        out.append(_runs_table_html(section.runs))
        out.append("</section>")
    if comm is not None:
        out.append(_comm_html(comm))
    out.extend(_prediction_html(section) for section in predicted)
    out.append("<h2 id='runs'>Every run: resolved spec and environment</h2>")
    out.extend(_run_details(run) for run in runs)
    out.append(f"<script>{RENDER_CHECK}</script></body></html>")
    return "\n".join(out)


def write_report(
    runs: Sequence[RunRecord],
    out: Path,
    *,
    store: str,
    budget_s: float | None = None,
    price: Price | None = None,
    png_dir: Path | None = None,
    comm_runs: Sequence[CommRun] = (),
    predictions: Sequence[dict[str, Any]] = (),
) -> tuple[list[Section], list[Path]]:
    """Write the HTML report (and PNGs of every figure when ``png_dir`` is given)."""
    sections = build_sections(runs, budget_s=budget_s, price=price)
    comm = comm_section(comm_runs)
    predicted = prediction_sections(predictions)
    page = render_html(
        sections, runs, store=store, budget_s=budget_s, price=price, comm=comm,
        predicted=predicted,
    )  # fmt: skip
    sections = [*sections, *([comm] if comm else []), *predicted]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    pngs = save_pngs(sections, png_dir) if png_dir else []
    return sections, pngs
