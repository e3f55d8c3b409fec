"""Datasets that shard correctly: token files and Megatron indexed datasets,
IterableDatasets, packed sequences, weighted mixtures."""

from .documents import DocumentBatch
from .indexed import MegatronIndex, split_bounds, write_indexed
from .iterable import ShardedIterable, shard_iterable
from .mixed import MixedDataset
from .packing import PackedDataset
from .tokens import TokenWindows, WindowBatch

__all__ = [
    "DocumentBatch",
    "MegatronIndex",
    "MixedDataset",
    "PackedDataset",
    "ShardedIterable",
    "TokenWindows",
    "WindowBatch",
    "shard_iterable",
    "split_bounds",
    "write_indexed",
]
