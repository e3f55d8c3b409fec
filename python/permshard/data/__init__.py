"""Datasets that shard correctly: token files and Megatron indexed datasets, fixed-size
records, IterableDatasets, packed sequences, weighted mixtures."""

from .documents import DocumentBatch
from .indexed import MegatronIndex, split_bounds, write_indexed
from .iterable import ShardedIterable, shard_iterable
from .mixed import MixedDataset
from .packing import PackedDataset
from .rows import MemmapRows, RowBatch
from .tokens import TokenWindows, WindowBatch

__all__ = [
    "DocumentBatch",
    "MegatronIndex",
    "MemmapRows",
    "MixedDataset",
    "PackedDataset",
    "RowBatch",
    "ShardedIterable",
    "TokenWindows",
    "WindowBatch",
    "shard_iterable",
    "split_bounds",
    "write_indexed",
]
