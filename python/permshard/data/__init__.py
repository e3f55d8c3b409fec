"""Datasets that shard correctly: flat token files, IterableDatasets, packed sequences."""

from .iterable import ShardedIterable, shard_iterable
from .packing import PackedDataset
from .tokens import TokenWindows

__all__ = ["PackedDataset", "ShardedIterable", "TokenWindows", "shard_iterable"]
