"""Datasets that shard correctly: flat token files, IterableDatasets, packed sequences."""

from .iterable import ShardedIterable, shard_iterable
from .packing import PackedDataset
from .tokens import TokenWindows, WindowBatch

__all__ = ["PackedDataset", "ShardedIterable", "TokenWindows", "WindowBatch", "shard_iterable"]
