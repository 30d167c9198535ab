"""`dmlbench`: run benchmark tasks on N local workers and read the stored results.

Examples::

    dmlbench tasks                                   # every task and its reference recipe
    dmlbench run digits-mlp --workers 2              # a real 2-process run, then a summary
    dmlbench run cifar10-resnet20 --workers 4 --dry-run --json
    dmlbench run cifar10-resnet20 --data-dir ../shared/data/cifar10 --set max_steps=100
    dmlbench results --json                          # every stored run, machine-readable
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from dmlbench.errors import DmlbenchError
from dmlbench.results.store import default_store

app = typer.Typer(
    help="Benchmark distributed data-parallel training: time to accuracy, phases, scaling.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

DEFAULT_TASK = "digits-mlp"

StoreOption = Annotated[
    Path,
    typer.Option("--store", help="results folder (SQLite + run logs); env DMLBENCH_STORE"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@app.command()
def tasks(
    json_out: JsonOption = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="the docs page")] = False,
) -> None:
    """List every task: dataset, model, goal and reference recipe."""
    from dmlbench.report.docs import tasks_markdown
    from dmlbench.report.terminal import tasks_table
    from dmlbench.tasks import all_tasks

    if json_out:
        _print_json([t.describe() for t in all_tasks()])
    elif markdown:
        sys.stdout.write(tasks_markdown(all_tasks()))
    else:
        console.print(tasks_table(all_tasks()))


@app.command()
def run(
    task: Annotated[str | None, typer.Argument(help=f"task name (default {DEFAULT_TASK})")] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-w", help="worker processes")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML or TOML run spec")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="override any spec key: key=value (repeatable)"),
    ] = None,
    plugins: Annotated[
        list[str] | None, typer.Option("--plugin", help="module that registers tasks")
    ] = None,
    exchange: Annotated[
        str | None, typer.Option(help="gradient exchange: allreduce (reference) or ddp")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="where datasets are found")] = None,
    store: StoreOption = default_store(),
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="resolve the spec, start nothing")
    ] = False,
    json_out: JsonOption = False,
    quiet: Annotated[bool, typer.Option(help="keep worker output in the run folder only")] = False,
) -> None:
    """Run one benchmark task on local worker processes and store the result."""
    from dmlbench.spec.run import deviations, load_config_file, resolve_spec

    config_data = load_config_file(config) if config else {}
    config_task = config_data.pop("task", None)  # the argument wins over the file
    name = task or config_task or DEFAULT_TASK
    spec = resolve_spec(
        name,
        config=config_data,
        overrides=overrides or [],
        plugins=plugins or [],
        workers=workers,
        seed=seed,
        exchange=exchange,
        data_dir=str(data_dir) if data_dir else None,
    )
    if dry_run:
        _dry_run(spec, deviations(spec), json_out)
        return
    from dmlbench.launch import run_benchmark
    from dmlbench.report.terminal import RunProgress, run_summary
    from dmlbench.results import ResultsStore

    results = ResultsStore(store)
    out_console = err_console if json_out else console
    title = f"{spec.task} × {spec.workers}"
    try:
        if json_out:
            outcome = run_benchmark(spec, results, echo=False)
        else:
            with RunProgress(out_console, title) as progress:
                outcome = run_benchmark(spec, results, echo=not quiet, progress=progress)
    except KeyboardInterrupt:
        err_console.print("interrupted: the run is stored as interrupted")
        raise typer.Exit(130) from None
    stored = results.runs(outcome.run_id)[0]
    if json_out:
        _print_json(stored)
    else:
        console.print(run_summary(stored))
    if outcome.status == "failed":
        raise typer.Exit(1)


def _dry_run(spec: Any, differ: dict[str, Any], json_out: bool) -> None:
    from dmlbench.optim import learning_rate

    schedule = spec.recipe.schedule
    rate = {"local_batch": spec.local_batch, "world_size": spec.workers}
    derived = {
        "global_batch": spec.effective_global_batch,
        "threads_per_worker": spec.threads(),
        "division": "open" if differ else "closed",
        "lr_first_step": learning_rate(schedule, step=0, epoch=0.0, **rate),
        "lr_after_warmup": learning_rate(
            schedule, step=0, epoch=getattr(schedule, "warmup_epochs", 0.0), **rate
        ),
    }
    plan = {"spec": spec.to_json_dict(), "derived": derived, "deviations": differ}
    if json_out:
        _print_json(plan)
    else:
        console.print_json(json.dumps(plan, default=str))


@app.command()
def results(
    run_id: Annotated[
        str | None, typer.Argument(help="one run: its id, or a unique start or end of it")
    ] = None,
    store: StoreOption = default_store(),
    json_out: JsonOption = False,
) -> None:
    """Show stored runs: a table, one run's summary, or everything as JSON."""
    from dmlbench.report.terminal import run_summary, runs_table
    from dmlbench.results import ResultsStore

    if not (store / "dmlbench.sqlite").is_file():
        raise DmlbenchError(f"no results store at {store}; run a benchmark first or pass --store")
    results_store = ResultsStore(store)
    if run_id:
        resolved = results_store.resolve_id(run_id)
        if resolved is None:
            raise DmlbenchError(f"no single run matches '{run_id}' in {store}")
        run_id = resolved
    runs = results_store.runs(run_id)
    if json_out:
        _print_json(runs)
    elif run_id:
        console.print(run_summary(runs[0]))
    else:
        console.print(runs_table(runs))


def main() -> None:
    try:
        app()
    except DmlbenchError as error:
        err_console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        sys.exit(2)
