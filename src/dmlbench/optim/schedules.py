"""Learning rate as a pure function of training progress (easy to test and to plot)."""

from __future__ import annotations

import bisect
import math

from dmlbench.spec.recipe import InverseSqrtSchedule, Schedule, WarmupStepSchedule


def learning_rate(
    schedule: Schedule, *, step: int, epoch: float, local_batch: int, world_size: int
) -> float:
    """Rate for update number ``step`` (from 0), taken at fractional ``epoch``."""
    if isinstance(schedule, WarmupStepSchedule):
        start = schedule.lr_per_sample * local_batch
        peak = schedule.lr_per_sample * local_batch * world_size
        if epoch < schedule.warmup_epochs:
            rate = start + (peak - start) * epoch / schedule.warmup_epochs
        else:
            rate = peak
        decays = bisect.bisect_right(schedule.milestones, epoch)
        return rate * schedule.gamma**decays
    if isinstance(schedule, InverseSqrtSchedule):
        return schedule.alpha(world_size) / math.sqrt(step + 1)
    raise TypeError(f"unknown schedule {schedule!r}")
