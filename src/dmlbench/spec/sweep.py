"""SweepSpec: many runs described once (axes, derived values, rules, scaling, repeats).

A sweep file (YAML or TOML)::

    name: digits-weak            # runs are recorded under this name; default: the file name
    task: digits-mlp
    scaling: weak                # weak: local batch fixed | strong: global batch fixed | none
    repeats: 3                   # seeds seed, seed+1, ... (recorded with every run)
    set:                         # fixed values, any spec key (full path or unique suffix)
      max_epochs: 20
    axes:                        # Cartesian product
      workers: [1, 2, 4]
      exchange: [allreduce, ddp]
    derived:                     # computed per run, in order, after axes and rules
      recipe.optimizer.momentum: "0.9 if workers < 4 else 0.8"
    rules:                       # DLBS-style: set or fork where a condition holds, or drop
      - {when: "workers == 1 and exchange == 'ddp'", drop: true}
      - {when: "workers == 4", fork: {local_batch: [16, 32]}}

Order of expansion: axes, then ``set``/``fork`` rules (in file order), then derived
values, then ``drop`` rules, then the scaling mode, then repeats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from dmlbench.errors import SpecError
from dmlbench.spec.overrides import flatten
from dmlbench.spec.recipe import StrictModel
from dmlbench.strict import MAX_SEED

Scaling = Literal["none", "weak", "strong"]


class Rule(StrictModel):
    """Where ``when`` holds: ``drop`` the run, ``set`` values, or ``fork`` it per listed value."""

    when: str = Field("True", description="condition over spec keys, e.g. 'workers >= 2'")
    drop: bool = False
    set: dict[str, Any] = Field(default_factory=dict)
    fork: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_action(self) -> Rule:
        if self.drop and (self.set or self.fork):
            raise ValueError("a rule either drops runs or sets/forks values, not both")
        if not (self.drop or self.set or self.fork):
            raise ValueError(f"rule '{self.when}' does nothing: give drop, set or fork")
        for key, values in self.fork.items():
            if not values:
                raise ValueError(f"fork of '{key}' has no values")
        return self


class SweepSpec(StrictModel):
    name: str = Field(description="runs are recorded under this name; resuming matches it")
    task: str
    scaling: Scaling = Field(
        "none",
        description="weak: local batch fixed, global grows with workers; "
        "strong: global batch fixed, local = global / workers",
    )
    global_batch: int | None = Field(
        None,
        gt=0,
        description="strong scaling's fixed global batch (default: recipe's "
        "local batch × the smallest worker count)",
    )
    local_batch: int | None = Field(
        None,
        gt=0,
        description="weak scaling's local batch, every worker's (default: the recipe's)",
    )
    repeats: int = Field(1, ge=1, le=1000, description="runs per point, seeds seed, seed+1, ...")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="first seed")
    set: dict[str, Any] = Field(default_factory=dict, description="fixed spec values")
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    derived: dict[str, str] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    plugins: list[str] = Field(default_factory=list)

    @field_validator("set")
    @classmethod
    def _flatten_set(cls, value: dict[str, Any]) -> dict[str, Any]:
        flat = flatten(value)
        if "seed" in flat:
            raise ValueError("give the first seed as the sweep's own 'seed:', not under set")
        return flat

    @field_validator("axes")
    @classmethod
    def _non_empty_axes(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"axis '{key}' has no values")
            if key in ("seed", "task"):
                raise ValueError(
                    f"'{key}' cannot be an axis: use repeats (seeds) or one sweep file per task"
                )
        return value

    @model_validator(mode="after")
    def _scaling_batch(self) -> SweepSpec:
        if self.global_batch is not None and self.scaling != "strong":
            raise ValueError("global_batch belongs to strong scaling: set scaling: strong")
        if self.local_batch is not None and self.scaling != "weak":
            raise ValueError("local_batch belongs to weak scaling: set scaling: weak")
        if self.scaling != "none" and any(
            k.rpartition(".")[2] in ("local_batch", "global_batch")
            for k in [*self.axes, *self.set, *self.derived]
        ):
            raise ValueError(
                f"{self.scaling} scaling sets the batch sizes itself; remove local_batch/"
                "global_batch from set, axes and derived (or use scaling: none)"
            )
        return self


def validate_sweep(data: dict[str, Any]) -> SweepSpec:
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as error:
        from dmlbench.spec.run import one_line

        raise SpecError(f"invalid sweep: {one_line(error, SweepSpec)}") from None


def load_sweep_file(path: Path) -> SweepSpec:
    """Read a YAML or TOML sweep file; its name defaults to the file's stem."""
    from dmlbench.files import load_mapping_file

    data = load_mapping_file(path, "sweep file", "its keys (task, axes, set, rules, …)")
    data.setdefault("name", path.stem)
    if "task" not in data:
        raise SpecError(f"sweep file {path} names no task: add e.g. 'task: digits-mlp'")
    sweep = validate_sweep(data)
    _refuse_set_that_loses(sweep, path)
    return sweep


def _refuse_set_that_loses(sweep: SweepSpec, path: Path) -> None:
    """A key under a sweep file's ``set:`` that one of its axes or derived values sets
    too (the same key, or one a suffix of the other: ``max_epochs``,
    ``recipe.max_epochs``): the axis or the derived value won without a word. (An inline
    sweep's ``set:`` is a spec file's keys, which its lists rightly win over; a rule's
    ``set:`` refines the file's where its condition holds.)"""
    later = [(axis, f"the axis {axis}, whose values win") for axis in sweep.axes]
    later += [(key, f"derived as {key}, which wins") for key in sweep.derived]
    for key in flatten(sweep.set):
        for other, what in later:
            if key == other or key.endswith(f".{other}") or other.endswith(f".{key}"):
                raise SpecError(
                    f"sweep file {path}: {key} is under set: and is {what}: drop one of them"
                )
