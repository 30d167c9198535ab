"""How workers combine what they learn after each backward pass: the registry.

Closed division (synchronous SGD's update), in ``comm.sync``: ``allreduce``, the
reference form (one flat all-reduce after backward, comm timed alone), and ``ddp``
(DistributedDataParallel's buckets, overlapped with backward); sharded, in
``comm.sharded``: ``zero1`` (DDP with the optimizer state split) and ``fsdp``
(parameters, gradients and optimizer state split: torch's ``fully_shard``).

Open division (each changes the update): compressed exchanges in ``comm.compressed``
(``fp16``, ``bf16``, ``powersgd`` through torch's DDP hooks; ``signsgd``,
``ef-signsgd``, ``topk``), and replicas that drift apart between agreements in
``comm.local`` (``local-sgd``, ``gossip``); a parameter server in ``comm.ps``
(``ps-sync``, ``ssp``, ``ps-async``).

Each exchange counts the bytes it hands to collectives (``bytes_sent``); the trainer
reports them per step. New algorithms implement ``GradientExchange`` (``comm.base``),
declare their ``Options`` (validated with the spec) and register in ``EXCHANGES``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

import torch

from dmlbench.comm.base import GradientExchange, NoOptions
from dmlbench.comm.compressed import (
    Bf16Exchange,
    EFSignSGDExchange,
    Fp16Exchange,
    PowerSGDExchange,
    SignSGDExchange,
    TopKExchange,
)
from dmlbench.comm.local import GossipExchange, LocalSGDExchange
from dmlbench.comm.ps import AsyncParameterServerExchange, ParameterServerExchange, SSPExchange
from dmlbench.comm.sharded import FSDPExchange, ZeroOneExchange
from dmlbench.comm.sync import DDP_NO_BUFFER_SYNC, AllReduceExchange, DDPExchange
from dmlbench.strict import StrictModel

__all__ = [
    "DDP_NO_BUFFER_SYNC",
    "EXCHANGES",
    "AllReduceExchange",
    "DDPExchange",
    "GradientExchange",
    "check_options",
    "is_exact",
    "is_sharded",
    "load_modules",
    "make_exchange",
]

EXCHANGES: dict[str, type[GradientExchange]] = {
    "allreduce": AllReduceExchange,
    "ddp": DDPExchange,
    "zero1": ZeroOneExchange,
    "fsdp": FSDPExchange,
    "fp16": Fp16Exchange,
    "bf16": Bf16Exchange,
    "powersgd": PowerSGDExchange,
    "signsgd": SignSGDExchange,
    "ef-signsgd": EFSignSGDExchange,
    "topk": TopKExchange,
    "local-sgd": LocalSGDExchange,
    "gossip": GossipExchange,
    "ps-sync": ParameterServerExchange,
    "ssp": SSPExchange,
    "ps-async": AsyncParameterServerExchange,
}


def make_exchange(
    name: str,
    device: torch.device,
    options: Mapping[str, Any] | None = None,
    steps_per_epoch: int = 1,
) -> GradientExchange:
    return EXCHANGES[name](device, options, steps_per_epoch)


def load_modules(name: str) -> None:
    """Import the modules the exchange imports when first used (see
    ``GradientExchange.modules``), so that they are in the process before its memory is
    measured; one that is missing is left for the exchange to refuse in its own words."""
    for module in EXCHANGES[name].modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def check_options(name: str, options: Mapping[str, Any]) -> StrictModel:
    """The exchange's options, validated (pydantic's error when one is wrong)."""
    exchange = EXCHANGES[name]
    model = getattr(exchange, "Options", NoOptions)
    return model.model_validate(dict(options))


def is_sharded(name: str) -> bool:
    """Whether each worker holds only a shard of the parameters and gradients."""
    return bool(getattr(EXCHANGES[name], "sharded", False))


def is_exact(name: str) -> bool:
    """Whether the exchange computes synchronous SGD's update (closed division)."""
    return bool(getattr(EXCHANGES[name], "exact", False))
