"""`dmlbench simulate` and `dmlbench advise`: predictions and advice for clusters
calibrated from the store's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    EpochsOption,
    JsonOption,
    PriceOption,
    PricesOption,
    StoreOption,
    checked_output,
    console,
    open_store,
    print_json,
    store_path,
)
from dmlbench.report.formats import plural


def simulate(
    task: Annotated[str, typer.Argument(help="task to predict (calibrated from its runs)")],
    workers: Annotated[str, typer.Option("--workers", "-w", help="e.g. 1,8,64,512")] = "1,2,4,8",
    network: Annotated[
        str, typer.Option(help="profiles, comma-separated (none = the measured host network)")
    ] = "10gbit",
    algorithm: Annotated[
        str,
        typer.Option(
            help="ring, tree, ps and/or hierarchical (comma-separated); with --cluster, "
            "ring (flat, gloo's) or hierarchical (NCCL's shape)"
        ),
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
    store: StoreOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    png: Annotated[
        Path | None,
        typer.Option(
            help="write the predicted speedup plot here (PNG)",
            callback=checked_output("--png file"),
        ),
    ] = None,
    epochs: EpochsOption = None,
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
    cluster: Annotated[
        str | None,
        typer.Option(
            help="a hardware profile (dgx-a100, goyal2017-bigbasin, …; `--cluster list`): "
            "compute from the task's FLOPs and the device's peak, links from the profile, "
            "DDP's overlap; no store needed"
        ),
    ] = None,
    devices_per_node: Annotated[
        int | None,
        typer.Option(
            help="with --cluster: devices per node (default: the profile's)", min=1, max=1024
        ),
    ] = None,
    efficiency: Annotated[
        float | None,
        typer.Option(
            help="with --cluster: the share of the peak a step achieves (default: a run of "
            "the task on that device in the store, else 40%)",
            min=0.001,
            max=1.0,
        ),
    ] = None,
    dtype: Annotated[str, typer.Option(help="with --cluster: the peak's dtype")] = "fp32",
    hardware: Annotated[
        Path | None, typer.Option(help="with --cluster: your own hardware YAML, added")
    ] = None,
    local_batch: Annotated[
        int | None,
        typer.Option(
            help="with --cluster: each device's batch (default: the recipe's)", min=1, max=2**20
        ),
    ] = None,
    samples_per_s: Annotated[
        float | None,
        typer.Option(
            help="with --cluster: one device's measured samples/s at the local batch, in "
            "place of --efficiency",
            min=1e-6,
            max=1e12,
        ),
    ] = None,
    curve: Annotated[
        Path | None,
        typer.Option(
            help="with --cluster: one device's measured step time against its local batch "
            "(JSON [[batch, seconds], ...], from benchmarks/local_batch_curve.py), in place "
            "of --efficiency: the compute at any --local-batch"
        ),
    ] = None,
    converge_from: Annotated[
        str | None,
        typer.Option(
            help="with --cluster: fit samples to the target against the global batch on "
            "this task's runs in the store (default: the task's own; e.g. mlperf/resnet "
            "after `results --import-mlperf`)"
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Predict step time, time to accuracy and cost at N workers on a network.

    Calibrated from the store: compute from the task's runs, communication from
    `dmlbench bench allreduce`; epochs to the target from runs that reached it (at the
    nearest measured global batch otherwise, and said so). With --cluster, the task on a
    cluster's hardware profile instead: step time, speedup and efficiency by --nodes.
    """
    if cluster is not None:
        _simulate_cluster(
            task,
            cluster,
            nodes,
            devices_per_node,
            efficiency,
            dtype,
            hardware,
            store,
            png,
            json_out,
            converge_from,
            local_batch,
            samples_per_s,
            curve,
            algorithm,
        )
        return
    store = store_path(store)
    from dmlbench.launch.request import layouts, worker_counts
    from dmlbench.perfmodel.simulate import simulate as predict_scaling
    from dmlbench.prices import choose_price
    from dmlbench.report.predictions import save_predictions

    counts = worker_counts(workers)
    simulation = predict_scaling(
        open_store(store, existing=True),
        task,
        counts,
        [n.strip() for n in network.split(",") if n.strip()],
        [a.strip() for a in algorithm.split(",") if a.strip()],
        price=choose_price(price, prices),
        layouts=layouts(nodes, nproc_per_node),
        epochs=epochs,
        host_bandwidth=host_bandwidth,
        calibrate_from=calibrate_from or [],
    )
    result = simulation.to_json()
    saved = save_predictions(store, task, result)
    if json_out:
        print_json(result)
    else:
        from dmlbench.cli.views.predictions import prediction_table

        console.print(prediction_table(result))
        console.print(f"saved to {saved}; `dmlbench report` draws it", markup=False, soft_wrap=True)
    if png:
        from dmlbench.files import write_figure
        from dmlbench.report.figures import predicted_speedup

        runs = plural(simulation.calibration.runs, "run")
        title = f"{task} · predicted · calibrated on {runs}"
        write_figure(predicted_speedup(simulation.rows, title), png, "--png file")
        console.print(f"speedup plot: {png}", markup=False, soft_wrap=True)


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
    epochs: EpochsOption = None,
    store: StoreOption = None,
    price: PriceOption = None,
    prices: PricesOption = None,
    memory_per_worker: Annotated[
        str | None,
        typer.Option(
            help="a worker's memory (16GiB, 500MB): say which of ddp, zero1 and fsdp fits "
            "and what it costs in step time, instead of the batch advice"
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="plan on a hardware profile instead (`simulate --cluster list`): the node "
            "count that trains to the target within --deadline at the least cost, or "
            "fastest within --budget"
        ),
    ] = None,
    nodes: Annotated[
        str, typer.Option(help="with --cluster: the node counts to consider")
    ] = "1,2,4,8,16,32,64",
    deadline: Annotated[
        float | None,
        typer.Option(help="with --cluster: seconds by which training must reach the target", min=1),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(help="with --cluster: the most to spend on the training run", min=0),
    ] = None,
    converge_from: Annotated[
        str | None,
        typer.Option(help="with --cluster: fit samples to the target on this task's runs"),
    ] = None,
    curve: Annotated[
        Path | None,
        typer.Option(help="with --cluster: a device's measured step against local batch"),
    ] = None,
    dtype: Annotated[str, typer.Option(help="with --cluster: the peak's dtype")] = "fp32",
    algorithm: Annotated[
        str, typer.Option(help="with --cluster: ring (flat) or hierarchical (NCCL's shape)")
    ] = "ring",
    json_out: JsonOption = False,
) -> None:
    """Recommend workers, local batch and learning-rate rule for a task.

    Joins the gradient noise scale the task's runs measured, the store's epochs to the
    target by global batch, and the performance model's step time on the network;
    every number says where it came from. Needs runs of the task (one with 2+ workers
    for the noise scale) and `dmlbench bench allreduce` in the same store.
    """
    store = store_path(store)
    if cluster is not None:
        _advise_cluster(
            task,
            cluster,
            nodes,
            deadline,
            budget,
            converge_from,
            curve,
            dtype,
            local_batch,
            store,
            price,
            prices,
            json_out,
            algorithm,
        )
        return
    if memory_per_worker is not None:
        from dmlbench.advise.memory import advise_memory, parse_bytes
        from dmlbench.cli.views.memory import memory_advice_table

        budget = parse_bytes(memory_per_worker)
        runs = open_store(store, existing=True).runs(task=task)
        fit = advise_memory(runs, task, budget, workers or max_workers, local_batch)
        if json_out:
            print_json(fit.to_json())
        else:
            console.print(memory_advice_table(fit))
        return
    from dmlbench.advise.recommend import advise_from_store
    from dmlbench.prices import choose_price

    chosen = choose_price(price, prices)
    advice = advise_from_store(
        open_store(store, existing=True),
        task,
        max_workers=max_workers,
        network=network,
        price_per_worker_hour=chosen.per_worker_hour,
        workers=workers,
        local_batch=local_batch,
        assume_epochs=epochs,
    )
    if json_out:
        print_json({**advice.to_json(), "price": chosen.label})
        return
    from dmlbench.cli.views.predictions import advice_table

    console.print(advice_table(advice, chosen.label))


def _simulate_cluster(
    task: str,
    cluster: str,
    nodes: str | None,
    devices_per_node: int | None,
    efficiency: float | None,
    dtype: str,
    hardware: Path | None,
    store: Path | None,
    png: Path | None,
    json_out: bool,
    converge_from: str | None = None,
    local_batch: int | None = None,
    samples_per_s: float | None = None,
    curve: Path | None = None,
    algorithm: str = "ring",
) -> None:
    from dmlbench.cli.views.predictions import cluster_table, hardware_table
    from dmlbench.perfmodel.cluster import read_curve
    from dmlbench.perfmodel.hardware import load_hardware
    from dmlbench.perfmodel.replays import published_points

    if cluster == "list":
        console.print(hardware_table(load_hardware(hardware)))
        return
    result = _cluster_time_to_train(
        task,
        cluster,
        nodes or "1,2,4,8",
        store_path(store),
        converge_from,
        devices_per_node=devices_per_node,
        hardware_file=hardware,
        efficiency=efficiency,
        dtype=dtype,
        local_batch=local_batch,
        samples_per_s=samples_per_s,
        curve=read_curve(curve) if curve is not None else None,
        algorithm=algorithm,
    )
    result["published"] = published_points(task, cluster)
    if json_out:
        print_json(result)
    else:
        console.print(cluster_table(result))
    if png:
        from dmlbench.files import write_figure
        from dmlbench.report.figures import cluster_scaling

        write_figure(cluster_scaling(result), png, "--png file")
        console.print(f"scaling plot: {png}", markup=False, soft_wrap=True)


def _cluster_time_to_train(
    task: str,
    cluster: str,
    nodes: str,
    store: Path,
    converge_from: str | None,
    **options: Any,
) -> dict[str, Any]:
    """`simulate --cluster` and `advise --cluster`: the task on the profile, calibrated
    from its runs in ``store``, with time to train fitted on ``converge_from``'s runs
    (the task's own by default)."""
    from dmlbench.launch.request import worker_counts
    from dmlbench.perfmodel.cluster import add_time_to_train, simulate_cluster

    stored = open_store(store) if store.exists() else None
    runs = stored.runs(task=task) if stored else []
    counts = worker_counts(nodes, "--nodes", "node counts")
    result = simulate_cluster(task, cluster, counts, runs=runs, **options)
    source = converge_from or task
    converged = stored.runs(task=source) if stored and source != task else runs
    add_time_to_train(result, converged, source)
    return result


def _advise_cluster(
    task: str,
    cluster: str,
    nodes: str,
    deadline: float | None,
    budget: float | None,
    converge_from: str | None,
    curve: Path | None,
    dtype: str,
    local_batch: int | None,
    store: Path,
    price: str | None,
    prices: Path | None,
    json_out: bool,
    algorithm: str = "ring",
) -> None:
    """`advise TASK --cluster PROFILE --deadline S | --budget X`: the same model as
    `simulate --cluster` with time to train, a row per node count, and the choice."""
    from dmlbench.cli.views.predictions import plan_table
    from dmlbench.errors import SpecError
    from dmlbench.perfmodel.cluster import plan_cluster, read_curve
    from dmlbench.prices import choose_price

    if deadline is None and budget is None:
        raise SpecError("advise --cluster plans for a --deadline (seconds), a --budget, or both")
    result = _cluster_time_to_train(
        task,
        cluster,
        nodes,
        store,
        converge_from,
        dtype=dtype,
        local_batch=local_batch,
        curve=read_curve(curve) if curve is not None else None,
        algorithm=algorithm,
    )
    chosen = choose_price(price, prices)
    plan = plan_cluster(result, chosen.per_worker_hour, deadline, budget)
    plan.update(
        task=task,
        cluster=result["cluster"],
        price={"name": chosen.name, "per_device_hour": chosen.per_worker_hour},
        compute=result["efficiency_source"],
        convergence=result["convergence"],
        local_batch=result["local_batch"],
        algorithm=result["algorithm"],
    )
    if json_out:
        print_json(plan)
    else:
        console.print(plan_table(plan))
