"""One self-contained HTML report: figures inlined as SVG, tables, every run's spec.

No script or style is fetched from anywhere, so the file works offline and can be
mailed or archived as is. Each section is one (task, sweep) pair; each figure is
titled with task, division, hardware and date; every table row links to the run's
resolved spec and environment at the end of the page.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from matplotlib.figure import Figure

import dmlbench
from dmlbench.files import check_output_folder, write_file
from dmlbench.prices import Price
from dmlbench.report import (
    analysis,
    breakdown_figures,
    figures,
    formats,
    frames,
    prediction_figures,
)
from dmlbench.report.drawing import WIDTH, fit_labels
from dmlbench.report.export import to_csv
from dmlbench.report.formats import plural, status_words
from dmlbench.report.html_tables import (
    comm_view,
    prediction_view,
    runs_view,
    scaling_view,
    variant_legend_view,
)
from dmlbench.report.notes import section_notes
from dmlbench.report.tables import (
    calibration_text,
)
from dmlbench.report.variants import variant_legend
from dmlbench.results.records import CommRun, RunRecord
from dmlbench.results.schema import PHASES


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
    """Where the runs ran, for a section's title: the GPUs they trained on, and the
    host's CPU, or how many hosts (imported runs: how many systems)."""
    hosts = runs[["host", "cpu_model", "cores"]].drop_duplicates()
    gpus = [d for d in dict.fromkeys(runs.get("device", ())) if d and d != "cpu"]
    trained_on = gpus[0] if len(gpus) == 1 else f"{len(gpus)} kinds of GPU" if gpus else ""
    if len(hosts) > 1:
        imported = "system" in runs and bool(runs["system"].notna().all())
        where = f"{hosts['host'].nunique()} {'systems' if imported else 'hosts'}"
    else:
        host = hosts.iloc[0]
        cpu = re.sub(r"\s+", " ", str(host["cpu_model"]).replace("(R)", "").replace("(TM)", ""))
        where = f"{cpu}, {int(host['cores'])} cores" if pd.notna(host["cores"]) else cpu
    return f"{trained_on} · {where}" if trained_on else where


def section_title(runs: pd.DataFrame) -> str:
    division = "+".join(sorted(set(runs["division"])))
    date = str(runs["created_at"].max())[:10]
    titles = set(runs["title"]) if "title" in runs else {runs["task"].iloc[0]}
    name = titles.pop() if len(titles) == 1 else runs["task"].iloc[0]  # else in the variants
    return f"{name} · {division} division · {_hardware(runs)} · {date}"


def build_sections(
    runs: Sequence[RunRecord],
    *,
    budget_s: float | None = None,
    price: Price | None = None,
    include_disturbed: bool = False,
) -> list[Section]:
    frame = frames.runs_frame(runs)
    if frame.empty:
        return []
    evals = frames.evals_frame(runs)
    table = analysis.scaling_table(
        frame,
        budget_s=budget_s,
        evals=evals,
        price=price,
        include_disturbed=include_disturbed,
    )
    sections = []
    for (task, sweep), members in frame.groupby(frames.GROUP, sort=False):
        # none when every run of the section is still running (not a result yet)
        rows = table[(table["task"] == task) & (table["sweep"] == sweep)] if len(table) else table
        section = Section(
            task=str(task),
            sweep=str(sweep),
            title=section_title(members),
            runs=members,
            table=rows.reset_index(drop=True),
            evals=evals[evals["run_id"].isin(members["run_id"])],
        )
        section.notes = section_notes(members, section.table)
        if price is not None and (note := analysis.unpriced_note(section.table, price)):
            section.notes.append(note)
        section.figures = _figures(section, price)
        sections.append(section)
    return sections


def _figures(section: Section, price: Price | None) -> dict[str, Figure]:
    table, title = section.table, section.title
    made: dict[str, Figure] = {}
    finished = table[table["finished"] > 0] if len(table) else table
    if finished.empty:
        return made
    # a speedup needs two worker counts of one variant (MLPerf's systems: one each)
    if finished.groupby("variant")["workers"].nunique().max() > 1:
        made["speedup"] = figures.speedup(finished, title)
        made["efficiency"] = figures.efficiency(finished, title)
    synthetic = section.runs["status"] == "throughput"
    if synthetic.any():  # synthetic data: DLBS's tables
        made["throughput"] = figures.throughput(finished, title)
    else:
        made["time-to-accuracy"] = figures.time_to_accuracy(finished, title)
    if not section.evals.empty:
        target = section.runs["target"].dropna()
        value = target.iloc[0] if len(target) else None
        by_loss = "goal" in section.runs and (section.runs["goal"] == "loss").any()
        evals = section.evals.merge(section.runs[["run_id", "variant"]], on="run_id")
        made["curves"] = figures.curves(
            evals,
            finished,
            None if by_loss or value is None else float(value),
            title,
            target_loss=float(value)
            if by_loss and value is not None
            else _target_loss(section.runs["task"].iloc[0]),
        )
    if finished[[f"{phase}_s" for phase in PHASES]].notna().any(axis=None):
        made["phases"] = breakdown_figures.phases(finished, title)  # an imported run has no phases
    # variants that send different amounts at one worker count: e.g. an algorithm sweep
    if finished.groupby("workers")["bytes_per_step_mean"].nunique().max() > 1:
        made["bytes-vs-step-time"] = breakdown_figures.bytes_and_step_time(finished, title)
    costs = finished.filter(["cost_to_target", "cost_mean"])  # of the runs the price is for
    if price is not None and costs.notna().any(axis=None) and not synthetic.all():
        made["cost"] = breakdown_figures.cost(finished, price.label, title, price.currency)
    return made


def _target_loss(task: str) -> float | None:
    """The task's reference goal in test loss, if it has one (a plugin's task whose
    module is not imported here has none)."""
    from dmlbench.errors import DmlbenchError
    from dmlbench.tasks import get_task

    try:
        return get_task(task).target_loss
    except DmlbenchError:
        return None


def svg_of(fig: Figure) -> str:
    buffer = io.StringIO()
    fit_labels(fig).savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg") :], flags=re.S)
    size = re.compile(r'<svg([^>]*?) width="[^"]*" height="[^"]*"')
    return size.sub(r'<svg\1 class="plot-svg"', svg, count=1)  # scales with the page


def save_pngs(sections: Sequence[Section], folder: Path, dpi: int = 200) -> list[Path]:
    """Each figure as ``folder/<section>-<figure>.png``, written as any output file is;
    where a section's figures name variants by letter, the key to the letters beside
    them as ``<section>-variants.csv`` (the report's "Variants" table), so a figure
    taken into a paper can be read."""
    check_output_folder(folder, "--png folder")
    paths = []
    for section in sections:
        for name, fig in section.figures.items():
            image = io.BytesIO()
            fit_labels(fig).savefig(image, format="png", dpi=dpi)
            paths.append(
                write_file(folder / f"{section.slug}-{name}.png", image.getvalue(), "figure")
            )
        legend = variant_legend(section.table["variant"]) if "variant" in section.table else None
        if section.figures and legend is not None and not legend.empty:
            text = to_csv(legend).encode()  # a cell that reads as a formula, quoted
            paths.append(write_file(folder / f"{section.slug}-variants.csv", text, "legend"))
    return paths


def comm_section(comm_runs: Sequence[CommRun]) -> Section | None:
    """The communication micro-benchmarks as one section (figure + table)."""
    frame = frames.comm_frame(comm_runs)
    if frame.empty:
        return None
    first = comm_runs[0]
    hosts = pd.DataFrame(
        [{"host": r.host, "cpu_model": r.cpu_model, "cores": r.cores} for r in comm_runs]
    )
    title = (
        f"{first.op} micro-benchmark · {_hardware(hosts)} · "
        f"{max(r.created_at for r in comm_runs)[:10]}"
    )
    section = Section(
        "communication", "micro-benchmarks", title, frame, frame, pd.DataFrame(), kind="comm"
    )
    section.figures = {"allreduce": prediction_figures.comm_bandwidth(frame, title)}
    return section


def prediction_sections(predictions: Sequence[dict[str, Any]]) -> list[Section]:
    """One section per task simulated: predicted speedup vs workers per network."""
    sections = []
    for result in predictions:
        rows = pd.DataFrame(result["predictions"])
        if rows.empty:
            continue
        rows["currency"] = result.get("currency")  # the cost's; older predictions lack it
        calibration = result["calibration"]
        title = (
            f"{result['task']} · predicted by the performance model · calibrated on "
            f"{plural(calibration['runs'], 'run')} · {str(result.get('created_at', ''))[:10]}"
        )
        section = Section(
            result["task"], "predicted", title, rows, rows, pd.DataFrame(), kind="predicted"
        )
        section.figures = {
            "speedup": prediction_figures.predicted_speedup(result["predictions"], title)
        }
        assumed = not rows["epochs_measured"].all()
        section.notes = [
            f"Calibration: {calibration_text(calibration)}."
            + (" Epochs to the target are assumed where marked *." if assumed else "")
        ]
        price = result.get("unpriced") or (
            f"cost at {result['price']}" if "price" in result else ""
        )
        if price:  # what the cost column says, as `simulate` prints it
            section.notes.append(formats.sentence(price))
        sections.append(section)
    return sections


def _figures_view(section: Section) -> list[dict[str, Any]]:
    """The section's figures; one of panels side by side (drawn :data:`WIDE`) takes the
    page's whole row, so every figure's fonts are shown at one size."""
    return [
        {"name": name, "svg": svg_of(fig), "wide": fig.get_figwidth() > 1.5 * WIDTH}
        for name, fig in section.figures.items()
    ]


def _section_view(section: Section, budget_s: float | None) -> dict[str, Any]:
    """What the template needs of a section: headings, notes, figures, tables."""
    view: dict[str, Any] = {
        "slug": section.slug,
        "notes": section.notes,
        "count": len(section.runs),
    }
    if section.kind == "comm":
        view.update(
            heading="Communication micro-benchmarks",
            meta=f"{section.title}. busbw = algbw × 2(n−1)/n (NCCL-tests' definition); "
            "latency is the median over repeats, a repeat lasting as long as its slowest rank.",
            figures=_figures_view(section),
            tables=[{"title": "", "table": comm_view(section.runs)}],
        )
    elif section.kind == "predicted":
        view.update(
            heading=f"{section.task} · predicted scaling",
            meta=section.title,
            figures=_figures_view(section),
            tables=[{"title": "", "table": prediction_view(section.runs)}],
        )
    else:
        view.update(
            heading=f"{section.task} · {section.sweep}",
            meta=section.title,
            figures=_figures_view(section),
            tables=[
                *variant_legend_view(section.table),
                {"title": "Scaling table", "table": scaling_view(section.table, budget_s)},
                {"title": "Runs", "table": runs_view(section.runs)},
            ]
            if len(section.table)  # else every run of it is still running
            else [{"title": "Runs", "table": runs_view(section.runs)}],
        )
    return view


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dmlbench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails loudly, not as ""
        trim_blocks=True,
    )
    env.filters["plural"] = plural
    env.filters["status_words"] = status_words
    return env.get_template("report.html.j2")


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
    training = [_section_view(section, budget_s) for section in sections]
    others = [_section_view(s, budget_s) for s in ([comm] if comm else []) + list(predicted)]
    return _template().render(
        runs=runs,
        store=store,
        generated=datetime.now(UTC).isoformat(timespec="seconds"),
        version=dmlbench.__version__,
        price=price,
        training=training,
        sections=training + others,
    )


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
    include_disturbed: bool = False,
) -> tuple[list[Section], list[Path]]:
    """Write the HTML report (and PNGs of every figure when ``png_dir`` is given)."""
    sections = build_sections(
        runs, budget_s=budget_s, price=price, include_disturbed=include_disturbed
    )
    comm = comm_section(comm_runs)
    predicted = prediction_sections(predictions)
    page = render_html(
        sections,
        runs,
        store=store,
        budget_s=budget_s,
        price=price,
        comm=comm,
        predicted=predicted,
    )
    sections = [*sections, *([comm] if comm else []), *predicted]
    write_file(out, page, "report")
    pngs = save_pngs(sections, png_dir) if png_dir else []
    return sections, pngs
