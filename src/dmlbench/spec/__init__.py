"""Typed, validated run specifications (closed recipes and open-division overrides).

The bottom of the package graph: fields, types and bounds, no registry. Specs are built
and checked against the registries by :mod:`dmlbench.resolve`."""

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
from dmlbench.spec.run import RunSpec

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
]
