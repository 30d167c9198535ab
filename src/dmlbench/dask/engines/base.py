"""What both engines stand on: the estimator as an engine sees it, one fit's session
on the cluster (client, scaler, the data the workers hold) and :class:`Engine`, the
interface each engine implements."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from distributed import Client, Future
from distributed.scheduler import KilledWorker
from torch import nn

from dmlbench.dask import worker as remote
from dmlbench.dask.cluster import WorkerLost, Workers, connect, tasks_for
from dmlbench.dask.dampers import Damping
from dmlbench.dask.history import History, Record, Update


class DaskEstimator(Protocol):
    """What an engine uses of the estimator it trains for (``DaskEstimator`` has it all):
    its settings, its fitted state, and the steps it takes between gradients."""

    client: Any
    min_workers: int
    max_workers: int
    timeout: float
    grads_per_worker: int
    optimizer: Any
    module_: nn.Module
    optimizer_: torch.optim.Optimizer
    recipe_: remote.Recipe
    rng_: np.random.Generator
    history_: History
    n_updates_: int
    examples_seen_: int

    def routed(self, route: str) -> dict[str, Any]: ...
    def damping(self, updates: int | None = None, examples: int | None = None) -> Damping: ...
    def step(self, lr_factor: float) -> None: ...
    def restore_base_lrs(self) -> None: ...
    def observe_noise(
        self, small: float, small_batch: float, big: float, big_batch: int, decay: float = 0.9
    ) -> None: ...
    def record_update(self, record: Record, update: Update, damping: Damping) -> None: ...
    def finish_epoch(self, record: Record, wall: float) -> Record: ...
    def note(self, message: str) -> None: ...


def lost_work(error: BaseException) -> bool:
    """A worker died or its data went with it (retry), as opposed to the task's own error."""
    lost = (WorkerLost, KilledWorker, asyncio.CancelledError, concurrent.futures.CancelledError)
    if isinstance(error, lost):
        return True
    text = str(error).lower()
    return "lost" in text and ("key" in text or "dependenc" in text or "worker" in text)


@dataclass
class Session:
    """One fit's footing on the cluster: client, scaler, and what the workers hold."""

    client: Client
    workers: Workers
    recipe: remote.Recipe
    data: remote.TrainData
    timeout: float
    recipe_future: Future | None = None
    data_future: Future | None = None
    notes: list[str] = field(default_factory=list)
    owns_client: bool = False

    @classmethod
    def open(cls, est: DaskEstimator, recipe: remote.Recipe, data: remote.TrainData) -> Session:
        client = connect(est.client, est.min_workers, est.timeout)
        workers = Workers(client, est.min_workers, est.max_workers)
        workers.follow(est.min_workers)
        workers.settle()
        workers.await_some(1, est.timeout)
        session = cls(client, workers, recipe, data, est.timeout)
        session.owns_client = isinstance(est.client, str)  # made here from an address
        session.scatter()
        return session

    def data_lost(self) -> bool:
        return self.data_future is None or self.data_future.status != "finished"

    def scatter(self, attempts: int = 5) -> None:
        """Send the data and recipe to the workers (once per fit; again after a loss).
        Retried when a worker leaves mid-broadcast (the cluster may be scaling down).

        Each try is bounded by the session's timeout, from outside the scatter:
        distributed's own ``timeout`` only bounds the wait for workers to exist, and a
        broadcast to a worker that left (dask/distributed#5704) or stopped answering
        waits forever; that hung a grid search's fit in CI. The next try finds the
        cluster settled."""
        for attempt in range(attempts):
            try:
                self.data_future = self.broadcast(self.data)
                self.recipe_future = self.broadcast(self.recipe)
                break
            except (KeyError, OSError) as error:  # TimeoutError is an OSError
                if attempt == attempts - 1:
                    why = (
                        f"a worker gave no answer within timeout={self.timeout:g} s, "
                        f"{attempts} times; check that every worker is alive, or raise timeout"
                        if isinstance(error, TimeoutError)
                        else f"{type(error).__name__}: {error}"
                    )
                    raise RuntimeError(
                        f"could not send the training data to the Dask workers: {why}"
                    ) from None
                time.sleep(0.2 * (attempt + 1))

    def broadcast(self, value: object) -> Future:
        """One value to every worker, given up (TimeoutError) after the timeout: scattered
        to one worker, then fetched by each of the others as a task's dependency.

        Not ``scatter(broadcast=True)``: that runs the scheduler's replication loop,
        which the Active Memory Manager (on by default) works against by dropping the
        replicas it makes. In CI one such loop never ended; it held the scheduler's
        replica lock, so every later broadcast to that cluster waited too, and three
        fits in a row each failed after their five tries."""

        def scatter() -> Any:  # runs on the client's loop: returns the coroutine
            return self.client.scatter(value, hash=False, timeout=self.timeout, asynchronous=True)

        future = self.client.sync(scatter, callback_timeout=self.timeout)
        fetched = [
            self.client.submit(
                remote.hold, future, workers=[address], allow_other_workers=False, pure=False
            )
            for address in self.workers.current()
        ]
        deadline = time.monotonic() + self.timeout
        try:
            for task in fetched:  # TimeoutError where one never answers
                try:
                    task.result(timeout=max(0.01, deadline - time.monotonic()))
                except TimeoutError:
                    raise
                except (Exception, asyncio.CancelledError) as error:  # lost the worker or value
                    raise OSError(f"a worker could not fetch it: {error!r:.100}") from None
        finally:
            for task in fetched:
                task.release()
        return future

    def drain_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def note_loss(self, error: BaseException) -> None:
        self.notes.append(
            f"lost a worker ({type(error).__name__}: {error!s:.80}); its tasks ran again elsewhere"
        )

    def lost_data(self) -> None:
        """Every copy of the data went with dead workers: send it again."""
        self.notes.append("the training data was lost with its workers: sent again")
        self.workers.await_some(1, self.timeout)
        self.scatter()

    def close(self) -> None:
        for future in (self.data_future, self.recipe_future):
            if future is not None:
                future.release()
        self.data_future = self.recipe_future = None
        if self.owns_client:
            self.client.close()


class Engine:
    """Runs epochs for an estimator; keeps its cluster session between ``partial_fit``s."""

    name: ClassVar[str]
    retries: ClassVar[int] = 2  # updates (or epochs) re-run after a worker is lost

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        self.est = est
        self.session = Session.open(est, est.recipe_, data)

    def run_epoch(self) -> Record:
        raise NotImplementedError

    def warm_up(self) -> None:
        """Before the first epoch: the workers it wants started (:meth:`first_workers`),
        and what the engine starts on them."""
        self.first_workers()

    def first_workers(self) -> int:
        """The workers the first update wants: asked for and, where the cluster scales,
        waited for (up to the session timeout; fewer are no error), so that they start
        before a timed fit's clock, as a torch.distributed run's workers do. Later growth
        is the fit's own, and on its clock."""
        world, workers = self.first_world(), self.session.workers
        if workers.follow(world) is not None:
            workers.await_some(world, self.session.timeout)
        return world

    def first_world(self) -> int:
        """How many workers the next epoch's first update wants."""
        first = min(self.est.damping().batch_size, len(self.session.data.x))
        return self.session.workers.wanted(tasks_for(first, self.est.grads_per_worker))

    def holds(self, data: remote.TrainData) -> bool:
        held = self.session.data
        return (
            held.x.shape == data.x.shape
            and np.array_equal(held.x, data.x)
            and np.array_equal(held.y, data.y)
        )

    def close(self) -> None:
        self.session.close()


def batch_at(position: int, n: int, wanted: int) -> int:
    """The batch starting at ``position`` of an ``n``-example epoch: ``wanted`` examples,
    or the rest of the epoch when less than half a batch would be left over (no tiny,
    noisy last update)."""
    left = n - position
    return left if left - wanted < wanted / 2 else wanted
