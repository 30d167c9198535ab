"""What `dmlbench advise` and `dmlbench simulate` print."""

from __future__ import annotations

import string
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dmlbench.cli.views import figures_table
from dmlbench.report.formats import (
    money,
    percent,
    seconds,
)


def advice_table(advice: Any, price: str, currency: str = "USD") -> Group:
    """`dmlbench advise` for a person: the recommendation and the runners-up in a table,
    the plan's broken guidelines, and where every number came from; ``price``: the
    price's label, ``currency``: its currency, which heads the cost column."""
    cost = advice.unpriced or f"cost at {price}"
    table = figures_table(
        escape(f"{advice.task} on {advice.network}: ranked by predicted time to target"),
        escape(f"{cost}; epochs and compute: where they came from below"),
    )
    heads = ("", "N", "b / B", "epochs", "from", "step", "compute", "comm", "TTA")
    for column in (*heads, f"cost, {currency}"):
        text = column in ("", "from", "compute")  # a long word folds, never cut short
        table.add_column(column, justify="left" if text else "right", overflow="fold")
    # where each row's compute came from, a letter a source: the sentences are below,
    # once each, where a column of them wrapped every row over four lines (at most nine
    # rows, so never past z)
    keys: dict[str, str] = {}

    def row(mark: str, c: Any) -> None:
        key = keys.setdefault(c.compute_source, string.ascii_lowercase[len(keys)])
        table.add_row(
            mark,
            str(c.workers),
            f"{c.local_batch:,} / {c.global_batch:,}",
            f"{c.epochs:.1f}",
            escape(c.epochs_source.split(":")[0]),
            f"{1e3 * c.step_s:.2f} ms",
            key,
            percent(c.comm_ratio),
            seconds(c.tta_s, unit=True),
            money(c.cost),
        )

    row("best", advice.best)
    for runner_up in advice.candidates[1:5]:
        row("", runner_up)
    if advice.current is not None:
        row("yours", advice.current)
    for untried in advice.worth_measuring[:3]:
        row("measure?", untried)
    lines = [f"learning rate: {advice.learning_rate}"]
    if advice.worth_measuring:
        smallest = min(c.local_batch for c in advice.worth_measuring)
        lines.append(
            "measure? = predicted faster, but below the local batches measured, where the "
            "compute line is optimistic; not recommended until measured: `dmlbench run "
            f"{advice.task} --set recipe.local_batch={smallest}` (same --store)"
        )
    if advice.current is not None:
        lines.append("your plan breaks:" if advice.broken else "your plan breaks no guideline")
    broken = _hanging([("  -", rule) for rule in advice.broken])
    sources = _hanging(
        [(f"  {name}:", text) for name, text in advice.sources.items()]
        + [(f"  compute {key}:", source) for source, key in keys.items()]
    )
    return Group(table, Text("\n".join(lines)), broken, Text("from:"), sources)


def _hanging(rows: list[tuple[str, str]]) -> Table:
    """Labelled lines whose text, where it wraps, stays under its own start."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for label, text in rows:
        grid.add_row(Text(label), Text(text))
    return grid


def prediction_table(result: dict[str, Any]) -> Table:
    """`dmlbench simulate`'s predictions, in the form the store keeps them."""
    from dmlbench.report.tables import calibration_text, prediction_columns

    calibration, rows = result["calibration"], result["predictions"]
    table = figures_table(
        escape(
            f"{result['task']}: predicted (weak scaling, b = {calibration['local_batch']}; "
            f"{calibration_text(calibration)})"
        ),
        escape(
            "* epochs to the target assumed (--epochs, or the nearest measured global "
            "batch's); evaluation sharded over the workers; "
            + (f"speedup: time to the target against N={rows[0]['workers']}; " if rows else "")
            + (result.get("unpriced") or f"cost at {result['price']}")
        ),
    )
    columns = prediction_columns(result.get("currency"))
    for title, _ in columns:
        table.add_column("algo" if title == "algorithm" else title, justify="right")
    for row in rows:
        table.add_row(*(escape(cell(row)) for _, cell in columns))
    return table
