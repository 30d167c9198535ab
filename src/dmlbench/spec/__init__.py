"""Typed, validated run specifications (closed recipes and open-division overrides)."""

from dmlbench.spec.overrides import apply_overrides, parse_assignment
from dmlbench.spec.recipe import (
    InverseSqrtSchedule,
    ModelSpec,
    OptimizerSpec,
    Recipe,
    ScaledSchedule,
    Schedule,
    WarmupStepSchedule,
)
from dmlbench.spec.run import RunSpec, resolve_spec

__all__ = [
    "InverseSqrtSchedule",
    "ModelSpec",
    "OptimizerSpec",
    "Recipe",
    "RunSpec",
    "ScaledSchedule",
    "Schedule",
    "WarmupStepSchedule",
    "apply_overrides",
    "parse_assignment",
    "resolve_spec",
]
