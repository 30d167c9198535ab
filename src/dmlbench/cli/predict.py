"""`dmlbench simulate` and `dmlbench advise`: predictions and advice for clusters
calibrated from the store's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dmlbench.cli.cluster import AlgorithmOption, ConvergeFromOption, CurveOption, DtypeOption
from dmlbench.cli.options import (
    STORE,
    EpochsOption,
    JsonOption,
    PriceOption,
    PricesOption,
    StoreOption,
    console,
    open_store,
    output_option,
    print_json,
)
from dmlbench.names import comma_list
from dmlbench.report.formats import plural


def simulate(
    task: Annotated[str, typer.Argument(help="task to predict (calibrated from its runs)")],
    workers: Annotated[str, typer.Option("--workers", "-w", help="e.g. 1,8,64,512")] = "1,2,4,8",
    network: Annotated[
        str, typer.Option(help="profiles, comma-separated (none = the measured host network)")
    ] = "10gbit",
    algorithm: Annotated[
        str,
        typer.Option(help="ring, halving-doubling, tree, ps and/or hierarchical (comma-separated)"),
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
    store: StoreOption = STORE,
    price: PriceOption = None,
    prices: PricesOption = None,
    png: Annotated[
        Path | None,
        output_option("write the predicted speedup plot here (PNG)", "--png file"),
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
    json_out: JsonOption = False,
) -> None:
    """Predict step time, time to accuracy and cost at N workers on a network.

    Calibrated from the store: compute from the task's runs, communication from
    `dmlbench bench allreduce`; epochs to the target from runs that reached it (at the
    nearest measured global batch otherwise, and said so). For a cluster you do not
    have, from its hardware profile: `dmlbench simulate-cluster`.
    """
    from dmlbench.launch.request import layouts, worker_counts
    from dmlbench.perfmodel.simulate import simulate as predict_scaling
    from dmlbench.prices import choose_price
    from dmlbench.report.predictions import save_predictions

    counts = worker_counts(workers)
    simulation = predict_scaling(
        open_store(store, existing=True),
        task,
        counts,
        comma_list(network),
        comma_list(algorithm),
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
        from dmlbench.report.prediction_figures import predicted_speedup

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
        str | None,
        typer.Option(
            help="the local batch you plan (default: the recipe's); with --cluster, "
            "several to choose among, e.g. 32,64,128"
        ),
    ] = None,
    epochs: EpochsOption = None,
    store: StoreOption = STORE,
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
            help="plan on a hardware profile instead (`simulate-cluster --cluster list`): the node "
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
    converge_from: ConvergeFromOption = None,
    curve: CurveOption = None,
    dtype: DtypeOption = "fp32",
    algorithm: AlgorithmOption = None,
    json_out: JsonOption = False,
) -> None:
    """Recommend workers, local batch and learning-rate rule for a task.

    Joins the gradient noise scale the task's runs measured, the store's epochs to the
    target by global batch, and the performance model's step time on the network;
    every number says where it came from. Needs runs of the task (one with 2+ workers
    for the noise scale) and `dmlbench bench allreduce` in the same store. With
    --cluster, the plan on a hardware profile (--nodes, --deadline, --budget,
    --converge-from, --curve, --dtype and --algorithm go with it).
    """
    from dmlbench.errors import SpecError
    from dmlbench.launch.request import worker_counts

    batches = worker_counts(local_batch, "--local-batch", "local batches") if local_batch else None
    if cluster is not None:
        from dmlbench.cli.cluster import advise_cluster

        advise_cluster(
            task,
            cluster,
            nodes,
            deadline,
            budget,
            converge_from,
            curve,
            dtype,
            batches,
            store,
            price,
            prices,
            json_out,
            algorithm,
        )
        return
    if batches is not None and len(batches) > 1:
        raise SpecError(f"--local-batch {local_batch}: one batch (several go with --cluster)")
    planned = batches[0] if batches else None
    if memory_per_worker is not None:
        from dmlbench.advise.memory import advise_memory, parse_bytes
        from dmlbench.cli.views.memory import memory_advice_table

        budget = parse_bytes(memory_per_worker)
        runs = open_store(store, existing=True).runs(task=task)
        fit = advise_memory(runs, task, budget, workers or max_workers, planned)
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
        price=chosen,
        workers=workers,
        local_batch=planned,
        assume_epochs=epochs,
    )
    if json_out:
        print_json({**advice.to_json(), "price": chosen.label, "unpriced": advice.unpriced})
        return
    from dmlbench.cli.views.predictions import advice_table

    console.print(advice_table(advice, chosen.label, chosen.currency))
