"""permshard.grain under real grain: ShardedIndexSampler through grain's DataLoader (0 and
2 workers, 2 and 3 shards) reads ShardedSampler's streams, every record once per epoch at
the n where grain's own sampler repeats or drops one; grain's checkpoints; shuffle()."""

from __future__ import annotations

import pickle
from collections import Counter

import grain  # noqa: E402  (a test dependency, installed by make)
import pytest
from grain.sharding import NoSharding, ShardOptions  # noqa: E402

from permshard import ShardedSampler  # noqa: E402
from permshard.grain import ShardedIndexSampler, shuffle  # noqa: E402


def read(
    n: int, shards: int, shard: int, workers: int = 0, drop_remainder: bool = False, **kwargs
) -> list[int]:
    options = ShardOptions(shard, shards, drop_remainder=drop_remainder)
    sampler = ShardedIndexSampler(n, options, seed=7, **kwargs)
    loader = grain.DataLoader(
        data_source=range(n), sampler=sampler, shard_options=options, worker_count=workers
    )
    return [int(x) for x in loader]


def all_metadata(sampler, options: ShardOptions) -> list:
    """Every record a shard reads by grain's sampler protocol: indices ``s, s + k, ...`` until
    ``IndexError`` (grain's own samplers_test reads its samplers this way)."""
    out, i = [], options.shard_index
    while True:
        try:
            out.append(sampler[i])
        except IndexError:
            return out
        i += options.shard_count


def grains_own(n: int, options: ShardOptions, **kwargs) -> list[int]:
    """What grain's own IndexSampler gives the shard of ``options`` through its DataLoader."""
    sampler = grain.samplers.IndexSampler(n, options, num_epochs=1, **kwargs)
    loader = grain.DataLoader(data_source=range(n), sampler=sampler, shard_options=options)
    return [int(x) for x in loader]


@pytest.mark.parametrize("n, shards", [(8, 3), (1001, 2), (4_099, 4), (10, 3)])
def test_uneven_shards_read_every_record_exactly_once_like_grains_own(n, shards):
    ours, theirs = [], []
    for s in range(shards):
        options = ShardOptions(s, shards)
        ours.append([m.record_key for m in all_metadata(ShardedIndexSampler(n, options, seed=7), options)])
        own = grain.samplers.IndexSampler(n, options, shuffle=True, num_epochs=1, seed=7)
        theirs.append([m.record_key for m in all_metadata(own, options)])
    assert [len(r) for r in ours] == [len(r) for r in theirs]  # grain's uneven shards
    assert sorted(x for r in ours for x in r) == list(range(n))  # every record once, no padding
    # The shards read the epoch's one stream in turn.
    stream = list(ShardedSampler(n, 1, 0, seed=7))
    assert all(r == stream[s::shards] for s, r in enumerate(ours))
    # grain's DataLoader reads len(sampler) // k indices on every shard (its own sampler's
    # records too): the same prefix of each shard's stream.
    for s in range(shards):
        assert read(n, shards, s) == ours[s][: n // shards]
        assert len(grains_own(n, ShardOptions(s, shards), shuffle=True, seed=7)) == n // shards


@pytest.mark.parametrize("n, shards", [(8, 3), (1001, 2), (4_099, 4)])
def test_drop_remainder_gives_each_shard_n_div_k_records_like_grains_own(n, shards):
    for s in range(shards):
        options = ShardOptions(s, shards, drop_remainder=True)
        got = read(n, shards, s, drop_remainder=True)
        assert len(got) == len(grains_own(n, options, shuffle=True, seed=7)) == n // shards
        assert got == list(ShardedSampler(n, shards, s, seed=7, drop_last=True))


@pytest.mark.parametrize(
    "n, shards",
    # Past 2^16 (perm-v2's rounds rather than its table) once, read by grain's sampler
    # protocol (grain's loader costs ~0.25 ms a record; the small cases go through it).
    [(1001, 2), (1001, 3), (65_537, 3)],
)
def test_pad_reads_the_sharded_samplers_stream_on_every_shard(n, shards):
    everything: Counter = Counter()
    for shard in range(shards):
        if n < 1 << 16:
            got = read(n, shards, shard, pad=True)
        else:
            options = ShardOptions(shard, shards, drop_remainder=False)
            sampler = ShardedIndexSampler(n, options, seed=7, pad=True)
            got = [m.record_key for m in all_metadata(sampler, options)]
        assert got == list(ShardedSampler(n, shards, shard, seed=7)), shard
        everything.update(got)
    # Every record; the padding (fewer than `shards`) repeats the first ones, as DistributedSampler's.
    assert set(everything) == set(range(n))
    assert sum(everything.values()) == -(-n // shards) * shards


def test_uneven_epochs_follow_each_other_every_record_once_per_epoch():
    n, shards, epochs = 8, 3, 3
    samplers = [
        ShardedIndexSampler(n, ShardOptions(s, shards), seed=2, num_epochs=epochs) for s in range(shards)
    ]
    assert (
        len(samplers[0])
        == epochs * n
        == len(
            grain.samplers.IndexSampler(n, ShardOptions(0, shards), shuffle=True, num_epochs=epochs, seed=2)
        )
    )
    by_index = {i: samplers[i % shards].record_key(i) for i in range(epochs * n)}
    for e in range(epochs):
        order = ShardedSampler(n, 1, 0, seed=2)
        order.set_epoch(e)
        assert [by_index[e * n + p] for p in range(n)] == list(order)


def test_grains_own_errors_and_rngs():
    # The semantics of grain's samplers_test: bad counts, a non-int seed, indices out of range.
    with pytest.raises(ValueError, match="num_records"):
        ShardedIndexSampler(0, NoSharding())
    with pytest.raises(ValueError, match="num_epochs"):
        ShardedIndexSampler(10, NoSharding(), num_epochs=0)
    with pytest.raises(TypeError, match="seed"):
        ShardedIndexSampler(10, NoSharding(), seed="3")
    with pytest.raises(ValueError, match="pass one of them"):
        ShardedIndexSampler(10, ShardOptions(0, 2, drop_remainder=True), pad=True)
    sampler = ShardedIndexSampler(5, NoSharding(), seed=32, num_epochs=2)
    for bad in (-1, 10):
        with pytest.raises(IndexError, match="out of range"):
            sampler[bad]
    # Distinct, deterministic per-record rngs, grain's Philox(seed + index).
    draws = [sampler[i].rng.random() for i in range(10)]
    assert len(set(draws)) == 10
    again = ShardedIndexSampler(5, NoSharding(), seed=32, num_epochs=2)
    assert draws == [again[i].rng.random() for i in range(10)]
    assert [sampler[i].record_key for i in range(10)] == [again[i].record_key for i in range(10)]


@pytest.mark.multiprocess
def test_two_workers_read_the_same_streams():
    # Each shard in one mode (grain's workers are processes of their own: ~8 s a loader).
    assert read(1001, 2, 0, workers=2, pad=True) == list(ShardedSampler(1001, 2, 0, seed=7))
    assert read(1001, 2, 1, workers=2) == list(ShardedSampler(1001, 1, 0, seed=7))[1::2][:500]


def test_a_million_records_over_three_shards_is_proven_and_matches():
    n = 1_048_577  # 2**20 + 1: grain's own shuffle repeats a record here
    sampler = ShardedIndexSampler(n, ShardOptions(1, 3), seed=7, pad=True)
    cert = sampler.verify()
    assert (cert.covered, cert.padding, cert.dropped, cert.num_replicas) == (n, 1, 0, 3)
    uneven = ShardedIndexSampler(n, ShardOptions(1, 3), seed=7).verify()
    assert (uneven.covered, uneven.padding, uneven.dropped, uneven.num_replicas) == (n, 0, 0, 1)
    stream = ShardedSampler(n, 3, 1, seed=7)
    ours = [sampler.record_key(3 * j + 1) for j in range(0, len(stream), 997)]
    theirs = stream.config.partition().take_list(1, 0, len(stream))[::997]
    assert ours == theirs


def test_epochs_follow_each_other_and_drop_remainder_drops_the_tail():
    n, shards = 10, 3
    sampler = ShardedIndexSampler(n, ShardOptions(0, shards), seed=1, num_epochs=2, pad=True)
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
    sampler = ShardedIndexSampler(n, options, seed=7, pad=True)
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
    samplers = [ShardedIndexSampler(n, ShardOptions(s, 2), seed=7, num_epochs=2, pad=True) for s in range(2)]
    for s, sampler in enumerate(samplers):  # 300 records a shard, then the job stops
        read.update(sampler.record_key(j * 2 + s) for j in range(300))
    state = samplers[0].state_dict(consumed_records=300)
    assert (state["epoch"], state["consumed"]) == (0, 600)
    resumed = []
    for s in range(3):
        sampler = ShardedIndexSampler(n, ShardOptions(s, 3), seed=7, num_epochs=2, pad=True)
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
    sampler = ShardedIndexSampler(1001, ShardOptions(0, 2), seed=7, num_epochs=3, pad=True)
    sampler.load_state_dict(
        ShardedIndexSampler(1001, ShardOptions(0, 4), seed=7, pad=True).state_dict(consumed_records=100)
    )
    rest = -(-(1001 - 400) // 2)  # records of epoch 0 left to each of the 2 shards
    state = sampler.state_dict(consumed_records=rest)
    assert (state["epoch"], state["consumed"]) == (1, 0)
    assert sampler.state_dict(consumed_records=rest - 1)["epoch"] == 0


@pytest.mark.parametrize("n", [1001, 8])
def test_uneven_shards_resume_onto_another_shard_count_every_record_exactly_once(n):
    read_before = []
    samplers = [ShardedIndexSampler(n, ShardOptions(s, 2), seed=7, num_epochs=2) for s in range(2)]
    stop = n // 5 + 1
    for s, sampler in enumerate(samplers):  # `stop` records a shard, then the job stops
        read_before += [sampler.record_key(j * 2 + s) for j in range(stop)]
    state = samplers[1].state_dict(consumed_records=stop)
    resumed = []
    for s in range(3):
        options = ShardOptions(s, 3)
        sampler = ShardedIndexSampler(n, options, seed=7, num_epochs=2)
        sampler.load_state_dict(state)
        resumed.append([m.record_key for m in all_metadata(sampler, options)])
    # Exactly two epochs of records over both runs: every record twice, none more.
    assert Counter(read_before + [x for r in resumed for x in r]) == Counter({i: 2 for i in range(n)})
    last = samplers[0]
    assert last.state_dict(consumed_records=-(-len(last) // 2)) == last.config.replace(epoch=2).state_dict(0)


def test_uneven_shards_resume_a_padded_state_at_its_epochs_end():
    n = 1001
    end = ShardedSampler(n, 2, 0, seed=7).config.state_dict(1002)  # the padding consumed too
    sampler = ShardedIndexSampler(n, ShardOptions(0, 3), seed=7, num_epochs=2)
    sampler.load_state_dict(end)
    assert len(sampler) == n  # epoch 0 is done: only epoch 1 is left
    epoch1 = ShardedSampler(n, 1, 0, seed=7)
    epoch1.set_epoch(1)
    assert [sampler.record_key(i) for i in range(0, n, 3)] == list(epoch1)[::3]
