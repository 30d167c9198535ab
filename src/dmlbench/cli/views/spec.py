"""A run spec in the terminal: every key it takes (`dmlbench spec`), and one resolved
(`dmlbench run --dry-run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from dmlbench.cli.views.summary import deviations_text, fields_table
from dmlbench.optim.build import describe_optimizer
from dmlbench.report.formats import layout, plural, seconds
from dmlbench.results.records import run_title
from dmlbench.spec.recipe import target_text

if TYPE_CHECKING:
    from dmlbench.spec.run import RunSpec


def spec_view() -> Group:
    """`dmlbench spec`: every key with its type and default on a line, and its meaning
    indented below, which reads at 80 columns (a four-column table left the meaning a
    fifth of the width)."""
    from dmlbench.report.docs import SPEC_INTRO, spec_sections

    def plain(text: str) -> str:  # Markdown's code marks and a link, as a terminal says it
        return text.replace("`", "").replace("[Tasks](tasks.md)", "dmlbench tasks")

    parts: list[Any] = [Text("Every key of a run spec", style="bold"), Text(plain(SPEC_INTRO))]
    for title, doc, rows in spec_sections():
        parts += [Text(), Text(plain(title), style="bold underline"), Text(plain(doc))]
        for row in rows:
            default = {"": "", "required": ", required"}.get(
                row.default, f", default {plain(row.default)}"
            )
            head = Text(f"  {row.key}", style="bold") + Text(f"  {plain(row.type)}{default}")
            parts.append(head)
            if row.meaning:
                parts.append(Padding(Text(plain(row.meaning), style="dim"), (0, 0, 0, 6)))
    return Group(*parts)


def dry_run_view(spec: RunSpec, derived: dict[str, Any], differ: dict[str, Any]) -> Table:
    """`run --dry-run`: the run the spec resolves to, in the summary's shape (the whole
    resolved spec is `--json`'s)."""
    recipe = spec.recipe
    on = layout(spec.nodes, spec.per_node)
    title = run_title(spec.task, recipe.model.name, differ)  # as its stored run's will be
    table = fields_table(
        escape(
            f"{title} · {plural(spec.workers, 'worker')}{on} · {derived['division']} "
            "division · a dry run: nothing started"
        )
    )

    def named(name: str, options: dict[str, Any]) -> str:
        given = ", ".join(f"{key}={value}" for key, value in options.items())
        return escape(f"{name} ({given})" if given else name)

    table.add_row("model", named(recipe.model.name, recipe.model.options))
    table.add_row("exchange", named(spec.exchange, spec.exchange_options))
    table.add_row("batch", f"{spec.local_batch:,} a worker, {derived['global_batch']:,} in all")
    l2 = f", L2 {recipe.l2:g} in the loss" if recipe.l2 else ""
    table.add_row("optimizer", escape(describe_optimizer(recipe.optimizer) + l2))
    first, peak = derived["lr_first_step"], derived["lr_after_warmup"]
    rates = f"{first:.3g} at the first step"
    rates += f", {peak:.3g} after warm-up" if peak != first else ""
    table.add_row("schedule", escape(f"{recipe.schedule.describe()}: {rates}"))
    limits = [f"{recipe.max_epochs:g} epochs"]
    if spec.max_steps:
        limits.append(plural(spec.max_steps, "step"))
    if recipe.time_budget_s:
        limits.append(seconds(recipe.time_budget_s, unit=True))
    after = "after " + (f"{', '.join(limits[:-1])} or {limits[-1]}" if limits[1:] else limits[0])
    stops = [f"at {target_text(recipe.goal, recipe.target)}"] if spec.stop_at_target else []
    stops.append(after)
    first = ", whichever comes first" if len(stops) + len(limits) > 2 else ""
    table.add_row("stops", ", or ".join(stops) + first)
    device = "a GPU where there is one, else the CPU" if spec.device == "auto" else spec.device
    threads = plural(derived["threads_per_worker"], "thread")
    table.add_row("runs as", escape(f"{recipe.precision} on {device}; {threads} a worker"))
    data = "synthetic (DLBS's throughput mode)" if spec.synthetic_data else str(spec.data_dir)
    table.add_row("data", escape(data))
    table.add_row("network", escape(spec.network.label()))
    if differ:
        table.add_row("differs from recipe", deviations_text(differ))
    return table
