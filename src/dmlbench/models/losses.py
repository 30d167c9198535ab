"""Loss and correctness per task kind: class ids with cross-entropy, ±1 with logistic, or
the next token of each position of a sequence (language modelling).

Each loss gives one value per example (a sequence's is the mean over its tokens), each
correctness function the count of correct examples (a sequence counts the share of its
tokens predicted right), so accuracy is correct / examples for every kind."""

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


def next_token(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``(batch, tokens, vocab)`` logits against ``(batch, tokens)`` ids,
    the mean over each sequence's tokens."""
    losses = F.cross_entropy(out.flatten(0, 1), y.flatten().long(), reduction="none")
    return losses.view(y.shape).mean(dim=1)


def correct_tokens(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out.argmax(dim=-1) == y).float().mean(dim=1).sum()


LOSSES: dict[str, tuple[LossFn, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "cross_entropy": (cross_entropy, correct_classes),
    "logistic": (logistic, correct_signs),
    "next_token": (next_token, correct_tokens),
}
