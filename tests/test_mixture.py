"""Mixture (mix-v2, mix-v1) and MixedDataset: prefix proportions, passes, random access both
ways, golden vectors, the plain-Python reference, bad input, and MixedDataset under
ShardedSampler."""

from __future__ import annotations

import json
import math
import pickle
import random
import warnings
from collections import Counter

import numpy as np
import pytest

from helpers.reference_mix import GOLDEN, ReferenceMixture
from permshard import Certificate, Mixture, ShardedSampler
from permshard.data import MixedDataset


def deviation(m: Mixture, n: int) -> float:
    """Largest |counts(n)[s] - w_s·n| over the sources, in exact rationals."""
    from fractions import Fraction

    weights = [Fraction(w) for w in m.weights]
    total = sum(weights)
    return float(max(abs(c - w / total * n) for c, w in zip(m.counts(n), weights)))


@pytest.mark.parametrize("algorithm", ["mix-v1", "mix-v2"])
def test_golden_vectors_from_python(algorithm):
    golden = json.loads(GOLDEN[algorithm].read_text())
    assert golden["algorithm"] == algorithm
    assert any(case["stages"] for case in golden["cases"])
    for case in golden["cases"]:
        m = Mixture(
            [int(s) for s in case["sizes"]],
            [float(w) for w in case["weights"]],
            int(case["num_samples"]),
            int(case["seed"]),
            stages=[(int(start), [float(w) for w in ws]) for start, ws in case["stages"]],
            algorithm=algorithm,
        )
        assert m.algorithm == algorithm and pickle.loads(pickle.dumps(m)) == m
        for p, s, i in zip(case["positions"], case["sources"], case["indices"]):
            assert m[int(p)] == (int(s), int(i))
        for n, counts in zip(case["prefixes"], case["counts"]):
            assert m.counts(int(n)) == [int(c) for c in counts]


@pytest.mark.parametrize("algorithm", ["mix-v1", "mix-v2"])
def test_agrees_with_the_plain_python_reference_on_random_mixtures(algorithm):
    # Sources of a few thousand samples keep the reference's perm-v1 cycle walks short (its
    # domain is at least 2^16); num_samples up to 40x a source makes passes wrap.
    rng = random.Random(5)
    for _ in range(20 if algorithm == "mix-v1" else 8):  # perm-v2's reference shuffles a table per call
        k = rng.randint(1, 9)
        sizes = [rng.randint(1000, 9000) for _ in range(k)]
        weights = [rng.choice([0.0, rng.random(), rng.lognormvariate(0, 3)]) for _ in range(k)]
        if not any(weights):
            weights[0] = 1.0
        n, seed = rng.randint(1, 40 * min(sizes)), rng.randrange(2**64)
        m = Mixture(sizes, weights, n, seed, algorithm=algorithm)
        ref = ReferenceMixture(sizes, weights, n, seed, algorithm=algorithm)
        sources, indices = m.take(0, n)
        for p in [0, n - 1, *rng.sample(range(n), min(n, 40))]:
            assert (sources[p], indices[p]) == ref.at(p) == m[p], (sizes, weights, n, p)
        for prefix in [1, n // 3, n]:
            assert m.counts(prefix) == ref.counts(prefix)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 16])
def test_every_prefix_keeps_the_proportions_within_2(k):
    """Brute force: running counts over the first 20,000 positions, lognormal weights."""
    rng = random.Random(k)
    for trial in range(4):
        weights = [rng.lognormvariate(0, 2) for _ in range(k)]
        m = Mixture([10**6] * k, weights, 20_000, seed=trial)
        sources, _ = m.take(0, 20_000)
        total = sum(weights)
        running = np.zeros(k)
        worst = 0.0
        for p, s in enumerate(sources.tolist(), 1):
            running[s] += 1
            if p % 7 == 0 or p < 100:
                worst = max(worst, float(np.max(np.abs(running - np.array(weights) / total * p))))
        assert worst <= 2, (weights, worst)
        assert running.tolist() == m.counts(20_000)


@pytest.mark.parametrize("k", [16, 100, 1000])
def test_prefix_bound_holds_at_any_n_up_to_1e12(k):
    rng = random.Random(k)
    weights = [rng.lognormvariate(0, 2) for _ in range(k)]
    m = Mixture([10**12] * k, weights, 10**12, seed=1)
    bound = 2 if k <= 16 else 1 + math.log2(k)
    ns = [rng.randrange(1, 10**12) for _ in range(300)] + [10**12, 10**12 - 1, 2**39 + 1]
    assert max(deviation(m, n) for n in ns) <= bound
    assert sum(m.counts(10**12)) == 10**12


def test_each_pass_over_a_source_is_a_fresh_permutation():
    m = Mixture([7, 13, 3], [0.5, 0.3, 0.2], num_samples=1000, seed=4)
    sources, indices = m.take(0, 1000)
    for s, size in enumerate(m.sizes):
        stream = indices[sources == s].tolist()
        passes = [stream[i : i + size] for i in range(0, len(stream) - size + 1, size)]
        assert len(passes) >= 5
        assert all(sorted(p) == list(range(size)) for p in passes)
        assert len({tuple(p) for p in passes}) > 1  # not the same order every pass


def brute_force_passes(m: Mixture, start: int, stop: int) -> list[int]:
    """Per source, the passes wholly inside positions [start, stop), each checked to be a
    permutation of the source from the forward map alone (take and counts)."""
    sources, indices = m.take(start, stop)
    before = m.counts(start)
    complete = []
    for s, size in enumerate(m.sizes):
        read = indices[sources == s]  # occurrences before[s], before[s] + 1, ...
        first = -(-before[s] // size) * size - before[s]  # where the first whole pass begins
        passes = (len(read) - first) // size if len(read) >= first else 0
        for j in range(passes):
            chunk = read[first + j * size : first + (j + 1) * size]
            assert sorted(chunk.tolist()) == list(range(size)), (s, j)
        complete.append(passes)
    return complete


@pytest.mark.parametrize(
    "sizes, weights, n, stages",
    [
        ([10, 20], [1, 1], 60, ()),
        ([1500, 4000, 600, 2500], [0.4, 0.3, 0.2, 0.1], 40_000, ()),
        ([7000, 4500, 1000], [3, 1, 0.5], 60_000, ((25_000, [1, 1, 1]),)),
    ],
)
def test_verify_proves_every_pass_exhaustively(sizes, weights, n, stages):
    m = Mixture(sizes, weights, num_samples=n, seed=4, stages=stages)
    proof = m.verify()
    assert isinstance(proof, Certificate) and (proof.dealing, proof.algorithm) == ("mixture", m.algorithm)
    assert proof.covered == n and list(proof.per_source) == m.counts(n)
    assert (
        list(proof.complete_passes)
        == brute_force_passes(m, 0, n)
        == [c // z for c, z in zip(m.counts(n), sizes)]
    )
    assert "PROVEN (inverse, " in str(proof)
    for start, stop in [(1, n - 1), (n // 3, n // 2), (5, 5)]:
        part = m.verify(start, stop)
        assert part.covered == stop - start and part.start == start
        assert list(part.complete_passes) == brute_force_passes(m, start, stop)
    for s, size in enumerate(sizes):
        one = m.verify_pass(s, 0)
        assert one.per_source[s] == size and one.complete_passes[s] == 1
        assert sorted(m.at_positions(m.locate(s, 0))[1].tolist()) == [0] * len(m.locate(s, 0))


def test_passes_of_a_mixture_of_1e12_positions_are_proven():
    sizes = [1000, 30_000, 200_000]
    m = Mixture(sizes, [0.5, 0.3, 0.2], num_samples=10**12, seed=9)
    rng = random.Random(5)
    for _ in range(3):  # sampled passes, anywhere in the mixture
        s = rng.randrange(3)
        passes = m.counts(10**12)[s] // sizes[s]
        proof = m.verify_pass(s, rng.randrange(passes))
        assert proof.per_source[s] == sizes[s] and proof.complete_passes[s] == 1
    for start in [rng.randrange(10**12 - 10**6) for _ in range(2)] + [10**12 - 10**6]:
        proof = m.verify(start, start + 10**6)
        assert proof.covered == 10**6
        assert list(proof.complete_passes) == brute_force_passes(m, start, start + 10**6)
    with pytest.raises(ValueError, match="pass 10000000000 is never reached"):
        m.verify_pass(0, 10**10)
    with pytest.raises(ValueError, match="invalid range"):
        m.verify(10, 5)


def test_random_access_both_ways():
    m = Mixture([5, 9, 2], [1.0, 2.0, 0.5], num_samples=300, seed=2)
    sources, indices = m.take(0, 300)
    pairs = list(zip(sources.tolist(), indices.tolist()))
    assert [m[p] for p in range(300)] == pairs
    assert m[-1] == pairs[-1]
    picked = [299, 3, 3, 150, 0]
    # A list, int64 and uint32 arrays (read in place), a tuple: the same pairs.
    for given in (picked, np.array(picked), np.array(picked, np.uint32), tuple(picked)):
        s2, i2 = m.at_positions(given)
        assert list(zip(s2.tolist(), i2.tolist())) == [pairs[p] for p in picked]
    for negative in ([3, -1], np.array([3, -1])):
        with pytest.raises(ValueError, match="a position must be >= 0, got -1"):
            m.at_positions(negative)
    for s, size in enumerate(m.sizes):
        for i in range(size):
            assert m.locate(s, i) == [p for p, pair in enumerate(pairs) if pair == (s, i)]
    with pytest.raises(IndexError):
        m[300]


def test_the_table_store_is_sized_by_the_environment(monkeypatch):
    # A small source read in ~1,700 passes at random positions: its tables outgrow a
    # store of 1 MiB, so they are dropped and built again, to the same samples.
    def blend():
        return Mixture([300, 70_000], [0.5, 0.5], num_samples=10**6, seed=1)

    positions = np.random.default_rng(0).integers(0, 10**6, 1 << 14)
    sources, indices = blend().at_positions(positions)
    monkeypatch.setenv("PERMSHARD_MIX_TABLE_MIB", "1")
    small = blend()
    for batch in np.split(np.arange(len(positions)), 16):
        got_sources, got_indices = small.at_positions(positions[batch])
        assert np.array_equal(got_sources, sources[batch]) and np.array_equal(got_indices, indices[batch])
    monkeypatch.setenv("PERMSHARD_MIX_TABLE_MIB", "32MiB")
    with pytest.raises(ValueError, match=r"PERMSHARD_MIX_TABLE_MIB=\"32MiB\" is not a size in MiB.*unset it"):
        blend()


def test_table_bytes_counts_every_pass_of_the_small_sources(monkeypatch):
    # Sizes 300 and 2**16 are tables in mix-v2, 2**16 + 1 is not; in mix-v3 only 300 is.
    # Passes counted from the map itself: a source's occurrences over its size, the last
    # pass in part.
    monkeypatch.delenv("PERMSHARD_MIX_TABLE_MIB", raising=False)
    sizes, n = [300, 2**16, 2**16 + 1], 400_000
    m = Mixture(sizes, [0.2, 0.3, 0.5], num_samples=n, seed=2, algorithm="mix-v2")
    sources, _ = m.take(0, n)
    passes = [-(-int(np.count_nonzero(sources == s)) // size) for s, size in enumerate(sizes)]
    assert passes[0] > 200 and passes[2] > 1
    entries = passes[0] * sizes[0] + passes[1] * sizes[1]
    overhead = m.table_bytes - 2 * entries  # what keeping an order costs beyond its table
    assert 0 < overhead <= (passes[0] + passes[1]) * 1024
    v3 = Mixture(sizes, [0.2, 0.3, 0.5], num_samples=n, seed=2)
    assert v3.algorithm == "mix-v3"
    assert 0 < v3.table_bytes - 2 * passes[0] * sizes[0] <= passes[0] * 1024
    assert (
        Mixture(sizes, [0.2, 0.3, 0.5], num_samples=2 * n, seed=2, algorithm="mix-v2").table_bytes
        > m.table_bytes
    )
    assert Mixture(sizes, [0.2, 0.3, 0.5], num_samples=n, algorithm="perm-v1").table_bytes == 0
    assert Mixture([2**16 + 1], [1.0], num_samples=n).table_bytes == 0
    assert m.table_store_bytes == 32 * 2**20
    monkeypatch.setenv("PERMSHARD_MIX_TABLE_MIB", "3")
    assert Mixture(sizes, [0.2, 0.3, 0.5], num_samples=n).table_store_bytes == 3 * 2**20


def test_random_positions_past_the_store_are_warned_with_the_fixes(monkeypatch):
    # 300 samples up-sampled to ~3,300 passes: ~3 MiB of tables.
    def blend(algorithm="mix-v2"):
        return MixedDataset(
            [list(range(300)), list(range(10**5))], [0.5, 0.5], num_samples=2 * 10**6, algorithm=algorithm
        )

    monkeypatch.setenv("PERMSHARD_MIX_TABLE_MIB", "1")
    ds = blend()
    need = -(-ds.mixture.table_bytes // 2**20)
    assert need > 1
    with pytest.warns(
        UserWarning,
        match=rf"tables .* take {need} MiB, more than the 1 MiB .*"
        rf"PERMSHARD_MIX_TABLE_MIB={need} .*block_size.*mix-v3",
    ):
        next(iter(ShardedSampler(ds, num_replicas=4, rank=1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(ShardedSampler(ds, num_replicas=4, rank=1, shuffle=False)))  # in order
        next(iter(ShardedSampler(ds, num_replicas=4, rank=1, block_size=4096, window_blocks=4)))  # in blocks
        # mix-v3 rebuilds its tables of 300 samples at the cost of mix-v1's walk: no warning
        next(iter(ShardedSampler(blend("mix-v3"), num_replicas=4, rank=1)))
        monkeypatch.setenv("PERMSHARD_MIX_TABLE_MIB", str(need))  # the fix it names
        next(iter(ShardedSampler(blend(), num_replicas=4, rank=1)))


def test_default_length_is_the_longest_without_repeats():
    sizes = [1000, 300, 50]
    m = Mixture(sizes, [0.5, 0.3, 0.2])
    n = len(m)
    assert all(c <= size for c, size in zip(m.counts(n), sizes))
    assert any(c > size for c, size in zip(m.counts(n + 1), sizes))
    sources, indices = m.take(0, n)
    assert len(set(zip(sources.tolist(), indices.tolist()))) == n  # no sample twice


@pytest.mark.parametrize(
    "args, exc, text",
    [
        (([10, 10], [1.0, -1.0]), ValueError, "finite and >= 0"),
        (([10, 10], [float("nan"), 1.0]), ValueError, "finite and >= 0"),
        (([10, 10], [0.0, 0.0]), ValueError, "all weights are 0"),
        (([10, 0], [1.0, 1.0]), ValueError, "source 1 is empty \\(size 0\\)"),
        (([10, -1], [1.0, 1.0]), ValueError, "sizes\\[1\\] must be in \\[0"),
        (([10, 10], [1.0]), ValueError, "one weight per source"),
        (([], []), ValueError, "at least one source"),
        (([10], [1.0], 0), ValueError, "num_samples must be at least 1 \\(or None for one pass\\)"),
        (([10], ["1"]), TypeError, "weights\\[0\\] must be a number"),
        (([10.5], [1.0]), TypeError, "sizes\\[0\\] must be an integer"),
        ((10, [1.0]), TypeError, "sizes must be a sequence"),
    ],
)
def test_bad_input_names_the_fix(args, exc, text):
    with pytest.raises(exc, match=text):
        Mixture(*args)


def test_pickle_repr_and_equality():
    m = Mixture([10, 20], [0.25, 0.75], num_samples=50, seed=3)
    clone = pickle.loads(pickle.dumps(m))
    assert clone == m and hash(clone) == hash(m)
    assert clone.take(0, 50)[1].tolist() == m.take(0, 50)[1].tolist()
    assert repr(m) == "Mixture(sizes=[10, 20], weights=[0.25, 0.75], num_samples=50, seed=3) (mix-v3)"


def _sources() -> list[list[str]]:
    return [[f"a{i}" for i in range(30)], [f"b{i}" for i in range(7)], [f"c{i}" for i in range(11)]]


def test_mixed_dataset_reads_the_mixture():
    ds = MixedDataset(_sources(), [0.5, 0.2, 0.3], num_samples=200, seed=1)
    assert len(ds) == 200
    for p in (0, 17, 199):
        s, i = ds.mixture[p]
        assert ds[p] == _sources()[s][i]
    positions = [5, 199, 0, 5]
    assert ds.__getitems__(positions) == [ds[p] for p in positions]
    with pytest.raises(TypeError, match="map-style"):
        MixedDataset([iter([])], [1.0])


@pytest.mark.parametrize("shuffle", [False, True])
def test_mixed_dataset_under_sharded_samplers_with_a_resume_onto_another_world(shuffle):
    """4 ranks read part of epoch 1, 3 ranks finish it: every position of the mixture
    exactly once, so every (source, index) as often as the mixture has it."""
    ds = MixedDataset(_sources(), [0.5, 0.2, 0.3], num_samples=401, seed=1)
    read: Counter = Counter()
    state = None
    for world, steps in [(4, 30), (3, None)]:
        for rank in range(world):
            s = ShardedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=8)
            if state is not None:
                s.load_state_dict(state)
            s.set_epoch(1)
            items = list(s.iter_with_padding())[:steps]
            read.update(ds[p] for p, pad in items if not pad)
            if rank == 0 and steps is not None:
                saved = s.state_dict(consumed_samples=steps * world)
        state = saved
    every = Counter(ds[p] for p in range(len(ds)))
    assert read == every
    if not shuffle:  # in order, each rank's steps keep the proportions
        s = ShardedSampler(ds, num_replicas=4, rank=0, shuffle=False)
        first = [ds.mixture[p][0] for p in list(s)[:40]]
        assert Counter(first) == Counter(ds.mixture[p][0] for p in range(0, 160, 4))


def test_a_schedule_changes_the_weights_at_given_positions():
    stages = [(3000, [0.0, 0.2, 0.8]), (5000, [0.5, 0.25, 0.25])]
    m = Mixture([400, 900, 60], [0.6, 0.3, 0.1], num_samples=8000, seed=2, stages=stages)
    ref = ReferenceMixture([400, 900, 60], [0.6, 0.3, 0.1], 8000, 2, tuple(stages))
    sources, indices = m.take(0, 8000)
    for p in [0, 2999, 3000, 4999, 5000, 7999, *random.Random(0).sample(range(8000), 40)]:
        assert (sources[p], indices[p]) == ref.at(p) == m[p]
    bounds = [(0, 3000, [0.6, 0.3, 0.1]), (3000, 5000, [0.0, 0.2, 0.8]), (5000, 8000, [0.5, 0.25, 0.25])]
    for start, end, weights in bounds:  # the prefix bound, counted from each stage's start
        before = np.array(m.counts(start))
        for n in range(start + 1, end + 1, 13):
            assert np.max(np.abs(np.array(m.counts(n)) - before - np.array(weights) * (n - start))) <= 2
    # Passes continue across stages: the stream of a source is whole passes, each a permutation.
    for s, size in enumerate(m.sizes):
        stream = indices[sources == s].tolist()
        for k in range(0, len(stream) - size + 1, size):
            assert sorted(stream[k : k + size]) == list(range(size))
    assert m.stages == ((3000, (0.0, 0.2, 0.8)), (5000, (0.5, 0.25, 0.25)))
    clone = pickle.loads(pickle.dumps(m))
    assert clone == m and clone.take(0, 8000)[1].tolist() == indices.tolist()
    assert "stages=[(3000, [0.0, 0.2, 0.8]), (5000, [0.5, 0.25, 0.25])]" in repr(m)


@pytest.mark.parametrize(
    "stages, exc, text",
    [
        (
            [(0, [1.0, 1.0])],
            ValueError,
            "must increase: 0 is not after 0 \\(the first stage starts at position 0",
        ),
        ([(10, [1.0, 1.0]), (10, [1.0, 0.0])], ValueError, "must increase"),
        ([(10, [0.0, 0.0])], ValueError, "all weights are 0 \\(in the stage from position 10\\)"),
        ([(10, [1.0, -2.0])], ValueError, "got weights\\[1\\] = -2 \\(in the stage from position 10\\)"),
        ([(10, [1.0])], ValueError, "2 sizes but 1 weights \\(in the stage from position 10\\)"),
        ([10], TypeError, "must be a \\(start, weights\\) pair"),
    ],
)
def test_bad_schedules_name_the_fix(stages, exc, text):
    with pytest.raises(exc, match=text):
        Mixture([5, 5], [1.0, 1.0], stages=stages)


def test_a_run_of_mix_v2_resumes_only_on_mix_v2_and_the_error_says_so():
    # A run started before 0.6 read its blend by mix-v2 (the default then); resumed on a
    # new blend (mix-v3) it would read other samples: refused, naming the fix.
    sources = [[("a", i) for i in range(300)], [("b", i) for i in range(5_000)]]

    def sampler(**kwargs):
        return ShardedSampler(MixedDataset(sources, [0.3, 0.7], num_samples=20_000, **kwargs), 2, 1, seed=4)

    def samples(s):
        return [s.dataset[i] for i in s]

    old = sampler(algorithm="mix-v2")
    read = samples(old)
    state = old.state_dict(consumed_samples=4_000)
    with pytest.raises(
        ValueError, match=r"mixture map 'mix-v2', and this one reads 'mix-v3'.*algorithm='mix-v2'"
    ):
        sampler().load_state_dict(state)
    resumed = sampler(algorithm="mix-v2")
    resumed.load_state_dict(state)
    assert samples(resumed) == read[2_000:]  # 4,000 consumed over 2 ranks
    assert samples(sampler()) != read  # the new map reads the 300 samples' passes in other orders
