"""Datasets that shard correctly: flat token files, IterableDatasets, packed sequences,
weighted mixtures."""

from .iterable import ShardedIterable, shard_iterable
from .mixed import MixedDataset
from .packing import PackedDataset
from .tokens import TokenWindows, WindowBatch

__all__ = [
    "MixedDataset",
    "PackedDataset",
    "ShardedIterable",
    "TokenWindows",
    "WindowBatch",
    "shard_iterable",
]
