"""The DDP engine (``engine="ddp"``): torch ``DistributedDataParallel`` across the Dask
workers, one rank per worker; an epoch is one task per rank. The process group is a
*generation*: when the wanted world size changes with the batch size, the ranks leave
it and a new one starts (a fresh port) from rank 0's last state."""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from dmlbench.dask import worker as remote
from dmlbench.dask.cluster import WorkerLost, gather, tasks_for
from dmlbench.dask.engines.base import DaskEstimator, Engine, batch_at, lost_work
from dmlbench.dask.history import Record, Update


class DDP(Engine):
    name = "ddp"

    def __init__(self, est: DaskEstimator, data: remote.TrainData) -> None:
        super().__init__(est, data)
        self.generation: remote.Generation | None = None
        self.ranks: list[str] = []
        self.generations = 0

    def warm_up(self) -> None:
        """The first generation formed before the first epoch (each rank's group joined,
        its module built), by an epoch of no updates, where the workers the first epoch
        wants are there; else, or when one is lost meanwhile, the first epoch forms it."""
        session = self.session
        world = self.first_workers()
        if len(session.workers.current()) < world:
            return
        try:
            ranks = self._ranks(world)
            self._epoch(ranks, [remote.EpochPlan([], [], []) for _ in ranks])
        except Exception as error:
            if not lost_work(error):
                raise
            self._break_generation()

    def run_epoch(self) -> Record:
        est, session = self.est, self.session
        n = len(session.data.x)
        order = est.rng_.permutation(n)
        dampings, batches = self._plan(n)
        world = self._world(batches)
        target = session.workers.follow(world)
        start = time.perf_counter()
        for attempt in range(self.retries + 1):
            ranks = self._ranks(world)
            plans = self._rank_plans(order, batches, dampings, len(ranks))
            try:
                results = self._epoch(ranks, plans)
                break
            except Exception as error:
                self._break_generation()  # the next try is a new one
                if attempt == self.retries or not (lost_work(error) or self._rank_gone(ranks)):
                    raise
                est.note(
                    f"epoch {len(est.history_) + 1}: lost a rank ({error!s:.80}); "
                    "epoch re-run in a new generation"
                )
                session.workers.await_some(1, session.timeout)
                session.scatter()
        assert self.generation is not None  # the epoch that succeeded ran in one
        record = est.history_.new_epoch(engine=self.name, generation=self.generation.number)
        rank0 = next(r for r in results if r.rank == 0)
        assert rank0.state is not None
        remote.load_flat_state(est.module_, rank0.state.weights)
        est.optimizer_.load_state_dict(rank0.state.optimizer_state)
        est.restore_base_lrs()
        for u, (damping, index) in enumerate(zip(dampings, batches, strict=True)):
            compute = max(r.compute_s[u] for r in results)
            update = Update(
                loss=sum(r.loss_sums[u] for r in results) / len(index),
                workers=len(results),
                compute_s=compute,
                batch_size=len(index),
                tasks=len(results),
                target_workers=target,
                wall_s=compute,  # the ranks ran the epoch alone: no driver in between
            )
            est.record_update(record, update, damping)
        return est.finish_epoch(record, time.perf_counter() - start)

    def first_world(self) -> int:
        """The ranks of the next epoch, as :meth:`run_epoch` will plan it."""
        return self._world(self._plan(len(self.session.data.x))[1])

    def _world(self, batches: list[np.ndarray]) -> int:
        """The ranks an epoch of ``batches`` runs on: what its first update wants, and no
        more than its smallest batch has examples (each rank takes a share of each)."""
        wanted = tasks_for(len(batches[0]), self.est.grads_per_worker)
        return min(self.session.workers.wanted(wanted), min(len(b) for b in batches))

    def _break_generation(self) -> None:
        """The process group is broken (a rank lost): every worker leaves it."""
        self.generation = None
        self.session.client.run(remote.ddp_teardown)

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
