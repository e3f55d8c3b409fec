"""pytest-benchmark: ShardedSampler beside torch's DistributedSampler on the same workload.

``make bench`` runs these with timing; the test suite runs each once (smoke mode), on
small sizes. Every benchmark checks its result before it is timed.
"""

from __future__ import annotations

import itertools
import os
import resource

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

import permshard
from permshard import ShardedBatchSampler, ShardedSampler
from permshard.data import TokenWindows

W = 8


def first_index(make):
    return next(iter(make()))


def sizes(benchmark, full, smoke):
    return smoke if benchmark.disabled else full


@pytest.mark.parametrize("n", [10**6, 10**7])
@pytest.mark.parametrize("kind", ["permshard", "DistributedSampler"])
def test_time_to_first_index(benchmark, kind, n):
    benchmark.group = f"first index, N={n:.0e}"
    if benchmark.disabled:
        n = min(n, 10**5)
    make = {
        "permshard": lambda: ShardedSampler(n, num_replicas=W, rank=0),
        "DistributedSampler": lambda: DistributedSampler(range(n), num_replicas=W, rank=0),
    }[kind]
    assert 0 <= first_index(make) < n
    benchmark.pedantic(first_index, args=(make,), rounds=3 if n >= 10**7 else 10, iterations=1)


@pytest.mark.parametrize("kind", ["permshard", "DistributedSampler"])
def test_epoch_iteration_per_rank(benchmark, kind):
    n = 10**5 if benchmark.disabled else 10**7
    benchmark.group = f"one epoch on rank 0 of {W}, N={n:.0e}"
    make = {
        "permshard": lambda: ShardedSampler(n, num_replicas=W, rank=0),
        "DistributedSampler": lambda: DistributedSampler(range(n), num_replicas=W, rank=0),
    }[kind]

    def epoch():
        return sum(1 for _ in make())

    assert epoch() == n // W
    benchmark.extra_info["indices"] = n // W
    benchmark.pedantic(epoch, rounds=3, iterations=1)


def test_verify_1e9_over_8_ranks(benchmark):
    """The exact proof at N = 1e9, W = 8 (125 MB bitmap, all cores)."""
    n = 10**6 if benchmark.disabled else 10**9
    benchmark.group = "exact verify"
    cert = benchmark.pedantic(permshard.verify, args=(n, W), rounds=1, iterations=1)
    assert cert.covered == n


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens") / "train.bin"
    np.random.default_rng(0).integers(0, 50_000, size=4_000_000, dtype=np.uint16).tofile(path)
    return str(path)


@pytest.mark.parametrize("mode", ["getitems", "per_item"])
def test_batch_fetch(benchmark, token_file, mode):
    """64 windows of 1024 tokens, fetched and collated as a DataLoader does: one
    vectorised gather (``__getitems__`` + ``TokenWindows.collate``) vs 64 single fetches
    stacked by the default collation."""
    from torch.utils.data import default_collate

    benchmark.group = "fetch and collate a batch of 64 x 1024 tokens"
    ds = TokenWindows(token_file, seq_len=1024)
    batches = iter(ShardedBatchSampler(ShardedSampler(ds, num_replicas=1, rank=0, auto_epoch=True), 64))
    batch = next(batches)
    fetch = {
        "getitems": lambda b: TokenWindows.collate(ds.__getitems__(b)),
        "per_item": lambda b: default_collate([ds[i] for i in b]),
    }[mode]
    assert fetch(batch).tolist() == [ds[i].tolist() for i in batch]
    benchmark(fetch, batch)


def anonymous_rss_mib() -> float:
    """Anonymous resident memory (heap, not the page cache of mapped files), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_sparse_token_file_rss(benchmark, tmp_path):
    """A virtual (sparse) file of 2**31 tokens: > 1e9 windows; sampling and fetching
    10 000 batches must not grow the process's own memory with N (mapped file pages are
    page cache, reclaimable, and counted apart)."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc")
    path = tmp_path / "virtual.bin"
    with open(path, "wb") as f:
        f.truncate(2 * 2**31)
    ds = TokenWindows(str(path), seq_len=2)
    assert len(ds) >= 10**9
    sampler = ShardedSampler(ds, num_replicas=W, rank=0)
    before = anonymous_rss_mib()
    steps = 100 if benchmark.disabled else 10_000

    def run():
        it = iter(ShardedBatchSampler(sampler, 64))
        for batch in itertools.islice(it, steps):
            ds.__getitems__(batch)

    sampler.auto_epoch = True
    benchmark.pedantic(run, rounds=1, iterations=1)
    grown = anonymous_rss_mib() - before
    benchmark.extra_info["anonymous_rss_growth_mib"] = grown
    benchmark.extra_info["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert grown < 64, f"RSS grew {grown:.1f} MiB"


@pytest.mark.parametrize("size", [100, 1000, 100_000])
@pytest.mark.parametrize("access", ["take", "batch of 32"])
def test_mixture_over_many_sources(benchmark, size, access):
    """1,000 equal sources of ``size`` samples: small sources make long cipher walks."""
    benchmark.group = f"Mixture, 1000 sources of {size}"
    m = permshard.Mixture([size] * 1000, [1.0] * 1000, num_samples=10**7)
    count = 20_000 if benchmark.disabled else 200_000
    batches = [np.random.default_rng(k).integers(0, 10**7, 32).tolist() for k in range(100)]
    sources, indices = m.take(0, 64)
    assert [m[p] for p in range(64)] == list(zip(sources.tolist(), indices.tolist()))
    if access == "take":
        benchmark(m.take, 0, count)
    else:
        benchmark(lambda: [m.at_positions(b) for b in batches])
