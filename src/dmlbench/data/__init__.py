"""Datasets in memory, readers for the official formats, sharding and augmentation."""

from dmlbench.data.dataset import Dataset, Preprocess
from dmlbench.data.sharding import EpochSharding, eval_shard

__all__ = ["Dataset", "EpochSharding", "Preprocess", "eval_shard"]
