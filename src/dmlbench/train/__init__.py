"""One worker's training loop: Trainer, phase timers, the process entry point.

Attributes load on first use, so that the launcher's light modules of the package
(``allocator``: which C allocator the workers preload) do not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlbench.train.timers import PHASES, PhaseTimer
    from dmlbench.train.trainer import Trainer

__all__ = ["PHASES", "PhaseTimer", "Trainer"]
_HOMES = {"PHASES": "timers", "PhaseTimer": "timers", "Trainer": "trainer"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'dmlbench.train' has no attribute {name!r}")
    return getattr(import_module(f"dmlbench.train.{_HOMES[name]}"), name)
