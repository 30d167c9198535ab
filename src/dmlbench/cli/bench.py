"""`dmlbench bench`: micro-benchmarks: all-reduce over message sizes (the communication
layer), and one device's step against its local batch (the compute)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    NETWORK_HELP,
    STORE,
    Command,
    JsonOption,
    NprocPerNodeOption,
    QuietOption,
    SetOption,
    StoreOption,
    command_group,
    console,
    err_console,
    open_store,
    output_option,
    print_json,
)
from dmlbench.names import comma_list

bench_app = command_group(
    "Micro-benchmarks: all-reduce over message sizes (mlbench's task 0), and one device's "
    "step against its local batch."
)


@bench_app.command("allreduce", cls=Command)
def allreduce(
    workers: Annotated[
        str, typer.Option("--workers", "-w", help="worker counts, e.g. 2,4 (one run each)")
    ] = "2",
    backend: Annotated[str, typer.Option(help="gloo (CPU), nccl (GPU) or mpi")] = "gloo",
    max_bytes: Annotated[
        str,
        typer.Option(
            help="largest message: bytes, or a size like 64MiB or 1GB (from 4 bytes, "
            "×factor per step)"
        ),
    ] = "100MB",
    factor: Annotated[int, typer.Option(help="size step between messages")] = 4,
    repeats: Annotated[int, typer.Option(help="timed repeats per size")] = 10,
    warmup: Annotated[int, typer.Option(help="untimed all-reduces per size first")] = 3,
    network: Annotated[
        str | None,
        typer.Option(help=f"{NETWORK_HELP}; a list (1gbit,10gbit) benchmarks on each"),
    ] = None,
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
    from dmlbench.cli.views.comm import comm_table
    from dmlbench.launch.bench import resolve_bench, run_comm_bench
    from dmlbench.launch.request import worker_counts
    from dmlbench.netem.profiles import network_option
    from dmlbench.report.formats import human_bytes, layout, plural
    from dmlbench.spec.bench import CommBenchSpec
    from dmlbench.spec.overrides import apply_overrides, deep_merge, refuse_set_twice

    specs = []
    counts = [nodes * nproc_per_node] if nproc_per_node else worker_counts(workers)
    # the profiles file read once, not a count each
    links = [network_option(name) or {} for name in comma_list(network or "")] or [{}]
    for link, count in itertools.product(links, counts):
        tree: dict[str, Any] = {
            "workers": count,
            "nodes": nodes,
            "backend": backend,
            "max_bytes": max_bytes,
            "factor": factor,
            "repeats": repeats,
            "warmup": warmup,
            "network": link,
        }
        full = deep_merge(CommBenchSpec().to_json_dict(), tree)
        touched = apply_overrides(full, overrides or [])
        refuse_set_twice(touched, tree)
        specs.append(resolve_bench(full))
    results = open_store(store)
    runs, failed = [], False
    for spec in specs:
        out = err_console if json_out else console
        out.print(
            f"all-reduce · {spec.backend} · {plural(spec.workers, 'worker')}"
            f"{layout(spec.nodes, spec.per_node)} · network "
            f"{spec.network.label()} · {plural(len(spec.sizes()), 'size')} up to "
            f"{human_bytes(spec.sizes()[-1])} …",  # as the table writes it: 95.4 MiB
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


@bench_app.command("curve", cls=Command)
def curve(
    task: Annotated[str, typer.Argument(help="a task with an input shape (`dmlbench tasks`)")],
    local_batch: Annotated[
        str, typer.Option(help="local batches, e.g. 8,16,32 (a run each)")
    ] = "8,16,32,64,128,256",
    precision: Annotated[
        str | None, typer.Option(help="fp32, tf32 or bf16 (default: the recipe's)")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    out: Annotated[
        Path | None,
        output_option(
            "write the curve here (default: a file in this folder named for the task and "
            "the precision)",
            "--out file",
        ),
    ] = None,
    steps: Annotated[int, typer.Option(help="timed steps a run", min=1, max=100_000)] = 30,
    warmup: Annotated[
        int, typer.Option(help="steps a run takes before the clock starts", min=0, max=100_000)
    ] = 10,
    repeats: Annotated[
        int, typer.Option(help="runs a batch; the curve takes their median", min=1, max=100)
    ] = 1,
    overrides: SetOption = None,
    store: StoreOption = STORE,
    json_out: JsonOption = False,
    quiet: QuietOption = True,
) -> None:
    """One device's step time against its local batch: the curve file
    (curve-TASK-PRECISION.json unless --out) that `simulate-cluster --curve` reads.

    A one-worker run on synthetic data (DLBS's throughput mode) at each --local-batch,
    each stored; running it again reuses the runs the store has, and Ctrl-C keeps them.
    `advise-cluster --curve` reads the curve too.
    """
    from dmlbench.cli.sweeps import run_sweep
    from dmlbench.cli.views.clusters import curve_table
    from dmlbench.errors import SpecError
    from dmlbench.files import check_output_file, write_file
    from dmlbench.launch.lifecycle import check_device
    from dmlbench.launch.request import worker_counts
    from dmlbench.perfmodel.curve import curve_from_runs, curve_sweep
    from dmlbench.spec.recipe import PRECISIONS
    from dmlbench.spec.sweep import validate_sweep
    from dmlbench.sweep import plan_sweep
    from dmlbench.tasks import get_task

    batches = worker_counts(local_batch, "--local-batch", "local batches")
    if precision is not None and precision not in PRECISIONS:  # it names the file
        raise SpecError(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    precision = precision or get_task(task).recipe.precision
    check_device(device)
    fixed = {
        "workers": 1,
        "device": device,
        "synthetic_data": True,
        "warmup_steps_excluded": warmup,
        "max_steps": warmup + steps,
        "recipe.precision": precision,
    }
    sweep = validate_sweep(
        {
            "name": curve_sweep(task, _device_model(device), precision, steps, warmup),
            "task": task,
            "repeats": repeats,
            "set": fixed,
            "axes": {"recipe.local_batch": batches},
        }
    )
    first = plan_sweep(sweep, overrides=overrides or ()).runs[0].spec
    _refuse_what_the_curve_sets(first, fixed)
    compiled = first.compile
    mode = "" if not compiled else "-compiled" if compiled is True else f"-{compiled}"
    path = out or Path(f"curve-{task}-{precision}{mode}.json")
    check_output_file(path, "--out file")  # before any run, not after them all
    runs = run_sweep(
        sweep,
        overrides=overrides,
        store=store,
        json_out=json_out,
        quiet=quiet,
        table=False,
        planned_only=True,  # a run of another --set under this name is another curve's
    )
    measured, elsewhere = curve_from_runs(runs, precision)
    missing = sorted(set(batches) - {int(b) for b, _ in measured.points})
    measured = replace(measured, missing=tuple(missing))  # a script reads it in the file
    write_file(path, json.dumps(measured.to_json(), indent=1) + "\n", "--out file")
    if json_out:
        print_json(measured.to_json())
    else:
        console.print(curve_table(measured, elsewhere))
        said = _curve_use(task, path, measured.device, measured.kind)
        console.print(said, markup=False, soft_wrap=True)
    if missing:
        err_console.print(
            f"[yellow]no finished run at local batch {', '.join(map(str, missing))}: the "
            "curve leaves them out (their runs: dmlbench results)[/yellow]"
        )
        raise typer.Exit(1)


def _refuse_what_the_curve_sets(spec: Any, fixed: dict[str, Any]) -> None:
    """A --set of what `bench curve` sets itself (one worker on one node, synthetic data,
    its --device, --warmup, --steps and --precision) is refused before any run: `--set
    workers=4` ran every batch on 4 workers, then found no one-worker run to draw."""
    from dmlbench.errors import SpecError
    from dmlbench.spec.overrides import flatten

    tree = flatten(spec.to_json_dict())
    clash = [f"{key}={tree.get(key)}" for key, value in fixed.items() if tree.get(key) != value]
    clash += [f"nodes={spec.nodes}"] * (spec.nodes != 1) + ["network"] * spec.network.enabled
    if clash:
        raise SpecError(
            "bench curve times one device at each --local-batch, on synthetic data: drop "
            f"{', '.join(clash)} from --set (--device, --warmup, --steps and --precision "
            "set theirs)"
        )


def _curve_use(task: str, path: Path, device: str | None, kind: str | None = None) -> str:
    """Where the curve went and the command that uses it: on a cluster profile of the
    device it was measured on, or, where no shipped profile has that device, a profile
    of one's own, of the device's kind (a CPU's curve is refused on a GPU's profile)."""
    from dmlbench.perfmodel.hardware import load_hardware

    profiles = load_hardware().clusters_of(device or "")
    if profiles:
        command = f"dmlbench simulate-cluster {task} --cluster {profiles[0]} --curve {path}"
        return f"curve: {path} ({command})"
    return (
        f"curve: {path}, {device or 'this device'}'s steps: no cluster profile has this "
        "device, so give simulate-cluster one of your own that names it (--hardware FILE, "
        "an accelerator whose `matches` it holds" + (f", of kind: {kind})" if kind else ")")
    )


def _device_model(device: str) -> str:
    """The model of the device ``--device`` picks on this host: the GPU's name, or the
    CPU's (``auto``: a GPU where torch sees one)."""
    import torch

    from dmlbench.train.hardware import device_name, uses_cuda

    return device_name(torch.device("cuda" if uses_cuda(device) else "cpu"))
