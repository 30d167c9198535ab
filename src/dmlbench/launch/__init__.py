"""Starting workers: local processes through torch's elastic launcher, an emulated
cluster, Slurm, one node of a job across hosts.

Attributes load on first use, so that light modules of the package (``request``: the
run decisions the CLI takes) do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlbench.lazy import lazy_attributes

if TYPE_CHECKING:
    from dmlbench.launch.local import launch_local
    from dmlbench.launch.run import RunOutcome, run_benchmark

__all__ = ["RunOutcome", "launch_local", "run_benchmark"]
__getattr__ = lazy_attributes(
    __name__,
    {
        "RunOutcome": "dmlbench.launch.run",
        "run_benchmark": "dmlbench.launch.run",
        "launch_local": "dmlbench.launch.local",
    },
)
