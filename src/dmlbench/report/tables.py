"""Column definitions shared by the terminal, HTML and compare tables (formatting only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd


def fmt_seconds(value: Any) -> str:
    if value is None or pd.isna(value):
        return "—"
    if value == float("inf"):
        return "∞"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}" if abs(value) < 10 else (
        f"{value:,.1f}"
    )  # fmt: skip


def fmt(value: Any, spec: str = ".2f") -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "—"
    return format(value, spec) if not isinstance(value, str) else value


def mean_std(mean: Any, std: Any) -> str:
    """``12.0 ± 2.0``; just the mean when there is no spread; ``—`` when there is no mean."""
    if mean is None or pd.isna(mean):
        return "—"
    return fmt_seconds(mean) if std is None or pd.isna(std) else (
        f"{fmt_seconds(mean)} ± {fmt_seconds(std)}"
    )  # fmt: skip


def _ms(value: Any) -> str:
    return fmt(None if value is None or pd.isna(value) else 1000 * value, ".2f")


Column = tuple[str, str, Callable[[pd.Series], str]]

SCALING_COLUMNS: list[Column] = [
    ("workers", "N", lambda r: f"{int(r['workers'])}{'*' if r['oversubscribed'] else ''}"),
    ("variant", "variant", lambda r: r["variant"] or "—"),
    ("batch", "b / B", lambda r: f"{int(r['local_batch'])} / {int(r['global_batch'])}"),
    ("runs", "reached", lambda r: f"{int(r['converged'])}/{int(r['runs'])}"),
    ("tta", "TTA s (mean ± std)", lambda r: mean_std(r["tta_mean"], r["tta_std"])),
    ("olympic", "TTA olympic s", lambda r: fmt_seconds(r["tta_olympic"])),
    ("compute", "TTA w/o eval s", lambda r: fmt_seconds(r["tta_compute_mean"])),
    ("aat", "AAT", lambda r: fmt(r.get("aat_mean"), ".2%")),
    ("best", "best", lambda r: fmt(r["best_metric_mean"], ".2%")),
    ("step", "step ms", lambda r: _ms(r["step_time_mean"])),
    ("thr", "samples/s", lambda r: fmt(r["throughput_mean"], ",.0f")),
    ("sp", "speedup TTA / thr",
     lambda r: f"{fmt(r['speedup_tta'])} / {fmt(r['speedup_throughput'])}"),
    ("eff", "efficiency TTA / step",
     lambda r: f"{fmt(r['efficiency_tta'])} / {fmt(r['efficiency_step'])}"),
    ("comm", "comm mean / max",
     lambda r: f"{fmt(r['comm_ratio_mean'], '.1%')} / {fmt(r['comm_ratio_max'], '.1%')}"),
    ("cost", "cost to target", lambda r: fmt(r.get("cost_to_target"), ".4f")),
]  # fmt: skip


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
}


def scaling_columns(
    table: pd.DataFrame, budget_s: float | None, *, terminal: bool = False
) -> list[tuple[str, Callable[[pd.Series], str]]]:
    """The columns worth showing for ``table``: (title, formatter)."""
    if terminal:
        wide = scaling_columns(table, budget_s)
        keys = {title: key for key, title, _ in SCALING_COLUMNS}
        short = {
            "tta": lambda r: mean_std(r["tta_mean"], r["tta_std"]).replace(" ± ", "±"),
            "sp": lambda r: f"{fmt(r['speedup_tta'])}/{fmt(r['speedup_throughput'])}",
            "eff": lambda r: f"{fmt(r['efficiency_tta'])}/{fmt(r['efficiency_step'])}",
            "comm": lambda r: f"{fmt(r['comm_ratio_max'], '.0%')}",
            "batch": lambda r: f"{int(r['local_batch'])}/{int(r['global_batch'])}",
            "variant": lambda r: " ".join(p.partition("=")[2] for p in r["variant"].split()),
        }
        return [
            (TERMINAL_COLUMNS[keys[title]], short.get(keys[title], fn))
            for title, fn in wide
            if keys[title] in TERMINAL_COLUMNS
        ]
    skip = set()
    if budget_s is None:
        skip.add("aat")
    if "cost_to_target" not in table:
        skip.add("cost")
    if not (table["variant"] != "").any():
        skip.add("variant")
    return [(title, fn) for key, title, fn in SCALING_COLUMNS if key not in skip]
