"""Tables for the terminal: tasks, registries, stored runs, scaling and sweep plans
(communication's are in :mod:`dmlbench.cli.views.comm`, a spec's in
:mod:`dmlbench.cli.views.spec`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from dmlbench.cli.views import figures_table
from dmlbench.cli.views.summary import STATUS_STYLE, STATUS_WORDS
from dmlbench.report.formats import fmt, goal_value, plural, seconds
from dmlbench.report.tables import ELASTIC, batch_text
from dmlbench.results.records import RunRecord


def runs_table(runs: list[RunRecord], width: int = 80) -> Table:
    """One line per run, narrow enough for a ``width``-column terminal (80: what
    `dmlbench results > file` renders)."""
    captions = []
    if any(run.division == "open" for run in runs):
        captions.append("* open division (differs from the reference recipe)")
    if any(run.disturbed for run in runs):
        captions.append(
            "† disturbed: other processes took CPU its workers asked for, or a hypervisor "
            "did (dmlbench results RUN says how much)"
        )
    if any(_network(run) for run in runs):
        captions.append("on NAME: under an emulated network (`dmlbench networks`)")
    if any(run.elastic for run in runs):
        captions.append(ELASTIC)
    table = figures_table(plural(len(runs), "stored run"), "\n".join(captions) or None)
    rows = [_run_row(run) for run in runs]
    # A run of this machine's is 22 characters; an imported run's longer name folds.
    # Where a line would pass ``width``, the status wraps between its words first ("no
    # / target"), as rich would otherwise narrow the widest column, the run's, and fold
    # this machine's ids too.
    natural = [
        max([least, *(len(line) for row in rows for line in row[i].split("\n"))])
        for i, least in enumerate(RUN_LEAST)
    ]
    natural[0], natural[4] = min(natural[0], 22), min(natural[4], 11)
    crowded = sum(natural) + len(natural) - 1 > width
    longest_word = max((len(word) for row in rows for word in row[4].split()), default=7)
    table.add_column(RUN_COLUMNS[0], overflow="fold")
    widest = max((len(run.task) + (run.division == "open") for run in runs), default=4)
    table.add_column("task", overflow="fold", min_width=min(widest, 16))  # "name*" unbroken
    table.add_column("N", justify="right", no_wrap=True)
    table.add_column("b/B", no_wrap=True, min_width=5)
    # "throughput only" breaks between its words, as every status does when crowded
    table.add_column("status", max_width=longest_word if crowded else 11)
    table.add_column("TTA", justify="right", no_wrap=True, min_width=6)
    table.add_column("best", justify="right", no_wrap=True, min_width=5)
    table.add_column("ep.", justify="right", no_wrap=True, min_width=4)
    for run, row in zip(runs, rows, strict=True):
        style = STATUS_STYLE.get(run.status, "")
        task, *network = row[1].split("\n")  # under the task: a ninth column did not fit
        task = escape(task) + "".join(f"\n[dim]{escape(line)}[/dim]" for line in network)
        status = f"[{style}]{row[4]}[/{style}]" if style else row[4]
        table.add_row(row[0], task, row[2], row[3], status, *row[5:])
    return table


RUN_COLUMNS = ("run", "task", "N", "b/B", "status", "TTA", "best", "ep.")
RUN_LEAST = (3, 4, 1, 5, 6, 6, 5, 4)  # each column's header, or its min_width


def _run_row(run: RunRecord) -> list[str]:
    """A run's cells in the runs table, as plain text."""
    network = _network(run)
    # a Dask fit: the most workers it may scale to, and its batch as it grew
    batch = {
        "local_batch": run.local_batch,
        "global_batch": run.global_batch,
        "elastic": run.elastic,
        "largest_batch": run.summary.largest_batch,
    }
    return [
        run.run_id,
        run.task + ("*" if run.division == "open" else "") + (f"\non {network}" if network else ""),
        f"≤{run.workers}" if run.elastic else str(run.workers),
        batch_text(batch, "/"),
        STATUS_WORDS.get(run.status, run.status) + "†" * bool(run.disturbed),
        seconds(run.time_to_accuracy_s, unit=True),
        goal_value(run.goal, run.best, task=run.task),
        fmt(run.epochs, ".1f"),
    ]


def _network(run: RunRecord) -> str:
    """The emulated network's name (a profile's, or the rate given), "" when unshaped or
    when the run ran elsewhere (an imported run's system is in its name)."""
    label = "none" if run.external else run.network or "none"
    return "" if label == "none" else label.split(" · ")[0]


def scaling_tables(
    table: Any, budget_s: float | None = None, width: int = 80, by: Sequence[str] = ()
) -> list[Table]:
    """One rich table per (task, sweep) of ``analysis.scaling_table``'s rows; none where
    it has none (every run still running: the running note says so); ``by``: columns
    grouped by in place of the worker count, shown first. Variant labels stand whole
    where the row fits ``width`` columns with them, else as the one key they differ in
    over its values, else as letters the caption spells out (whole, they pushed every
    figure of a row into "…"); see :func:`_fitted_columns`."""
    from dmlbench.report.tables import aat_note, disturbed_note, elastic_note

    tables: list[Table] = []
    if table.empty:
        return tables
    for (task, sweep), rows in table.groupby(["task", "sweep"], sort=False):
        modes = ", ".join(sorted(set(rows["scaling"]) - {"none"}))
        over = rows[rows["oversubscribed"]]
        counts = ", ".join(str(int(n)) for n in sorted(set(over.get("workers", []))))
        cores = f"{int(over['cores'].max())} cores" if not over.empty else ""
        caption = (
            f"* oversubscribed: {f'{counts} workers on' if counts else 'more workers than'} {cores}"
            if not over.empty
            else None
        )
        columns, names = _fitted_columns(rows, budget_s, width, by)
        scaled = any(title == "speedup" for title, _ in columns)
        priced = any(title == "cost" for title, _ in columns)
        accuracy = not ("throughput_only" in rows and rows["throughput_only"].all())
        legend = (
            (
                "conv: runs that reached the target; TTA mean±std over them; olympic: "
                "MLPerf's score (a run short of the target counts as ∞); "
                if accuracy
                else ""
            )
            + (f"{aat}; " if accuracy and (aat := aat_note(rows, budget_s)) else "")
            + ("speedup and effic.: TTA/step time; " if scaled else "")
            + "comm: max over ranks"
            + (f"; cost: {rows['currency'].iloc[0]} to the target" if priced else "")
        )
        spelt = [f"{short}: {label}" for label, short in names.items() if short != label]
        said = (caption, disturbed_note(rows), elastic_note(rows))
        notes = [legend, *spelt, *(n for n in said if n)]
        rich_table = figures_table(
            escape(f"{task} · sweep {sweep}" + (f" · {modes} scaling" if modes else "")),
            escape("\n".join(notes)),
        )
        for title, fn in columns:
            widest = max(len(fn(row)) for _, row in rows.iterrows())
            # a long value (a GPU's name) folds, left-aligned, where every figure was cut
            folds = title in by and widest > GROUP_WIDTH
            rich_table.add_column(
                title,
                justify="left" if folds else "right",
                no_wrap=not folds,
                overflow="fold" if folds else "ellipsis",
                max_width=GROUP_WIDTH if folds else None,
                min_width=widest if title == "variant" else None,
            )
        for _, row in rows.iterrows():
            rich_table.add_row(*(escape(fn(row)) for _, fn in columns))
        tables.append(rich_table)
    return tables


# A grouped-by column's cells fold at this width (`compare --by device`: a GPU's name)
GROUP_WIDTH = 16

# Two-line titles, and a shorter one for a column of letters, where even letters leave a
# row wider than the terminal (`compare --budget` adds the AAT column)
_FOLDED = {"variant": "var.", "TTA s": "TTA\ns", "step ms": "step\nms"}


def _fitted_columns(
    rows: Any, budget_s: float | None, width: int, by: Sequence[str] = ()
) -> tuple[list[Any], dict[str, str]]:
    """The scaling columns for a terminal ``width`` wide (a space between columns), the
    first that fits of: whole variant labels; the one key they differ in over its values
    (titles folded if need be); letters (titles folded if need be). And each variant
    label with the letter that stands for it, where letters do."""
    from dmlbench.report.tables import scaling_columns
    from dmlbench.report.variants import short_labels, variant_pairs

    def spans(columns: list[Any]) -> dict[str, int]:  # a title's longest line, or a cell
        widths = {}
        for title, cell in columns:
            lines = [len(line) for line in title.split("\n")]
            widths[title] = max(lines + [len(cell(row)) for _, row in rows.iterrows()])
            if title in by:  # folds at GROUP_WIDTH
                widths[title] = min(widths[title], max(GROUP_WIDTH, len(title)))
        return widths

    def overflow(columns: list[Any]) -> int:
        return sum(spans(columns).values()) + len(columns) - 1 - width

    def folded(columns: list[Any]) -> list[Any]:
        return [(_FOLDED.get(title, title), cell) for title, cell in columns]

    def group_cell(row: Any, key: str, first: bool) -> str:  # starred and daggered, as N is
        marks = "*" * bool(row.get("oversubscribed")) + "†" * bool(row.get("timed_disturbed"))
        return f"{row[key]}{marks if first else ''}"

    grouped = [
        (key, lambda row, key=key, first=i == 0: group_cell(row, key, first))
        for i, key in enumerate(by)
    ]
    whole = grouped + scaling_columns(rows, budget_s, terminal=True, label_width=width)
    if by and all(variant_pairs(label).keys() <= set(by) for label in rows["variant"]):
        whole = [(title, cell) for title, cell in whole if title != "variant"]  # said by them
    if overflow(whole) <= 0:  # a label longer than the terminal itself is a letter here
        return whole, short_labels(rows["variant"], width)
    room = spans(whole).get("variant", 0) - overflow(whole)
    keyed = _by_key(whole, rows)  # `exchange` over its values, not `exchange=topk`
    for columns in [keyed, folded(keyed)] if keyed else []:
        if overflow(columns) <= 0:
            return columns, {}
    letters = grouped + scaling_columns(rows, budget_s, terminal=True, label_width=max(room, 1))
    columns = letters if overflow(letters) <= 0 else folded(letters)
    return columns, short_labels(rows["variant"], max(room, 1))  # what the letters stand for


def _by_key(columns: list[Any], rows: Any) -> list[Any] | None:
    """The columns with the variant column headed by the one key the variants differ
    in, and its values below; None where they differ in more or name no key."""
    from dmlbench.report.variants import variant_pairs

    pairs = [variant_pairs(label) for label in rows["variant"]]
    keys = {key for pair in pairs for key in pair}
    if len(keys) != 1 or any(len(pair) != 1 for pair in pairs):
        return None
    (key,) = keys

    def value(row: Any) -> str:
        return variant_pairs(row["variant"])[key]

    return [(key, value) if title == "variant" else (title, cell) for title, cell in columns]


def plan_table(plan: Any, stored: set[str]) -> Table:
    """A sweep's planned runs (a ``SweepPlan``); ``stored``: keys the store has."""
    from dmlbench.resolve import deviations

    mode = plan.sweep.scaling
    scaling = f"{mode} scaling" if mode != "none" else "scaling: none"
    table = figures_table(
        escape(f"sweep {plan.sweep.name}: {plural(len(plan.runs), 'run')} ({scaling})"),
        f"{plan.dropped} dropped by rules, {plan.duplicates} duplicates removed; "
        "stored = already in the store",
    )
    for column in ("#", "run", "N", "b / B", "seed", "division", "stored"):
        table.add_column(column)
    for index, run in enumerate(plan.runs, 1):
        spec = run.spec
        table.add_row(
            str(index),
            escape(plan.describe(run)),
            str(spec.workers),
            f"{spec.local_batch:,} / {spec.effective_global_batch:,}",
            str(spec.seed),
            "open" if deviations(spec) else "closed",
            "yes" if run.key in stored else "",
        )
    return table
