"""permshard.grain under real grain: ShardedIndexSampler through grain's DataLoader (0 and
2 workers, 2 and 3 shards) reads ShardedSampler's streams, every record once per epoch at
the n where grain's own sampler repeats or drops one; grain's checkpoints; shuffle()."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

grain = pytest.importorskip("grain", reason="grain is not installed (pip install grain)")
from grain.sharding import NoSharding, ShardOptions  # noqa: E402

from permshard import ShardedSampler  # noqa: E402
from permshard.grain import ShardedIndexSampler, shuffle  # noqa: E402


def read(n: int, shards: int, shard: int, workers: int = 0, **kwargs) -> list[int]:
    options = ShardOptions(shard, shards)
    sampler = ShardedIndexSampler(n, options, seed=7, **kwargs)
    loader = grain.DataLoader(
        data_source=range(n), sampler=sampler, shard_options=options, worker_count=workers
    )
    return [int(x) for x in loader]


@pytest.mark.parametrize("n", [1001, 65_537])
@pytest.mark.parametrize("shards", [2, 3])
def test_every_shard_reads_the_sharded_samplers_stream_and_every_record_once(n, shards):
    everything: Counter = Counter()
    for shard in range(shards):
        got = read(n, shards, shard)
        assert got == list(ShardedSampler(n, shards, shard, seed=7)), shard
        everything.update(got)
    # Every record; the padding (fewer than `shards`) repeats the first ones, as DistributedSampler's.
    assert set(everything) == set(range(n))
    assert sum(everything.values()) == -(-n // shards) * shards


@pytest.mark.multiprocess
def test_two_workers_read_the_same_streams():
    for shard in range(2):
        assert read(1001, 2, shard, workers=2) == list(ShardedSampler(1001, 2, shard, seed=7))


def test_a_million_records_over_three_shards_is_proven_and_matches():
    n = 1_048_577  # 2**20 + 1: grain's own shuffle repeats a record here
    sampler = ShardedIndexSampler(n, ShardOptions(1, 3), seed=7)
    cert = sampler.verify()
    assert (cert.covered, cert.padding, cert.dropped, cert.num_replicas) == (n, 1, 0, 3)
    stream = ShardedSampler(n, 3, 1, seed=7)
    ours = [sampler.record_key(3 * j + 1) for j in range(0, len(stream), 997)]
    theirs = stream.config.partition().take_list(1, 0, len(stream))[::997]
    assert ours == theirs


def test_epochs_follow_each_other_and_drop_remainder_drops_the_tail():
    n, shards = 10, 3
    sampler = ShardedIndexSampler(n, ShardOptions(0, shards), seed=1, num_epochs=2)
    assert len(sampler) == 2 * 12
    epoch1 = [sampler.record_key(12 + 3 * j) for j in range(4)]
    expected = ShardedSampler(n, shards, 0, seed=1)
    expected.set_epoch(1)
    assert epoch1 == list(expected)
    with pytest.raises(IndexError):
        sampler[24]
    dropping = ShardedIndexSampler(n, ShardOptions(2, shards, drop_remainder=True), seed=1, num_epochs=1)
    assert len(dropping) == 9 and dropping.verify().dropped == 1
    forever = ShardedIndexSampler(n, NoSharding(), num_epochs=None)
    assert forever[10**12].record_key in range(n)


def test_a_grain_checkpoint_mid_epoch_resumes_exactly():
    n, options = 1001, ShardOptions(0, 2)
    sampler = ShardedIndexSampler(n, options, seed=7)
    loader = grain.DataLoader(data_source=range(n), sampler=sampler, shard_options=options)
    it = iter(loader)
    first = [int(next(it)) for _ in range(123)]
    state = it.get_state()
    again = iter(grain.DataLoader(data_source=range(n), sampler=sampler, shard_options=options))
    again.set_state(state)
    assert first + [int(x) for x in again] == list(ShardedSampler(n, 2, 0, seed=7))


@pytest.mark.parametrize("n", [1001, 65_537])
def test_shuffle_reads_every_record_once_per_epoch(n):
    ds = shuffle(grain.MapDataset.source(list(range(n))), seed=3)
    epoch0 = [ds[i] for i in range(n)]
    epoch1 = [ds[n + i] for i in range(n)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(n)) and epoch0 != epoch1
    assert pickle.loads(pickle.dumps(ds))[5] == ds[5]
    assert list(ds.batch(10)[0]) == epoch0[:10]


def test_bad_input_names_the_fix():
    with pytest.raises(TypeError, match="grain.sharding.ShardOptions"):
        ShardedIndexSampler(10, (0, 2))
    with pytest.raises(ValueError, match="unknown permutation algorithm"):
        ShardedIndexSampler(10, NoSharding(), algorithm="perm-v9")
    with pytest.raises(ValueError, match="num_records"):
        ShardedIndexSampler(0, NoSharding())
    with pytest.raises(TypeError, match="grain.MapDataset"):
        shuffle(list(range(5)))
    with pytest.raises(ValueError, match="unknown permutation algorithm"):
        shuffle(grain.MapDataset.source([1, 2]), algorithm="perm-v9")


def test_a_state_resumes_onto_another_shard_count_every_record_once():
    n, read = 1001, Counter()
    samplers = [ShardedIndexSampler(n, ShardOptions(s, 2), seed=7, num_epochs=2) for s in range(2)]
    for s, sampler in enumerate(samplers):  # 300 records a shard, then the job stops
        read.update(sampler.record_key(j * 2 + s) for j in range(300))
    state = samplers[0].state_dict(consumed_records=300)
    assert (state["epoch"], state["consumed"]) == (0, 600)
    resumed = []
    for s in range(3):
        sampler = ShardedIndexSampler(n, ShardOptions(s, 3), seed=7, num_epochs=2)
        sampler.load_state_dict(state)
        options = ShardOptions(s, 3)
        loader = grain.DataLoader(data_source=range(n), sampler=sampler, shard_options=options)
        resumed.append([int(x) for x in loader])
    first_epoch = -(-(n - 600) // 3)  # what is left of epoch 0, per shard
    read.update(x for r in resumed for x in r[:first_epoch])
    assert set(read) == set(range(n)) and sum(read.values()) - n < 3  # padding only
    second = Counter(x for r in resumed for x in r[first_epoch:])
    expected = ShardedSampler(n, 3, 0, seed=7)
    expected.set_epoch(1)
    assert resumed[0][first_epoch:] == list(expected) and set(second) == set(range(n))
    with pytest.raises(ValueError, match="n="):
        ShardedIndexSampler(999, ShardOptions(0, 3), seed=7).load_state_dict(state)


def test_a_state_at_the_end_of_a_resumed_epoch_is_the_next_epochs_start():
    sampler = ShardedIndexSampler(1001, ShardOptions(0, 2), seed=7, num_epochs=3)
    sampler.load_state_dict(
        ShardedIndexSampler(1001, ShardOptions(0, 4), seed=7).state_dict(consumed_records=100)
    )
    rest = -(-(1001 - 400) // 2)  # records of epoch 0 left to each of the 2 shards
    state = sampler.state_dict(consumed_records=rest)
    assert (state["epoch"], state["consumed"]) == (1, 0)
    assert sampler.state_dict(consumed_records=rest - 1)["epoch"] == 0
