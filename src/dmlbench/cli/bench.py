"""`dmlbench bench`: micro-benchmarks of the communication layer."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    STORE,
    Command,
    JsonOption,
    NetworkOption,
    NprocPerNodeOption,
    StoreOption,
    command_group,
    console,
    err_console,
    open_store,
    print_json,
)

bench_app = command_group("Micro-benchmarks of the communication layer (mlbench's task 0).")


@bench_app.command("allreduce", cls=Command)
def allreduce(
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
    network: NetworkOption = None,
    nodes: Annotated[
        int,
        typer.Option(
            min=1,
            help="emulated cluster: a namespace per node (root); measures "
            "across nodes, within one node, and hierarchically",
        ),
    ] = 1,
    nproc_per_node: NprocPerNodeOption = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="any benchmark key: key=value")
    ] = None,
    store: StoreOption = STORE,
    json_out: JsonOption = False,
) -> None:
    """Latency, algorithm and bus bandwidth of all-reduce over message sizes."""
    from dmlbench.cli.views.tables import comm_table
    from dmlbench.launch.bench import resolve_bench, run_comm_bench
    from dmlbench.launch.request import worker_counts
    from dmlbench.spec.bench import CommBenchSpec
    from dmlbench.spec.overrides import apply_overrides, deep_merge

    specs = []
    counts = [nodes * nproc_per_node] if nproc_per_node else worker_counts(workers)
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
        specs.append(resolve_bench(full))
    results = open_store(store)
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
        print_json(runs)
    if failed:
        raise typer.Exit(1)
