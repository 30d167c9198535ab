"""Layer-wise adaptive optimizers for large batches: LARS and LAMB.

torch has neither; the libraries that do are not usable here (timm needs torchvision,
which does not import beside this torch; torch-optimizer has not been released since
2021), and each is a few lines, so they are written here, each checked against its
paper's formula in ``tests/unit/test_optim.py``.

Both scale each layer's update by a *trust ratio* ``‖w‖ / ‖update‖``, so that a layer
moves by a set fraction of its own norm whatever its gradient's scale. As in the
papers' reference setups (and MLPerf's), tensors of one dimension (biases, BatchNorm
scales and shifts) get neither weight decay nor the trust ratio: they are updated as
plain SGD with momentum (LARS) or Adam (LAMB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # torch's alias for what an optimizer takes: tensors or their groups
    from torch.optim.optimizer import ParamsT


def _adapted(p: torch.Tensor) -> bool:
    return p.ndim > 1


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator`` where both are positive, else 1 (an all-zero layer)."""
    ok = (numerator > 0) & (denominator > 0)
    return torch.where(ok, numerator / denominator.clamp_min(1e-30), torch.ones_like(numerator))


class LARS(torch.optim.Optimizer):
    """Layer-wise Adaptive Rate Scaling (You, Gitman and Ginsburg, 2017).

    Per weight tensor ``w`` with gradient ``g``::

        trust = η · ‖w‖ / (‖g‖ + λ·‖w‖ + ε)
        v     = m · v + lr · trust · (g + λ·w)
        w     = w − v                 (Nesterov: w − (m·v + lr · trust · (g + λ·w)))
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 0.0,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        eps: float = 1e-8,
        nesterov: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "trust_coefficient": trust_coefficient,
            "eps": eps,
            "nesterov": nesterov,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad.clone()
                if _adapted(p):
                    decay = group["weight_decay"]
                    w_norm, g_norm = p.norm(), update.norm()
                    trust = _ratio(
                        group["trust_coefficient"] * w_norm, g_norm + decay * w_norm + group["eps"]
                    )
                    update = (update + decay * p) * trust
                update = update * lr
                if momentum:
                    state = self.state[p]
                    buffer = state.get("momentum_buffer")
                    if buffer is None:
                        buffer = state["momentum_buffer"] = update.clone()
                    else:
                        buffer.mul_(momentum).add_(update)
                    update = update + momentum * buffer if group["nesterov"] else buffer
                p.sub_(update)
        return loss


class LAMB(torch.optim.Optimizer):
    """Layer-wise Adaptive Moments for Batch training (You et al., 2019).

    Adam's moments with bias correction, then per weight tensor ``w``::

        r     = m̂ / (√v̂ + ε) + λ·w
        w     = w − lr · (‖w‖ / ‖r‖) · r
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        )

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["m"], state["v"], state["step"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + group["eps"])
                if _adapted(p):
                    update = update + group["weight_decay"] * p
                    update = update * _ratio(p.norm(), update.norm())
                p.sub_(update, alpha=group["lr"])
        return loss
