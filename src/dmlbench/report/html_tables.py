"""The HTML report's tables as its template draws them: every cell already text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from dmlbench.report import formats
from dmlbench.report.analysis import in_number_order
from dmlbench.report.formats import (
    SCOPE_NOTE,
    SCOPES,
    fmt,
    goal_value,
    microseconds,
    milliseconds,
    seconds,
    status_words,
)
from dmlbench.report.tables import (
    aat_note,
    elastic_note,
    prediction_columns,
    scaling_columns,
)
from dmlbench.report.variants import short_labels, variant_legend


@dataclass(frozen=True)
class Link:
    """A cell that links within the page (a run's id, to its spec at the end)."""

    text: str
    href: str


@dataclass
class Row:
    """A row's cells, and the CSS class that colours it (a run's status)."""

    cells: list[str | Link]
    css: str = ""


@dataclass
class TableView:
    """A table as the template draws it: every cell already written as text."""

    head: list[str]
    rows: list[Row]
    caption: str = ""


def scaling_view(table: pd.DataFrame, budget_s: float | None) -> TableView:
    """A section's scaling table (``analysis.scaling_table``'s rows), its variants named
    as the figures name them, and a caption for its marks."""
    names = short_labels(table["variant"])  # as the figures and the legend name them
    table = table.assign(variant=table["variant"].map(names))
    columns = scaling_columns(table, budget_s)
    aat = f" {note}." if (note := aat_note(table, budget_s)) else ""
    return TableView(
        [title for title, _ in columns],
        [Row([str(cell(row)) for _, cell in columns]) for _, row in table.iterrows()],
        f"Means over finished runs; TTA over runs that reached the target.{aat}"
        + (" * oversubscribed." if table["oversubscribed"].any() else "")
        + (" † timed by disturbed runs only." if table["timed_disturbed"].any() else "")
        + (f" {note}." if (note := elastic_note(table)) else ""),
    )


def variant_legend_view(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The table that spells out the figures' variant letters (none when labels are short)."""
    legend = variant_legend(table["variant"])
    if legend.empty:
        return []
    rows = [Row([str(cell) for cell in row]) for row in legend.itertuples(index=False)]
    view = TableView(
        list(legend.columns), rows, "What differs between the variants the figures name by letter."
    )
    return [{"title": "Variants", "table": view}]


def runs_view(runs: pd.DataFrame) -> TableView:
    """A section's runs (``frames.runs_frame``'s rows), each linked to its spec."""
    names = short_labels(runs["variant"])
    varied = len(names) > 1
    head = [
        "run",
        "N",
        *(["variant"] if varied else []),
        "seed",
        "status",
        "TTA s",
        "best",
        "epochs",
        "step ms",
        "comm max",
        "started",
    ]
    rows = []
    # a variant's repeats together (v0.7's systems at 8 devices read A, B, A, B, ...)
    order = ["workers", "variant", "seed", "created_at"]
    for _, run in runs.sort_values(order, kind="stable", key=in_number_order).iterrows():
        cells: list[str | Link] = [Link(run["run_id"], f"#run-{run['run_id']}")]
        workers = f"{'≤' * bool(run['elastic'])}{run['workers']}"  # a Dask fit: up to N
        cells += [workers, *([names[run["variant"]]] if varied else [])]
        cells += [
            str(run["seed"]),
            status_words(run["status"])
            + ("†" if run["disturbed"] else "")
            + (", redone" if bool(run.get("redone", False)) else ""),
            seconds(run["tta_s"]),
            goal_value(run["goal"], run["best"], 2, run["task"]),
            fmt(run["epochs"], ".1f"),
            milliseconds(run["step_time_s"]),
            fmt(run["comm_ratio_max"], ".1%"),
            str(run["created_at"]),
        ]
        rows.append(Row(cells, css=f"status-{run['status']}"))
    caption = (
        "† disturbed: other processes took CPU its workers asked for, or a hypervisor did."
        if runs["disturbed"].any()
        else ""
    )
    if "redone" in runs and runs["redone"].any():  # the tables count the later run
        caption += " Redone: a later run of the same point replaced it in the tables."
    return TableView(head, rows, caption.strip())


def comm_view(runs: pd.DataFrame) -> TableView:
    """The micro-benchmarks' table: a row per run and message size."""
    scoped = "scope" in runs and runs["scope"].notna().any()
    head = ["run", "backend", "N", "network", *(["scope"] if scoped else []), "size B", "iter"]
    head += ["latency µs", "min µs", "max µs", "algbw MB/s", "busbw MB/s"]
    rows = []
    for _, r in runs.iterrows():
        nodes = int(r.get("nodes") or 1)
        on = formats.layout(nodes, r["workers"] // nodes, compact=True)
        star = "*" * bool(r["oversubscribed"])  # more CPU workers than cores
        cells: list[str | Link] = [r["run_id"], r["backend"], f"{r['workers']}{on}{star}"]
        cells += [r["network"], *([SCOPES.get(r["scope"] or "", "")] if scoped else [])]
        cells += [f"{r['bytes']:,}", str(r["iterations"])]
        cells += [microseconds(r[key]) for key in ("latency_s", "latency_min_s", "latency_max_s")]
        cells += [f"{r['algbw'] / 1e6:,.2f}", f"{r['busbw'] / 1e6:,.2f}"]
        rows.append(Row(cells))
    over = "* oversubscribed: more workers than cores, so the times include waiting for one."
    notes = (SCOPE_NOTE if scoped else "", over if runs["oversubscribed"].any() else "")
    return TableView(head, rows, " ".join(filter(None, notes)))


def prediction_view(rows: pd.DataFrame) -> TableView:
    """A task's predictions: a row per network, algorithm and worker count."""
    columns = prediction_columns(rows["currency"].iloc[0])
    cells = [Row([cell(r) for _, cell in columns]) for _, r in rows.iterrows()]
    return TableView([title for title, _ in columns], cells)
