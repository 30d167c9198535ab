"""Learning rate as a pure function of training progress (easy to test and to plot)."""

from __future__ import annotations

from dmlbench.spec.recipe import Schedule


def learning_rate(
    schedule: Schedule, *, step: int, epoch: float, local_batch: int, world_size: int
) -> float:
    """Rate for update number ``step`` (from 0), taken at fractional ``epoch``; each
    schedule in the recipe's ``Schedule`` union computes its own."""
    return schedule.rate(step=step, epoch=epoch, local_batch=local_batch, world_size=world_size)
