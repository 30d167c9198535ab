"""How workers combine gradients after each backward pass.

``allreduce`` is the reference form of synchronous SGD: backward finishes, then one
all-reduce of all gradients (held in one flat buffer, so there is no copy) averages
them; communication is its own measured phase. ``ddp`` is PyTorch's
DistributedDataParallel: gradients are all-reduced in buckets while backward still
runs. Its ``comm`` phase is the part that did not overlap: from the launch of the last
bucket (when the last gradients were ready) to the end of ``backward()``, which waits
for every bucket. On a GPU, where launch precedes completion of the kernels, that is
an upper bound.

Open-division algorithms (they change the update, so a run with one is open division):
``local-sgd`` (H local steps, then the replicas' parameters are averaged with torch's
``model_averaging.utils.average_parameters``; post-local SGD with ``sync_epochs`` of
synchronous SGD first), and ``fp16`` / ``bf16``: DDP with torch's gradient-compression
hooks (half the bytes; the average is taken in fp32 again after the exchange).

Each exchange counts the bytes it hands to collectives (``bytes_sent``); the trainer
reports them per step. New algorithms implement ``GradientExchange``, declare their
``Options`` (validated with the spec) and register in ``EXCHANGES``.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from pydantic import Field
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from dmlbench.comm.collectives import broadcast_state, world_size
from dmlbench.strict import StrictModel


class NoOptions(StrictModel):
    """An exchange without settings of its own."""


# torch ≥ 2.13 renamed DDP's per-forward buffer broadcast; parameters were synced at init
# either way, and buffers are synced before evaluation (see ``sync_buffers``).
DDP_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


class GradientExchange(ABC):
    """One algorithm for turning local gradients into the update every worker applies."""

    name: str
    overlapped: bool  # True when communication overlaps backward (only its tail is ``comm``)
    vote_every: int = 1  # steps between stop votes (a vote must not cost a message per step)
    exact: ClassVar[bool] = True  # computes synchronous SGD's update (closed division)
    Options: ClassVar[type[StrictModel]] = NoOptions

    def __init__(
        self,
        device: torch.device,
        options: Mapping[str, Any] | None = None,
        steps_per_epoch: int = 1,
    ) -> None:
        self.device = device
        self.options = self.Options.model_validate(dict(options or {}))
        self.steps_per_epoch = steps_per_epoch
        self.bytes_sent = 0  # payload handed to collectives by this worker

    def after_step(self) -> bool:
        """After the optimizer step (local SGD averages here); True if it communicated."""
        return False

    @abstractmethod
    def prepare(self, model: nn.Module) -> nn.Module:
        """Start every rank from rank 0's weights; return the module to run forward on."""

    @abstractmethod
    def zero_grad(self) -> None: ...

    @abstractmethod
    def exchange(self, stop: bool | None) -> bool:
        """Average gradients across workers; return True if any worker voted to stop.

        ``stop`` is this worker's vote, or None on steps where no vote is taken (every
        rank passes None on the same steps: ``step % vote_every != 0``).
        """

    def exposed_comm(self, backward_end: float) -> float:
        """Seconds of the backward phase spent only waiting on communication."""
        return 0.0

    def sync_buffers(self, model: nn.Module) -> None:
        """Before evaluation: every rank uses rank 0's BatchNorm statistics."""
        broadcast_state(model, buffers_only=True)

    def _vote_alone(self, stop: bool | None) -> bool:
        if stop is None or world_size() == 1:
            return bool(stop)
        flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.bytes_sent += flag.numel() * flag.element_size()
        return bool(flag.item() > 0)


class AllReduceExchange(GradientExchange):
    name = "allreduce"
    overlapped = False

    def prepare(self, model: nn.Module) -> nn.Module:
        broadcast_state(model)
        params = [p for p in model.parameters() if p.requires_grad]
        total = sum(p.numel() for p in params)
        # One extra slot carries the stop vote: agreement costs no extra message.
        self.flat = torch.zeros(total + 1, device=self.device)
        offset = 0
        for p in params:
            p.grad = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        return model

    def zero_grad(self) -> None:
        self.flat.zero_()  # keeps the .grad views; set_to_none would detach them

    def exchange(self, stop: bool | None) -> bool:
        if world_size() == 1:
            return bool(stop)
        self.flat[-1] = 1.0 if stop else 0.0
        dist.all_reduce(self.flat)
        self.bytes_sent += self.flat.numel() * self.flat.element_size()
        self.flat.div_(world_size())
        return bool(self.flat[-1].item() > 0)


class DDPExchange(GradientExchange):
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
            **DDP_NO_BUFFER_SYNC,  # type: ignore[arg-type]
        )
        self._last_launch: float | None = None
        self.wrapped.register_comm_hook(self, _timed_hook)
        return self.wrapped

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's own all-reduce of one bucket."""
        self.bytes_sent += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]

    def exposed_comm(self, backward_end: float) -> float:
        launched, self._last_launch = self._last_launch, None
        return max(0.0, backward_end - launched) if launched is not None else 0.0

    def zero_grad(self) -> None:
        self.wrapped.zero_grad(set_to_none=True)

    def exchange(self, stop: bool | None) -> bool:
        return self._vote_alone(stop)  # gradients were averaged during backward


def _timed_hook(state, bucket):
    """The exchange's hook for one bucket, noting when each bucket is launched.

    Unannotated on purpose: DDP compares a hook's annotations with ``dist.GradBucket``
    itself, and this module's postponed annotations would be strings.
    """
    state._last_launch = time.perf_counter()
    return state.hook(bucket)


class Fp16Exchange(DDPExchange):
    """DDP with torch's fp16 compression hook: buckets cast to half, all-reduced, cast
    back and divided in fp32. Half the bytes of ``ddp``; rounding changes the update."""

    name = "fp16"
    exact = False

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        self.bytes_sent += bucket.buffer().numel() * 2
        return default_hooks.fp16_compress_hook(None, bucket)  # type: ignore[arg-type]


class Bf16Exchange(DDPExchange):
    """As ``fp16`` with bfloat16: fp32's range, 8 bits of mantissa."""

    name = "bf16"
    exact = False

    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        self.bytes_sent += bucket.buffer().numel() * 2
        return default_hooks.bf16_compress_hook(None, bucket)  # type: ignore[arg-type]


class LocalSGDOptions(StrictModel):
    period: int = Field(4, ge=1, le=100_000, description="H: local steps between averages")
    sync_epochs: float = Field(
        0.0, ge=0.0, description="post-local SGD: synchronous SGD for the first E epochs"
    )


class LocalSGDExchange(AllReduceExchange):
    """Local SGD (Stich 2019; Lin et al. 2020 for post-local SGD): every worker steps on
    its own gradients; every H steps the replicas' parameters are averaged (torch's
    ``average_parameters``, one coalesced all-reduce). With ``sync_epochs`` the first E
    epochs are synchronous SGD. Before an evaluation the replicas are averaged, so the
    model evaluated is the one the workers agree on. With H = 1 and SGD it is
    synchronous SGD: averaging is linear, and so is each replica's update."""

    name = "local-sgd"
    exact = False
    vote_every = 16
    Options = LocalSGDOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        self.model = super().prepare(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        options = self.options
        assert isinstance(options, LocalSGDOptions)
        self.period = options.period
        self.sync_steps = round(options.sync_epochs * self.steps_per_epoch)
        self.step = 0
        return self.model

    def exchange(self, stop: bool | None) -> bool:
        if self.step < self.sync_steps:
            return super().exchange(stop)  # synchronous SGD first
        return self._vote_alone(stop)

    def after_step(self) -> bool:
        self.step += 1
        if self.step <= self.sync_steps or (self.step - self.sync_steps) % self.period:
            return False
        self._average()
        return True

    def _average(self) -> None:
        if world_size() == 1:
            return
        from torch.distributed.algorithms.model_averaging.utils import average_parameters

        average_parameters(iter(self.params), dist.group.WORLD)  # type: ignore[arg-type]
        self.bytes_sent += sum(p.numel() * p.element_size() for p in self.params)

    def sync_buffers(self, model: nn.Module) -> None:
        self._average()  # evaluate the model the replicas agree on
        super().sync_buffers(model)


EXCHANGES: dict[str, Callable[..., GradientExchange]] = {
    "allreduce": AllReduceExchange,
    "ddp": DDPExchange,
    "fp16": Fp16Exchange,
    "bf16": Bf16Exchange,
    "local-sgd": LocalSGDExchange,
}


def make_exchange(
    name: str, device: torch.device, options: Mapping[str, Any] | None = None,
    steps_per_epoch: int = 1,
) -> GradientExchange:  # fmt: skip
    return EXCHANGES[name](device, options, steps_per_epoch)


def check_options(name: str, options: Mapping[str, Any]) -> StrictModel:
    """The exchange's options, validated (pydantic's error when one is wrong)."""
    exchange = EXCHANGES[name]
    model = getattr(exchange, "Options", NoOptions)
    return model.model_validate(dict(options))


def is_exact(name: str) -> bool:
    """Whether the exchange computes synchronous SGD's update (closed division)."""
    return bool(getattr(EXCHANGES[name], "exact", False))
