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
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from distributed import Client, Future
from distributed.actor import Actor
from distributed.scheduler import KilledWorker
from torch import nn

from dmlbench.dask import worker as remote
from dmlbench.dask.cluster import WorkerLost, Workers, connect, gather, tasks_for
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
    def record_update(
        self,
        record: Record,
        update: Update,
        damping: Damping,
        *,
        tasks: int,
        target: int | None,
        wall: float,
    ) -> None: ...
    def finish_epoch(self, record: Record, wall: float) -> Record: ...
    def note(self, message: str) -> None: ...


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

        Each try is bounded by the session's timeout: a worker that leaves during a
        broadcast can leave it waiting forever (dask/distributed#5704: the scheduler
        retries the replication to the gone worker), which hung a grid search's fit
        beside other work; the next try finds the cluster settled."""
        for attempt in range(attempts):
            try:
                self.data_future = self.client.scatter(
                    self.data, broadcast=True, hash=False, timeout=self.timeout
                )
                self.recipe_future = self.client.scatter(
                    self.recipe, broadcast=True, hash=False, timeout=self.timeout
                )
                break
            except (KeyError, OSError) as error:  # TimeoutError is an OSError
                if attempt == attempts - 1:
                    raise RuntimeError(
                        f"could not send the training data to the Dask workers: "
                        f"{type(error).__name__}: {error}"
                    ) from None
                time.sleep(0.2 * (attempt + 1))

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

    def holds(self, data: remote.TrainData) -> bool:
        held = self.session.data
        return (
            held.x.shape == data.x.shape
            and np.array_equal(held.x, data.x)
            and np.array_equal(held.y, data.y)
        )

    def close(self) -> None:
        self.session.close()


class Centralised(Engine):
    """Gradient tasks go to one :class:`~dmlbench.dask.worker.GradientWorker` actor per
    worker, called directly (a task through the scheduler costs ~10 ms of round trips on
    a small machine; an actor call ~1 ms). Workers that join get an actor as they
    arrive; a worker that dies takes its actor with it and its tasks run elsewhere."""

    name = "centralised"

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        super().__init__(est, data)
        self.pool = ActorPool(self.session)

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
            begin = time.perf_counter()
            results = self.pool.run(remote.flat_state(est.module_), np.array_split(index, tasks))
            for message in session.drain_notes():
                est.note(f"update {est.n_updates_ + 1}: {message}")
            self._step(results, len(index), damping.lr_factor)
            wall = time.perf_counter() - begin
            update = results_summary(results, len(index))
            est.record_update(record, update, damping, tasks=tasks, target=target, wall=wall)
        return est.finish_epoch(record, time.perf_counter() - start)

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

    def close(self) -> None:
        self.pool.close()
        super().close()


def _actor_lost(error: BaseException) -> bool:
    """The actor's worker is gone (as opposed to the task's own error)."""
    if isinstance(error, OSError | asyncio.CancelledError | concurrent.futures.CancelledError):
        return True
    return isinstance(error, RuntimeError) and "actor" in str(error).lower()


class ActorPool:
    """One gradient actor per worker, kept in step with the cluster."""

    max_failures: ClassVar[int] = 3  # per task and update, before the fit gives up

    def __init__(self, session: Session, refresh_s: float = 0.5) -> None:
        self.session = session
        self.refresh_s = refresh_s
        self.starting: dict[str, Future] = {}  # worker address → actor being created
        self.actors: dict[str, Any] = {}  # worker address → ready actor
        self.alive: dict[str, Future] = {}  # worker address → the ready actor's future
        self.checked = -float("inf")

    def refresh(self, force: bool = False) -> None:
        """Start actors on new workers, adopt the ones that are ready, forget departed
        workers (checked at most every ``refresh_s`` seconds unless forced)."""
        now = time.monotonic()
        if force or now - self.checked >= self.refresh_s:
            self.checked = now
            present = set(self.session.workers.current())
            for gone in (set(self.actors) | set(self.starting)) - present:
                self.actors.pop(gone, None)
                self.alive.pop(gone, None)
                self.starting.pop(gone, None)
            if self.session.data_lost():
                self.session.lost_data()
            for address in present - set(self.actors) - set(self.starting):
                self.starting[address] = self.session.client.submit(
                    remote.GradientWorker,
                    self.session.recipe,
                    self.session.data_future,
                    actor=True,
                    workers=[address],
                    allow_other_workers=False,
                    pure=False,
                )
        for address, future in list(self.starting.items()):
            if future.status == "finished":
                # a handle of our own, bound to this client: the one the future returns is
                # shared with the worker when the cluster runs in this process
                with self.session.client.as_current():
                    self.actors[address] = Actor(remote.GradientWorker, address, future.key)
                self.alive[address] = self.starting.pop(address)  # keeps the actor alive
            elif future.status in ("error", "cancelled", "lost"):
                del self.starting[address]  # retried at the next refresh
                if future.status == "error" and not _lost_work(future.exception()):
                    future.result()  # the module failed on the worker: say so

    def ready(self) -> list[tuple[str, Any]]:
        """The ready actors with their workers' addresses; waits (up to the session
        timeout) for one when there is none."""
        self.refresh()
        deadline = time.monotonic() + self.session.timeout
        while not self.actors:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no gradient worker became ready in {self.session.timeout:g} s"
                    ": check the Dask workers' logs, or raise timeout="
                )
            self.session.workers.await_some(1, self.session.timeout)
            time.sleep(0.02)
            self.refresh(force=True)
        return list(self.actors.items())

    def run(self, weights: np.ndarray, chunks: list[np.ndarray]) -> list[remote.GradientResult]:
        """Every chunk's gradient; a chunk whose worker is lost runs again elsewhere."""
        results: dict[int, remote.GradientResult] = {}
        failures = dict.fromkeys(range(len(chunks)), 0)
        while len(results) < len(chunks):
            actors = self.ready()
            todo = [i for i in range(len(chunks)) if i not in results]
            shares = {a: todo[a :: len(actors)] for a in range(min(len(actors), len(todo)))}
            calls = {}
            for a, share in shares.items():
                try:  # a worker lost since the last update fails here, before any call
                    calls[a] = actors[a][1].gradients(weights, [chunks[i] for i in share])
                except Exception as error:
                    self._lost(error, actors[a][1], share, failures)
            for a, call in calls.items():
                address, actor = actors[a]
                try:
                    for i, result in zip(shares[a], self._outcome(call, address), strict=True):
                        results[i] = result
                except TimeoutError:
                    raise  # no result at all, not a lost worker (though an OSError, too)
                except Exception as error:
                    self._lost(error, actor, shares[a], failures)
        return [results[i] for i in range(len(chunks))]

    def _outcome(self, call: Any, address: str) -> Any:
        """The call's result, or ``OSError`` as soon as the scheduler knows its worker is
        gone: a call to a dead worker's address otherwise retries its connection until
        Dask's connect timeout (30 s by default) before it fails."""
        deadline = time.monotonic() + self.session.timeout
        while True:
            try:
                return call.result(timeout=min(self.refresh_s, self.session.timeout))
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"gradient tasks gave no result in "
                        f"{self.session.timeout:g} s (a worker stuck?): raise "
                        "timeout= or check the cluster"
                    ) from None
                if address not in self.session.workers.current():
                    raise OSError(f"worker {address} left the cluster") from None

    def _lost(
        self, error: Exception, actor: Any, share: list[int], failures: dict[int, int]
    ) -> None:
        """A call failed: if its worker is gone, forget the actor so that its tasks run
        elsewhere (up to ``max_failures`` times each); any other error is the task's own."""
        if not _actor_lost(error):
            raise error
        for i in share:
            failures[i] += 1
        if max(failures[i] for i in share) > self.max_failures:
            raise RuntimeError(
                f"gradient tasks lost their worker {self.max_failures + 1} times: the "
                "cluster is unstable"
            ) from None
        self._forget(actor)
        self.session.note_loss(error)

    def _forget(self, actor: Any) -> None:
        for address, known in list(self.actors.items()):
            if known is actor:
                del self.actors[address]
                self.alive.pop(address).release()
        self.refresh(force=True)

    def close(self) -> None:
        self.actors.clear()
        for future in [*self.starting.values(), *self.alive.values()]:
            future.release()
        self.starting.clear()
        self.alive.clear()


def batch_at(position: int, n: int, wanted: int) -> int:
    """The batch starting at ``position`` of an ``n``-example epoch: ``wanted`` examples,
    or the rest of the epoch when less than half a batch would be left over (no tiny,
    noisy last update)."""
    left = n - position
    return left if left - wanted < wanted / 2 else wanted


def results_summary(results: list[remote.GradientResult], batch: int) -> Update:
    return Update(
        loss=sum(r.loss_sum for r in results) / batch,
        workers=len({r.worker for r in results}),
        compute_s=max(r.compute_s for r in results),
        batch_size=batch,
    )


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
                est.note(
                    f"epoch {len(est.history_) + 1}: lost a rank ({error!s:.80}); "
                    "epoch re-run in a new generation"
                )
                session.workers.await_some(1, session.timeout)
                session.scatter()
        record = est.history_.new_epoch(engine=self.name, generation=self.generation.number)  # type: ignore[union-attr]
        rank0 = next(r for r in results if r.rank == 0)
        assert rank0.state is not None
        remote.load_flat_state(est.module_, rank0.state.weights)
        est.optimizer_.load_state_dict(rank0.state.optimizer_state)
        est.restore_base_lrs()
        for u, (damping, index) in enumerate(zip(dampings, batches, strict=True)):
            update = Update(
                loss=sum(r.loss_sums[u] for r in results) / len(index),
                workers=len(results),
                compute_s=max(r.compute_s[u] for r in results),
                batch_size=len(index),
            )
            est.record_update(
                record,
                update,
                damping,
                tasks=len(results),
                target=target,
                wall=update.compute_s,
            )
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
        if len(ranks) < world:  # one left after joining: a new generation, as when lost
            raise WorkerLost(f"{world} Dask workers were wanted and {len(ranks)} are left")
        if (
            self.generation is None
            or ranks != self.ranks
            or self.generation.world_size != len(ranks)
        ):
            pids = session.client.run(remote.process_id, workers=ranks)
            if len(set(pids.values())) < len(ranks):
                raise ValueError(
                    "engine='ddp' needs one process per Dask worker (these share "
                    "one): use LocalCluster(processes=True) or dask worker "
                    "processes"
                )
            if self.generation is not None:
                session.client.run(remote.ddp_teardown)
            host, port = session.client.submit(
                remote.open_rendezvous, session.timeout, workers=[ranks[0]], pure=False
            ).result(session.timeout)
            self.generations += 1
            self.generation = remote.Generation(
                self.generations, self.est.recipe_.key, host, port, len(ranks), session.timeout
            )
            self.ranks = ranks
        return ranks

    def _rank_plans(
        self, order: np.ndarray, batches: list[np.ndarray], dampings: list[Any], world: int
    ) -> list[remote.EpochPlan]:
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
            session.client.submit(
                remote.ddp_epoch,
                session.recipe_future,
                session.data_future,
                self.generation,
                rank,
                start,
                est.optimizer,
                optimizer_kwargs,
                plans[rank],
                workers=[address],
                allow_other_workers=False,
                pure=False,
                key=f"ddp-epoch-{rank}-{uuid.uuid4().hex[:8]}",
            )
            for rank, address in enumerate(ranks)
        ]
        # no overall limit (an epoch takes what it takes): a dead rank's peers fail in the
        # all-reduce within the group timeout, and a lost worker is noticed by polling
        return gather(session.client, futures, None, "DDP ranks", pinned=ranks)

    def close(self) -> None:
        try:
            self.session.client.run(remote.ddp_teardown)
        finally:
            super().close()


ENGINES: dict[str, type[Engine]] = {cls.name: cls for cls in (Centralised, DDP)}
