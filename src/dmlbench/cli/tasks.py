"""`dmlbench tasks`, `models`, `exchanges`, `networks` and `spec`: what a run can name,
as a table, JSON or the docs pages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dmlbench.cli.options import JsonOption, console, flag, one_form, print_json


def tasks(
    json_out: JsonOption = False,
    markdown: Annotated[bool, flag("--markdown", help="the docs page")] = False,
) -> None:
    """List every task: dataset, model, goal and reference recipe."""
    one_form(json=json_out, markdown=markdown)
    from dmlbench.cli.views.catalogue import tasks_table
    from dmlbench.report.docs import tasks_markdown
    from dmlbench.tasks import all_tasks

    if json_out:
        print_json([t.describe() for t in all_tasks()])
    elif markdown:
        sys.stdout.write(tasks_markdown(all_tasks()))
    else:
        console.print(tasks_table(all_tasks()))


def models(json_out: JsonOption = False) -> None:
    """List every model a recipe can name (`--set recipe.model.name=…`) with its options
    (`--set recipe.model.options.…`); naming another model drops the old one's options."""
    from dmlbench.cli.views.catalogue import registry_view
    from dmlbench.report.docs import models_described
    from dmlbench.tasks import load_plugins

    load_plugins()  # the models a plugin or an entry point registers, too
    described = models_described()
    if json_out:
        print_json(described)
    else:
        console.print(
            registry_view(
                "Models: --model NAME; an option: --set recipe.model.options.KEY=VALUE",
                described,
            )
        )


def exchanges(json_out: JsonOption = False) -> None:
    """List every gradient exchange (`--exchange`) with its division and its options
    (`--set exchange_options.…`)."""
    from dmlbench.cli.views.catalogue import registry_view
    from dmlbench.report.docs import exchanges_described

    described = exchanges_described()
    if json_out:
        print_json(described)
    else:
        console.print(
            registry_view(
                "Gradient exchanges: --exchange NAME; an option: --set exchange_options.KEY=VALUE",
                described,
            )
        )


def networks(
    json_out: JsonOption = False,
    file: Annotated[
        Path | None,
        typer.Option(help="your own profiles YAML (what network.profiles_file takes)"),
    ] = None,
) -> None:
    """List the named network profiles (`--network NAME`): bandwidth and latency of a
    link, between nodes and inside one."""
    from dmlbench.cli.views.comm import networks_table
    from dmlbench.netem.profiles import load_profiles

    profiles = load_profiles(file)
    if json_out:
        print_json([{"name": name, **profile} for name, profile in profiles.items()])
    else:
        console.print(networks_table(profiles))


def spec(
    json_out: JsonOption = False,
    markdown: Annotated[bool, flag("--markdown", help="the docs page")] = False,
) -> None:
    """Every key of a run spec: type, default and meaning (what --set and spec files take)."""
    one_form(json=json_out, markdown=markdown)
    from dmlbench.report.docs import spec_markdown
    from dmlbench.spec.run import RunSpec

    if json_out:
        print_json(RunSpec.model_json_schema())
    else:
        if markdown:
            sys.stdout.write(spec_markdown() + "\n")
        else:
            from dmlbench.cli.views.spec import spec_view

            console.print(spec_view())
