"""Starting workers: local processes through torch's elastic launcher."""

from dmlbench.launch.local import launch_local
from dmlbench.launch.run import RunOutcome, run_benchmark

__all__ = ["RunOutcome", "launch_local", "run_benchmark"]
