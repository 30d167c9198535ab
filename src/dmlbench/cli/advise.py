"""`dmlbench advise` and `dmlbench advise-cluster`: workers, batch and learning-rate
rule from the store's runs, and the node count and batch that train to the target by a
deadline or within a budget on a hardware profile."""

from __future__ import annotations

from typing import Annotated

import typer

from dmlbench.cli.cluster import (
    AlgorithmOption,
    ConvergeFromOption,
    CurveOption,
    DevicesPerNodeOption,
    DtypeOption,
    EfficiencyOption,
    HardwareOption,
    SamplesPerSOption,
    cluster_time_to_train,
)
from dmlbench.cli.options import (
    STORE,
    EpochsOption,
    JsonOption,
    PriceOption,
    PricesOption,
    StoreOption,
    console,
    duration,
    open_store,
    print_json,
)
from dmlbench.errors import SpecError

# The network the batch advice prices steps on where --network is not given (None
# tells --memory-per-worker's refusal that it was not)
ADVICE_NETWORK = "10gbit"


def advise(
    task: Annotated[str, typer.Argument(help="task to advise on (calibrated from its runs)")],
    max_workers: Annotated[int, typer.Option(help="the most workers to consider", min=1)] = 8,
    network: Annotated[
        str | None,
        typer.Option(
            help="a profile or a rate (none = the measured host network); default " + ADVICE_NETWORK
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="the worker count you plan (checked against guidelines)", min=1),
    ] = None,
    local_batch: Annotated[
        int | None, typer.Option(help="the local batch you plan (default: the recipe's)", min=1)
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
    json_out: JsonOption = False,
) -> None:
    """Recommend workers, local batch and learning-rate rule for a task.

    Joins the gradient noise scale the task's runs measured, the store's epochs to the
    target by global batch, and the performance model's step time on the network;
    every number says where it came from. Needs runs of the task (one with 2+ workers
    for the noise scale) and `dmlbench bench allreduce` in the same store. For a
    cluster you do not have, by a deadline or within a budget: `dmlbench advise-cluster`.
    """
    if memory_per_worker is not None:
        given = {"--network": network, "--epochs": epochs, "--price": price, "--prices": prices}
        if ignored := [name for name, value in given.items() if value is not None]:
            raise SpecError(
                f"--memory-per-worker advises on memory alone, from the task's runs: drop "
                f"{', '.join(ignored)} (the batch advice's, without --memory-per-worker)"
            )
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
        network=network or ADVICE_NETWORK,
        price=chosen,
        workers=workers,
        local_batch=local_batch,
        assume_epochs=epochs,
    )
    if json_out:
        print_json({**advice.to_json(), "price": chosen.label, "unpriced": advice.unpriced})
        return
    from dmlbench.cli.views.predictions import advice_table

    console.print(advice_table(advice, chosen.label, chosen.currency))


def advise_cluster(
    task: Annotated[str, typer.Argument(help="task to plan (its FLOPs, and its runs' samples)")],
    cluster: Annotated[
        str, typer.Option(help="a hardware profile (`dmlbench simulate-cluster --cluster list`)")
    ],
    deadline: Annotated[
        float | None,
        typer.Option(
            parser=duration,
            metavar="<duration>",
            help="time by which training must reach the target: seconds, or 30min, 8h, H:MM:SS",
        ),
    ] = None,
    budget: Annotated[
        float | None, typer.Option(help="the most to spend on the training run", min=0)
    ] = None,
    nodes: Annotated[str, typer.Option(help="the node counts to consider")] = "1,2,4,8,16,32,64",
    local_batch: Annotated[
        str | None,
        typer.Option(
            help="the local batches to choose among, e.g. 32,64,128 (default: the recipe's)"
        ),
    ] = None,
    converge_from: ConvergeFromOption = None,
    curve: CurveOption = None,
    samples_per_s: SamplesPerSOption = None,
    efficiency: EfficiencyOption = None,
    dtype: DtypeOption = "fp32",
    algorithm: AlgorithmOption = None,
    devices_per_node: DevicesPerNodeOption = None,
    hardware: HardwareOption = None,
    store: StoreOption = STORE,
    price: Annotated[
        str | None,
        typer.Option(
            help="price per device-hour: a number or a name in the price table "
            "(default: the table's entry for the profile's devices)"
        ),
    ] = None,
    prices: PricesOption = None,
    json_out: JsonOption = False,
) -> None:
    """Plan a training run on a cluster's hardware profile: the node count and local
    batch that reach the target within --deadline at the least cost, or fastest within
    --budget.

    The same model as `dmlbench simulate-cluster`, with time to train, a row per node
    count and local batch, and the choice; each at the slow end of the band the
    published runs' spread gives.
    """
    from dmlbench.advise.deadline import plan_cluster
    from dmlbench.cli.views.clusters import plan_table
    from dmlbench.launch.request import worker_counts
    from dmlbench.prices import choose_price
    from dmlbench.tasks import get_task

    if deadline is None and budget is None:
        raise SpecError("advise-cluster plans for a --deadline (a time), a --budget, or both")
    if deadline is not None and deadline < 1:
        raise SpecError(f"--deadline {deadline:g} s: give a time of a second or more")
    batches = worker_counts(local_batch, "--local-batch", "local batches") if local_batch else None
    if samples_per_s is not None and batches is not None and len(batches) > 1:
        raise SpecError(
            "--samples-per-s is one device's speed at one local batch; for several, measure "
            "the device's curve (`dmlbench bench curve`) and give --curve"
        )
    chosen = choose_price(price, prices)  # a bad price is refused before any model is built
    results = cluster_time_to_train(
        task,
        cluster,
        nodes,
        store,
        converge_from,
        curve=curve,
        local_batches=batches or [None],
        devices_per_node=devices_per_node,
        hardware_file=hardware,
        efficiency=efficiency,
        dtype=dtype,
        samples_per_s=samples_per_s,
        algorithm=algorithm,
    )
    first = results[0]
    accelerator = str(first.cluster["accelerator"])
    if price is None:  # the table's price for these devices, where it has one
        chosen = choose_price(None, prices, device=accelerator)
    if not chosen.covers(accelerator):  # an A100's hour at a CPU machine's price
        said = (
            f"{chosen.name} prices {chosen.what}, and"
            if price
            else f"the price table{f' {prices}' if prices else ''} has no entry for"
        )
        raise SpecError(
            f"{said} this cluster's devices, {accelerator}: give --price (a device-hour's) "
            "or --prices FILE with an entry whose device names them (e.g. device: V100)"
        )
    examples = get_task(task).train_examples  # a node count past them is left out
    plan = plan_cluster(results, chosen.per_worker_hour, deadline, budget, examples)
    plan.update(
        task=task,
        cluster=first.cluster,
        price={
            "name": chosen.name,
            "per_device_hour": chosen.per_worker_hour,
            "currency": chosen.currency,
        },
        compute={result.local_batch: result.efficiency_source for result in results},
        convergence=first.convergence,
        algorithm=first.algorithm,
    )
    if json_out:
        print_json(plan)
    else:
        console.print(plan_table(plan))
