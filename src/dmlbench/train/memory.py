"""What a worker's memory holds, counted: the model's own accounting and this rank's
shares (see :mod:`dmlbench.perfmodel.memory` for the prediction it feeds).

- :class:`SavedForBackward` counts the bytes autograd keeps for backward during a
  forward (each tensor once; parameters are not activations). It runs on the meta-device
  replica the FLOPs are counted on, so counting costs no memory.
- :func:`local_bytes` is what this rank holds of some tensors: a sharded tensor's
  (DTensor's) local shard.
- :func:`resident_bytes`: the process's own memory now (a GPU: allocated; a CPU: its
  anonymous resident memory); :func:`restart_peak` and :func:`peak_bytes` its peak
  since the last restart (Linux resets a process's VmHWM when "5" is written to its
  ``clear_refs``), so the training steps' peak is told apart from an evaluation's.
"""

from __future__ import annotations

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
    """The most memory since :func:`restart_peak`: a GPU's allocated peak, or on a CPU
    the process's peak resident set less the file-backed part resident now (the code
    of torch's libraries that its kernels paged in, memory-mapped data: not the run's
    own memory, and still resident at the peak)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    status = _status()
    return max(0, status.get("VmHWM", 0) - status.get("RssFile", 0) - status.get("RssShmem", 0))


def _status() -> dict[str, int]:
    """The byte counts of /proc/self/status (empty off Linux)."""
    try:
        with open("/proc/self/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return {}
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024
    return fields


def resident_bytes(device: torch.device) -> int:
    """Memory the process holds now: a GPU's allocated bytes, or on a CPU its anonymous
    resident memory (the heap and anonymous maps; code and mapped files left out)."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status().get("RssAnon", 0)
