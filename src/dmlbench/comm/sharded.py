"""Sharded data parallelism: synchronous SGD's update with less memory a worker.

- ``zero1`` (ZeRO stage 1, Rajbhandari et al. 2020): gradients are all-reduced as DDP
  does; the optimizer state is split, each worker updating only its 1/N of the
  parameters and broadcasting them (torch's ``ZeroRedundancyOptimizer``).
- ``fsdp`` (ZeRO stage 3; torch's ``fully_shard``, FSDP2): each worker holds 1/N of
  the parameters, gradients and optimizer state. A unit's parameters are all-gathered
  before its forward and again before its backward, and its gradients reduce-scattered
  after it. ``reshard_after_forward=false`` keeps the gathered parameters from forward
  to backward (one all-gather a unit a step instead of two, the memory of the whole
  model meanwhile: ZeRO stage 2's trade). The units are the model's ``shard_units()``
  (a transformer's blocks), or the items of its ``nn.ModuleList``s, then the rest.

Both run on gloo as on NCCL: torch 2.13's gloo has all_gather_single and
reduce_scatter_single (``all_gather_into_tensor`` and ``reduce_scatter_tensor`` before
2.13; ``fsdp`` refuses in one line, naming the collective, where a backend lacks one).
On a GPU its communication overlaps forward and backward, so it is counted in those
phases (``comm`` holds only the stop vote); on a CPU each gather and reduce-scatter
blocks the worker, and the time it blocks is moved to ``comm``. Its bytes are counted through
FSDP's own hooks for custom collectives (``set_custom_all_gather`` and
``set_custom_reduce_scatter``, torch 2.9 and later), as every exchange counts them: the
tensor each worker hands in (an all-gather's shard, a reduce-scatter's whole gradients).
"""

from __future__ import annotations

import inspect
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from pydantic import Field
from torch import nn

from dmlbench.comm.base import GradientExchange
from dmlbench.comm.collectives import broadcast_state, world_size
from dmlbench.comm.sync import DDPExchange
from dmlbench.errors import SpecError
from dmlbench.strict import StrictModel

ParamGroups = list[dict[str, Any]]


class ZeroOneExchange(DDPExchange):
    """DDP with the optimizer's state sharded across the workers (ZeRO stage 1): each
    steps its shard and the parameters are broadcast back."""

    name = "zero1"
    modules = ("torch.distributed.optim",)
    parameter_bytes = 0  # broadcast after each step (none on one worker)

    def wrap_optimizer(
        self, make: Callable[[ParamGroups], torch.optim.Optimizer], groups: ParamGroups
    ) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if world_size() == 1:
            return make(groups)
        # each step's updated shards are broadcast back: the whole model's parameters
        self.parameter_bytes = sum(
            p.numel() * p.element_size() for group in groups for p in group["params"]
        )
        plain = make(groups)  # the recipe's optimizer: its class and settings
        accepted = inspect.signature(type(plain)).parameters
        settings = {k: v for k, v in plain.defaults.items() if k in accepted and k != "params"}
        return ZeroRedundancyOptimizer(groups, optimizer_class=type(plain), **settings)

    def after_step(self) -> bool:
        """Count the parameters ZeRO's step broadcast (timed in the optimizer's phase)."""
        self.bytes_sent += self.parameter_bytes
        return False


class FSDPOptions(StrictModel):
    reshard_after_forward: bool = Field(
        True,
        description="free each unit's gathered parameters after its forward (full "
        "sharding); false keeps them until its backward (ZeRO-2's memory, fewer gathers)",
    )


class FSDPExchange(GradientExchange):
    """torch's fully sharded data parallel (FSDP2): parameters, gradients and optimizer
    state sharded, each unit's parameters gathered for its forward and backward."""

    name = "fsdp"
    overlapped = True
    sharded = True
    modules = (
        "torch.distributed.device_mesh",
        "torch.distributed.fsdp",
        "torch.distributed.tensor",
    )
    vote_every = 16  # a separate message: at most 16 steps past a time budget
    Options = FSDPOptions

    def prepare(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            raise SpecError(
                f"exchange=fsdp needs torch's fully_shard (torch 2.6 and later; this is "
                f"{torch.__version__}): upgrade torch, or use exchange=zero1"
            ) from None
        _check_collectives(self.device)
        broadcast_state(model)
        assert isinstance(self.options, FSDPOptions)
        reshard = self.options.reshard_after_forward
        mesh = init_device_mesh(self.device.type, (world_size(),))
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        self.counts_bytes = _count_collectives(model, self)
        self.stepping = False  # gathers for evaluation are not a step's
        self.blocked: defaultdict[str, float] = defaultdict(float)  # seconds by phase
        self.model = model
        return model

    def zero_grad(self) -> None:
        self.stepping = True
        self.model.zero_grad(set_to_none=True)

    def exchange(self, stop: bool | None) -> bool:
        return self._vote_alone(stop)  # gradients were reduce-scattered during backward

    def exposed_comm(self, backward_end: float) -> dict[str, float]:
        blocked, self.blocked = self.blocked, defaultdict(float)
        return blocked

    def sync_buffers(self, model: nn.Module) -> None:
        """Before evaluation: gather every unit's parameters and keep them gathered, so
        ranks may evaluate different numbers of batches with no collective between."""
        from torch.distributed.fsdp import FSDPModule

        self.stepping = False
        broadcast_state(model, buffers_only=True)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_reshard_after_forward(False, recurse=False)
                module.unshard()

    def after_evaluate(self, model: nn.Module) -> None:
        from torch.distributed.fsdp import FSDPModule

        assert isinstance(self.options, FSDPOptions)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
                module.set_reshard_after_forward(self.options.reshard_after_forward, recurse=False)

    def full_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's state (a collective: every rank calls it)."""
        from torch.distributed.tensor import DTensor

        return {
            name: value.full_tensor() if isinstance(value, DTensor) else value
            for name, value in model.state_dict().items()
        }


class _CountedCollective:
    """FSDP's all-gather or reduce-scatter, called as torch's default calls it, adding
    the bytes this worker hands in to ``exchange.bytes_sent`` during training steps."""

    def __init__(self, exchange: FSDPExchange, call: Callable[..., Any]) -> None:
        self.exchange = exchange
        self.call = call

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, **how: Any) -> Any:
        exchange = self.exchange
        if not exchange.stepping:
            return self.call(output_tensor, input_tensor, **how)
        exchange.bytes_sent += input_tensor.numel() * input_tensor.element_size()
        start = time.perf_counter()
        done = self.call(output_tensor, input_tensor, **how)
        # a CPU worker waits in the call; a GPU's runs on a stream, an async one later
        if input_tensor.device.type == "cpu" and not how.get("async_op"):
            exchange.blocked[exchange.phase] += time.perf_counter() - start
        return done


def _count_collectives(model: nn.Module, exchange: FSDPExchange) -> bool:
    """Route every FSDP unit's collectives through :class:`_CountedCollective`; False
    where this torch has no hooks for custom collectives (its bytes stay uncounted)."""
    from torch.distributed.fsdp import FSDPModule

    if not hasattr(FSDPModule, "set_custom_reduce_scatter"):
        return False
    gather, scatter = _collective_names()
    gathers = _CountedCollective(exchange, getattr(dist, gather))
    scatters = _CountedCollective(exchange, getattr(dist, scatter))
    for module in model.modules():
        if isinstance(module, FSDPModule):
            unit: Any = module  # FSDP's AllGather and ReduceScatter are private: duck-typed
            unit.set_custom_all_gather(gathers)
            unit.set_custom_reduce_scatter(scatters)
    return True


def _collective_names() -> tuple[str, str]:
    """The all-gather and reduce-scatter FSDP calls: torch 2.13 renamed them
    (``*_single``) and deprecated the old names."""
    if hasattr(dist, "all_gather_single"):
        return "all_gather_single", "reduce_scatter_single"
    return "all_gather_into_tensor", "reduce_scatter_tensor"


def _check_collectives(device: torch.device) -> None:
    """Refuse in one line where the process group's backend lacks a collective FSDP
    needs (gloo gained them in torch 2.6; NCCL has them)."""
    if world_size() == 1:
        return
    probe = torch.zeros(world_size(), device=device)
    gather, scatter = _collective_names()
    for name, call in (
        (gather, lambda: getattr(dist, gather)(probe, probe[:1])),
        (scatter, lambda: getattr(dist, scatter)(probe[:1], probe)),
    ):
        try:
            call()
        except (RuntimeError, NotImplementedError, ValueError) as error:
            backend = dist.get_backend()
            raise SpecError(
                f"exchange=fsdp needs {name}, which {backend} in torch {torch.__version__} "
                f"lacks ({str(error).splitlines()[0][:80]}): run on NCCL (a GPU), a newer "
                "torch, or use exchange=zero1"
            ) from None


def shard_units(model: nn.Module) -> Iterable[nn.Module]:
    """The modules FSDP shards as units: ``model.shard_units()`` where the model names
    them, else every item of every ``nn.ModuleList`` in it."""
    named = getattr(model, "shard_units", None)
    if callable(named):
        return list(named())
    return [item for m in model.modules() if isinstance(m, nn.ModuleList) for item in m]
