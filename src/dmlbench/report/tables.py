"""Column definitions shared by the terminal, HTML and compare tables (formatting only;
numbers are written by :mod:`dmlbench.report.formats`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from dmlbench.qualities import shared_quality
from dmlbench.report.formats import (
    MISSING,
    fmt,
    goal_value,
    human_bytes,
    mean_std,
    milliseconds,
    missing,
    money,
    plural,
    seconds,
    share,
)
from dmlbench.report.variants import SHORT_LABEL, short_labels

Column = tuple[str, str, Callable[[pd.Series], str]]


def _workers(row: pd.Series) -> str:
    """``N``, starred when oversubscribed, daggered when timed by disturbed runs; ``≤N``
    for Dask fits, which may use up to N workers."""
    marks = ("*" if row["oversubscribed"] else "") + ("†" if row.get("timed_disturbed") else "")
    return f"{'≤' * bool(row.get('elastic'))}{int(row['workers'])}{marks}"


def batch_text(row: pd.Series | Mapping[str, Any], between: str = " / ") -> str:
    """``b / B``, and ``→B'`` after it where a Dask fit's batch grew to B' (a scaling
    table's row, or a run's numbers under the same names)."""
    local, global_ = int(row["local_batch"]), int(row["global_batch"])
    local_top = int(row.get("local_batch_max", local))
    global_top = int(row.get("global_batch_max", global_))
    batch = f"{_span(local, local_top)}{between}{_span(global_, global_top)}"
    grown = row.get("largest_batch")
    if not row.get("elastic") or grown is None or missing(grown) or grown <= global_:
        return batch
    return f"{batch}→{int(grown):,}"


def _span(low: int, high: int) -> str:
    """``32``, or ``32–64`` where a row's runs span batches (grouped without N); with
    thousands separators, as every count is written (``65/33,280``)."""
    return f"{low:,}" if high == low else f"{low:,}–{high:,}"


ELASTIC = "≤N, B→B': a Dask fit, on up to N workers, its batch grown from B to B'"


def elastic_note(table: pd.DataFrame) -> str | None:
    """What ``≤N`` and ``B→B'`` mean, where ``table`` has a Dask fit (None: it has none)."""
    return ELASTIC if "elastic" in table and table["elastic"].any() else None


def _bytes(value: Any) -> str:
    return MISSING if missing(value) else human_bytes(value)


def _goal_value(row: pd.Series, column: str) -> str:
    """A goal's value in a scaling row: a percentage, a loss, an imported quality."""
    return goal_value(row.get("goal", "accuracy"), row.get(column), 2, row.get("task", ""))


def disturbed_note(table: pd.DataFrame) -> str | None:
    """What the dagger means, for the rows of ``table`` that carry one (None: none do)."""
    if "timed_disturbed" not in table or not table["timed_disturbed"].any():
        return None
    disturbed = table[table["timed_disturbed"]]
    counts = ", ".join(str(int(n)) for n in sorted(set(disturbed.get("workers", []))))
    where = f"at {counts} workers " if counts else ""  # none where grouped by another key
    # a table of one worker count, or grouped by another key, has no speedup to give
    scaled = "workers" in table and table["workers"].nunique() > 1
    left_out = scaled and (table["speedup_tta"].isna() & table["speedup_throughput"].isna()).any()
    note = (
        f"† disturbed: {where}only runs whose workers waited for cores other processes "
        "took were timed"
    )
    if left_out:
        note += "; no speedup or efficiency is given against them (--include-disturbed counts them)"
    return note


def aat_note(table: pd.DataFrame, budget_s: float | None) -> str | None:
    """What the AAT column holds, in the goals of ``table``'s rows (None without a budget)."""
    if budget_s is None:
        return None
    goals = set(table["goal"]) if "goal" in table else set()
    best = f"best {shared_quality(table.get('task', ())).name}"
    if "loss" not in goals:
        what = best
    elif goals == {"loss"}:
        what = "least test loss"
    else:
        what = f"{best} (least test loss for a loss goal)"
    return f"AAT: {what} within {budget_s:g} s"


SCALING_COLUMNS: list[Column] = [
    ("workers", "N", _workers),
    ("variant", "variant", lambda r: r["variant"] or "—"),
    ("batch", "b / B", batch_text),
    ("runs", "reached", lambda r: f"{int(r['converged'])}/{int(r['runs'])}"),
    ("disturbed", "disturbed", lambda r: str(int(r.get("disturbed") or 0))),
    ("tta", "TTA s (mean ± std)", lambda r: mean_std(r["tta_mean"], r["tta_std"])),
    ("olympic", "TTA olympic s", lambda r: seconds(r["tta_olympic"])),
    ("compute", "TTA w/o eval s", lambda r: seconds(r["tta_compute_mean"])),
    ("aat", "AAT", lambda r: _goal_value(r, "aat_mean")),
    ("best", "best", lambda r: _goal_value(r, "best_mean")),
    ("step", "step ms", lambda r: milliseconds(r["step_time_mean"])),
    ("thr", "samples/s", lambda r: fmt(r["throughput_mean"], ",.0f")),
    (
        "sp",
        "speedup TTA / thr",
        lambda r: f"{fmt(r['speedup_tta'])} / {fmt(r['speedup_throughput'])}",
    ),
    (
        "eff",
        "efficiency TTA / step",
        lambda r: f"{fmt(r['efficiency_tta'])} / {fmt(r['efficiency_step'])}",
    ),
    ("bytes", "sent per step", lambda r: _bytes(r.get("bytes_per_step_mean"))),
    ("noise", "noise scale B_simple", lambda r: fmt(r.get("noise_scale_mean"), ",.0f")),
    ("util", "utilisation", lambda r: share(r.get("utilisation_mean"))),
    ("mem", "peak memory", lambda r: _bytes(r.get("peak_memory_max"))),
    (
        "comm",
        "comm mean / max",
        lambda r: f"{fmt(r['comm_ratio_mean'], '.1%')} / {fmt(r['comm_ratio_max'], '.1%')}",
    ),
    ("cost", "cost to target", lambda r: money(r.get("cost_to_target"))),
]


# The terminal shows these, under short titles, to fit 80 columns.
TERMINAL_COLUMNS = {
    "workers": "N",
    "variant": "variant",
    "batch": "b/B",
    "runs": "conv",
    "tta": "TTA s",
    "olympic": "olympic",
    "aat": "AAT",
    "step": "step ms",
    "thr": "samp/s",
    "sp": "speedup",
    "eff": "effic.",
    "comm": "comm",
    "cost": "cost",  # to the target, in the currency the legend says
}


def scaling_columns(
    table: pd.DataFrame,
    budget_s: float | None,
    *,
    terminal: bool = False,
    label_width: int = SHORT_LABEL,
) -> list[tuple[str, Callable[[pd.Series], str]]]:
    """The columns worth showing for ``table``: (title, formatter); in the ``terminal``,
    a variant label longer than ``label_width`` is a letter the legend spells out."""
    chosen = _chosen_columns(table, budget_s)
    if terminal:
        names = short_labels(table["variant"], label_width)
        short = {
            "tta": lambda r: mean_std(r["tta_mean"], r["tta_std"]).replace(" ± ", "±"),
            "sp": lambda r: f"{fmt(r['speedup_tta'])}/{fmt(r['speedup_throughput'])}",
            "eff": lambda r: f"{fmt(r['efficiency_tta'])}/{fmt(r['efficiency_step'])}",
            "comm": lambda r: f"{fmt(r['comm_ratio_max'], '.0%')}",
            "batch": lambda r: batch_text(r, "/"),
            "variant": lambda r: names[r["variant"]],
        }
        return [
            (TERMINAL_COLUMNS[key], short.get(key, fn))
            for key, _, fn in chosen
            if key in TERMINAL_COLUMNS
        ]
    currency = table["currency"].iloc[0] if "currency" in table and len(table) else "USD"
    return [(f"{title}, {currency}" if key == "cost" else title, fn) for key, title, fn in chosen]


def _chosen_columns(table: pd.DataFrame, budget_s: float | None) -> list[Column]:
    skip = set()
    if "disturbed" not in table or not table["disturbed"].any():
        skip.add("disturbed")
    if budget_s is None:
        skip.add("aat")
    if "cost_to_target" not in table:
        skip.add("cost")
    if "bytes_per_step_mean" not in table or not table["bytes_per_step_mean"].notna().any():
        skip.add("bytes")  # runs from before bytes were counted
    if "noise_scale_mean" not in table or not table["noise_scale_mean"].notna().any():
        skip.add("noise")
    for key, column in (("util", "utilisation_mean"), ("mem", "peak_memory_max")):
        if column not in table or not table[column].notna().any():
            skip.add(key)  # runs from before hardware use was measured
    if not (table["variant"] != "").any():
        skip.add("variant")
    if "throughput_only" in table and len(table) and table["throughput_only"].all():
        skip.update(("runs", "tta", "olympic", "compute", "aat", "best"))  # no accuracy
    if "workers" not in table:  # grouped by something else (compare --by nodes)
        skip.update(("workers", "sp", "eff"))
    elif table.empty or table.groupby("variant")["workers"].nunique().max() < 2:
        skip.update(("sp", "eff"))  # a speedup needs two worker counts
    return [column for column in SCALING_COLUMNS if column[0] not in skip]


def calibration_text(calibration: Mapping[str, Any]) -> str:
    """What a prediction was calibrated on (a saved ``calibration``), as the terminal
    and the report both say it."""
    measured = calibration.get("compute_runs")  # absent in predictions saved before
    source = (
        f" ({'run' if len(measured) == 1 else 'runs'} {', '.join(measured)})" if measured else ""
    )
    disturbed = calibration.get("disturbed_runs") or []
    if calibration.get("compute_disturbed"):
        source += " — disturbed by other processes, so compute is overstated"
    elif disturbed:
        source += f"; {plural(len(disturbed), 'disturbed run')} left out"
    setup = calibration.get("setup")  # absent in predictions saved before
    others = calibration.get("other_setups") or {}
    if others:
        source += f"; {plural(sum(others.values()), 'run')} of other setups left out"
    return (
        f"compute {calibration['compute_step_s'] * 1e3:.2f} ms per step measured at "
        f"{plural(calibration['workers'], 'worker')}{f' with {setup}' if setup else ''}"
        f"{source}; {calibration['gradient_bytes'] / 1e6:.2f} MB of gradients per step"
    )


def _shape(row: Any) -> str:
    """``N``, or ``nodes×per node`` for a two-level prediction."""
    nodes = row.get("nodes")
    if nodes is None or missing(nodes):
        return str(int(row["workers"]))
    return f"{int(nodes)}×{int(row['workers']) // int(nodes)}"


# One row of `dmlbench simulate`'s predictions (a dict, as the store keeps it): the
# terminal and the HTML report show these columns.
PREDICTION_COLUMNS: list[tuple[str, Callable[[Any], str]]] = [
    ("network", lambda r: str(r["network"])),
    ("algorithm", lambda r: str(r["algorithm"])),
    ("N", _shape),
    ("B", lambda r: f"{int(r['global_batch']):,}"),
    ("step ms", lambda r: milliseconds(r["step_s"])),
    ("comm", lambda r: fmt(r["comm_ratio"], ".0%")),
    ("epochs", lambda r: f"{r['epochs']:.1f}{'' if r['epochs_measured'] else '*'}"),
    ("TTA s", lambda r: seconds(r["tta_s"])),  # three figures: 0.213, 2,115.4
    ("speedup", lambda r: fmt(r["speedup"])),
    ("cost", lambda r: money(r.get("cost"))),
]


def prediction_columns(currency: str | None) -> list[tuple[str, Callable[[Any], str]]]:
    """:data:`PREDICTION_COLUMNS` with the cost headed by its currency, as the scaling
    tables head theirs (predictions stored before the currency was kept say "cost")."""
    return [
        (f"cost, {currency}" if title == "cost" and currency else title, cell)
        for title, cell in PREDICTION_COLUMNS
    ]
