"""Synchronous SGD in its two closed-division forms.

``allreduce`` is the reference form: backward finishes, then one all-reduce of all
gradients (held in one flat buffer, so there is no copy) averages them; communication
is its own measured phase. ``ddp`` is PyTorch's DistributedDataParallel: gradients are
all-reduced in buckets while backward still runs. Its ``comm`` phase is the part that
did not overlap: from the launch of the last bucket (when the last gradients were
ready) to the end of ``backward()``, which waits for every bucket. On a GPU, where
launch precedes completion of the kernels, that is an upper bound.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from dmlbench.comm.base import GradientExchange
from dmlbench.comm.collectives import broadcast_state, squared_norm, world_size

# torch ≥ 2.13 renamed DDP's per-forward buffer broadcast; parameters were synced at init
# either way, and buffers are synced before evaluation (see ``sync_buffers``).
DDP_NO_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class AllReduceExchange(GradientExchange):
    """The reference: after backward, one flat all-reduce of every gradient (its time
    measured alone, as comm)."""

    name = "allreduce"
    overlapped = False

    def prepare(self, model: nn.Module) -> nn.Module:
        broadcast_state(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        total = sum(p.numel() for p in self.params)
        # One extra slot carries the stop vote: agreement costs no extra message.
        self.flat = torch.zeros(total + 1, device=self.device)
        offset = 0
        for p in self.params:
            # each gradient in its parameter's layout (a channels-last weight's too), as
            # DDP's bucket views are: autograd then accumulates into it element for
            # element, and a fused optimizer step may walk both alike (optim.build)
            p.grad = self.flat[offset : offset + p.numel()].as_strided(p.shape, p.stride())
            offset += p.numel()
        self._norms: tuple[torch.Tensor, torch.Tensor] | None = None
        return model

    def zero_grad(self) -> None:
        self.flat.zero_()  # keeps the .grad views; set_to_none would detach them

    def exchange(self, stop: bool | None) -> bool:
        if world_size() == 1:
            return bool(stop)
        grads = self.flat[:-1]
        local = grads.square().sum() if self.measure_norms else None
        self.flat[-1] = 1.0 if stop else 0.0
        dist.all_reduce(self.flat)
        self.bytes_sent += self.flat.numel() * self.flat.element_size()
        self.flat.div_(world_size())
        if local is not None:
            self._norms = (local, grads.square().sum())
        return bool(self.flat[-1].item() > 0)

    def gradient_norms(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self._norms


class DDPExchange(GradientExchange):
    """torch's DistributedDataParallel: gradients all-reduced in buckets while backward
    runs (only the tail that outlasts backward counts as comm)."""

    name = "ddp"
    overlapped = True
    vote_every = 16  # a separate message: at most 16 steps past a time budget

    def prepare(self, model: nn.Module) -> nn.Module:
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # Buffers are synced before evaluation instead of before every forward, matching
        # the reference form (and saving one broadcast per step).
        self.wrapped = DistributedDataParallel(
            model,
            device_ids=device_ids,
            **DDP_NO_BUFFER_SYNC,
        )
        self._last_launch: float | None = None
        self._local_norm2 = torch.zeros((), device=self.device)  # summed over buckets
        self._norms: tuple[torch.Tensor, torch.Tensor] | None = None
        self.wrapped.register_comm_hook(self, _timed_hook)
        return self.wrapped

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's own all-reduce of one bucket."""
        self.bytes_sent += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]

    def exposed_comm(self, backward_end: float) -> dict[str, float]:
        launched, self._last_launch = self._last_launch, None
        return {"backward": max(0.0, backward_end - launched)} if launched is not None else {}

    def zero_grad(self) -> None:
        self.wrapped.zero_grad(set_to_none=True)
        if self.measure_norms:
            self._local_norm2 = torch.zeros((), device=self.device)

    def exchange(self, stop: bool | None) -> bool:
        # gradients were averaged during backward
        if self.measure_norms:
            self._norms = (
                self._local_norm2,
                squared_norm(p.grad for p in self.wrapped.parameters()),
            )
        return self._vote_alone(stop)

    def gradient_norms(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self._norms


def _timed_hook(state, bucket):
    """The exchange's hook for one bucket, noting when each bucket is launched.

    Unannotated on purpose: DDP compares a hook's annotations with ``dist.GradBucket``
    itself, and this module's postponed annotations would be strings.
    """
    state._last_launch = time.perf_counter()
    if state.measure_norms:  # the bucket holds this worker's own gradients until reduced
        state._local_norm2 += bucket.buffer().square().sum()
    return state.hook(bucket)
