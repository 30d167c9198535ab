"""One worker's training loop: Trainer, phase timers, the process entry point."""

from dmlbench.train.timers import PHASES, PhaseTimer
from dmlbench.train.trainer import Trainer

__all__ = ["PHASES", "PhaseTimer", "Trainer"]
