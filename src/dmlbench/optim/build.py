"""Optimizer construction and the recipe's explicit L2 term."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from dmlbench.spec.recipe import OptimizerSpec

if TYPE_CHECKING:  # a recipe names an optimizer, and is validated, without torch
    import torch
    from torch import nn


def _sgd(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    import torch

    return torch.optim.SGD(
        params, lr=0.0, momentum=spec.momentum, nesterov=spec.nesterov,
        weight_decay=spec.weight_decay,
    )  # fmt: skip


# The optimizers a recipe may name (OptimizerSpec.name is validated against this);
# register another by adding a builder.
OPTIMIZERS: dict[str, Callable[[OptimizerSpec, Iterable[nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd": _sgd,
}


def build_optimizer(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The rate is set every step by the schedule; 0 here is a placeholder."""
    return OPTIMIZERS[spec.name](spec, params)


def l2_penalty(model: nn.Module, coefficient: float) -> torch.Tensor:
    """``coefficient/2 · ‖w‖²`` over weight matrices and kernels (biases and norms excluded)."""
    weights = [p for p in model.parameters() if p.ndim > 1]
    return 0.5 * coefficient * sum((w * w).sum() for w in weights)  # type: ignore[return-value]
