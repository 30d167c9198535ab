"""The two ways a fit trains on Dask, behind one interface (:class:`Engine`).

- :class:`Centralised` (``engine="centralised"``, the paper's architecture): per update
  the batch is split into ``ceil(B / grads_per_worker)`` gradient tasks; the driver sums
  their gradients and steps its optimizer. The cluster is scaled with the task count.
- :class:`DDP` (``engine="ddp"``): torch ``DistributedDataParallel`` across the Dask
  workers, one rank per worker; an epoch is one task per rank. The process group is a
  *generation*: when the wanted world size changes with the batch size, the ranks leave
  it and a new one starts (a fresh port) from rank 0's last state.

Both hold the training data on the workers once (scattered), and neither ever ships a
pickled model or optimizer per update.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from distributed import Client, Future
from distributed.scheduler import KilledWorker

from dmlbench.dask import worker as remote
from dmlbench.dask.cluster import WorkerLost, Workers, connect, gather, tasks_for
from dmlbench.dask.history import Record

if TYPE_CHECKING:
    from dmlbench.dask.estimator import DaskEstimator


def _lost_work(error: BaseException) -> bool:
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
    _known: set[str] = field(default_factory=set)
    _checked: float = 0.0

    @classmethod
    def open(cls, est: DaskEstimator, recipe: remote.Recipe, data: remote.TrainData) -> Session:
        client = connect(est.client, est.min_workers)
        workers = Workers(client, est.min_workers, est.max_workers)
        workers.follow(est.min_workers)
        workers.settle()
        workers.await_some(1, est.timeout)
        session = cls(client, workers, recipe, data, est.timeout)
        session.scatter()
        return session

    def scatter(self, attempts: int = 5) -> None:
        """Send the data and recipe to the workers (once per fit; again after a loss).
        Retried when a worker leaves mid-broadcast (the cluster may be scaling down)."""
        for attempt in range(attempts):
            try:
                self.data_future = self.client.scatter(self.data, broadcast=True, hash=False)
                self.recipe_future = self.client.scatter(self.recipe, broadcast=True, hash=False)
                break
            except (KeyError, OSError) as error:
                if attempt == attempts - 1:
                    raise RuntimeError(f"could not send the training data to the Dask workers: "
                                       f"{type(error).__name__}: {error}") from None  # fmt: skip
                time.sleep(0.2 * (attempt + 1))
        self._known = set(self.workers.current())

    def welcome_new_workers(self, every_s: float = 0.5) -> None:
        """Copy the data to workers that joined since (checked every ``every_s`` seconds),
        so the scheduler sends them tasks instead of keeping them on the old ones."""
        now = time.monotonic()
        if now - self._checked < every_s:
            return
        self._checked = now
        present = set(self.workers.current())
        if present - self._known:
            self.client.replicate([self.data_future, self.recipe_future])
        self._known = present

    def close(self) -> None:
        for future in (self.data_future, self.recipe_future):
            if future is not None:
                future.release()
        self.data_future = self.recipe_future = None


class Engine:
    """Runs epochs for an estimator; keeps its cluster session between ``partial_fit``s."""

    name: ClassVar[str]
    retries: ClassVar[int] = 2  # updates (or epochs) re-run after a worker is lost

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        self.est = est
        self.session = Session.open(est, est.recipe_, data)

    def run_epoch(self) -> Record:
        raise NotImplementedError

    def holds(self, data: remote.TrainData) -> bool:
        held = self.session.data
        return (held.x.shape == data.x.shape and np.array_equal(held.x, data.x)
                and np.array_equal(held.y, data.y))  # fmt: skip

    def close(self) -> None:
        self.session.close()


class Centralised(Engine):
    name = "centralised"
    inline_bytes: ClassVar[int] = 1 << 20

    def run_epoch(self) -> Record:
        est, session = self.est, self.session
        n = len(session.data.x)
        order = est.rng_.permutation(n)
        record = est.history_.new_epoch(engine=self.name)
        start, position = time.perf_counter(), 0
        while position < n:
            damping = est.damping()
            index = order[position : position + batch_at(position, n, damping.batch_size)]
            position += len(index)
            tasks = tasks_for(len(index), est.grads_per_worker)
            # the cluster follows the schedule's batch, not a merged epoch tail
            target = session.workers.follow(
                tasks_for(min(damping.batch_size, n), est.grads_per_worker)
            )
            session.welcome_new_workers()
            begin = time.perf_counter()
            results = self._gradients(np.array_split(index, tasks))
            self._step(results, len(index), damping.lr_factor)
            wall = time.perf_counter() - begin
            summary = results_summary(results, len(index))
            est.record_update(record, summary, damping, tasks=tasks, target=target, wall=wall)
        return est.finish_epoch(record, time.perf_counter() - start)

    def _gradients(self, chunks: list[np.ndarray]) -> list[remote.GradientResult]:
        session = self.session
        weights = remote.flat_state(self.est.module_)
        for attempt in range(self.retries + 1):
            client = session.client
            # small weights ride in the task messages; big ones go to one worker once and
            # the others fetch them from it
            payload: Any = weights
            if weights.nbytes > self.inline_bytes:
                payload = client.scatter(weights, hash=False)
            futures = client.map(remote.gradient, [session.recipe_future] * len(chunks),
                                 [session.data_future] * len(chunks), [payload] * len(chunks),
                                 chunks, pure=False)  # fmt: skip
            try:
                return gather(client, futures, session.timeout, "gradient tasks")
            except Exception as error:
                if attempt == self.retries or not _lost_work(error):
                    raise
                self.est.note(f"update {self.est.n_updates_ + 1}: lost work ({error!s:.80}); "
                              "data re-sent, update retried")  # fmt: skip
                session.workers.await_some(1, session.timeout)
                session.scatter()
            finally:
                if isinstance(payload, Future):
                    payload.release()
        raise AssertionError("unreachable")

    def _step(self, results: list[remote.GradientResult], batch: int, lr_factor: float) -> None:
        est = self.est
        total = np.sum([r.grad_sum for r in results], axis=0) / batch
        gradient = torch.from_numpy(total)
        offset = 0
        for p in est.module_.parameters():
            p.grad = gradient[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        buffers = [r.buffers * r.count for r in results if r.buffers is not None]
        if buffers:  # BatchNorm statistics: the examples-weighted mean of the tasks'
            state = remote.flat_state(est.module_)
            state[offset:] = np.sum(buffers, axis=0) / batch
            remote.load_flat_state(est.module_, state)
        if len(results) > 1:
            small = float(np.mean([np.sum((r.grad_sum / r.count) ** 2) for r in results]))
            est.observe_noise(small, batch / len(results), float(np.sum(total**2)), batch)
        est.step(lr_factor)


def batch_at(position: int, n: int, wanted: int) -> int:
    """The batch starting at ``position`` of an ``n``-example epoch: ``wanted`` examples,
    or the rest of the epoch when less than half a batch would be left over (no tiny,
    noisy last update)."""
    left = n - position
    return left if left - wanted < wanted / 2 else wanted


def results_summary(results: list[remote.GradientResult], batch: int) -> dict[str, Any]:
    return {
        "batch_size": batch,
        "loss": sum(r.loss_sum for r in results) / batch,
        "workers": len({r.worker for r in results}),
        "compute_s": max(r.compute_s for r in results),
    }


class DDP(Engine):
    name = "ddp"

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        super().__init__(est, data)
        self.generation: remote.Generation | None = None
        self.ranks: list[str] = []
        self.generations = 0

    def run_epoch(self) -> Record:
        est, session = self.est, self.session
        n = len(session.data.x)
        order = est.rng_.permutation(n)
        dampings, batches = self._plan(n)
        world = session.workers.wanted(tasks_for(len(batches[0]), est.grads_per_worker))
        world = min(world, min(len(b) for b in batches))
        target = session.workers.follow(world)
        start = time.perf_counter()
        for attempt in range(self.retries + 1):
            ranks = self._ranks(world)
            plans = self._rank_plans(order, batches, dampings, len(ranks))
            try:
                results = self._epoch(ranks, plans)
                break
            except Exception as error:
                self.generation = None  # the group is broken: the next try is a new one
                session.client.run(remote.ddp_teardown)
                if attempt == self.retries or not (_lost_work(error) or self._rank_gone(ranks)):
                    raise
                est.note(f"epoch {len(est.history_) + 1}: lost a rank ({error!s:.80}); "
                         "epoch re-run in a new generation")  # fmt: skip
                session.workers.await_some(1, session.timeout)
                session.scatter()
        record = est.history_.new_epoch(engine=self.name, generation=self.generation.number)  # type: ignore[union-attr]
        rank0 = next(r for r in results if r.rank == 0)
        assert rank0.state is not None
        remote.load_flat_state(est.module_, rank0.state.weights)
        est.optimizer_.load_state_dict(rank0.state.optimizer_state)
        est.restore_base_lrs()
        for u, (damping, index) in enumerate(zip(dampings, batches, strict=True)):
            summary = {
                "loss": sum(r.loss_sums[u] for r in results) / len(index),
                "workers": len(results),
                "compute_s": max(r.compute_s[u] for r in results),
                "batch_size": len(index),
            }
            est.record_update(record, summary, damping, tasks=len(results), target=target,
                              wall=summary["compute_s"])  # fmt: skip
        return est.finish_epoch(record, time.perf_counter() - start)

    def _rank_gone(self, ranks: list[str], wait_s: float = 10.0) -> bool:
        """Did a rank's worker die? (Its peers' all-reduce fails before the scheduler
        hears of the death, so give the scheduler a few seconds.)"""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if set(ranks) - set(self.session.workers.current()):
                return True
            time.sleep(0.25)
        return False

    def _plan(self, n: int) -> tuple[list[Any], list[np.ndarray]]:
        """The epoch's dampings and batches (positions in the epoch's order), decided up
        front: DDP ranks run the whole epoch without asking the driver."""
        est = self.est
        dampings, batches, position, updates = [], [], 0, est.n_updates_
        while position < n:
            damping = est.damping(updates=updates, examples=est.examples_seen_ + position)
            size = batch_at(position, n, damping.batch_size)
            dampings.append(damping)
            batches.append(np.arange(position, position + size))
            position += size
            updates += 1
        return dampings, batches

    def _ranks(self, world: int) -> list[str]:
        session = self.session
        session.workers.settle()
        session.workers.await_some(world, session.timeout)
        ranks = session.workers.current()[:world]
        if (self.generation is None or ranks != self.ranks
                or self.generation.world_size != len(ranks)):  # fmt: skip
            pids = session.client.run(remote.process_id, workers=ranks)
            if len(set(pids.values())) < len(ranks):
                raise ValueError("engine='ddp' needs one process per Dask worker (these share "
                                 "one): use LocalCluster(processes=True) or dask worker "
                                 "processes")  # fmt: skip
            if self.generation is not None:
                session.client.run(remote.ddp_teardown)
            host, port = session.client.submit(remote.free_port, workers=[ranks[0]],
                                               pure=False).result(session.timeout)  # fmt: skip
            self.generations += 1
            self.generation = remote.Generation(self.generations, self.est.recipe_.key, host,
                                                port, len(ranks), session.timeout)  # fmt: skip
            self.ranks = ranks
        return ranks

    def _rank_plans(self, order: np.ndarray, batches: list[np.ndarray], dampings: list[Any],
                    world: int) -> list[remote.EpochPlan]:  # fmt: skip
        shards = [np.array_split(order[b], world) for b in batches]
        sizes = [len(b) for b in batches]
        factors = [d.lr_factor for d in dampings]
        return [
            remote.EpochPlan([s[rank] for s in shards], sizes, factors) for rank in range(world)
        ]

    def _epoch(self, ranks: list[str], plans: list[remote.EpochPlan]) -> list[remote.EpochResult]:
        est, session = self.est, self.session
        start = remote.TrainerState(remote.flat_state(est.module_), est.optimizer_.state_dict())
        optimizer_kwargs = est.routed("optimizer")
        futures = [
            session.client.submit(remote.ddp_epoch, session.recipe_future, session.data_future,
                                  self.generation, rank, start, est.optimizer, optimizer_kwargs,
                                  plans[rank], workers=[address], allow_other_workers=False,
                                  pure=False, key=f"ddp-epoch-{rank}-{uuid.uuid4().hex[:8]}")
            for rank, address in enumerate(ranks)
        ]  # fmt: skip
        # no overall limit (an epoch takes what it takes): a dead rank's peers fail in the
        # all-reduce within the group timeout, and a lost worker is noticed by polling
        return gather(session.client, futures, None, "DDP ranks", pinned=ranks)

    def close(self) -> None:
        try:
            self.session.client.run(remote.ddp_teardown)
        finally:
            super().close()


ENGINES: dict[str, type[Engine]] = {cls.name: cls for cls in (Centralised, DDP)}
