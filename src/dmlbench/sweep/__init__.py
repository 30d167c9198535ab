"""Sweeps: many runs from one description (axes, derived values, rules, scaling, repeats)."""

from dmlbench.sweep.plan import PlannedRun, SweepPlan, plan_sweep, run_key
from dmlbench.sweep.runner import Rerun, SweepOutcome, pending, run_sweep

__all__ = [
    "PlannedRun",
    "Rerun",
    "SweepOutcome",
    "SweepPlan",
    "pending",
    "plan_sweep",
    "run_key",
    "run_sweep",
]
