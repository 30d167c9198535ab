"""What every gradient exchange is: the interface the trainer drives, and its options."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from dmlbench.comm.collectives import broadcast_state, world_size
from dmlbench.strict import StrictModel


class NoOptions(StrictModel):
    """An exchange without settings of its own."""


OptionsT = TypeVar("OptionsT", bound=StrictModel)


class GradientExchange(ABC):
    """One algorithm for turning local gradients into the update every worker applies."""

    name: str
    overlapped: bool  # True when communication overlaps backward (only its tail is ``comm``)
    vote_every: int = 1  # steps between stop votes (a vote must not cost a message per step)
    exact: ClassVar[bool] = True  # computes synchronous SGD's update (closed division)
    # Each worker holds a shard of the parameters and gradients, never the whole: what
    # needs them whole (an L2 term in the loss, the gradient noise scale) is refused.
    sharded: ClassVar[bool] = False
    # False where the collectives run inside a library that does not say what they carry
    # (torch's FSDP before 2.9): ``sent`` is then NaN, not a count of nothing.
    counts_bytes: bool = True
    # True where a worker alone still sends: to a server process of its own. Otherwise a
    # group of one moves nothing, whatever its collectives were handed (DDP's hooks
    # all-reduce over it, a compressed exchange gathers from itself).
    sends_alone: ClassVar[bool] = False
    # Modules its methods import when first called (heavy ones, kept out of the CLI):
    # the trainer imports them before it measures the worker's starting memory, so a
    # module's code and objects are not counted as the run's memory.
    modules: ClassVar[tuple[str, ...]] = ()
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
        # Set by the trainer before ``prepare``: note the gradient norms of each step
        # (see ``gradient_norms``) for the gradient noise scale.
        self.measure_norms = False
        self.phase = "forward"  # the step's phase now: set by the trainer

    def sent(self) -> float:
        """The bytes this worker has handed to collectives; NaN where not counted."""
        if not self.counts_bytes:
            return math.nan
        return float(self.bytes_sent) if self.sends_alone or world_size() > 1 else 0.0

    def options_as(self, kind: type[OptionsT]) -> OptionsT:
        """The exchange's options as the class its ``Options`` names."""
        assert isinstance(self.options, kind)
        return self.options

    def wrap_optimizer(
        self,
        make: Callable[[list[dict[str, Any]]], torch.optim.Optimizer],
        groups: list[dict[str, Any]],
    ) -> torch.optim.Optimizer:
        """The optimizer over ``groups`` (``make`` builds the recipe's); ZeRO shards it."""
        return make(groups)

    def full_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's weights on this rank (a collective where they are sharded:
        every rank calls it)."""
        return model.state_dict()

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

    def gradient_norms(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """After ``exchange``, with ``measure_norms`` set: (|this worker's own gradient|²,
        |the averaged gradient|²) of the step, as 0-d tensors; None where this exchange
        does not see both (only synchronous SGD's average is a batch ``b·N`` gradient)."""
        return None

    def exposed_comm(self, backward_end: float) -> dict[str, float]:
        """Seconds of each phase of this step spent only waiting on communication (DDP:
        backward's tail; FSDP on a CPU: its collectives, wherever they ran); the trainer
        moves them to ``comm``. It sets ``phase`` before forward and before backward."""
        return {}

    def sync_buffers(self, model: nn.Module) -> None:
        """Before evaluation: every rank uses rank 0's BatchNorm statistics."""
        broadcast_state(model, buffers_only=True)

    def after_evaluate(self, model: nn.Module) -> None:
        """After evaluation (gossip gives each replica its own weights back)."""
        return None

    def helper_cpu_s(self) -> float:
        """CPU seconds used by processes this exchange started (the parameter server),
        counted as the worker's own by the contention check."""
        return 0.0

    def close(self) -> None:
        """When training ends, also after a failure (the parameter server stops here)."""
        return None

    def _vote_alone(self, stop: bool | None) -> bool:
        if stop is None or world_size() == 1:
            return bool(stop)
        flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.bytes_sent += flag.numel() * flag.element_size()
        return bool(flag.item() > 0)
