"""A task's training recipe: model, batch, optimizer, learning-rate schedule, goal.

The reference recipe of each task lives in exactly one place (its task definition);
a run's recipe starts as a copy of it and every field a user changes is recorded as a
deviation (open division).
"""

from __future__ import annotations

import bisect
import math
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from dmlbench.strict import StrictModel, in_registry


class ModelSpec(StrictModel):
    """Which network to build; ``options`` are checked by the model's own registry entry."""

    name: str = Field(description="registered model builder, e.g. 'resnet', 'mlp', 'linear'")
    options: dict[str, Any] = Field(default_factory=dict, description="builder options")


class OptimizerSpec(StrictModel):
    """Per-worker optimizer applied after the gradient exchange."""

    name: Annotated[str, in_registry("optimizer", "dmlbench.optim.build", "OPTIMIZERS")] = Field(
        "sgd", description="a name in optim.build.OPTIMIZERS"
    )
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="sgd, lars")
    nesterov: bool = Field(False, description="sgd, lars")
    weight_decay: float = Field(
        0.0, ge=0.0, description="λ: added to the gradient (sgd, adam, lars, lamb) or to the "
        "step, decoupled (adamw)"
    )  # fmt: skip
    betas: tuple[float, float] = Field((0.9, 0.999), description="adam, adamw, lamb: moment decays")
    eps: float = Field(1e-8, gt=0.0, description="adam, adamw, lamb, lars: added to denominators")
    trust_coefficient: float = Field(0.001, gt=0.0, description="lars: η of the trust ratio")

    @model_validator(mode="after")
    def _betas_in_range(self) -> OptimizerSpec:
        if not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"betas {list(self.betas)}: each must be in [0, 1)")
        return self

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> OptimizerSpec:
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov=true needs momentum > 0")
        return self


class WarmupStepSchedule(StrictModel):
    """Linear-scaling rule with warm-up and step decay (Goyal et al. 2017).

    The rate of a worker is ``lr_per_sample × local_batch`` at step 0 and grows linearly
    to ``lr_per_sample × global_batch`` over ``warmup_epochs``; it is multiplied by
    ``gamma`` at each milestone epoch.
    """

    kind: Literal["warmup_step"] = "warmup_step"
    lr_per_sample: float = Field(gt=0.0, description="η, learning rate per example")
    warmup_epochs: float = Field(0.0, ge=0.0)
    milestones: list[float] = Field(default_factory=list, description="epochs of each decay")
    gamma: float = Field(0.1, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _sorted_milestones(self) -> WarmupStepSchedule:
        if any(m <= 0 for m in self.milestones) or self.milestones != sorted(self.milestones):
            raise ValueError("milestones must be positive epochs in increasing order")
        return self

    def rate(self, *, step: int, epoch: float, local_batch: int, world_size: int) -> float:
        start = self.lr_per_sample * local_batch
        peak = self.lr_per_sample * local_batch * world_size
        if epoch < self.warmup_epochs:
            rate = start + (peak - start) * epoch / self.warmup_epochs
        else:
            rate = peak
        return rate * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class InverseSqrtSchedule(StrictModel):
    """``α / √t`` with ``t`` the update count from 1; α looked up by worker count."""

    kind: Literal["inverse_sqrt"] = "inverse_sqrt"
    alpha_by_workers: dict[int, float] = Field(
        description="α for each worker count; a count between keys takes the lower key's α"
    )

    @model_validator(mode="after")
    def _table_is_usable(self) -> InverseSqrtSchedule:
        if not self.alpha_by_workers or 1 not in self.alpha_by_workers:
            raise ValueError("alpha_by_workers needs an entry for 1 worker")
        if any(a <= 0 for a in self.alpha_by_workers.values()):
            raise ValueError("every alpha must be > 0")
        return self

    def alpha(self, world_size: int) -> float:
        key = max(k for k in self.alpha_by_workers if k <= world_size)
        return self.alpha_by_workers[key]

    def rate(self, *, step: int, epoch: float, local_batch: int, world_size: int) -> float:
        return self.alpha(world_size) / math.sqrt(step + 1)


# A new schedule is a class here with a ``kind`` and a ``rate`` method, added to this union.


Schedule = Annotated[WarmupStepSchedule | InverseSqrtSchedule, Field(discriminator="kind")]


class Recipe(StrictModel):
    """Everything the closed division fixes, except the worker count."""

    model: ModelSpec
    local_batch: int = Field(gt=0, description="examples per worker per step (b)")
    max_epochs: float = Field(gt=0.0)
    optimizer: OptimizerSpec = Field(default_factory=lambda: OptimizerSpec())
    schedule: Schedule
    l2: float = Field(0.0, ge=0.0, description="adds l2/2·‖w‖² to the loss")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="bf16: forward and loss under torch.autocast (weights, gradients "
        "and the exchange stay fp32)"
    )  # fmt: skip
    augment: bool = Field(False, description="the task's random training augmentation")
    target: float = Field(
        gt=0.0,
        le=1.0,
        description="goal on the task's metric, an accuracy: a fraction of the test set "
        "(time to accuracy); to never stop at it, set stop_at_target=false",
    )
    time_budget_s: float | None = Field(
        None, gt=0.0, description="seconds for accuracy after time; the run stops there"
    )
