"""Optimizer construction and the recipe's explicit L2 term."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from dmlbench.spec.recipe import OptimizerSpec


def build_optimizer(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The rate is set every step by the schedule; 0 here is a placeholder."""
    if spec.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=0.0,
            momentum=spec.momentum,
            nesterov=spec.nesterov,
            weight_decay=spec.weight_decay,
        )
    raise ValueError(f"unknown optimizer {spec.name}")


def l2_penalty(model: nn.Module, coefficient: float) -> torch.Tensor:
    """``coefficient/2 · ‖w‖²`` over weight matrices and kernels (biases and norms excluded)."""
    weights = [p for p in model.parameters() if p.ndim > 1]
    return 0.5 * coefficient * sum((w * w).sum() for w in weights)  # type: ignore[return-value]
