"""`dmlbench run`: one benchmark run (or an inline sweep) on local workers, an emulated
cluster, or one node of a job across hosts. What to do is decided by
:func:`dmlbench.launch.request.plan_run`; this module parses and prints."""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from dmlbench.catalogue import OPEN_EXCHANGES, SYNC_EXCHANGES
from dmlbench.cli.options import (
    DEFAULT_TASK,
    NETWORK_HELP,
    STORE,
    ConfigOption,
    DataDirOption,
    JsonOption,
    NprocPerNodeOption,
    PluginOption,
    QuietOption,
    SeedOption,
    SetOption,
    StoreOption,
    SweepRerunOption,
    TaskArgument,
    console,
    err_console,
    flag,
    load_config,
    open_store,
    print_json,
    show_stored_run,
)
from dmlbench.errors import DmlbenchError
from dmlbench.results.store import Rerun

if TYPE_CHECKING:
    from dmlbench.launch.request import RunRequest
    from dmlbench.spec.run import RunSpec


def run(
    task: TaskArgument = None,
    workers: Annotated[
        str | None,
        typer.Option("--workers", "-w", help="worker processes; a list (1,2,4) makes a sweep"),
    ] = None,
    seed: SeedOption = None,
    config: ConfigOption = None,
    overrides: SetOption = None,
    plugins: PluginOption = None,
    exchange: Annotated[
        str | None,
        typer.Option(
            help=f"gradient exchange: {', '.join(SYNC_EXCHANGES)} (synchronous SGD), or "
            f"{', '.join(OPEN_EXCHANGES)}; `dmlbench exchanges` lists their options; a "
            "list (allreduce,powersgd) makes a sweep"
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="another model than the recipe's (`dmlbench models`); its options start at "
            "their defaults, and --set OPTION=VALUE sets one; a list makes a sweep"
        ),
    ] = None,
    data_dir: DataDirOption = None,
    network: Annotated[
        str | None, typer.Option(help=f"{NETWORK_HELP}; a list (1gbit,100mbit) makes a sweep")
    ] = None,
    store: StoreOption = STORE,
    dry_run: Annotated[bool, flag("--dry-run", help="resolve the spec, start nothing")] = False,
    json_out: JsonOption = False,
    quiet: QuietOption = False,
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
    rerun: SweepRerunOption = None,
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
    nproc_per_node: NprocPerNodeOption = None,
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

    A list of worker counts, exchanges, networks or models, --scaling or --repeats
    turns the run into a sweep.
    --nnodes with --rdzv-endpoint makes this one node of a job over several hosts;
    --nodes emulates such a cluster on this machine.
    """
    from dmlbench.launch.forkserver import start_early
    from dmlbench.launch.request import SWEPT_OPTIONS, RunFlags, early_allocator, plan_run

    config_task, config_data = load_config(config)
    flags = RunFlags(
        store=store,
        task=task or config_task,
        workers=workers,
        scaling=scaling,
        repeats=repeats,
        global_batch=global_batch,
        name=name,
        rerun=rerun,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        exchange=exchange,
        network=network,
        model=model,
    )
    request = plan_run(flags, config_data, os.environ, DEFAULT_TASK)
    exchange, network, model = (request.chosen.get(key) for key in SWEPT_OPTIONS)
    if model is not None:  # as --set recipe.model.name=MODEL, before the other --set
        overrides = [f"recipe.model.name={json.dumps(model)}", *(overrides or [])]
    if not dry_run:  # the workers' fork server imports while the spec resolves
        start_early(early_allocator(request, config_data, overrides or []))
    from dmlbench.netem.profiles import network_option
    from dmlbench.resolve import deviations, resolve_spec  # imports torch

    if request.sweep is not None:
        from dmlbench.cli.sweeps import run_sweep
        from dmlbench.spec.sweep import validate_sweep

        run_sweep(
            validate_sweep(request.sweep_file(global_batch, seed, config_data)),
            overrides=overrides or [],
            plugins=plugins or [],
            fields={
                "exchange": exchange,
                "data_dir": str(data_dir) if data_dir else None,
                "network": network_option(network),
                **request.layout,
            },
            store=request.store,
            rerun=rerun or Rerun.failed,
            plan_only=dry_run,
            json_out=json_out,
            quiet=quiet,
            slurm=request.slurm,
        )
        return
    spec = resolve_spec(
        request.task,
        config=config_data,
        overrides=overrides or [],
        plugins=plugins or [],
        workers=request.workers,
        seed=seed,
        exchange=exchange,
        global_batch=global_batch,
        data_dir=str(data_dir) if data_dir else None,
        network=network_option(network),
        **request.layout,
    )
    if dry_run:
        _dry_run(spec, deviations(spec), json_out)
        return
    _start(spec, request, rdzv_timeout, local_addr, json_out, quiet)


def _start(
    spec: RunSpec,
    request: RunRequest,
    rdzv_timeout: int,
    local_addr: str | None,
    json_out: bool,
    quiet: bool,
) -> None:
    """Launch the resolved run (one node of a job when the request names an endpoint),
    with a progress bar, then print its summary or this node's part."""
    from dmlbench.cli.views.progress import RunProgress
    from dmlbench.launch import run_benchmark
    from dmlbench.launch.rendezvous import Rendezvous

    rendezvous = None
    if request.rdzv_endpoint is not None:
        if spec.network.enabled:
            raise DmlbenchError(
                "--network emulates a cluster on this machine; with "
                "--rdzv-endpoint the nodes are real hosts: drop --network"
            )
        rendezvous = Rendezvous(
            request.rdzv_endpoint, request.rdzv_id, spec.nodes, rdzv_timeout, local_addr
        )
    results = open_store(request.store)
    title = escape(f"{spec.task} × {spec.layout if spec.nodes > 1 else spec.workers}")
    try:  # --json: no progress bar, and the workers' output only in the run folder
        with contextlib.nullcontext() if json_out else RunProgress(console, title) as progress:
            outcome = run_benchmark(
                spec,
                results,
                echo=not (quiet or json_out),
                progress=progress,
                rendezvous=rendezvous,
                slurm=request.slurm,
            )
    except KeyboardInterrupt:
        err_console.print("interrupted: the run is stored as interrupted")
        raise typer.Exit(130) from None
    if not outcome.recorded:
        _node_outcome(outcome, json_out)
        return
    show_stored_run(results, outcome.run_id, outcome.status, json_out)


def _node_outcome(outcome: Any, json_out: bool) -> None:
    """A node of a multi-node job whose rank 0 ran elsewhere: say where its part is kept
    and exit with the run's status."""
    ranks = outcome.ranks
    if json_out:
        print_json(
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
        held = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
        console.print(
            f"run {escape(outcome.run_id)}: this node ran {held} "
            f"({outcome.status}); the node that held rank 0 stores the run. Worker "
            f"logs: {escape(outcome.run_dir)}/logs",
            soft_wrap=True,
        )
        if outcome.error:
            err_console.print(f"error: {escape(outcome.error)}")
    if outcome.status != "finished":
        raise typer.Exit(130 if outcome.status == "interrupted" else 1)


def _dry_run(spec: Any, differ: dict[str, Any], json_out: bool) -> None:
    from dmlbench.resolve import derived

    plan = {"spec": spec.to_json_dict(), "derived": derived(spec), "deviations": differ}
    if json_out:
        print_json(plan)
        return
    from dmlbench.cli.views.spec import dry_run_view

    console.print(dry_run_view(spec, plan["derived"], differ))
    console.print("The whole resolved spec: --json; what each key means: dmlbench spec")
