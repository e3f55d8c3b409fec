"""Datasets that shard correctly: token files and Megatron indexed datasets, fixed-size
records, IterableDatasets, packed sequences, weighted mixtures."""

from ._documents import DocumentBatch, PackedDataset
from ._indexed import MegatronIndex, split_bounds, write_indexed
from ._iterable import ShardedIterable, shard_iterable
from ._mixed import MixedDataset
from ._rows import MemmapRows, RowBatch
from ._tokens import TokenWindows, WindowBatch

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
