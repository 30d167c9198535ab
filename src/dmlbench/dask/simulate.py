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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dmlbench.dask.dampers import Damper, TrainState
from dmlbench.dask.history import Record
from dmlbench.perfmodel.model import Algorithm, CommCalibration, Link, allreduce_time


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
    schedules: dict[str, Sequence[int]],
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
    schedules: dict[str, Sequence[int]],
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
