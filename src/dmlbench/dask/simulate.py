"""What a batch-size schedule saves at scale, from measured per-update times.

The paper's point: when the batch grows and the workers grow with it, each model update
takes about the same time, so wall-clock time follows the number of model updates,
and a schedule that needs far fewer updates finishes far sooner.

- :func:`schedule` counts the updates a damper makes over ``epochs`` of ``n`` examples
  (the same epoch arithmetic as the estimators: no tiny last update).
- :class:`UpdateTime` is a per-update time model *measured* on this machine:
  ``t(B) = fixed + per_task · k + compute · ⌈k / workers⌉ + comm``, with
  ``k = ⌈B / grads_per_worker⌉`` tasks on ``workers = min(k, max_workers)``.
  :func:`measure_update_time` fits ``fixed``, ``per_task`` and ``compute`` from the
  update records of real fits (``est.history_``).
- :func:`simulate` tabulates updates and wall-clock time for several schedules and
  worker limits; :func:`network_table` adds the network term from the performance
  model (a central server vs ring all-reduce at given link speeds).
- :func:`schedule_table` is the adadamp paper's two tables in one: per damper, its
  model updates, epochs and maximum workers, and its training time with no network
  and over each :class:`Network` (bandwidth *and* latency, centralised or
  decentralised); :data:`PAPER_NETWORKS` are the paper's three.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dmlbench.dask.dampers import Damper, TrainState
from dmlbench.dask.history import Record
from dmlbench.perfmodel.model import Algorithm, CommCalibration, Link, allreduce_time

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


def schedule(damper: Damper, n: int, epochs: int) -> list[int]:
    """The batch size of every model update over ``epochs`` epochs of ``n`` examples.
    For dampers that look only at epochs and updates (not the loss or the noise scale)."""
    sizes: list[int] = []
    for epoch in range(epochs):
        position = 0
        while position < n:
            seen = epoch * n + position
            wanted = min(damper(TrainState(epoch=seen / n, updates=len(sizes))).batch_size, n)
            left = n - position
            size = left if left - wanted < wanted / 2 else wanted
            sizes.append(size)
            position += size
    return sizes


@dataclass(frozen=True)
class UpdateTime:
    """Seconds per model update as a function of the batch size (see the module doc)."""

    fixed_s: float  # the driver's own work and one round of calls, per update
    per_task_s: float  # each further gradient task's dispatch and reduction
    compute_s: float  # one task's gradient of ``grads_per_worker`` examples
    grads_per_worker: int

    def tasks(self, batch: int) -> int:
        return max(1, math.ceil(batch / self.grads_per_worker))

    def __call__(self, batch: int, max_workers: int, comm_s: float = 0.0) -> float:
        k = self.tasks(batch)
        workers = min(k, max_workers)
        return self.fixed_s + self.per_task_s * k + self.compute_s * math.ceil(k / workers) + comm_s


def measure_update_time(updates: Iterable[Record], grads_per_worker: int) -> UpdateTime:
    """Fit :class:`UpdateTime` to real update records (each with ``tasks``, ``wall_s``,
    ``compute_s`` and ``workers``): overhead = wall − compute against the task count."""
    frame = pd.DataFrame(list(updates))
    if frame.empty:
        raise ValueError("no update records to measure from")
    frame = frame[frame["tasks"] <= frame["workers"]]  # one task per worker: no queueing
    compute = float(frame["compute_s"].median())
    overhead = (frame["wall_s"] - frame["compute_s"]).to_numpy()
    tasks = frame["tasks"].to_numpy()
    if len(set(tasks)) >= 2:
        per_task, fixed = np.polyfit(tasks, overhead, 1)
    else:
        per_task, fixed = 0.0, float(np.median(overhead))
    return UpdateTime(max(float(fixed), 0.0), max(float(per_task), 0.0), compute, grads_per_worker)


def simulate(
    schedules: Mapping[str, Sequence[int]],
    update_time: UpdateTime,
    max_workers: Sequence[int],
) -> pd.DataFrame:
    """Updates and wall-clock seconds of each schedule at each worker limit."""
    rows = []
    for name, sizes in schedules.items():
        for limit in max_workers:
            rows.append(
                {
                    "schedule": name,
                    "max_workers": limit,
                    "updates": len(sizes),
                    "largest_batch": max(sizes),
                    "workers_used": min(update_time.tasks(max(sizes)), limit),
                    "wall_s": sum(update_time(b, limit) for b in sizes),
                }
            )
    table = pd.DataFrame(rows)
    base = table.groupby("max_workers")["wall_s"].transform("max")
    table["speedup"] = base / table["wall_s"]
    return table


def network_table(
    schedules: Mapping[str, Sequence[int]],
    update_time: UpdateTime,
    gradient_bytes: float,
    links: dict[str, Link],
    calibration: CommCalibration,
    max_workers: int,
    algorithms: Sequence[Algorithm] = ("ps", "ring"),
) -> pd.DataFrame:
    """The paper's centralised (``ps``: one server) against decentralised (``ring``
    all-reduce) prediction: per schedule, network and algorithm, the wall-clock time
    when each update also exchanges ``gradient_bytes`` among its workers."""
    rows = []
    for name, sizes in schedules.items():
        for label, link in links.items():
            for algorithm in algorithms:
                wall = 0.0
                for batch in sizes:
                    workers = min(update_time.tasks(batch), max_workers)
                    comm = allreduce_time(algorithm, workers, gradient_bytes, link, calibration)
                    wall += update_time(batch, max_workers, comm)
                rows.append(
                    {
                        "schedule": name,
                        "network": label,
                        "algorithm": algorithm,
                        "updates": len(sizes),
                        "wall_s": wall,
                    }
                )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Network:
    """What each update's gradient exchange runs over. ``ps`` is the centralised engine:
    the driver's one link carries every worker's gradient in and the weights out;
    ``ring`` is decentralised all-reduce, each worker on its own ``link``."""

    name: str
    algorithm: Algorithm
    link: Link


IDEAL_STACK = CommCalibration(
    alpha_s=0.0, host_busbw=math.inf, link_efficiency=1.0, latencies_per_step=1.0
)
"""The paper's networks are bandwidth and latency alone: no software overhead per
message, hosts that keep up, one latency per message."""

PAPER_NETWORKS = (
    Network("centralised, 54 Gbit/s, 0.05 µs", "ps", Link(54 * GBIT, 0.05e-6)),
    Network("decentralised, 54 Gbit/s, 0.05 µs", "ring", Link(54 * GBIT, 0.05e-6)),
    Network("decentralised, 800 Gbit/s, 0.025 µs", "ring", Link(800 * GBIT, 0.025e-6)),
)


def schedule_table(
    dampers: Mapping[str, Damper],
    n: int,
    epochs: int,
    update_time: UpdateTime,
    gradient_bytes: float,
    networks: Sequence[Network] = PAPER_NETWORKS,
    calibration: CommCalibration = IDEAL_STACK,
) -> pd.DataFrame:
    """Per damper over ``epochs`` epochs of ``n`` examples: ``updates``, ``epochs``,
    ``max_batch`` (the schedule's largest), ``max_workers`` (one per
    ``grads_per_worker`` examples of that batch: the cluster the fit grows to),
    ``compute_s`` (the training time with a free network) and one column of seconds
    per network, named by :attr:`Network.name`.

    An epoch's last update takes the examples left over (up to 1.5× the batch); with
    more tasks than ``max_workers`` a worker computes two, as on a real cluster."""
    rows = []
    for name, damper in dampers.items():
        sizes = Counter(schedule(damper, n, epochs))
        largest = min(damper.max_batch_size or max(sizes), n)
        workers = update_time.tasks(largest)
        row: dict[str, object] = {
            "schedule": name,
            "updates": sum(sizes.values()),
            "epochs": epochs,
            "max_batch": largest,
            "max_workers": workers,
            "compute_s": sum(count * update_time(b, workers) for b, count in sizes.items()),
        }
        for network in networks:
            seconds = 0.0
            for batch, count in sizes.items():
                senders = min(update_time.tasks(batch), workers)
                comm = allreduce_time(
                    network.algorithm, senders, gradient_bytes, network.link, calibration
                )
                seconds += count * update_time(batch, workers, comm)
            row[network.name] = seconds
        rows.append(row)
    return pd.DataFrame(rows)


def full_batch_updates(damper: Damper, n: int, epochs: int) -> Counter[int]:
    """Updates per batch size when every update takes a whole batch and an epoch ends
    once ``n`` examples are seen (``⌈n / B⌉`` updates): adadamp's own epoch arithmetic,
    which the paper's tables count. (:func:`schedule` gives an epoch's leftover
    examples to its last update instead, as dmlbench's estimators do.)"""
    counts: Counter[int] = Counter()
    for epoch in range(epochs):
        state = TrainState(epoch=float(epoch), updates=sum(counts.values()))
        batch = min(damper(state).batch_size, n)
        counts[batch] += math.ceil(n / batch)
    return counts


@dataclass(frozen=True)
class SleepEngine:
    """Seconds per update as the adadamp paper's simulation charged them.

    Holt & Sievert ran their real Dask engine on one machine with each gradient task
    *sleeping* for the model's copy to its worker and its gradient (their
    ``exp-dask/classifier.py``): ``P = ⌊B / grads_per_worker⌋`` tasks on one Dask worker
    of ``threads`` threads, so they run in ``⌈P / threads⌉`` waves, plus what the engine
    itself costs::

        t(B) = fixed + per_task·P + ⌈P / threads⌉ · (gradient·(B/P)/grads_per_worker + copy(P))

    ``copy(P)`` is ``copy_s`` (their centralised engine: a deep copy of the model per
    task) plus, over a ``broadcast`` link, the model sent down a binary tree:
    ``log2(P) · (model_bytes / bandwidth + latency)`` (their decentralised networks)."""

    threads: int
    fixed_s: float
    per_task_s: float
    gradient_s: float  # one task's gradient of ``grads_per_worker`` examples
    grads_per_worker: int
    copy_s: float = 0.0
    broadcast: Link | None = None
    model_bytes: float = 0.0

    def tasks(self, batch: int) -> int:
        return max(1, batch // self.grads_per_worker)

    def copy(self, tasks: int) -> float:
        tree = 0.0
        if self.broadcast is not None and tasks > 1:
            hop = self.model_bytes / self.broadcast.bandwidth + self.broadcast.latency_s
            tree = math.log2(tasks) * hop
        return self.copy_s + tree

    def __call__(self, batch: int) -> float:
        tasks = self.tasks(batch)
        one_task = self.gradient_s * (batch / tasks) / self.grads_per_worker + self.copy(tasks)
        waves = math.ceil(tasks / self.threads)
        return self.fixed_s + self.per_task_s * tasks + waves * one_task


def fit_engine_cost(points: Mapping[int, float]) -> tuple[float, float]:
    """(fixed, per task) seconds of an engine's own cost per update, fitted by least
    squares to ``{tasks: overhead seconds per update}`` (each at one wave of tasks)."""
    if len(points) < 2:
        raise ValueError("two task counts at least, to tell the fixed cost from the per-task one")
    per_task, fixed = np.polyfit(list(points), list(points.values()), 1)
    return float(fixed), float(per_task)


def sleep_engine_table(
    dampers: Mapping[str, Damper], n: int, epochs: int, engines: Mapping[str, SleepEngine]
) -> pd.DataFrame:
    """Per damper: ``updates`` (adadamp's arithmetic, :func:`full_batch_updates`),
    ``max_workers`` and one column of seconds per engine, named by its key."""
    rows = []
    for name, damper in dampers.items():
        counts = full_batch_updates(damper, n, epochs)
        first = next(iter(engines.values()))
        row: dict[str, object] = {
            "schedule": name,
            "updates": sum(counts.values()),
            "max_workers": max(first.tasks(batch) for batch in counts),
        }
        for label, engine in engines.items():
            row[label] = sum(count * engine(batch) for batch, count in counts.items())
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the paper's own simulation
# Inputs from the authors' experiment repository, stsievert/adadamp-experiments at 7035da9
# (exp-dask/), and the paper's Table 2. Nothing here is fitted to Table 2.

PAPER_REPOSITORY = "stsievert/adadamp-experiments@7035da9"
PAPER_GRADIENT_S = 78.32e-3
"""One gradient of 128 examples through WRN-16-4 on their T4 GPU: their real run's 147.9
ms per update less the 11 ms update task, split by their profile into the gradient and
a 58.56 ms deep copy of the model (simulation-sleep-time/Calculation.ipynb)."""
PAPER_DEEPCOPY_S = 58.56e-3
PAPER_THREADS = 4
"""Their simulations' Dask worker: one process of 4 threads, as the client of every
Table 2 run in sim-results/ records (``processes=1 threads=4``: a g4dn.xlarge)."""
PAPER_ENGINE_RUNS = {1: 0.17445, 2: 0.10366, 4: 0.07538, 8: 0.08027, 16: 0.11717}
"""Seconds per update of their engine at P tasks, one wave (16 one-thread workers),
from their grads-per-worker simulation (sim-results/grads_per_worker/, batch 512 for
200 epochs): each task slept ``0.5 · 78.32 ms · (512/P)/128`` and ``0.127 ms · log2 P``;
the rest is the engine's own cost, fitted as fixed + per task by
:func:`paper_engine_cost`."""
PAPER_ENGINE_RUN_SLEEP = (0.5 * PAPER_GRADIENT_S, 0.127488e-3, 512)  # gradient, copy, batch

PAPER_TABLE_2 = {  # minutes: centralised; decentralised 54 Gbit/s; decentralised 800 Gbit/s
    "256 → 5,120 (*2)": (69.9, 45.1, 43.5),
    "128 → 3,200": (107.2, 67.7, 65.5),
    "128 → 16,000": (107.5, 67.7, 65.7),
    "128 → 640": (116.9, 73.6, 71.8),
    "128 → 128": (200.2, 121.7, 121.5),
}
"""Holt & Sievert (SciPy 2021), Table 2, "Simulations that indicate how the training time
(in minutes) will change under different architectures and networks"; rows by the
schedule's largest batch."""


def paper_engine_cost() -> tuple[float, float]:
    """(fixed, per task) seconds of the authors' engine per update, from
    :data:`PAPER_ENGINE_RUNS` less the sleeps those runs made."""
    gradient, copy, batch = PAPER_ENGINE_RUN_SLEEP
    overhead = {
        tasks: seconds - gradient * (batch / tasks) / 128 - copy * math.log2(tasks)
        for tasks, seconds in PAPER_ENGINE_RUNS.items()
    }
    return fit_engine_cost(overhead)


def paper_engines(model_bytes: float) -> dict[str, SleepEngine]:
    """The three engines of Table 2's columns, as the authors' simulation charged them:
    the centralised engine (a deep copy of the model per task, measured) and the two
    decentralised networks (the model along a tree over the paper's links)."""
    fixed, per_task = paper_engine_cost()
    base = SleepEngine(PAPER_THREADS, fixed, per_task, PAPER_GRADIENT_S, 128)
    return {
        "centralised": dataclasses.replace(base, copy_s=PAPER_DEEPCOPY_S),
        **{
            network.name: dataclasses.replace(base, broadcast=network.link, model_bytes=model_bytes)
            for network in PAPER_NETWORKS
            if network.algorithm == "ring"
        },
    }
