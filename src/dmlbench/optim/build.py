"""Optimizer construction and the recipe's explicit L2 term."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dmlbench.spec.recipe import OptimizerSpec

if TYPE_CHECKING:  # a recipe names an optimizer, and is validated, without torch
    import torch
    from torch import nn


def _sgd(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    import torch

    return torch.optim.SGD(
        params,
        lr=0.0,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
        weight_decay=spec.weight_decay,
        foreach=True,
    )


def _adam(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    import torch

    return torch.optim.Adam(
        params, lr=0.0, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay, foreach=True
    )


def _adamw(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    import torch

    return torch.optim.AdamW(
        params, lr=0.0, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay, foreach=True
    )


def _lars(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    from dmlbench.optim.layerwise import LARS

    return LARS(
        params,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
        eps=spec.eps,
        weight_decay=spec.weight_decay,
        trust_coefficient=spec.trust_coefficient,
    )


def _lamb(spec: OptimizerSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    from dmlbench.optim.layerwise import LAMB

    return LAMB(params, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)


# The optimizers a recipe may name (OptimizerSpec.name is validated against this);
# register another by adding a builder. torch's own where it has one, with its foreach
# implementation (the same update as one call over all tensors: on the CPU torch would
# otherwise loop in Python, several times slower for a ResNet's 60 tensors); LARS and
# LAMB in optim.layerwise (torch has neither).
OPTIMIZERS: dict[str, Callable[[OptimizerSpec, Iterable[nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd": _sgd,
    "adam": _adam,
    "adamw": _adamw,
    "lars": _lars,
    "lamb": _lamb,
}

# The recipe fields each built-in optimizer reads (the others leave them unused).
USES = {
    "sgd": ("momentum", "nesterov", "weight_decay"),
    "adam": ("betas", "eps", "weight_decay"),
    "adamw": ("betas", "eps", "weight_decay"),
    "lars": ("momentum", "nesterov", "weight_decay", "trust_coefficient", "eps"),
    "lamb": ("betas", "eps", "weight_decay"),
}


def describe_optimizer(spec: OptimizerSpec) -> str:
    """The optimizer in words, naming only the settings it reads (``dmlbench tasks``,
    docs/tasks.md)."""
    uses = USES.get(
        spec.name, ("momentum", "nesterov", "weight_decay", "betas", "eps", "trust_coefficient")
    )
    words = {
        "momentum": f"momentum {spec.momentum:g}" + (" (Nesterov)" if spec.nesterov else ""),
        "nesterov": "",  # said with the momentum
        "weight_decay": f"weight decay {spec.weight_decay:g}"
        + (" (decoupled)" if spec.name == "adamw" else "")
        + ("" if spec.decay_norms else ", none on norm layers"),
        "betas": f"betas {spec.betas[0]:g}/{spec.betas[1]:g}",
        "eps": f"ε {spec.eps:g}",
        "trust_coefficient": f"trust coefficient {spec.trust_coefficient:g}",
    }
    return ", ".join([spec.name, *(words[key] for key in uses if words[key])])


def build_optimizer(
    spec: OptimizerSpec, params: Iterable[nn.Parameter] | Iterable[dict[str, Any]]
) -> torch.optim.Optimizer:
    """The rate is set every step by the schedule; 0 here is a placeholder."""
    return OPTIMIZERS[spec.name](spec, params)  # type: ignore[arg-type]


NORMS = ("BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm")


def parameter_groups(spec: OptimizerSpec, model: nn.Module) -> list[dict[str, Any]]:
    """The model's parameters as the optimizer takes them: one group, or with
    ``decay_norms=false`` a second group, without weight decay, of normalisation layers'
    scales and shifts."""
    if spec.decay_norms or not spec.weight_decay:
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]
    norms = {
        id(p)
        for m in model.modules()
        if type(m).__name__.startswith(NORMS)
        for p in m.parameters(recurse=False)
    }
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) not in norms]},
        {"params": [p for p in params if id(p) in norms], "weight_decay": 0.0},
    ]


def clip_gradients(params: Iterable[nn.Parameter], max_norm: float) -> None:
    """Scale the gradients down to a total norm of ``max_norm`` at most; the norm of a
    sharded model's gradients (DTensors) is the whole model's."""
    import torch
    from torch.distributed.tensor import DTensor

    params = [p for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)


def l2_penalty(model: nn.Module, coefficient: float) -> torch.Tensor:
    """``coefficient/2 · ‖w‖²`` over weight matrices and kernels (biases and norms excluded)."""
    import torch

    weights = [p for p in model.parameters() if p.ndim > 1]
    return 0.5 * coefficient * sum(((w * w).sum() for w in weights), torch.zeros(()))
