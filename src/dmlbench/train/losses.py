"""Loss and correctness per task kind: class ids with cross-entropy, or ±1 with logistic."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="none")


def logistic(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log(1 + exp(-y·f))`` for labels ±1 and one output score ``f``."""
    return F.softplus(-y * out.squeeze(1))


def correct_classes(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out.argmax(dim=1) == y).sum()


def correct_signs(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (torch.where(out.squeeze(1) >= 0, 1.0, -1.0) == y).sum()


LOSSES: dict[str, tuple[LossFn, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "cross_entropy": (cross_entropy, correct_classes),
    "logistic": (logistic, correct_signs),
}
