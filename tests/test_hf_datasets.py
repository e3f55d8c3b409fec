"""Hugging Face ``datasets`` on real ranks: a memory-mapped ``Dataset`` (save_to_disk /
load_from_disk) under ShardedSampler and ShardedBatchSampler with DataLoader workers, and a
sharded ``IterableDataset`` through ShardedIterable: every row exactly once."""

from __future__ import annotations

from collections import Counter

import datasets  # noqa: E402  (a test dependency, installed by make)
import pytest

from helpers import dataset_workers  # noqa: E402
from helpers.distributed import launch  # noqa: E402
from permshard.data import shard_iterable  # noqa: E402


@pytest.mark.multiprocess
def test_datasets_on_real_ranks_with_workers(tmp_path):
    n, world = 103, 2
    datasets.Dataset.from_dict({"id": list(range(n)), "text": [f"row {i}" for i in range(n)]}).save_to_disk(
        str(tmp_path / "ds")
    )
    results = launch(dataset_workers.hf_datasets, world, str(tmp_path / "ds"), n)
    for r in results:
        assert r["files"] and all(f.startswith(str(tmp_path / "ds")) for f in r["files"])
    # Map-style: DistributedSampler's rule, padding by repeating the first positions.
    for key in ("sampler", "batch_sampler"):
        per_rank = [r[key] for r in results]
        assert [len(p) for p in per_rank] == [52, 52]
        counts = Counter(i for p in per_rank for i in p)
        assert set(counts) == set(range(n)) and sum(counts.values()) == 104
        assert sorted(counts.values()) == [1] * (n - 1) + [2]
    # Iterable: every row exactly once across ranks x workers, whatever the worker count.
    for workers in (2, 3):
        rows = [i for r in results for i in r[f"iterable_{workers}"]]
        assert sorted(rows) == list(range(n)), workers


def test_an_iterable_dataset_is_split_by_rank_only():
    stream = datasets.Dataset.from_dict({"id": list(range(50))}).to_iterable_dataset(num_shards=5)
    parts = [[row["id"] for row in shard_iterable(stream, rank=r, world_size=3)] for r in range(3)]
    assert sorted(i for p in parts for i in p) == list(range(50))
    assert all(p for p in parts)
    with pytest.raises(ValueError, match="even=True is not available for a datasets.IterableDataset"):
        list(shard_iterable(stream, rank=0, world_size=3, even=True))
