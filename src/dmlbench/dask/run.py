"""A registered task trained by the Dask estimator and stored like any run
(``dmlbench dask fit``).

The task gives the data, the model, the optimizer and the goal; a damper gives the
batch schedule, which replaces the recipe's learning-rate schedule (the rate starts at
the recipe's rate for the first batch, and the damper's hybrid rule decays it). The fit
writes the same event log as a torch.distributed run (``run_start``, ``epoch_stop``,
``eval_accuracy``, ``run_stop``) and is completed in the store by the same lifecycle,
so ``dmlbench results``, ``report`` and ``compare`` show it beside other runs: exchange
``dask-centralised`` or ``dask-ddp``, always open division, its deviations saying how.

A Dask fit stops between epochs: at the target (``stop_at_target``), past
``recipe.time_budget_s``, at ``max_steps`` updates or after ``recipe.max_epochs``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dmlbench.dask.cluster import connect, refuse_too_large
from dmlbench.dask.dampers import Damper
from dmlbench.dask.estimator import DaskClassifier
from dmlbench.errors import SpecError, WorkerFailed
from dmlbench.launch.forkserver import chosen_start_method
from dmlbench.launch.lifecycle import (
    Attempt,
    Launcher,
    OpenedRun,
    RunOutcome,
    execute,
    prepare_data,
)
from dmlbench.resolve import deviations
from dmlbench.results import EVENTS_FILE, ResultsStore
from dmlbench.results.compliance import Submission, log_cache_clear, platform
from dmlbench.results.events import EventLog
from dmlbench.results.records import RunStop
from dmlbench.spec import RunSpec
from dmlbench.spec.recipe import OptimizerSpec
from dmlbench.system import raise_unhandled
from dmlbench.tasks import get_task

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class DaskFit:
    """How the estimator trains a task: the schedule and the cluster."""

    damper: Damper
    engine: str = "centralised"
    grads_per_worker: int = 32
    min_workers: int = 1
    max_workers: int = 4
    scheduler: str | None = None  # a scheduler's address; None: a LocalCluster here
    device: str = "cpu"
    timeout_s: float = 300.0

    def describe(self) -> dict[str, Any]:
        return {
            "damper": {"name": type(self.damper).__name__, **self.damper.get_params()},
            "engine": self.engine,
            "grads_per_worker": self.grads_per_worker,
            "min_workers": self.min_workers,
            "max_workers": self.max_workers,
            "scheduler": self.scheduler or "local",
            "device": self.device,
        }


# What a spec may set that a Dask fit does not train with, and what to give instead
# (the empty string: nothing). Its cluster is --min-workers/--max-workers on the hosts'
# network, its exchange its engine, its batch its damper's.
_NOT_FOR_DASK = {
    "workers": "--min-workers/--max-workers",
    "nodes": "--min-workers/--max-workers",
    "network": "",
    "exchange": "--engine (centralised or ddp)",
    "exchange_options": "",
    "global_batch": "--batch and --damper",
    "device": "--device",
    "backend": "",
    "noise_scale": "--damper noisescaledamp",
    "channels_last": "",
    "compile": "",
    "cpu_allocator": "",
    "peak_tflops": "",
    "warmup_steps_excluded": "",
    "loader_processes": "",
    "save_model": "",
    "recipe.precision": "",
    "recipe.l2": "",
    "recipe.clip_grad_norm": "",
}


def refuse_what_a_fit_ignores(spec: RunSpec) -> None:
    """Refuse in one line every key ``spec`` sets that a Dask fit would not train with
    (:data:`_NOT_FOR_DASK`), naming what to give instead; trained without a word, each
    was stored as if it had been."""
    recipe = get_task(spec.task).recipe.model_dump(mode="json")
    actual = spec.model_dump(mode="json")
    given = []
    for key, instead in _NOT_FOR_DASK.items():
        section, _, name = key.rpartition(".")
        if section:  # the task's recipe's
            ours, theirs = actual[section][name], recipe[name]
        else:  # the spec's default
            default = RunSpec.model_fields[key].get_default(call_default_factory=True)
            ours = actual[key]
            theirs = default.model_dump(mode="json") if hasattr(default, "model_dump") else default
        if ours != theirs:
            shown = "" if isinstance(ours, dict | list) else f"={json.dumps(ours)}"
            given.append(f"{key}{shown}" + (f" (give {instead})" if instead else ""))
    if given:
        raise SpecError(
            f"dask fit does not train with {'; '.join(given)}: drop "
            f"{'it' if len(given) == 1 else 'them'}, or train with `dmlbench run`"
        )


def recipe_optimizer(
    params: Iterable[nn.Parameter], *, optimizer: dict[str, Any], lr: float
) -> torch.optim.Optimizer:
    """The recipe's optimizer at rate ``lr`` (importable, so DDP workers build it too)."""
    from dmlbench.optim.build import build_optimizer

    built = build_optimizer(OptimizerSpec.model_validate(optimizer), params)
    for group in built.param_groups:
        group["lr"] = lr
    return built


def first_rate(spec: RunSpec, batch: int) -> float:
    """The recipe's learning rate for one worker at ``batch`` after any warm-up."""
    schedule = spec.recipe.schedule
    warm = float(getattr(schedule, "warmup_epochs", 0.0))
    return float(schedule.rate(step=1, epoch=warm, local_batch=batch, world_size=1))


def stored_spec(spec: RunSpec, fit: DaskFit) -> dict[str, Any]:
    """The spec as stored: a worker's share is ``grads_per_worker`` examples, the global
    batch is the schedule's first, ``workers`` the most the fit may use."""
    stored = spec.model_dump(mode="json")
    stored.update(
        workers=fit.max_workers,
        global_batch=fit.damper.initial,
        exchange=f"dask-{fit.engine}",
        dask=fit.describe(),
    )
    stored["recipe"]["local_batch"] = fit.grads_per_worker
    return stored


def fit_deviations(spec: RunSpec, fit: DaskFit) -> dict[str, dict[str, Any]]:
    differ: dict[str, dict[str, Any]] = dict(deviations(spec))
    differ["engine"] = {"reference": "torch.distributed", "actual": f"dask ({fit.engine})"}
    differ["batch_schedule"] = {
        "reference": f"constant {spec.recipe.local_batch} per worker, "
        f"{spec.recipe.schedule.describe()}",
        "actual": repr(fit.damper),  # GeoDamp(initial=32, delay=60, ...)
    }
    if spec.recipe.augment:
        differ["augment"] = {"reference": True, "actual": False}
    return differ


@dataclass
class _Progress:
    best: float | None = None
    tta: float | None = None
    tta_compute: float | None = None
    eval_s: float = 0.0
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    worker_s_to_target: float | None = None


@dataclass
class HeldWorkers:
    """Worker-seconds of the cluster a fit scaled, what an elastic fit is billed for:
    each update at the workers it asked the cluster for, and the time between updates
    (the driver's work, evaluation) at what the epoch's last update asked for. None
    where the cluster could not be scaled: what it held then was not the fit's to say."""

    since: float
    worker_s: float | None = 0.0

    def add(self, updates: list[dict[str, Any]], now: float) -> None:
        span, self.since = now - self.since, now
        asked = [u["target_workers"] for u in updates]
        if self.worker_s is None or not asked or None in asked:
            self.worker_s = None
            return
        walls = [u["wall_s"] for u in updates]
        in_updates = sum(n * wall for n, wall in zip(asked, walls, strict=True))
        self.worker_s += in_updates + max(0.0, span - sum(walls)) * asked[-1]


def short_of_workers(history: list[dict[str, Any]]) -> list[str]:
    """A note where updates ran on fewer workers than they asked the cluster for and had
    tasks for: a new Dask worker takes seconds to start and join, and a short fit may end
    before it does, though the cluster was asked for it (and a cloud bills from the ask).
    DDP's updates name no more tasks than ranks, so only the centralised engine's say."""

    def wanting(update: dict[str, Any]) -> int:  # the workers it asked for and had tasks for
        return min(update["target_workers"] or 0, update["tasks"])

    short = [e for e in history if any(wanting(u) > u["workers"] for u in e["updates"])]
    if not short:
        return []
    asked = max(wanting(u) for e in short for u in e["updates"])
    had = min(u["workers"] for e in short for u in e["updates"] if wanting(u) > u["workers"])
    return [
        f"{len(short)} of {len(history)} epochs ran on fewer workers than they asked the "
        f"cluster for (up to {asked} asked, {had} took part): a new worker takes seconds to join"
    ]


def _evaluate(est: DaskClassifier, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy on (x, y), on the driver."""
    probabilities = est.predict_proba(x)
    columns = np.searchsorted(est.classes_, y).clip(0, len(est.classes_) - 1)
    known = est.classes_[columns] == y
    picked = np.where(known, probabilities[np.arange(len(y)), columns], 0.0)
    loss = float(-np.mean(np.log(np.maximum(picked, 1e-12))))
    accuracy = float(np.mean(est.classes_[probabilities.argmax(axis=1)] == y))
    return accuracy, loss


def fit_task(
    spec: RunSpec,
    fit: DaskFit,
    store: ResultsStore,
    progress: ProgressFn | None = None,
    starting: Callable[[int], None] | None = None,
) -> RunOutcome:
    """Train ``spec.task`` with the Dask estimator as ``fit`` says; store it as a run.
    ``starting(examples)`` is called once the task's data passed its checks, before the
    cluster starts; ``progress`` after every epoch."""
    refuse_what_a_fit_ignores(spec)
    if fit.scheduler is None:  # a bad DMLBENCH_START_METHOD is refused before anything runs
        chosen_start_method()
    task = get_task(spec.task)
    if task.loss != "cross_entropy":
        raise SpecError(
            f"dask fit trains classification tasks with cross-entropy; "
            f"{spec.task} uses the {task.loss} loss"
        )
    if spec.synthetic_data:
        raise SpecError("dask fit trains on a task's data: synthetic_data is for `dmlbench run`")
    prepare_data(spec)
    data = task.read(spec.data_dir)
    if spec.validation_split:
        data = data.hold_out(spec.validation_split)
    train, test = data.train_x, data.test_x
    if not (isinstance(train, torch.Tensor) and isinstance(test, torch.Tensor)):
        raise SpecError(
            f"dask fit holds a task's data in memory; {spec.task}'s images stay files "
            "(decoded as it trains): run it with `dmlbench run`"
        )
    x_train = np.ascontiguousarray(data.plain.eval(train).numpy(), dtype=np.float32)
    x_test = np.ascontiguousarray(data.plain.eval(test).numpy(), dtype=np.float32)
    y_train, y_test = data.train_y.numpy(), data.test_y.numpy()
    torch.manual_seed(spec.seed)
    from dmlbench.models import build_model, parameter_bytes
    from dmlbench.optim.build import state_tensors

    size = parameter_bytes(spec.recipe.model, data.input_shape, data.num_outputs)
    state = state_tensors(spec.recipe.optimizer)
    refuse_too_large(size, state, fit.max_workers if fit.scheduler is None else 0)
    module = build_model(spec.recipe.model, data.input_shape, data.num_outputs)
    est = DaskClassifier(
        module,
        optimizer=recipe_optimizer,
        optimizer__optimizer=spec.recipe.optimizer.model_dump(mode="json"),
        optimizer__lr=first_rate(spec, fit.damper.initial),
        batch_size=fit.damper,
        max_epochs=1,
        grads_per_worker=fit.grads_per_worker,
        min_workers=fit.min_workers,
        max_workers=fit.max_workers,
        engine=fit.engine,
        client=fit.scheduler,
        timeout=fit.timeout_s,
        torch_threads=spec.threads_per_worker,
        device=fit.device,
        random_state=spec.seed,
    )
    if starting is not None:
        starting(len(x_train))
    launcher = DaskLauncher(spec, fit, est, (x_train, y_train, x_test, y_test), progress)
    return execute(stored_spec(spec, fit), store, launcher, deviations=fit_deviations(spec, fit))


class DaskLauncher(Launcher):
    """The Dask estimator's fit, driven from this process: its workers are the Dask
    cluster's, and this process writes the run's event log."""

    unfinished = "the Dask fit stopped early"
    # SIGTERM (kill, a job's time limit) acts as Ctrl-C: no launcher of torch's is there
    # to catch it, and it ended the process with the run's row left running
    sigterm_interrupts = True

    def __init__(
        self,
        spec: RunSpec,
        fit: DaskFit,
        est: DaskClassifier,
        data: tuple[np.ndarray, ...],
        progress: ProgressFn | None,
    ) -> None:
        self.spec, self.fit, self.est, self.data, self.progress = spec, fit, est, data, progress
        self.log: EventLog | None = None

    def start(self, run: OpenedRun, held: contextlib.ExitStack) -> None:
        self.log = held.enter_context(contextlib.closing(EventLog(run.run_dir / EVENTS_FILE)))
        held.callback(self.est.close)
        log_cache_clear(self.log)
        self.log.log("init_start", nodes=1)

    def wait(self, attempt: Attempt) -> None:
        assert self.log is not None
        fit = self.fit
        try:
            # the cluster, the data on it and the model on its workers start before the
            # clock, as a torch run's processes, data and model do
            self.est.set_params(client=connect(fit.scheduler, fit.min_workers, fit.timeout_s))
            self.est.prepare(self.data[0], self.data[1])
            self._submission().log(self.log)
            self.log.log("init_stop")
            _train(self.spec, self.est, self.log, self.data, self.progress)
        except (RuntimeError, TimeoutError, ConnectionError, OSError, ValueError) as error:
            raise WorkerFailed(f"{type(error).__name__}: {error}".splitlines()[0]) from None
        attempt.status = ""  # the event log says how it ended

    def stop(self) -> None:
        self.est.close()

    def _submission(self) -> Submission:
        """What the fit's log says of it for MLPerf's compliance checker."""
        spec, fit = self.spec, self.fit
        return Submission(
            benchmark=get_task(spec.task).mlperf_benchmark or spec.task,
            platform=platform(fit.max_workers, f"Dask {fit.device} worker"),
            division="open",  # a Dask fit is always open division
            seed=spec.seed,
            global_batch=self.est.batch_size.initial,  # it grows as the damper says
            optimizer=spec.recipe.optimizer.name,
            train_samples=len(self.data[0]),
            eval_samples=len(self.data[2]),
        )


def _train(
    spec: RunSpec,
    est: DaskClassifier,
    log: EventLog,
    data: tuple[np.ndarray, ...],
    progress: ProgressFn | None,
) -> None:
    x_train, y_train, x_test, y_test = data
    recipe, n = spec.recipe, len(x_train)
    log.log(
        "run_start",
        world_size=est.max_workers,
        local_batch=est.grads_per_worker,
        global_batch=est.batch_size.initial,
        target=recipe.target,
        train_examples=n,
        test_examples=len(x_test),
        device=est.device,
        exchange=f"dask-{est.engine}",
        engine="dask",
    )
    state = _Progress()
    start = time.perf_counter()
    held = HeldWorkers(start)
    epochs = math.ceil(recipe.max_epochs)
    for epoch in range(1, epochs + 1):
        raise_unhandled()
        log.log("epoch_start", epoch_num=epoch)
        est.partial_fit(x_train, y_train)
        record = est.history_[-1]
        log.log(
            "epoch_stop",
            epoch,
            epoch_num=epoch,
            step=est.n_updates_,
            train_loss=record["train_loss"],
            batch_size=record["batch_size"],
            workers=record["workers"],
            lr=record["lr"],
        )
        last = epoch == epochs or (spec.max_steps and est.n_updates_ >= spec.max_steps)
        if epoch % spec.eval_every_epochs == 0 or last:
            _evaluate_and_log(spec, est, log, state, start, x_test, y_test)
        held.add(record["updates"], time.perf_counter())
        if state.tta is not None and state.worker_s_to_target is None:
            state.worker_s_to_target = held.worker_s
        if progress is not None:
            progress(
                {**{k: v for k, v in record.items() if k != "updates"}, "test_accuracy": state.best}
            )
        if state.reason is not None:
            break
        if spec.max_steps and est.n_updates_ >= spec.max_steps:
            state.reason = "max_steps"
            break
        budget = recipe.time_budget_s
        if budget is not None and time.perf_counter() - start - state.eval_s >= budget:
            state.reason = "time_budget"
            break
    elapsed = time.perf_counter() - start
    examples = est.examples_seen_
    stop = RunStop(
        status="success" if state.tta is not None else "target_not_reached",
        stop_reason=state.reason or "max_epochs",
        steps=est.n_updates_,
        epochs=examples / n,
        samples=examples,
        elapsed_s=elapsed,
        eval_s=state.eval_s,
        time_to_accuracy_s=state.tta,
        time_to_accuracy_compute_s=state.tta_compute,
        best_metric=state.best,
        target=recipe.target,
        throughput=examples / max(elapsed - state.eval_s, 1e-9),
        largest_batch=max(e["batch_size"] or 0 for e in est.history_),
        most_workers=max(e["workers"] for e in est.history_),
        worker_s=held.worker_s,
        worker_s_to_target=state.worker_s_to_target,
        notes=[*est.notes_, *short_of_workers(est.history_)],
    )
    log.log("run_stop", stop.status, **stop.metadata())


def _evaluate_and_log(
    spec: RunSpec,
    est: DaskClassifier,
    log: EventLog,
    state: _Progress,
    start: float,
    x_test: np.ndarray,
    y_test: np.ndarray,
) -> None:
    epoch_num = round(est.examples_seen_ / est.n_train_, 4)
    log.log("eval_start", epoch_num=epoch_num)
    begin = time.perf_counter()
    accuracy, loss = _evaluate(est, x_test, y_test)
    state.eval_s += time.perf_counter() - begin
    log.log("eval_stop", epoch_num=epoch_num)
    elapsed = time.perf_counter() - start
    compute = elapsed - state.eval_s
    est.history_[-1]["test_accuracy"] = accuracy
    log.log(
        "eval_accuracy",
        accuracy,
        epoch_num=epoch_num,
        step=est.n_updates_,
        samples_count=est.examples_seen_,
        eval_loss=loss,
        elapsed_s=elapsed,
        compute_elapsed_s=compute,
    )
    state.best = accuracy if state.best is None else max(state.best, accuracy)
    if state.tta is None and accuracy >= spec.recipe.target:
        state.tta, state.tta_compute = elapsed, compute
        if spec.stop_at_target:
            state.reason = "target_reached"
