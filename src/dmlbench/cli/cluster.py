"""`dmlbench simulate-cluster`: a task on a cluster you do not have, from its hardware
profile, with time to train; and the model `advise-cluster` plans on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from dmlbench.cli.options import (
    STORE,
    JsonOption,
    StoreOption,
    console,
    err_console,
    open_store,
    output_option,
    print_json,
)
from dmlbench.errors import SpecError
from dmlbench.qualities import imported_benchmark

if TYPE_CHECKING:
    from dmlbench.perfmodel.cluster import ClusterSimulation

# The options `simulate-cluster` and `advise-cluster` share: the same model's inputs.
DevicesPerNodeOption = Annotated[
    int | None, typer.Option(help="devices per node (default: the profile's)", min=1, max=1024)
]
EfficiencyOption = Annotated[
    float | None,
    typer.Option(
        help="the share of the peak a step achieves (default: a run of "
        "the task on that device in the store, else 40%)",
        min=0.001,
        max=1.0,
    ),
]
HardwareOption = Annotated[Path | None, typer.Option(help="your own hardware YAML, added")]
SamplesPerSOption = Annotated[
    float | None,
    typer.Option(
        help="one device's measured samples/s at the local batch, in place of --efficiency",
        min=1e-6,
        max=1e12,
    ),
]
CurveOption = Annotated[
    Path | None,
    typer.Option(
        help="one device's measured step time against its local batch (the file `dmlbench "
        "bench curve` writes), in place of --efficiency: the compute at any local batch"
    ),
]
ConvergeFromOption = Annotated[
    str | None,
    typer.Option(
        help="fit samples to the target against the global batch on this task's runs in "
        "the store (default: the task's own; e.g. mlperf/resnet after `results "
        "--import-mlperf`)"
    ),
]
DtypeOption = Annotated[str, typer.Option(help="the dtype of the devices' peak FLOP/s")]
AlgorithmOption = Annotated[
    str | None,
    typer.Option(
        help="the all-reduce: ring (flat, gloo's) or hierarchical (reduced in each node "
        "first: NCCL's shape); default: the profile's (`simulate-cluster --cluster list`)"
    ),
]


def simulate_cluster(
    cluster: Annotated[
        str | None,
        typer.Option(
            help="a hardware profile (dgx-a100, goyal2017-bigbasin, …; `--cluster list`): "
            "compute from the task's FLOPs and the device's peak, links from the profile, "
            "DDP's overlap; no store needed",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Argument(help="task to predict (none with --cluster list)", show_default=False),
    ] = None,
    devices_per_node: DevicesPerNodeOption = None,
    efficiency: EfficiencyOption = None,
    dtype: DtypeOption = "fp32",
    hardware: HardwareOption = None,
    local_batch: Annotated[
        int | None,
        typer.Option(help="each device's batch (default: the recipe's)", min=1, max=2**20),
    ] = None,
    samples_per_s: SamplesPerSOption = None,
    curve: CurveOption = None,
    converge_from: ConvergeFromOption = None,
    nodes: Annotated[str, typer.Option(help="node counts, e.g. 1,2,4,8")] = "1,2,4,8",
    algorithm: AlgorithmOption = None,
    store: StoreOption = STORE,
    png: Annotated[
        Path | None,
        output_option("write the scaling plot here (PNG)", "--png file"),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Predict a task on a cluster's hardware profile: step time, speedup, efficiency
    and time to train by --nodes, beside the published results the profile cites.

    Compute from the task's FLOPs and the device's peak (or a measured speed or curve),
    links from the profile, DDP's overlap; samples to the target fitted on the store's
    runs (--converge-from). `--cluster list` lists the profiles.
    """
    from dmlbench.cli.views.clusters import cluster_table, hardware_table
    from dmlbench.perfmodel.hardware import load_hardware
    from dmlbench.perfmodel.replays import published_points
    from dmlbench.perfmodel.simulate import refuse_batches_past_the_data
    from dmlbench.tasks import get_task

    if cluster == "list" or (cluster is None and task == "list"):  # `simulate-cluster list`
        console.print(hardware_table(load_hardware(hardware)))
        return
    if cluster is None:
        raise SpecError(
            "which cluster? --cluster PROFILE (`dmlbench simulate-cluster list` lists them)"
        )
    if task is None:
        raise SpecError(f"which task? dmlbench simulate-cluster TASK --cluster {cluster}")
    (result,) = cluster_time_to_train(
        task,
        cluster,
        nodes,
        store,
        converge_from,
        curve=curve,
        local_batches=[local_batch],
        devices_per_node=devices_per_node,
        hardware_file=hardware,
        efficiency=efficiency,
        dtype=dtype,
        samples_per_s=samples_per_s,
        algorithm=algorithm,
    )
    batches = {row["nodes"]: row["global_batch"] for row in result.rows}
    refuse_batches_past_the_data(task, batches, get_task(task).train_examples, "--nodes", "nodes")
    result.published = published_points(task, cluster)
    if json_out:
        print_json(result.to_json())
    else:
        console.print(cluster_table(result))
    if png:
        from dmlbench.files import write_figure
        from dmlbench.report.prediction_figures import cluster_scaling

        figure = cluster_scaling(result.task, result.cluster, result.rows, result.published)
        write_figure(figure, png, "--png file")
        console.print(f"scaling plot: {png}", markup=False, soft_wrap=True)


def cluster_time_to_train(
    task: str,
    cluster: str,
    nodes: str,
    store: Path,
    converge_from: str | None,
    curve: Path | None = None,
    local_batches: Sequence[int | None] = (None,),
    **options: Any,
) -> list[ClusterSimulation]:
    """`simulate-cluster` and `advise-cluster`: the task on the profile at each of
    ``local_batches`` (None: the recipe's), calibrated from its runs in ``store``, with
    time to train fitted on ``converge_from``'s runs (the task's own by default); the
    store and the curve are read once for them all."""
    from dmlbench.launch.request import worker_counts
    from dmlbench.perfmodel.cluster import add_time_to_train, simulate_cluster
    from dmlbench.perfmodel.curve import read_curve

    stored = open_store(store) if store.exists() else None
    runs = stored.runs(task=task) if stored else []
    counts = worker_counts(nodes, "--nodes", "node counts")
    curve_points = read_curve(curve) if curve is not None else None
    source = converge_from or task
    converged = stored.runs(task=source) if stored and source != task else runs
    results, short = [], []
    for batch in local_batches:
        result = simulate_cluster(
            task, cluster, counts, runs=runs, curve=curve_points, local_batch=batch, **options
        )
        result.convergence = convergence = add_time_to_train(result.rows, converged, source)
        if converge_from is not None:
            convergence["borrowed"] = _borrowed(task, converge_from)
        if "note" in convergence:
            short.append(convergence)
        results.append(result)
    if short and stored and converge_from is None:  # the same note for every batch
        elsewhere = _fittable_elsewhere(stored.runs())
        for convergence in short:
            convergence["note"] += elsewhere
    for note in results[0].notes:  # the curve's: the same for every batch
        err_console.print(f"[yellow]note[/yellow]: {escape(note)}", soft_wrap=True)
    return results


def _borrowed(task: str, source: str) -> str | None:
    """What --converge-from's runs are where they are not this task's: an imported MLPerf
    benchmark other than the one the task is trains another model on other data, and
    its samples to the target count other samples (GNMT's sentences, not images)."""
    from dmlbench.tasks import get_task

    benchmark = imported_benchmark(source)
    if benchmark is None or source == get_task(task).published_runs:
        return None
    return f"MLPerf's {benchmark}: another model and dataset than {task}'s"


def _fittable_elsewhere(runs: Sequence[Any]) -> str:
    """The published runs in the store (``results --import-mlperf``'s, under their own
    task names) that reached the target at two or more global batches, for a note that
    asks for --converge-from ("" where there are none)."""
    from dmlbench.perfmodel.cluster import convergence_points

    tasks = sorted({run.task for run in runs if run.external})
    fittable = [
        name
        for name in tasks
        if len({b for b, _ in convergence_points([r for r in runs if r.task == name])}) > 1
    ]
    return f" (published runs in the store: {', '.join(fittable)})" if fittable else ""
