"""Starting workers: local processes through torch's elastic launcher, an emulated
cluster, Slurm, one node of a job across hosts.

Attributes load on first use, so that light modules of the package (``request``: the
run decisions the CLI takes) do not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlbench.launch.local import launch_local
    from dmlbench.launch.run import RunOutcome, run_benchmark

__all__ = ["RunOutcome", "launch_local", "run_benchmark"]
_HOMES = {"RunOutcome": "run", "run_benchmark": "run", "launch_local": "local"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'dmlbench.launch' has no attribute {name!r}")
    return getattr(import_module(f"dmlbench.launch.{_HOMES[name]}"), name)
