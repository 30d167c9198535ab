"""Collective helpers used for metrics (never for gradients)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if world_size() > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


def all_gather_floats(values: list[float], device: torch.device) -> list[list[float]]:
    """Every rank's ``values`` (same length on all ranks), in rank order; no pickling."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    if world_size() == 1:
        return [mine.tolist()]
    gathered = [torch.empty_like(mine) for _ in range(world_size())]
    dist.all_gather(gathered, mine)
    return [t.tolist() for t in gathered]


def all_gather_named(
    values: Mapping[str, float | Sequence[float]], device: torch.device
) -> list[dict[str, Any]]:
    """Every rank's named ``values`` (the same names and lengths on all ranks), in rank
    order, each rank's as a dict of the same names: a number stays a number, a list a
    list. One all-gather of floats; no pickling, and no unpacking by position."""
    layout = [(name, None if isinstance(v, int | float) else len(v)) for name, v in values.items()]
    flat: list[float] = []
    for value in values.values():
        flat.extend([float(value)] if isinstance(value, int | float) else map(float, value))
    rows = []
    for row in all_gather_floats(flat, device):
        named: dict[str, Any] = {}
        at = 0
        for name, length in layout:
            named[name] = row[at] if length is None else row[at : at + length]
            at += 1 if length is None else length
        rows.append(named)
    return rows


def squared_norm(tensors: Iterable[torch.Tensor | None]) -> torch.Tensor:
    """|x|² of the tensors taken as one vector (None, a parameter without a gradient, is
    skipped), as a 0-d tensor: no synchronisation with the device."""
    return torch.stack([t.square().sum() for t in tensors if t is not None]).sum()


def broadcast_state(module: nn.Module, *, buffers_only: bool = False) -> None:
    """Copy rank 0's parameters and buffers (e.g. BatchNorm statistics) to every rank."""
    if world_size() == 1:
        return
    tensors = list(module.buffers()) if buffers_only else [*module.parameters(), *module.buffers()]
    for tensor in tensors:
        dist.broadcast(tensor.data, src=0)
