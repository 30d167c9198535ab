"""`dmlbench tasks`: the task registry, as a table, JSON or the docs page."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dmlbench.cli.options import JsonOption, console, print_json


def tasks(
    json_out: JsonOption = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="the docs page")] = False,
) -> None:
    """List every task: dataset, model, goal and reference recipe."""
    from dmlbench.cli.views.tables import tasks_table
    from dmlbench.report.docs import tasks_markdown
    from dmlbench.tasks import all_tasks

    if json_out:
        print_json([t.describe() for t in all_tasks()])
    elif markdown:
        sys.stdout.write(tasks_markdown(all_tasks()))
    else:
        console.print(tasks_table(all_tasks()))
