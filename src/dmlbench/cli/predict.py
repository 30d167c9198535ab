"""`dmlbench simulate`: step time, time to accuracy and cost at N workers on a network,
calibrated from the store's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
from dmlbench.errors import DmlbenchError
from dmlbench.names import comma_list
from dmlbench.report.formats import plural

# The worker counts predicted where neither --workers nor --nodes is given (None tells
# that --workers was not, beside --nodes)
SIMULATED_WORKERS = "1,2,4,8"


def simulate(
    task: Annotated[str, typer.Argument(help="task to predict (calibrated from its runs)")],
    workers: Annotated[
        str | None,
        typer.Option(
            "--workers",
            "-w",
            help=f"e.g. 1,8,64,512 (default {SIMULATED_WORKERS}; not with --nodes)",
        ),
    ] = None,
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

    placed = layouts(nodes, nproc_per_node)
    if placed and workers is not None:  # the layouts' counts were used, the list dropped
        raise DmlbenchError(
            "--workers or --nodes/--nproc-per-node: with them, each count is nodes × "
            "workers per node"
        )
    simulation = predict_scaling(
        open_store(store, existing=True),
        task,
        worker_counts(workers or SIMULATED_WORKERS),
        comma_list(network),
        comma_list(algorithm),
        price=choose_price(price, prices),
        layouts=placed,
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
