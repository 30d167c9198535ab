"""A worker's memory under each data-parallel strategy, from the model's own accounting.

The accounting (made by every run: :func:`dmlbench.train.memory.account`) is the whole
model's parameters ``P``, gradients ``G`` and optimizer state ``O`` in bytes, the
activations autograd keeps for backward ``A`` (for the worker's batch), and the largest
FSDP unit's parameters ``U`` with the parameters that stay with the root ``R``. With
``N`` workers, a worker holds at its peak (the end of backward):

========================  ==============================================================
``allreduce``             P + G + O + A  (gradients live in the flat buffer)
``ddp``                   P + 2G + O + A  (DDP's buckets are a second copy of G)
``zero1``                 P + 2G + O/N + A  (each worker updates 1/N of the parameters)
``fsdp``                  (P + G + O)/N + A + R + 2U  (the root's parameters gathered
                          for the whole step, a unit gathered and the next prefetched)
``fsdp``, kept gathered   (P + G + O)/N + A + P  (reshard_after_forward=false: every
                          unit stays gathered from its forward to its backward)
========================  ==============================================================

On a CPU the measured figure is the worker's peak resident memory less its resident
memory when the trainer started (the interpreter, torch and the data are not the
strategy's); glibc keeps some freed memory, so measured runs a little over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SHARDED = ("zero1", "fsdp")


@dataclass(frozen=True)
class MemoryAccount:
    parameters: float
    gradients: float
    optimizer_state: float
    activations: float  # kept for backward, for one worker's batch
    largest_unit: float = 0.0  # parameters of FSDP's largest unit
    root: float = 0.0  # parameters FSDP keeps with the root module

    @classmethod
    def from_summary(cls, account: Mapping[str, Any]) -> MemoryAccount:
        return cls(**{k: float(account.get(k) or 0.0) for k in cls.__dataclass_fields__})


def predicted_bytes(
    account: MemoryAccount,
    exchange: str,
    workers: int,
    options: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Each part of a worker's peak memory and their ``total``, in bytes."""
    n = max(1, workers)
    p, g, o, a = account.parameters, account.gradients, account.optimizer_state, account.activations
    if exchange == "fsdp" and n > 1:
        kept = not (options or {}).get("reshard_after_forward", True)
        parts = {
            "parameters": p / n,
            "gradients": g / n,
            "optimizer_state": o / n,
            "activations": a,
            "gathered": p if kept else account.root + 2 * account.largest_unit,
        }
    else:
        parts = {
            "parameters": p,
            "gradients": g * (2 if exchange in ("ddp", "zero1") and n > 1 else 1),
            "optimizer_state": o / n if exchange == "zero1" else o,
            "activations": a,
        }
    parts["total"] = sum(parts.values())
    return parts
