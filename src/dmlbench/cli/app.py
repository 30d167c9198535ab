"""`dmlbench`: run benchmark tasks on N local workers and read the stored results.

Examples::

    dmlbench tasks                                   # every task and its reference recipe
    dmlbench run digits-mlp --workers 2              # a real 2-process run, then a summary
    dmlbench run cifar10-resnet20 --workers 4 --dry-run --json
    dmlbench run cifar10-resnet20 --data-dir ../shared/data/cifar10 --set max_steps=100
    dmlbench results --json                          # every stored run, machine-readable
    dmlbench run digits-mlp --workers 1,2,4 --scaling weak --repeats 3   # a sweep
    dmlbench sweep examples/scaling-weak.yaml --plan # the runs a sweep file expands to
    dmlbench report --out report.html                # terminal tables + one HTML file
    dmlbench compare --by workers --csv              # aggregated side by side
    dmlbench export --out tables --format parquet    # runs, evals, phases as files
    dmlbench dask fit digits-mlp --damper geodamp --delay 2 --factor 2   # elastic, on Dask
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dmlbench.errors import DmlbenchError
from dmlbench.report.formats import plural
from dmlbench.results.records import RunRecord, match_id
from dmlbench.results.store import default_store


def _flag_type(display: Any) -> Any:
    """typer (0.29) writes ``<bool>`` beside every flag in --help, as if it took a value;
    a flag's help row shows none."""

    def display_type(self: Any, ctx: Any) -> Any:
        return None if getattr(self, "is_flag", False) else display(self, ctx)

    return display_type


if hasattr(typer.core, "TyperOption") and hasattr(typer.core.TyperOption, "display_type_rich"):
    typer.core.TyperOption.display_type_rich = _flag_type(  # type: ignore[method-assign]
        typer.core.TyperOption.display_type_rich
    )
app = typer.Typer(
    help="Benchmark distributed data-parallel training: time to accuracy, phases, scaling.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

DEFAULT_TASK = "digits-mlp"
MAX_ERROR_CHARS = 2000

StoreOption = Annotated[
    Path,
    typer.Option("--store", help="results folder (SQLite + run logs); env DMLBENCH_STORE"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]
TaskArgument = Annotated[
    str | None, typer.Argument(help=f"task name (default {DEFAULT_TASK})", show_default=False)
]
SeedOption = Annotated[int | None, typer.Option(help="random seed")]
DataDirOption = Annotated[Path | None, typer.Option(help="where datasets are found")]
ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML run spec")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="override any spec key: key=value (repeatable)"),
]
RerunOption = Annotated[
    str,
    typer.Option(
        help="runs the store already has: never (skip all), failed (redo failed/interrupted), "
        "always (run everything again)"
    ),
]


def _worker_counts(
    text: str | None, option: str = "--workers", noun: str = "worker counts", unique: bool = True
) -> list[int]:
    """``"1,2,4"`` → [1, 2, 4]; refused with one line when it is not a list of counts.
    ``unique``: repeats dropped (a sweep's axis); otherwise kept (values paired by
    position, as --nodes with --nproc-per-node)."""
    if text is None:
        return []
    try:
        counts = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise DmlbenchError(f"{option} {text!r}: give a count or a list like 1,2,4") from None
    if not counts or min(counts) < 1:
        raise DmlbenchError(f"{option} {text!r}: {noun} must be at least 1")
    return list(dict.fromkeys(counts)) if unique else counts


def _require_store(store: Path) -> Any:
    from dmlbench.results import ResultsStore

    if not (store / "dmlbench.sqlite").is_file():
        raise DmlbenchError(f"no results store at {store}; run a benchmark first or pass --store")
    opened = ResultsStore(store)
    if opened.read_only:
        err_console.print(f"[yellow]note[/yellow]: read-only: {escape(opened.read_only)}")
    unlisted = opened.unlisted_run_dirs()
    if unlisted:
        err_console.print(
            f"[yellow]note[/yellow]: {escape(str(opened.path))} holds no runs, but "
            f"{plural(len(unlisted), 'run folder')} in {escape(str(store / 'runs'))} could be "
            f"stored: dmlbench results --store {escape(str(store))} --import "
            f"{escape(str(store / 'runs'))}",
            soft_wrap=True,
        )
    return opened


def _print_json(data: Any) -> None:
    """``data`` as JSON on stdout; stored records in their ``as_dict()`` form."""
    sys.stdout.write(json.dumps(data, indent=2, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else str(value)


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
    task: TaskArgument = None,
    workers: Annotated[
        str | None,
        typer.Option("--workers", "-w", help="worker processes; a list (1,2,4) makes a sweep"),
    ] = None,
    seed: SeedOption = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    plugins: Annotated[
        list[str] | None, typer.Option("--plugin", help="module that registers tasks")
    ] = None,
    exchange: Annotated[
        str | None, typer.Option(help="gradient exchange: allreduce (reference) or ddp")
    ] = None,
    data_dir: DataDirOption = None,
    network: Annotated[
        str | None,
        typer.Option(help="network profile: each worker in its own namespace, shaped (root)"),
    ] = None,
    store: StoreOption = default_store(),
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="resolve the spec, start nothing")
    ] = False,
    json_out: JsonOption = False,
    quiet: Annotated[bool, typer.Option(help="keep worker output in the run folder only")] = False,
    scaling: Annotated[
        str | None, typer.Option(help="weak (local batch fixed) or strong (global batch fixed)")
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="fixed global batch, local = global / workers; with a list of worker "
            "counts: strong scaling at this batch",
        ),
    ] = None,
    repeats: Annotated[
        int | None, typer.Option(min=1, help="runs per worker count (seeds seed, seed+1, ...)")
    ] = None,
    rerun: RerunOption = "failed",
    name: Annotated[
        str | None, typer.Option(help="sweep name runs are stored under (resume key)")
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="emulated cluster on this machine: nodes, each a network "
            "namespace with its own agent (root)",
        ),
    ] = None,
    nproc_per_node: Annotated[
        int | None, typer.Option(min=1, help="workers per node (torchrun's meaning)")
    ] = None,
    nnodes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="this is one node of a job on NNODES hosts: run the same "
            "command on each (needs --rdzv-endpoint)",
        ),
    ] = None,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            help="HOST[:PORT] where the nodes meet (torch's c10d rendezvous); the "
            "node whose address it is hosts it"
        ),
    ] = None,
    rdzv_id: Annotated[
        str, typer.Option(help="the job's id, the same on every node; its run id here")
    ] = "dmlbench",
    rdzv_timeout: Annotated[
        int, typer.Option(min=1, help="seconds to wait for every node to arrive")
    ] = 600,
    local_addr: Annotated[
        str | None,
        typer.Option(
            help="this node's address for its listeners (default: the one facing the endpoint)"
        ),
    ] = None,
) -> None:
    """Run one benchmark task on worker processes and store the result.

    A list of worker counts, --scaling or --repeats turns the run into a sweep.
    --nnodes with --rdzv-endpoint makes this one node of a job over several hosts;
    --nodes emulates such a cluster on this machine.
    """
    from dmlbench.spec.run import deviations, load_config_file, resolve_spec

    config_data = load_config_file(config) if config else {}
    config_task = config_data.pop("task", None)  # the argument wins over the file
    task_name = task or config_task or DEFAULT_TASK
    counts = _worker_counts(workers)
    single = len(counts) <= 1 and not scaling and (repeats or 1) == 1
    from dmlbench.launch.node import node_folder
    from dmlbench.launch.slurm import SlurmJob

    slurm = SlurmJob.from_env()
    if slurm is not None and slurm.nodes > 1 and nodes is None:
        if slurm.in_step:  # one task of `srun` across nodes: one node of the job
            if rdzv_endpoint is None:
                nnodes, rdzv_endpoint = nnodes or slurm.nodes, slurm.endpoint()
                rdzv_id = slurm.rendezvous_id if rdzv_id == "dmlbench" else rdzv_id
            store = node_folder(store, slurm.node_id)
        elif single and nnodes is None and "nodes" not in config_data:
            nodes = slurm.nodes  # the batch script: the job's launcher, on all its nodes
    if nnodes is not None and rdzv_endpoint is None:
        raise DmlbenchError(
            "--nnodes needs --rdzv-endpoint HOST:PORT, the same on every "
            "node; for an emulated cluster on this machine use --nodes"
        )
    if nnodes is not None and nodes is not None:
        raise DmlbenchError(
            "give --nnodes (this is one node of a real job) or --nodes (an "
            "emulated cluster), not both"
        )
    if rdzv_endpoint is not None:
        from dmlbench.names import path_component

        path_component(rdzv_id, "--rdzv-id")  # it names the run's folder on every node
        nodes = nnodes or 1
    given = counts or "workers" in config_data or "nproc_per_node" in config_data
    if nodes and nproc_per_node is None and not given:
        nproc_per_node = 1  # torchrun's default
    layout = {"nodes": nodes, "nproc_per_node": nproc_per_node}
    if len(counts) > 1 or scaling or (repeats or 1) > 1:
        from dmlbench.spec.sweep import validate_sweep

        if rdzv_endpoint is not None:
            raise DmlbenchError(
                "--rdzv-endpoint runs one job across hosts, not a sweep: start "
                "one job at a time (or sweep an emulated cluster, --nodes)"
            )

        mode = scaling or ("strong" if global_batch is not None else "none")
        sweep = validate_sweep(
            {
                "name": name or f"{task_name}-{mode if mode != 'none' else 'workers'}",
                "task": task_name,
                "scaling": mode,
                "global_batch": global_batch,
                "repeats": repeats or 1,
                "seed": seed or 0,
                "set": {k: v for k, v in config_data.items() if k != "plugins"},
                "axes": {"workers": counts or [1]},
                "plugins": config_data.get("plugins", []),
            }
        )
        _run_sweep(
            sweep,
            overrides=overrides or [],
            plugins=plugins or [],
            fields={
                "exchange": exchange,
                "data_dir": str(data_dir) if data_dir else None,
                "network": {"profile": network} if network else None,
                **layout,
            },
            store=store,
            rerun=rerun,
            plan_only=dry_run,
            json_out=json_out,
            quiet=quiet,
        )
        return
    spec = resolve_spec(
        task_name,
        config=config_data,
        overrides=overrides or [],
        plugins=plugins or [],
        workers=counts[0] if counts else None,
        seed=seed,
        exchange=exchange,
        global_batch=global_batch,
        data_dir=str(data_dir) if data_dir else None,
        network={"profile": network} if network else None,
        **layout,
    )
    if dry_run:
        _dry_run(spec, deviations(spec), json_out)
        return
    from dmlbench.launch import run_benchmark
    from dmlbench.launch.rendezvous import Rendezvous
    from dmlbench.report.terminal import RunProgress, run_summary
    from dmlbench.results import ResultsStore

    rendezvous = None
    if rdzv_endpoint is not None:
        if spec.network.enabled:
            raise DmlbenchError(
                "--network emulates a cluster on this machine; with "
                "--rdzv-endpoint the nodes are real hosts: drop --network"
            )
        rendezvous = Rendezvous(rdzv_endpoint, rdzv_id, spec.nodes, rdzv_timeout, local_addr)
    results = ResultsStore(store)
    out_console = err_console if json_out else console
    title = escape(f"{spec.task} × {spec.layout if spec.nodes > 1 else spec.workers}")
    try:
        if json_out:
            outcome = run_benchmark(spec, results, echo=False, rendezvous=rendezvous)
        else:
            with RunProgress(out_console, title) as progress:
                outcome = run_benchmark(
                    spec, results, echo=not quiet, progress=progress, rendezvous=rendezvous
                )
    except KeyboardInterrupt:
        err_console.print("interrupted: the run is stored as interrupted")
        raise typer.Exit(130) from None
    if not outcome.recorded:
        _node_outcome(outcome, json_out)
        return
    stored = results.runs(outcome.run_id)[0]
    if json_out:
        _print_json(stored)
    else:
        console.print(run_summary(stored))
    if outcome.status == "failed":
        raise typer.Exit(1)


def _node_outcome(outcome: Any, json_out: bool) -> None:
    """A node of a multi-node job whose rank 0 ran elsewhere: say where its part is kept
    and exit with the run's status."""
    ranks = outcome.ranks
    if json_out:
        _print_json(
            {
                "run_id": outcome.run_id,
                "status": outcome.status,
                "error": outcome.error,
                "ranks": list(ranks),
                "run_dir": outcome.run_dir,
                "recorded": False,
            }
        )
    else:
        console.print(
            f"run {escape(outcome.run_id)}: this node ran ranks {ranks[0]}-{ranks[-1]} "
            f"({outcome.status}); the node that held rank 0 stores the run. Worker "
            f"logs: {escape(outcome.run_dir)}/logs"
        )
        if outcome.error:
            err_console.print(f"error: {escape(outcome.error)}")
    if outcome.status != "finished":
        raise typer.Exit(130 if outcome.status == "interrupted" else 1)


def _dry_run(spec: Any, differ: dict[str, Any], json_out: bool) -> None:
    from dmlbench.spec.run import derived

    plan = {"spec": spec.to_json_dict(), "derived": derived(spec), "deviations": differ}
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
    import_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--import",
            help="store the run in this run folder (one the store could not take when it "
            "ended, e.g. on a full disk); repeatable",
        ),
    ] = None,
) -> None:
    """Show stored runs: a table, one run's summary, or everything as JSON.

    Communication micro-benchmarks (`dmlbench bench`) are listed after training runs;
    `--json` gives training runs, or the one benchmark asked for.
    """
    if import_dirs:
        from dmlbench.errors import StoreError
        from dmlbench.results import ResultsStore
        from dmlbench.results.recover import import_run_dir

        target = ResultsStore(store)
        for given in import_dirs:
            # a folder of run folders (a store's runs/): each one the store lacks
            many = not (given / "spec.json").exists() and any(given.glob("*/spec.json"))
            folders = sorted(p.parent for p in given.glob("*/spec.json")) if many else [given]
            lacking = [
                f
                for f in folders
                if not many or target.status_of(f.name) in (None, "running", "interrupted")
            ]
            if many and not lacking:
                console.print(f"{target.path} has every run in {given}", markup=False)
            for folder in lacking:
                try:
                    done = import_run_dir(target, folder)
                except StoreError as error:
                    if not many:
                        raise
                    err_console.print(f"skipped {folder}: {error}", markup=False, soft_wrap=True)
                    continue
                skipped = (
                    f"; {plural(done.skipped, 'line')} of its event log could not be read "
                    "and were skipped"
                    if done.skipped
                    else ""
                )
                console.print(
                    f"imported {done.kind} {done.run_id} ({done.status}) from {folder}{skipped}",
                    markup=False,
                    soft_wrap=True,
                )
        return
    results_store = _require_store(store)  # before the report's imports (pandas: seconds)
    from dmlbench.report.terminal import comm_table, run_summary, runs_table

    if run_id:
        resolved = results_store.resolve_id(run_id)
        if resolved is None:
            comm = {r.run_id: r for r in results_store.comm_runs()}
            found = match_id(run_id, comm)
            if found is not None:
                _print_json(comm[found]) if json_out else console.print(comm_table(comm[found]))
                return
            raise DmlbenchError(f"no single run matches '{run_id}' in {store}")
        run_id = resolved
    runs = results_store.runs(run_id)
    if json_out:
        _print_json(runs)
    elif run_id:
        console.print(run_summary(runs[0]))
    else:
        console.print(runs_table(runs))
        comm_runs = results_store.comm_runs()
        if comm_runs:
            console.print(f"{len(comm_runs)} communication micro-benchmarks:")
            for run in comm_runs:
                console.print(
                    escape(
                        f"  {run.run_id}  {run.op} {run.backend} × {run.workers}  "
                        f"network {run.network}  {run.status}"
                    )
                )


def _run_sweep(
    sweep: Any,
    *,
    overrides: list[str],
    plugins: list[str],
    fields: dict[str, Any],
    store: Path,
    rerun: str,
    plan_only: bool,
    json_out: bool,
    quiet: bool,
    repeats: int | None = None,
) -> None:
    """Plan a sweep, then (unless ``plan_only``) run what the store does not have yet."""
    from dmlbench.sweep import pending, plan_sweep, run_sweep

    if rerun not in ("never", "failed", "always"):
        raise DmlbenchError(f"--rerun {rerun!r}: choose never, failed or always")
    plan = plan_sweep(sweep, overrides=overrides, plugins=plugins, fields=fields, repeats=repeats)
    results = _open_store(store)
    to_run, skipped = pending(plan, results, rerun)  # type: ignore[arg-type]
    if plan_only:
        _print_plan(plan, {r.key for r in skipped}, json_out)
        return
    from dmlbench.report.terminal import RunProgress

    out = err_console if json_out else console
    out.print(
        f"sweep [bold]{escape(plan.sweep.name)}[/bold]: {plural(len(plan.runs), 'run')} planned, "
        f"{len(skipped)} already in {escape(str(store))} (--rerun {rerun}), {len(to_run)} to run"
    )
    active: list[RunProgress] = []

    def progress(run: Any, index: int, total: int) -> Any:
        title = escape(f"[{index + 1}/{total}] {plan.describe(run)}")
        if json_out or not out.is_terminal:
            out.print(title)
            return None
        bar = RunProgress(out, title)
        bar.__enter__()
        active.append(bar)
        return bar

    def done(run: Any, result: Any, error: str | None) -> None:
        while active:
            active.pop().__exit__(None, None, None)
        if result is None and str(error).startswith("skipped"):
            out.print(f"  [yellow]{escape(str(error))}[/yellow]")
            return
        if result is None:
            out.print(f"  [red]error[/red]: {escape(str(error))}")
            return
        colour = {"success": "green", "failed": "red"}.get(result.status, "yellow")
        tta = result.summary.get("time_to_accuracy_s")
        detail = f"TTA {tta:.1f} s" if tta is not None else "target not reached"
        if result.status in ("failed", "interrupted"):
            detail = result.error or ""
        out.print(f"  [{colour}]{result.status}[/{colour}] {result.run_id}: {escape(detail)}")

    outcome = run_sweep(
        plan,
        results,
        rerun=rerun,  # type: ignore[arg-type]
        echo=not quiet and not json_out,
        progress=progress,
        on_done=done,
    )
    while active:
        active.pop().__exit__(None, None, None)
    runs = results.runs(sweep=plan.sweep.name)
    if json_out:
        _print_json(runs)
    else:
        from dmlbench.report import analysis
        from dmlbench.report.terminal import scaling_tables

        table = analysis.scaling_table(analysis.runs_frame(runs))
        for rich_table in scaling_tables(table):
            console.print(rich_table)
        import shlex

        console.print(
            f"{plural(len(outcome.finished), 'run')} done, {len(outcome.skipped)} skipped, "
            + (f"{len(outcome.elsewhere)} run by another launcher, " if outcome.elsewhere else "")
            + f"{outcome.failed} failed. Report: dmlbench report --store "
            f"{shlex.quote(str(store))} --sweep {shlex.quote(plan.sweep.name)}",
            markup=False,
            soft_wrap=True,
        )
    if outcome.interrupted:
        err_console.print(
            "interrupted: finished runs are stored; run the same command again to resume"
        )
        raise typer.Exit(130)
    if outcome.failed:
        raise typer.Exit(1)


def _open_store(store: Path) -> Any:
    from dmlbench.results import ResultsStore

    return ResultsStore(store)


def _print_plan(plan: Any, stored: set[str], json_out: bool) -> None:
    if json_out:
        _print_json(plan.to_json(stored))
    else:
        from dmlbench.report.terminal import plan_table

        console.print(plan_table(plan, stored))


@app.command()
def sweep(
    file: Annotated[Path, typer.Argument(help="sweep file (YAML or TOML)")],
    plan: Annotated[
        bool, typer.Option("--plan", help="print the expanded runs, start nothing")
    ] = False,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="override a key in every run")
    ] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="override the file's repeats")] = None,
    rerun: RerunOption = "failed",
    plugins: Annotated[
        list[str] | None, typer.Option("--plugin", help="module that registers tasks")
    ] = None,
    data_dir: DataDirOption = None,
    store: StoreOption = default_store(),
    json_out: JsonOption = False,
    quiet: Annotated[bool, typer.Option(help="keep worker output in the run folders only")] = True,
) -> None:
    """Run a sweep file: every combination of its axes, each stored as it finishes.

    Running it again skips what the store already has (see --rerun); Ctrl-C keeps
    every finished run.
    """
    from dmlbench.spec.sweep import load_sweep_file

    spec = load_sweep_file(file)
    _run_sweep(
        spec,
        overrides=overrides or [],
        plugins=plugins or [],
        fields={"data_dir": str(data_dir) if data_dir else None},
        store=store,
        rerun=rerun,
        plan_only=plan,
        json_out=json_out,
        quiet=quiet,
        repeats=repeats,
    )


SweepFilter = Annotated[str | None, typer.Option(help="only this sweep's runs")]
TaskFilter = Annotated[str | None, typer.Option(help="only this task's runs")]
BudgetOption = Annotated[
    float | None,
    typer.Option(help="accuracy after time: best accuracy within this many seconds", min=0),
]
PriceOption = Annotated[
    str | None,
    typer.Option(
        help="price per worker-hour: a number or a name in the price table "
        "(default gcp-n1-standard-4, an example)"
    ),
]
PricesOption = Annotated[
    Path | None, typer.Option(help="your own price table (YAML, like report/prices.yaml)")
]
IncludeDisturbedOption = Annotated[
    bool,
    typer.Option(
        "--include-disturbed",
        help="count runs disturbed by other processes in timings, speedup and efficiency",
    ),
]


def _selected_runs(
    store: Path, sweep: str | None, task: str | None, opened: Any = None
) -> list[RunRecord]:
    runs = (opened or _require_store(store)).runs(sweep=sweep, task=task)
    if not runs:
        what = " and ".join(f"{k} '{v}'" for k, v in (("sweep", sweep), ("task", task)) if v)
        raise DmlbenchError(f"no stored runs in {store}" + (f" for {what}" if what else ""))
    return list(runs)


@app.command()
def report(
    store: StoreOption = default_store(),
    out: Annotated[
        Path | None, typer.Option(help="HTML file to write (default: STORE/report.html)")
    ] = None,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
    budget: BudgetOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    png: Annotated[Path | None, typer.Option(help="also write every figure as PNG here")] = None,
    include_disturbed: IncludeDisturbedOption = False,
) -> None:
    """Scaling tables in the terminal and one self-contained HTML report with plots."""
    from dmlbench.files import check_output_file, check_output_folder

    results = _require_store(store)  # before the report's imports (pandas: seconds)
    target = out or store / "report.html"
    check_output_file(target, "report")  # before any work: --out /dev/full, --out DIR
    if png is not None:
        check_output_folder(png, "--png folder")
    import pandas as pd

    from dmlbench.report.html import write_report
    from dmlbench.report.prices import choose_price
    from dmlbench.report.terminal import scaling_tables

    runs = results.runs(sweep=sweep, task=task)
    comm_runs = results.comm_runs() if not (sweep or task) else []
    from dmlbench.report.predictions import load_predictions

    predictions = (
        [] if sweep else [p for p in load_predictions(store) if not task or p["task"] == task]
    )
    if not runs and not comm_runs and not predictions:
        raise DmlbenchError(f"no stored runs in {store} to report on")
    chosen = choose_price(price, prices)
    sections, pngs = write_report(
        runs,
        target,
        store=str(store),
        budget_s=budget,
        price=chosen,
        png_dir=png,
        comm_runs=comm_runs,
        predictions=predictions,
        include_disturbed=include_disturbed,
    )
    training = [s.table for s in sections if s.kind == "training"]
    if training:  # the report's own tables, in the order scaling_table sorts them
        table = pd.concat(training).sort_values(
            ["task", "sweep", "variant", "workers"], kind="stable"
        )
        for rich_table in scaling_tables(table, budget):
            console.print(rich_table)
    for section in sections:
        for note in section.notes:
            where = escape(f"({section.task} · {section.sweep}): {note}")
            console.print(f"[yellow]note[/yellow] {where}")
    figures = sum(len(s.figures) for s in sections)
    console.print(
        f"report: {target} ({plural(figures, 'figure')}, {plural(len(runs), 'run')}; cost at "
        f"{chosen.label})",
        markup=False,
    )
    if pngs:
        console.print(f"{len(pngs)} PNG files in {png}", markup=False)


@app.command()
def compare(
    by: Annotated[
        str, typer.Option(help="columns to group by, comma-separated (e.g. workers,exchange)")
    ] = "workers",
    store: StoreOption = default_store(),
    sweep: SweepFilter = None,
    task: TaskFilter = None,
    budget: BudgetOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    json_out: JsonOption = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="CSV on stdout")] = False,
    include_disturbed: IncludeDisturbedOption = False,
    best_by: Annotated[
        str | None,
        typer.Option(
            help="keep only the best variant per --group: time_to_accuracy, "
            "accuracy_after_time (with --budget), best_metric, throughput or cost_to_target "
            "(a tuning protocol's pick; mlbench's: time_to_accuracy per workers)"
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="columns --best-by picks within (default: --by's)")
    ] = None,
) -> None:
    """Aggregated runs side by side: repeats as mean ± std and olympic mean, speedup,
    efficiency, comm ratio and cost."""
    runs = _selected_runs(store, sweep, task)  # before the report's imports
    from dmlbench.report import analysis
    from dmlbench.report.prices import choose_price
    from dmlbench.report.terminal import scaling_tables

    if best_by is not None and best_by not in analysis.BEST_BY:
        raise DmlbenchError(f"--best-by {best_by}: choose {', '.join(analysis.BEST_BY)}")
    if best_by == "accuracy_after_time" and budget is None:
        raise DmlbenchError("--best-by accuracy_after_time needs --budget SECONDS")
    if group is not None and best_by is None:
        raise DmlbenchError("--group picks the best within groups: give --best-by too")
    frame = analysis.runs_frame(runs)
    columns = [c.strip() for c in by.split(",") if c.strip()]
    within = [c.strip() for c in group.split(",") if c.strip()] if group else columns
    columns += [c for c in within if c not in columns]
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise DmlbenchError(
            f"cannot group by {', '.join(unknown)}; choose from workers, layout, nodes, "
            "nproc_per_node, exchange, local_batch, global_batch, variant, status, division"
        )
    chosen = choose_price(price, prices)
    table = analysis.scaling_table(
        frame,
        by=columns,
        budget_s=budget,
        evals=analysis.evals_frame(runs),
        price_per_worker_hour=chosen.per_worker_hour,
        include_disturbed=include_disturbed,
        currency=chosen.currency,
    )
    if best_by is not None:
        table = analysis.best_of(table, best_by, within)
        if not json_out and not csv_out:
            column, less = analysis.BEST_BY[best_by]
            console.print(
                f"best variant per {', '.join(within)} by {best_by} ({column}, "
                f"{'least' if less else 'most'})",
                markup=False,
            )
    if json_out:
        sys.stdout.write(table.to_json(orient="records", indent=2) + "\n")
    elif csv_out:
        from dmlbench.report.export import to_csv

        sys.stdout.write(to_csv(table))
    elif "workers" in columns:
        for rich_table in scaling_tables(table, budget):
            console.print(rich_table)
    else:
        console.print(table.to_string(index=False))


@app.command()
def export(
    out: Annotated[Path, typer.Option(help="folder for runs/evals/phases files")],
    store: StoreOption = default_store(),
    formats: Annotated[
        list[str] | None,
        typer.Option("--format", help="csv and/or parquet (default: both, where pyarrow is there)"),
    ] = None,
    sweep: SweepFilter = None,
    task: TaskFilter = None,
) -> None:
    """Write runs, evaluations, phases (and communication micro-benchmarks, unless
    filtered by sweep or task) as CSV and/or Parquet files."""
    from dmlbench.files import check_output_folder
    from dmlbench.report.export import check_formats, default_formats
    from dmlbench.report.export import export as export_tables

    chosen = formats or default_formats()
    check_formats(chosen)
    opened = _require_store(store)
    check_output_folder(out, "export folder")
    comm = [] if sweep or task else opened.comm_runs()
    runs = opened.runs() if comm else _selected_runs(store, sweep, task, opened)
    written = export_tables(runs, out, chosen, comm)  # type: ignore[arg-type]
    names = ", ".join(p.name for p in written)
    console.print(f"{len(written)} files in {out}: {names}", markup=False)


bench_app = typer.Typer(
    help="Micro-benchmarks of the communication layer (mlbench's task 0).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


@bench_app.command("allreduce")
def bench_allreduce(
    workers: Annotated[
        str, typer.Option("--workers", "-w", help="worker counts, e.g. 2,4 (one run each)")
    ] = "2",
    backend: Annotated[str, typer.Option(help="gloo (CPU), nccl (GPU) or mpi")] = "gloo",
    max_bytes: Annotated[
        int, typer.Option(help="largest message in bytes (from 4 bytes, ×factor per step)")
    ] = 10**8,
    factor: Annotated[int, typer.Option(help="size step between messages")] = 4,
    repeats: Annotated[int, typer.Option(help="timed repeats per size")] = 10,
    warmup: Annotated[int, typer.Option(help="untimed all-reduces per size first")] = 3,
    network: Annotated[
        str | None,
        typer.Option(
            help="run each worker in its own namespace on this network profile "
            "(root); see src/dmlbench/netem/profiles.yaml"
        ),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option(
            min=1,
            help="emulated cluster: a namespace per node (root); measures "
            "across nodes, within one node, and hierarchically",
        ),
    ] = 1,
    nproc_per_node: Annotated[
        int | None, typer.Option(min=1, help="workers per node (then workers = nodes × this)")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="any benchmark key: key=value")
    ] = None,
    store: StoreOption = default_store(),
    json_out: JsonOption = False,
) -> None:
    """Latency, algorithm and bus bandwidth of all-reduce over message sizes."""
    from dmlbench.launch.bench import run_comm_bench
    from dmlbench.report.terminal import comm_table
    from dmlbench.spec.bench import CommBenchSpec, validate_bench
    from dmlbench.spec.overrides import apply_overrides, deep_merge

    specs = []
    counts = [nodes * nproc_per_node] if nproc_per_node else _worker_counts(workers)
    for count in counts:
        tree: dict[str, Any] = {
            "workers": count,
            "nodes": nodes,
            "backend": backend,
            "max_bytes": max_bytes,
            "factor": factor,
            "repeats": repeats,
            "warmup": warmup,
            "network": {"profile": network} if network else {},
        }
        full = deep_merge(CommBenchSpec().to_json_dict(), tree)
        apply_overrides(full, overrides or [])
        specs.append(validate_bench(full))
    results = _open_store(store)
    runs, failed = [], False
    for spec in specs:
        out = err_console if json_out else console
        layout = f" ({spec.nodes} nodes × {spec.per_node})" if spec.nodes > 1 else ""
        out.print(
            f"all-reduce · {spec.backend} · {spec.workers} workers{layout} · network "
            f"{spec.network.label()} · {len(spec.sizes())} sizes up to "
            f"{spec.max_bytes:,} bytes …",
            markup=False,
        )
        try:
            outcome = run_comm_bench(spec, results)
        except KeyboardInterrupt:
            err_console.print("interrupted: the benchmark is stored as interrupted")
            raise typer.Exit(130) from None
        run = results.comm_runs(outcome.run_id)[0]
        runs.append(run)
        failed |= outcome.status != "success"
        if not json_out:
            console.print(comm_table(run))
    if json_out:
        _print_json(runs)
    if failed:
        raise typer.Exit(1)


def _layouts(nodes: str | None, per_node: str | None) -> list[tuple[int, int]]:
    """``--nodes 1,2,4 --nproc-per-node 4,2,1`` → [(1, 4), (2, 2), (4, 1)]; one value of
    either applies to every value of the other."""
    if nodes is None and per_node is None:
        return []
    node_counts = _worker_counts(nodes or "1", "--nodes", "node counts", unique=False)
    per_counts = _worker_counts(
        per_node or "1", "--nproc-per-node", "workers per node", unique=False
    )
    if len(node_counts) > 1 and len(per_counts) > 1 and len(node_counts) != len(per_counts):
        raise DmlbenchError(
            "--nodes and --nproc-per-node: give one value of either, or as many of each"
        )
    if len(node_counts) == 1:
        node_counts = node_counts * len(per_counts)
    if len(per_counts) == 1:
        per_counts = per_counts * len(node_counts)
    return list(zip(node_counts, per_counts, strict=True))


@app.command()
def simulate(
    task: Annotated[str, typer.Argument(help="task to predict (calibrated from its runs)")],
    workers: Annotated[str, typer.Option("--workers", "-w", help="e.g. 1,8,64,512")] = "1,2,4,8",
    network: Annotated[
        str, typer.Option(help="profiles, comma-separated (none = the measured host network)")
    ] = "10gbit",
    algorithm: Annotated[
        str, typer.Option(help="ring, tree, ps and/or hierarchical (comma-separated)")
    ] = "ring",
    nodes: Annotated[
        str | None,
        typer.Option(
            help="nodes, e.g. 1,2,4: workers = nodes × --nproc-per-node, --network "
            "between nodes, the profile's intra_* inside one (two-level model)"
        ),
    ] = None,
    nproc_per_node: Annotated[
        str | None, typer.Option(help="workers per node: one count, or one per --nodes value")
    ] = None,
    store: StoreOption = default_store(),
    price: PriceOption = None,
    prices: PricesOption = None,
    png: Annotated[Path | None, typer.Option(help="write the predicted speedup plot here")] = None,
    epochs: Annotated[
        float | None,
        typer.Option(
            help="epochs to the target to assume where no stored run reached it", min=0.01
        ),
    ] = None,
    host_bandwidth: Annotated[
        str | None,
        typer.Option(
            help="assume hosts that move this much (e.g. 400gbit) instead of the "
            "calibrated host bandwidth: for machines faster than this one"
        ),
    ] = None,
    calibrate_from: Annotated[
        list[str] | None,
        typer.Option(
            "--calibrate-from",
            help="take compute from this run (id, or a unique start or end of it; "
            "repeatable) instead of every run at the fewest workers",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Predict step time, time to accuracy and cost at N workers on a network.

    Calibrated from the store: compute from the task's runs, communication from
    `dmlbench bench allreduce`; epochs to the target from runs that reached it (at the
    nearest measured global batch otherwise, and said so).
    """
    from dmlbench.perfmodel.simulate import simulate as predict_scaling
    from dmlbench.report.predictions import save_predictions
    from dmlbench.report.prices import choose_price

    counts = _worker_counts(workers)
    simulation = predict_scaling(
        _require_store(store),
        task,
        counts,
        [n.strip() for n in network.split(",") if n.strip()],
        [a.strip() for a in algorithm.split(",") if a.strip()],
        price=choose_price(price, prices),
        layouts=_layouts(nodes, nproc_per_node),
        epochs=epochs,
        host_bandwidth=host_bandwidth,
        calibrate_from=calibrate_from or [],
    )
    result = simulation.to_json()
    saved = save_predictions(store, task, result)
    if json_out:
        _print_json(result)
    else:
        from dmlbench.report.terminal import prediction_table

        console.print(prediction_table(result))
        console.print(f"saved to {saved}; `dmlbench report` draws it", markup=False)
    if png:
        from dmlbench.report.figures import predicted_speedup

        runs = plural(simulation.calibration.runs, "run")
        title = f"{task} · predicted · calibrated on {runs}"
        predicted_speedup(simulation.rows, title).savefig(png, dpi=200)
        console.print(f"speedup plot: {png}", markup=False)


@app.command()
def advise(
    task: Annotated[str, typer.Argument(help="task to advise on (calibrated from its runs)")],
    max_workers: Annotated[int, typer.Option(help="the most workers to consider", min=1)] = 8,
    network: Annotated[
        str, typer.Option(help="a profile or a rate (none = the measured host network)")
    ] = "10gbit",
    workers: Annotated[
        int | None,
        typer.Option(help="the worker count you plan (checked against guidelines)", min=1),
    ] = None,
    local_batch: Annotated[
        int | None, typer.Option(help="the local batch you plan (default: the recipe's)", min=1)
    ] = None,
    epochs: Annotated[
        float | None,
        typer.Option(
            help="epochs to the target at the recipe's batch, assumed until a run reaches it",
            min=0.01,
        ),
    ] = None,
    store: StoreOption = default_store(),
    price: PriceOption = None,
    prices: PricesOption = None,
    json_out: JsonOption = False,
) -> None:
    """Recommend workers, local batch and learning-rate rule for a task.

    Joins the gradient noise scale the task's runs measured, the store's epochs to the
    target by global batch, and the performance model's step time on the network;
    every number says where it came from. Needs runs of the task (one with 2+ workers
    for the noise scale) and `dmlbench bench allreduce` in the same store.
    """
    from dmlbench.advise.recommend import advise_from_store
    from dmlbench.report.prices import choose_price

    chosen = choose_price(price, prices)
    advice = advise_from_store(
        _require_store(store),
        task,
        max_workers=max_workers,
        network=network,
        price_per_worker_hour=chosen.per_worker_hour,
        workers=workers,
        local_batch=local_batch,
        assume_epochs=epochs,
    )
    if json_out:
        _print_json({**advice.to_json(), "price": chosen.label})
        return
    from dmlbench.report.terminal import advice_table

    console.print(advice_table(advice, chosen.label))


def _cluster_spec(
    task: str | None,
    config: Path | None,
    overrides: list[str] | None,
    nodes: int,
    per_node: int,
    engine: str,
) -> Any:
    """The spec a scheduler's job runs: resolved here, so mistakes are refused before
    anything is submitted; the hosts' own network, never an emulated one."""
    from dmlbench.spec.run import load_config_file, resolve_spec

    config_data = load_config_file(config) if config else {}
    task_name = task or config_data.pop("task", None) or DEFAULT_TASK
    config_data.pop("task", None)
    spec = resolve_spec(
        task_name,
        config=config_data,
        overrides=overrides or [],
        nodes=nodes,
        nproc_per_node=per_node,
    )
    if spec.network.enabled:
        raise DmlbenchError(
            f"--network emulates a cluster on one machine; on {engine} the "
            "hosts' own network is measured: drop it"
        )
    return spec


@app.command()
def slurm(
    target: Annotated[
        str | None, typer.Argument(help=f"task name, or a sweep file (default {DEFAULT_TASK})")
    ] = None,
    nodes: Annotated[int, typer.Option(min=1, help="nodes, one task each")] = 1,
    nproc_per_node: Annotated[
        int | None, typer.Option(min=1, help="workers per node (default: --gpus-per-node, or 1)")
    ] = None,
    cpus_per_task: Annotated[
        int | None, typer.Option(min=1, help="CPUs each node's task gets (its workers share them)")
    ] = None,
    gpus_per_node: Annotated[int, typer.Option(min=0, help="GPUs per node")] = 0,
    partition: Annotated[str | None, typer.Option(help="Slurm partition")] = None,
    time: Annotated[str | None, typer.Option(help="time limit, e.g. 30 or 2:00:00")] = None,
    account: Annotated[str | None, typer.Option(help="account to charge")] = None,
    array: Annotated[
        int | None,
        typer.Option(min=1, help="sweep: a job array of this many tasks sharing the points"),
    ] = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    store: StoreOption = default_store(),
    out: Annotated[Path | None, typer.Option(help="write the script here, not stdout")] = None,
    submit: Annotated[bool, typer.Option("--submit", help="submit it with sbatch")] = False,
) -> None:
    """Write an sbatch script that runs a task (or a sweep) on Slurm nodes.

    The script holds the resolved spec; the store must be on a file system every node
    shares. In the job, `dmlbench run` on the first node starts one srun task per node
    and records the run in the store; scancel stores it as interrupted.
    """
    from dmlbench.files import write_file
    from dmlbench.launch.slurm import SbatchOptions, sbatch_script
    from dmlbench.launch.slurm import submit as submit_script
    from dmlbench.names import file_stem, one_line

    root = store.expanduser().resolve()
    one_line(str(root), "--store")
    program = [sys.executable, "-m", "dmlbench"]
    given = Path(target) if target else None
    if given is not None and given.suffix in (".yaml", ".yml", ".toml"):
        from dmlbench.spec.sweep import load_sweep_file

        if config or overrides:
            raise DmlbenchError("--config and --set apply to a task; put them in the sweep file")
        sweep_spec = load_sweep_file(given)  # refused here, not on the cluster
        embedded, suffix, name = given.read_text(), given.suffix, sweep_spec.name
        command = [*program, "sweep", "{file}", "--store", str(root)]
    else:
        if array:
            raise DmlbenchError("--array shares a sweep's points among tasks; give a sweep file")
        from dmlbench.launch.node import job_spec

        spec = _cluster_spec(
            target, config, overrides, nodes, nproc_per_node or max(1, gpus_per_node), "Slurm"
        )
        embedded = json.dumps(job_spec(spec), indent=1) + "\n"
        suffix, name = ".json", spec.task
        command = [*program, "run", "--config", "{file}", "--store", str(root), "--quiet"]
    options = SbatchOptions(
        nodes=nodes,
        cpus_per_task=cpus_per_task,
        gpus_per_node=gpus_per_node,
        partition=partition,
        time=time,
        account=account,
        array=array,
        job_name=file_stem(f"dmlbench-{name}"),
    )
    logs = root / "slurm"
    text = sbatch_script(command, embedded, suffix, options, logs)
    if out is None and not submit:
        sys.stdout.write(text)
        return
    script = out or logs / f"{options.job_name}.sbatch"
    try:
        logs.mkdir(parents=True, exist_ok=True)  # sbatch writes the job's output there
    except OSError as error:
        raise DmlbenchError(f"cannot make {logs}: {error.strerror}") from None
    write_file(script, text, "batch script")
    if not submit:
        console.print(f"wrote {script}; submit with: sbatch {script}", markup=False, soft_wrap=True)
        return
    job_id = submit_script(script)
    console.print(
        f"submitted job {job_id} ({script}); its output: {logs}; its runs: "
        f"dmlbench results --store {root}",
        markup=False,
        soft_wrap=True,
    )


@app.command()
def k8s(
    task: TaskArgument = None,
    image: Annotated[
        str, typer.Option(help="container image with dmlbench installed (see Dockerfile)")
    ] = "",
    nodes: Annotated[int, typer.Option(min=1, help="pods, one node each")] = 2,
    nproc_per_node: Annotated[
        int | None, typer.Option(min=1, help="workers per pod (default: --gpus, or 1)")
    ] = None,
    cpus: Annotated[str | None, typer.Option(help="CPU per pod, e.g. 4 or 3500m")] = None,
    memory: Annotated[str | None, typer.Option(help="memory per pod, e.g. 16Gi")] = None,
    gpus: Annotated[int, typer.Option(min=0, help="NVIDIA GPUs per pod")] = 0,
    name: Annotated[str | None, typer.Option(help="job name (default dmlbench-TASK)")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace")] = None,
    store_claim: Annotated[
        str | None,
        typer.Option(help="PersistentVolumeClaim for the results (default: emptyDir, lost)"),
    ] = None,
    data_claim: Annotated[
        str | None, typer.Option(help="PersistentVolumeClaim holding the datasets")
    ] = None,
    pytorchjob: Annotated[
        bool, typer.Option("--pytorchjob", help="a Kubeflow PyTorchJob instead of Job + Service")
    ] = False,
    config: ConfigOption = None,
    overrides: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="write the manifests here, not stdout")] = None,
) -> None:
    """Write Kubernetes manifests that run one task on several pods.

    An Indexed Job (completion index = node rank) and a headless Service whose first
    pod is the rendezvous endpoint, with the resolved spec in a ConfigMap; apply them
    with `kubectl apply -f`. Generated and schema-checked, not run on a cluster here.
    """
    from dmlbench.launch.kubernetes import PodResources, default_name, manifests, to_yaml

    if not image:
        raise DmlbenchError(
            "give --image: a container image with dmlbench installed "
            "(build one from the repository's Dockerfile)"
        )
    spec = _cluster_spec(
        task, config, overrides, nodes, nproc_per_node or max(1, gpus), "Kubernetes"
    )
    objects = manifests(
        spec,
        image=image,
        name=name or default_name(spec.task),
        namespace=namespace,
        resources=PodResources(cpus, memory, gpus),
        store_claim=store_claim,
        data_claim=data_claim,
        pytorchjob=pytorchjob,
    )
    text = to_yaml(objects)
    if out is None:
        sys.stdout.write(text)
        return
    from dmlbench.files import write_file

    write_file(out, text, "manifest file", make_folder=False)
    kinds = ", ".join(o["kind"] for o in objects)
    console.print(
        f"wrote {kinds} to {out}; apply with: kubectl apply -f {out}", markup=False, soft_wrap=True
    )


dask_app = typer.Typer(
    help="Elastic training on Dask: the scikit-learn estimator whose batch grows.",
    no_args_is_help=True,
)
app.add_typer(dask_app, name="dask")


@dask_app.command("fit")
def dask_fit(
    task: TaskArgument = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    seed: SeedOption = None,
    data_dir: DataDirOption = None,
    damper: Annotated[
        str,
        typer.Option(
            help="batch schedule: constant, geodamp, geodamplr, padadamp, adadamp or noisescaledamp"
        ),
    ] = "constant",
    batch: Annotated[
        int | None, typer.Option(min=1, help="first batch (default: the recipe's local batch)")
    ] = None,
    delay: Annotated[float | None, typer.Option(help="geodamp: epochs between growths")] = None,
    factor: Annotated[float | None, typer.Option(help="geodamp: growth per step")] = None,
    rate: Annotated[float | None, typer.Option(help="padadamp: examples added per update")] = None,
    scale: Annotated[float | None, typer.Option(help="noisescaledamp: batch ÷ noise scale")] = None,
    max_batch: Annotated[
        int | None,
        typer.Option("--max-batch", min=1, help="the largest batch; past it the rate decays"),
    ] = None,
    grads_per_worker: Annotated[
        int | None, typer.Option(min=1, help="examples per gradient task (default: --batch)")
    ] = None,
    min_workers: Annotated[int, typer.Option(min=1, help="fewest Dask workers")] = 1,
    max_workers: Annotated[int, typer.Option(min=1, help="most Dask workers")] = 2,
    engine: Annotated[str, typer.Option(help="centralised (the paper's) or ddp")] = "centralised",
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or auto")] = "cpu",
    scheduler: Annotated[
        str | None,
        typer.Option(help="a Dask scheduler's address (default: a LocalCluster on loopback)"),
    ] = None,
    store: StoreOption = default_store(),
    json_out: JsonOption = False,
) -> None:
    """Train a registered task with the Dask estimator and store it like any run.

    The task gives the data, model, optimizer and target; --damper gives the batch
    schedule in place of the recipe's learning-rate schedule. Stops between epochs.
    """
    # Dask's own logs (a worker's traceback, its chatter at shutdown) stay out of the
    # terminal: what failed is the run's one-line error, kept in the store too
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    from dmlbench.dask.run import DaskFit, fit_task, make_damper
    from dmlbench.report.terminal import run_summary
    from dmlbench.results import ResultsStore
    from dmlbench.spec.run import load_config_file, resolve_spec

    config_data = load_config_file(config) if config else {}
    task_name = task or config_data.pop("task", None) or DEFAULT_TASK
    config_data.pop("task", None)
    spec = resolve_spec(
        task_name,
        config=config_data,
        overrides=overrides or [],
        seed=seed,
        data_dir=str(data_dir) if data_dir else None,
    )
    if spec.network.enabled or spec.workers > 1:
        raise DmlbenchError(
            "dask fit sizes its cluster with --min-workers/--max-workers and "
            "runs on the hosts' network: drop workers= and network="
        )
    if min_workers > max_workers:
        raise DmlbenchError(f"--min-workers {min_workers} is above --max-workers {max_workers}")
    first = batch or spec.recipe.local_batch
    options = {
        "delay": delay,
        "factor": factor,
        "rate": rate,
        "scale": scale,
        "max_batch_size": max_batch,
    }
    fit = DaskFit(
        make_damper(damper, first, options),
        engine=engine,
        grads_per_worker=grads_per_worker or first,
        min_workers=min_workers,
        max_workers=max_workers,
        scheduler=scheduler,
        device=device,
    )
    from dmlbench.dask.estimator import DaskClassifier

    try:  # the estimator's own checks, before any data is read
        DaskClassifier(None, engine=engine, device=device)._check_params()
    except ValueError as error:
        raise DmlbenchError(str(error)) from None

    def progress(epoch: dict[str, Any]) -> None:
        accuracy = epoch.get("test_accuracy")
        shown = f", best test accuracy {accuracy:.2%}" if accuracy is not None else ""
        err_console.print(
            f"epoch {epoch['epoch']}: {epoch['n_updates']:,} updates so far, batch "
            f"{epoch['batch_size']}, {plural(epoch['workers'], 'worker')}, training loss "
            f"{epoch['train_loss']:.4f}{shown}",
            highlight=False,
            soft_wrap=True,
        )

    from dmlbench.dask.cluster import close_local

    results = ResultsStore(store)
    try:
        outcome = fit_task(spec, fit, results, progress=progress)
    except KeyboardInterrupt:
        err_console.print("interrupted: the fit is stored as interrupted")
        raise typer.Exit(130) from None
    finally:
        close_local()  # before the interpreter exits: its workers would outlive it, noisily
    stored = results.runs(outcome.run_id)[0]
    if json_out:
        _print_json(stored)
    else:
        console.print(run_summary(stored))
    if outcome.status == "failed":
        raise typer.Exit(1)


def main() -> None:
    # torch's C++ side warns on every retry while a node waits for the rendezvous host
    # (nodes start in any order); dmlbench reports what failed in one line instead.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from dmlbench.system import interruptible

    interruptible()
    try:
        app()
    except KeyboardInterrupt:  # between the places that store what it interrupted
        err_console.print("interrupted")
        sys.exit(130)
    except DmlbenchError as error:
        from dmlbench.names import shorten

        # whatever a message echoes of the user's input, it stays a readable line
        message = escape(shorten(str(error), MAX_ERROR_CHARS))
        err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except Exception as error:
        # torch's launcher raises SignalException from its own signal handlers; they are
        # put back after each launch, so only a signal inside the launch reaches here
        if type(error).__name__ != "SignalException":
            raise
        err_console.print(f"interrupted ({getattr(error, 'sigval', 'a signal')!s})")
        sys.exit(130)
