"""Optimizers and learning-rate schedules built from a recipe."""

from dmlbench.optim.build import build_optimizer, l2_penalty
from dmlbench.optim.schedules import learning_rate

__all__ = ["build_optimizer", "l2_penalty", "learning_rate"]
