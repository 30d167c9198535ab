"""What the registries hold, for `dmlbench tasks`, `models` and `exchanges`: a task's
data, model, goal and recipe, and a registry's entries with their options."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from dmlbench.optim.build import describe_optimizer
from dmlbench.report.docs import describe_schedule
from dmlbench.report.formats import seconds
from dmlbench.spec.recipe import target_text
from dmlbench.tasks import TaskDefinition


def tasks_table(tasks: list[TaskDefinition]) -> Table:
    table = Table(title="dmlbench tasks", title_justify="left", show_lines=True, expand=True)
    table.add_column("task", no_wrap=True)
    table.add_column("data · model · goal", ratio=2, overflow="fold")  # a long option, whole
    table.add_column("reference recipe", ratio=3, overflow="fold")
    for task in tasks:
        recipe = task.recipe
        options = ", ".join(f"{k}={v}" for k, v in recipe.model.options.items())
        opt = recipe.optimizer
        lines = [
            f"local batch b={recipe.local_batch}, at most {recipe.max_epochs:g} epochs",
            describe_schedule(recipe.schedule),
            describe_optimizer(opt) + (f", L2 {recipe.l2:g} in loss" if recipe.l2 else ""),
        ]
        if recipe.augment:
            lines.append(f"augmentation: {task.augmentation}")
        if recipe.time_budget_s:  # the figure first: rich folds at any space, NBSP too
            budget = seconds(recipe.time_budget_s, unit=True)
            lines.append(f"time budget {budget} (accuracy after time)")
        for key, values in task.free_choices.items():
            lines.append(f"free choice: {key.rpartition('.')[2]} in {', '.join(map(str, values))}")
        name = escape(task.name) + ("\n[dim](for tests)[/dim]" if task.builtin_for_tests else "")
        model = f"{recipe.model.name} ({options})" if options else recipe.model.name
        goal = target_text(recipe.goal, recipe.target)
        said = f"{task.dataset}\n{model}\ngoal: {goal} {task.metric}"
        if task.published_runs:  # they fit time to train
            said += f"\nMLPerf's {task.mlperf_benchmark}: --converge-from {task.published_runs}"
        table.add_row(name, escape(said), escape("\n".join(lines)))
    return table


def registry_view(title: str, entries: list[dict[str, Any]]) -> Group:
    """What a registry holds (models, exchanges): a name a line with what it is, and its
    options indented below, as `dmlbench spec` lists keys (a three-column table left a
    dozen characters to a line at 80 columns, beside options mostly "—")."""
    parts: list[Any] = [Text(title, style="bold")]
    for entry in entries:
        division = (
            f"  {entry['division']} division" + (", sharded" if entry["sharded"] else "")
            if "division" in entry
            else ""
        )
        parts += [Text(), Text(f"  {entry['name']}", style="bold") + Text(division)]
        parts.append(Padding(Text(entry["summary"]), (0, 0, 0, 6)))
        for option in entry["options"]:
            said = f"{option['name']} ({option['default']}): {option['meaning']}".rstrip(": ")
            parts.append(Padding(Text(said, style="dim"), (0, 0, 0, 8)))
    return Group(*parts)
