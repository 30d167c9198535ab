"""The centralised engine (``engine="centralised"``, the paper's architecture): per update
the batch is split into ``ceil(B / grads_per_worker)`` gradient tasks; the driver sums
their gradients and steps its optimizer. The cluster is scaled with the task count."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any, ClassVar

import numpy as np
import torch
from distributed import Future
from distributed.actor import Actor

from dmlbench.dask import worker as remote
from dmlbench.dask.cluster import tasks_for
from dmlbench.dask.engines.base import DaskEstimator, Engine, Session, batch_at, lost_work
from dmlbench.dask.history import Record, Update
from dmlbench.system import raise_unhandled


class Centralised(Engine):
    """Gradient tasks go to one :class:`~dmlbench.dask.worker.GradientWorker` actor per
    worker, called directly (a task through the scheduler costs ~10 ms of round trips on
    a small machine; an actor call ~1 ms). Workers that join get an actor as they
    arrive; a worker that dies takes its actor with it and its tasks run elsewhere."""

    name = "centralised"

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        super().__init__(est, data)
        self.pool = ActorPool(self.session)

    def warm_up(self) -> None:
        """The first update's workers started, each one's actor too (the module built
        there), and ready."""
        self.first_workers()
        self.pool.warm()

    def run_epoch(self) -> Record:
        est, session = self.est, self.session
        n = len(session.data.x)
        order = est.rng_.permutation(n)
        record = est.history_.new_epoch(engine=self.name)
        start, position = time.perf_counter(), 0
        while position < n:
            raise_unhandled()  # an interrupt Python dropped (see dmlbench.system)
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
            update = Update(
                loss=sum(r.loss_sum for r in results) / len(index),
                workers=len({r.worker for r in results}),
                compute_s=max(r.compute_s for r in results),
                batch_size=len(index),
                tasks=tasks,
                target_workers=target,
                wall_s=wall,
            )
            est.record_update(record, update, damping)
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
                if future.status == "error" and not lost_work(future.exception()):
                    future.result()  # the module failed on the worker: say so

    def warm(self) -> None:
        """Start an actor on every present worker and wait (up to the session timeout)
        until each is ready or its worker gone."""
        self.refresh(force=True)
        deadline = time.monotonic() + self.session.timeout
        while self.starting and time.monotonic() < deadline:
            time.sleep(0.02)
            self.refresh(force=True)
        self.ready()  # one at least, or the session's error

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
