"""`dmlbench dask fit`: elastic training on Dask with a batch size that grows."""

from __future__ import annotations

import logging
import os
from typing import Annotated, Any

import typer

from dmlbench.cli.options import (
    STORE,
    Command,
    ConfigOption,
    DataDirOption,
    JsonOption,
    SeedOption,
    SetOption,
    StoreOption,
    TaskArgument,
    command_group,
    err_console,
    open_store,
    show_stored_run,
    spec_from,
)
from dmlbench.errors import DmlbenchError
from dmlbench.report.formats import plural

dask_app = command_group("Elastic training on Dask: the scikit-learn estimator whose batch grows.")


@dask_app.command("fit", cls=Command)
def fit(
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
    store: StoreOption = STORE,
    json_out: JsonOption = False,
) -> None:
    """Train a registered task with the Dask estimator and store it like any run.

    The task gives the data, model, optimizer and target; --damper gives the batch
    schedule in place of the recipe's learning-rate schedule. Stops between epochs.
    """
    # Dask's own logs (a worker's traceback, its chatter at shutdown) stay out of the
    # terminal: what failed is the run's one-line error, kept in the store too
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    from dmlbench.dask.dampers import make_damper
    from dmlbench.dask.run import DaskFit, fit_task

    # and its client's event loop's: Ctrl-C in the middle of a call to the scheduler
    # had distributed's callback that cancels the call log a NameError traceback of its
    # own (distributed 2026.8's sync(), interrupted before its future exists)
    logging.getLogger("tornado.application").setLevel(logging.CRITICAL)

    spec = spec_from(
        task, config, overrides, seed=seed, data_dir=str(data_dir) if data_dir else None
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
        make_damper(damper, first, options, flags={"max_batch_size": "--max-batch"}),
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

    def progress(epoch: dict[str, Any]) -> None:  # a line that fits 80 columns
        accuracy = epoch.get("test_accuracy")
        shown = f", best {accuracy:.2%}" if accuracy is not None else ""
        err_console.print(
            f"epoch {epoch['epoch']}: {epoch['n_updates']:,} updates, batch "
            f"{epoch['batch_size']:,} on {plural(epoch['workers'], 'worker')}, train loss "
            f"{epoch['train_loss']:.4f}{shown}",
            highlight=False,
            soft_wrap=True,
        )

    from dmlbench.dask.cluster import close_local

    def starting(examples: int) -> None:  # an epoch of a real dataset takes minutes
        err_console.print(
            f"{spec.task}: starting Dask, up to {plural(fit.max_workers, 'worker')}, on "
            f"{examples:,} training examples",
            highlight=False,
            soft_wrap=True,
        )

    results = open_store(store)
    try:
        outcome = fit_task(spec, fit, results, progress=progress, starting=starting)
    except KeyboardInterrupt:
        err_console.print("interrupted: the fit is stored as interrupted")
        raise typer.Exit(130) from None
    finally:
        close_local()  # before the interpreter exits: its workers would outlive it, noisily
    show_stored_run(results, outcome.run_id, outcome.status, json_out)
