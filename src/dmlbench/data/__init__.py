"""Datasets in memory, readers for the official formats, sharding and augmentation.

The torch-backed names load on first use (PEP 562), so tasks register, and
``dmlbench tasks`` or ``run --dry-run`` answer, without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlbench.data.dataset import Dataset, Preprocess
    from dmlbench.data.sharding import EpochSharding, eval_shard

_HOMES = {
    "Dataset": "dmlbench.data.dataset",
    "Preprocess": "dmlbench.data.dataset",
    "EpochSharding": "dmlbench.data.sharding",
    "eval_shard": "dmlbench.data.sharding",
}

__all__ = ["Dataset", "EpochSharding", "Preprocess", "eval_shard"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'dmlbench.data' has no attribute {name!r}")
