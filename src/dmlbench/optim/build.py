"""Optimizer construction and the recipe's explicit L2 term."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dmlbench.spec.recipe import OptimizerSpec

LOG = logging.getLogger(__name__)

if TYPE_CHECKING:  # a recipe names an optimizer, and is validated, without torch
    import torch
    from torch import nn
    from torch.optim.optimizer import ParamsT


def _fastest(
    kind: Callable[..., torch.optim.Optimizer],
    params: ParamsT,
    **settings: Any,
) -> torch.optim.Optimizer:
    """torch's optimizer ``kind`` with its fused kernel where that is safe: one pass over
    each tensor, with no step temporaries, 2–5× faster than foreach on a CPU
    (``benchmarks/optimizer_step.py``). Else its foreach implementation: on an older
    torch or a device without a fused kernel, and for FSDP's shards (DTensors).

    A fused kernel walks a parameter and its gradient as if laid out alike. Autograd,
    DDP and the ``allreduce`` exchange keep a gradient in its parameter's layout; one
    set otherwise (a default-layout view of a flat buffer beside a channels-last
    weight, as ``allreduce`` once made) makes torch 2.13's fused SGD on a CPU pair the
    wrong elements and step to wrong weights, silently (by 4.2 where the loop moves
    them 0.1). So a group with such a gradient at the first step runs foreach from then
    on (see :func:`_unfuse_mismatched`)."""
    listed: list[Any] = list(params)
    if all(_dense(t) and not _is_dtensor(t) for t in _tensors(listed)):
        try:
            fused = kind(listed, fused=True, **settings)
        except (RuntimeError, TypeError, ValueError):  # an older torch, another device
            pass
        else:
            handle = fused.register_step_pre_hook(lambda opt, *_: _unfuse_mismatched(opt, handle))
            return fused
    return kind(listed, foreach=True, **settings)


def _unfuse_mismatched(optimizer: torch.optim.Optimizer, handle: Any) -> None:
    """Before the first step with gradients: a group any of whose gradients is laid out
    unlike its parameter runs foreach from then on (fused kernels assume the same
    layout). Later steps keep the layouts the first one had, so it checks once."""
    if all(p.grad is None for group in optimizer.param_groups for p in group["params"]):
        return  # nothing to step yet: check at the next step
    for group in optimizer.param_groups:
        if group.get("fused") and any(
            p.grad is not None and p.grad.stride() != p.stride() for p in group["params"]
        ):
            group["fused"], group["foreach"] = False, True
            LOG.info("a gradient is laid out unlike its parameter: this group steps foreach")
    handle.remove()


def _dense(tensor: Any) -> bool:
    """Laid out densely in one of the layouts dmlbench gives parameters."""
    import torch

    return bool(tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last))


def _tensors(params: list[Any]) -> Iterator[Any]:
    for item in params:
        yield from item["params"] if isinstance(item, dict) else [item]


def _is_dtensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a DTensor (a shard of FSDP's), without importing it first."""
    import sys

    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def _sgd(spec: OptimizerSpec, params: ParamsT) -> torch.optim.Optimizer:
    import torch

    return _fastest(
        torch.optim.SGD,
        params,
        lr=0.0,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
        weight_decay=spec.weight_decay,
    )


def _adam(spec: OptimizerSpec, params: ParamsT) -> torch.optim.Optimizer:
    """Adam, or AdamW (decoupled weight decay) for a recipe that names it."""
    import torch

    kind = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return _fastest(
        kind, params, lr=0.0, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay
    )


def _lars(spec: OptimizerSpec, params: ParamsT) -> torch.optim.Optimizer:
    from dmlbench.optim.layerwise import LARS

    return LARS(
        params,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
        eps=spec.eps,
        weight_decay=spec.weight_decay,
        trust_coefficient=spec.trust_coefficient,
    )


def _lamb(spec: OptimizerSpec, params: ParamsT) -> torch.optim.Optimizer:
    from dmlbench.optim.layerwise import LAMB

    return LAMB(params, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)


# The optimizers a recipe may name (OptimizerSpec.name is validated against this);
# register another by adding a builder. torch's own where it has one, fused or foreach
# (see _fastest); LARS and LAMB in optim.layerwise (torch has neither).
OPTIMIZERS: dict[str, Callable[[OptimizerSpec, ParamsT], torch.optim.Optimizer]] = {
    "sgd": _sgd,
    "adam": _adam,
    "adamw": _adam,
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


def state_tensors(spec: OptimizerSpec) -> int:
    """The parameter-sized tensors of state the optimizer keeps once it has stepped:
    Adam's, AdamW's and LAMB's two moments, SGD's and LARS's momentum buffer (none
    without momentum); 0 for one a plugin registers (nothing known of it)."""
    if spec.name in ("adam", "adamw", "lamb"):
        return 2
    return int(spec.name in ("sgd", "lars") and spec.momentum > 0)


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


def build_optimizer(spec: OptimizerSpec, params: ParamsT) -> torch.optim.Optimizer:
    """The rate is set every step by the schedule; 0 here is a placeholder."""
    return OPTIMIZERS[spec.name](spec, params)


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
