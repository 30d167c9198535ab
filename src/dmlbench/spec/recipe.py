"""A task's training recipe: model, batch, optimizer, learning-rate schedule, goal.

The reference recipe of each task lives in exactly one place (its task definition);
a run's recipe starts as a copy of it and every field a user changes is recorded as a
deviation (open division).
"""

from __future__ import annotations

import bisect
import math
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from dmlbench.strict import MAX_COUNT, StrictModel

Precision = Literal["fp32", "tf32", "bf16"]
# What one example is: what a model takes (``models.ModelEntry.inputs``), a task gives
Inputs = Literal["features", "image", "tokens"]
PRECISIONS: tuple[str, ...] = get_args(Precision)


class ModelSpec(StrictModel):
    """Which network to build; ``options`` are checked by the model's own registry entry."""

    name: str = Field(description="registered model builder, e.g. 'resnet', 'mlp', 'linear'")
    options: dict[str, Any] = Field(default_factory=dict, description="builder options")


class OptimizerSpec(StrictModel):
    """Per-worker optimizer applied after the gradient exchange."""

    name: str = Field("sgd", description="a name in optim.build.OPTIMIZERS")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="sgd, lars")
    nesterov: bool = Field(False, description="sgd, lars")
    weight_decay: float = Field(
        0.0,
        ge=0.0,
        description="λ: added to the gradient (sgd, adam, lars, lamb) or to the "
        "step, decoupled (adamw)",
    )
    decay_norms: bool = Field(
        True,
        description="weight decay on normalisation layers' scale and shift too (false: "
        "Goyal et al.'s ResNet-50 leaves BatchNorm's γ and β undecayed)",
    )
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

    def describe(self) -> str:
        text = f"lr η·B with η={self.lr_per_sample:.3g}/example"
        if self.warmup_epochs:
            text += f", warm-up from η·b over {self.warmup_epochs:g} epochs"
        if self.milestones:
            epochs = ", ".join(f"{m:g}" for m in self.milestones)
            text += f", ×{self.gamma:g} at epochs {epochs}"
        return text


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

    def describe(self) -> str:
        table = ", ".join(f"{k}→{v:g}" for k, v in sorted(self.alpha_by_workers.items()))
        return f"lr α/√t, α by workers {table}"


SCALINGS = {"linear": lambda n: float(n), "sqrt": math.sqrt, "none": lambda n: 1.0}


class ScaledSchedule(StrictModel):
    """A single worker's rate scaled by the worker count, warmed up, then decayed.

    ``peak = base_lr × s(N)`` with ``s`` = N (linear, Goyal et al. 2017), √N (sqrt,
    Krizhevsky 2014) or 1 (none). Over ``warmup_epochs`` the rate grows linearly from
    ``base_lr`` (the single-worker rate) to the peak; then, with ``p`` the fraction of
    the decay period done (epochs since warm-up / ``decay_epochs``):

    - ``none``: the peak; ``step``: × gamma at each of ``milestones`` (epochs);
    - ``exponential``: × gamma per epoch; ``inverse`` (1/t): ÷ (1 + gamma · epochs);
    - ``polynomial``: × (1 − p)^power; ``cosine``: × (1 + cos πp) / 2, to 0 at the end.
    """

    kind: Literal["scaled"] = "scaled"
    base_lr: float = Field(gt=0.0, description="one worker's rate at the recipe's local batch")
    scaling: Literal["linear", "sqrt", "none"] = "linear"
    warmup_epochs: float = Field(0.0, ge=0.0)
    warmup_from: Literal["base", "zero"] = Field(
        "base", description="warm-up starts at base_lr (Goyal et al.) or at 0 (transformers)"
    )
    decay: Literal["none", "step", "exponential", "inverse", "polynomial", "cosine"] = "none"
    milestones: list[float] = Field(default_factory=list, description="step: epochs")
    gamma: float = Field(
        0.1,
        gt=0.0,
        description="step: factor per milestone; exponential: per epoch; "
        "inverse: rate of 1/(1 + gamma·epochs)",
    )
    power: float = Field(1.0, gt=0.0, description="polynomial: exponent")
    decay_epochs: float | None = Field(
        None, gt=0.0, description="polynomial, cosine: epochs after warm-up to reach 0"
    )

    @model_validator(mode="after")
    def _decay_has_what_it_needs(self) -> ScaledSchedule:
        if self.decay in ("polynomial", "cosine") and self.decay_epochs is None:
            raise ValueError(f"decay {self.decay} needs decay_epochs (epochs to reach 0)")
        if self.decay == "step" and not self.milestones:
            raise ValueError("decay step needs milestones (epochs)")
        if self.milestones != sorted(self.milestones) or any(m <= 0 for m in self.milestones):
            raise ValueError("milestones must be positive epochs in increasing order")
        if self.decay == "exponential" and self.gamma > 1:
            raise ValueError(f"decay exponential: gamma {self.gamma:g} must be at most 1")
        return self

    def rate(self, *, step: int, epoch: float, local_batch: int, world_size: int) -> float:
        peak = self.base_lr * SCALINGS[self.scaling](world_size)
        if epoch < self.warmup_epochs:
            start = self.base_lr if self.warmup_from == "base" else 0.0
            return start + (peak - start) * epoch / self.warmup_epochs
        since = epoch - self.warmup_epochs
        if self.decay == "step":
            return peak * self.gamma ** bisect.bisect_right(self.milestones, epoch)
        if self.decay == "exponential":
            return peak * self.gamma**since
        if self.decay == "inverse":
            return peak / (1.0 + self.gamma * since)
        if self.decay in ("polynomial", "cosine"):
            done = min(1.0, since / (self.decay_epochs or 1.0))
            if self.decay == "polynomial":
                return peak * (1.0 - done) ** self.power
            return peak * (1.0 + math.cos(math.pi * done)) / 2.0
        return peak

    def describe(self) -> str:
        scaled = {"linear": " × N", "sqrt": " × √N", "none": ""}[self.scaling]
        text = f"lr {self.base_lr:g}{scaled}"
        if self.warmup_epochs:
            start = f"{self.base_lr:g}" if self.warmup_from == "base" else "0"
            text += f", warm-up from {start} over {self.warmup_epochs:g} epochs"
        if self.decay == "step":
            text += f", ×{self.gamma:g} at epochs " + ", ".join(f"{m:g}" for m in self.milestones)
        elif self.decay == "exponential":
            text += f", ×{self.gamma:g} per epoch"
        elif self.decay == "inverse":
            text += f", ÷ (1 + {self.gamma:g}·epochs)"
        elif self.decay == "polynomial":
            text += (
                f", polynomial decay (power {self.power:g}) to 0 over {self.decay_epochs:g} epochs"
            )
        elif self.decay == "cosine":
            text += f", cosine decay to 0 over {self.decay_epochs:g} epochs"
        return text


# A new schedule is a class here with a ``kind`` and a ``rate`` method, added to this union.


Schedule = Annotated[
    WarmupStepSchedule | InverseSqrtSchedule | ScaledSchedule, Field(discriminator="kind")
]


class Recipe(StrictModel):
    """Everything the closed division fixes, except the worker count."""

    model: ModelSpec
    local_batch: int = Field(gt=0, le=MAX_COUNT, description="examples per worker per step (b)")
    max_epochs: float = Field(gt=0.0)
    optimizer: OptimizerSpec = Field(default_factory=lambda: OptimizerSpec())
    schedule: Schedule
    l2: float = Field(0.0, ge=0.0, description="adds l2/2·‖w‖² to the loss")
    precision: Precision = Field(
        "fp32",
        description="bf16: forward and loss under torch.autocast (weights, gradients "
        "and the exchange stay fp32); tf32: float32 throughout, its matmuls on a GPU's "
        "TF32 tensor cores (fp32 runs only convolutions so, torch's default)",
    )
    augment: bool = Field(False, description="the task's random training augmentation")
    goal: Literal["accuracy", "loss"] = Field(
        "accuracy",
        description="what target is: a test accuracy to reach (or pass), or a test loss "
        "to reach (or go under), as language models are judged",
    )
    target: float = Field(
        gt=0.0,
        description="goal on the task's metric: an accuracy, a fraction of the test set "
        "(time to accuracy), or with goal=loss a test loss in nats; to never stop at it, "
        "set stop_at_target=false",
    )
    clip_grad_norm: float | None = Field(
        None, gt=0.0, description="scale the averaged gradient down to this norm at most"
    )
    time_budget_s: float | None = Field(
        None, gt=0.0, description="seconds for accuracy after time; the run stops there"
    )

    @model_validator(mode="after")
    def _an_accuracy_is_a_fraction(self) -> Recipe:
        if self.goal == "accuracy" and self.target > 1:
            raise ValueError(
                f"target {self.target:g} is an accuracy, a fraction at most 1 "
                "(a test-loss goal is goal=loss)"
            )
        return self

    def reached(self, accuracy: float, loss: float) -> bool:
        return goal_reached(self.goal, self.target, accuracy, loss)


def goal_reached(goal: str, target: float, accuracy: float, loss: float) -> bool:
    """Whether an evaluation's accuracy and loss meet a goal (see ``Recipe.goal``)."""
    return loss <= target if goal == "loss" else accuracy >= target


def target_text(goal: str, target: float | None) -> str:
    """``76.0%`` for an accuracy goal, ``loss 4.2`` for a loss goal."""
    if target is None:
        return "—"
    return f"loss {target:g}" if goal == "loss" else f"{100 * target:.1f}%"
