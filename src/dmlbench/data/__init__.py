"""Datasets in memory, readers for the official formats, sharding and augmentation.

The torch-backed names load on first use (PEP 562), so tasks register, and
``dmlbench tasks`` or ``run --dry-run`` answer, without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlbench.lazy import lazy_attributes

if TYPE_CHECKING:
    from dmlbench.data.dataset import Dataset, Preprocess
    from dmlbench.data.sharding import EpochSharding, eval_shard

__all__ = ["Dataset", "EpochSharding", "Preprocess", "eval_shard"]
__getattr__ = lazy_attributes(
    __name__,
    {
        "Dataset": "dmlbench.data.dataset",
        "Preprocess": "dmlbench.data.dataset",
        "EpochSharding": "dmlbench.data.sharding",
        "eval_shard": "dmlbench.data.sharding",
    },
)
