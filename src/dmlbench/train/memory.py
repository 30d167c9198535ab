"""What a worker's memory holds, counted: the model's own accounting and this rank's
shares (see :mod:`dmlbench.perfmodel.memory` for the prediction it feeds).

- :class:`SavedForBackward` counts the bytes autograd keeps for backward during a
  forward (each tensor once; parameters are not activations). It runs on the meta-device
  replica the FLOPs are counted on, so counting costs no memory.
- :func:`local_bytes` is what this rank holds of some tensors: a sharded tensor's
  (DTensor's) local shard.
- :func:`resident_bytes`: the process's resident memory now (a GPU: allocated);
  :func:`restart_peak` and :func:`peak_bytes` its peak since the last restart (Linux
  resets a process's VmHWM when "5" is written to its ``clear_refs``), so the training
  steps' peak is told apart from an evaluation's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


class SavedForBackward:
    """``with SavedForBackward(model) as saved: loss = f(model)`` → ``saved.bytes``."""

    def __init__(self, model: nn.Module) -> None:
        self.params = {id(p) for p in model.parameters()}
        self.seen: set[int] = set()
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        base = tensor._base if tensor._base is not None else tensor
        if id(base) not in self.params and id(base) not in self.seen:
            self.seen.add(id(base))
            self.bytes += base.numel() * base.element_size()
        return tensor

    def __enter__(self) -> SavedForBackward:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


def local_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of ``tensors`` this rank holds (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for tensor in tensors:
        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()
        if isinstance(tensor, torch.Tensor):
            total += tensor.numel() * tensor.element_size()
    return total


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[Any]:
    """The tensors of an optimizer's state this rank holds (ZeRO's local optimizer's)."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps one
    return [value for state in inner.state.values() for value in state.values()]


def state_slots(optimizer: torch.optim.Optimizer) -> float:
    """Optimizer state in parameter-sized tensors (Adam's two moments: 2), once it has
    stepped; used to predict state not yet made."""
    inner = getattr(optimizer, "optim", optimizer)
    slots = [
        sum(1 for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        for state in inner.state.values()
    ]
    return max(slots, default=0)


def restart_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass  # not Linux: the peak then runs from the process's start


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def resident_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
