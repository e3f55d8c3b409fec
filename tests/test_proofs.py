"""The exact proofs (by the inverse, and the bitmap) against brute force and each other,
one rank's share; the local double-split checks."""

from __future__ import annotations

import time
import warnings
from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Subset

import permshard
from helpers import native
from permshard import ShardConfig, ShardedSampler, ShardingError, _core, check_loader, verify
from permshard._guards import check_not_presharded
from permshard._hooks import dataset_fingerprint

BOUNDARY_N = [1, 2, 3, 7, 2**10 - 1, 2**10, 2**10 + 1, 2**16 - 1, 2**16, 2**16 + 1, 2**20, 2**20 + 1]


def brute_force(n, w, seed, epoch, shuffle, drop_last):
    counts = Counter()
    lengths = []
    for r in range(w):
        s = ShardedSampler(n, num_replicas=w, rank=r, seed=seed, shuffle=shuffle, drop_last=drop_last)
        s.set_epoch(epoch)
        items = list(s)
        lengths.append(len(items))
        counts.update(items)
    covered = len(counts)
    padding = sum(c - 1 for c in counts.values())
    return tuple(lengths), covered, padding, n - covered


@pytest.mark.parametrize("n", BOUNDARY_N)
@pytest.mark.parametrize("w", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_verify_matches_brute_force(n, w, drop_last):
    for shuffle, method in [(True, "inverse"), (True, "bitmap"), (False, "inverse"), (False, "bitmap")]:
        began = time.perf_counter()
        cert = verify(n, w, seed=5, epoch=1, shuffle=shuffle, drop_last=drop_last, method=method)
        took = time.perf_counter() - began
        lengths, covered, padding, dropped = brute_force(n, w, 5, 1, shuffle, drop_last)
        assert (cert.lengths, cert.covered, cert.padding, cert.dropped) == (
            lengths,
            covered,
            padding,
            dropped,
        )
        assert cert.n == n and cert.num_replicas == w and cert.method == method
        assert cert.ranks == tuple(range(w))
        assert 0 < cert.seconds <= took  # the proof's own time, inside the call's
        assert "PROVEN" in str(cert) and cert.config.algorithm == ("perm-v2" if shuffle else "identity")


@pytest.mark.parametrize(
    "n, w, drop_last", [(10_007, 4, False), (10_007, 5, True), (3, 8, False), (2**20 + 1, 7, False)]
)
def test_rank_shares_add_up_to_the_whole_proof(n, w, drop_last):
    whole = verify(n, w, seed=2, drop_last=drop_last, method="bitmap")
    shares = [verify(n, w, seed=2, drop_last=drop_last, rank=r) for r in range(w)]
    assert [s.ranks for s in shares] == [(r,) for r in range(w)]
    assert sum(s.covered for s in shares) == whole.covered
    assert sum(s.padding for s in shares) == whole.padding
    assert all(s.dropped == whole.dropped and s.method == "inverse" for s in shares)
    assert "the share of rank 1" in str(shares[1])


def test_block_orders_and_resumed_passes_are_proven_both_ways():
    for kwargs in [{"block_size": 64, "window_blocks": 4}, {"block_size": 1000, "window_blocks": 2}]:
        inverse, bitmap = (verify(20_011, 6, seed=4, method=m, **kwargs) for m in ("inverse", "bitmap"))
        assert (inverse.covered, inverse.padding, inverse.algorithm) == (
            bitmap.covered,
            bitmap.padding,
            "block-v2",
        )
    s = ShardedSampler(5000, num_replicas=3, rank=1, seed=8)
    s.load_state_dict(ShardedSampler(5000, num_replicas=4, rank=0, seed=8).state_dict(consumed_samples=1204))
    inverse, bitmap = s.verify(), s.verify(method="bitmap")
    assert (inverse.consumed, inverse.covered, inverse.padding) == (
        bitmap.consumed,
        bitmap.covered,
        bitmap.padding,
    )
    assert (inverse.consumed, inverse.covered) == (1204, 5000 - 1204)


def test_bad_methods_and_ranks_are_refused():
    with pytest.raises(ValueError, match="method must be one of \\('inverse', 'bitmap'\\)"):
        verify(10, 2, method="fast")
    with pytest.raises(ValueError, match="rank must be in \\[0, 2\\), got 2"):
        verify(10, 2, rank=2)
    with pytest.raises(ValueError, match="proven by the inverse"):
        verify(10, 2, rank=0, method="bitmap")


def test_sampler_verify_and_progress():
    s = ShardedSampler(100_000, num_replicas=4, rank=0, seed=2)
    s.set_epoch(3)
    cert = s.verify()
    assert cert.epoch == 3 and cert.covered == 100_000
    ticks = []
    verify(3_000_000, 8, on_progress=ticks.append)
    assert ticks and ticks[-1] == 3_000_000 and ticks == sorted(ticks)


@pytest.mark.parametrize(
    "args, exc, text",
    [
        ((0, 2), ValueError, "n should be a positive integer"),
        ((10, 0), ValueError, "num_replicas should be a positive integer"),
        ((10, 2.0), TypeError, "num_replicas must be an integer"),
    ],
)
def test_verify_errors(args, exc, text):
    with pytest.raises(exc, match=text):
        verify(*args)
    with pytest.raises(ValueError, match="seed must be in"):
        verify(10, 2, seed=-1)
    # Never a silently reinterpreted positional: seed, epoch, shuffle are keywords only.
    with pytest.raises(TypeError):
        verify(10, 2, 1)  # type: ignore[misc]
    with pytest.raises(TypeError, match="'sed'"):  # a misspelt field is named, never ignored
        verify(10, 2, sed=1)


def test_verify_proves_the_pass_a_sampler_with_the_same_fields_yields():
    fields = dict(seed=3, drop_last=True, exclude=[1, 5, 8, 40])
    cert = verify(50, 4, epoch=2, **fields)
    samplers = [ShardedSampler(50, num_replicas=4, rank=r, **fields) for r in range(4)]
    for sampler in samplers:
        sampler.set_epoch(2)
    read = [i for s in samplers for i in s]
    assert list(cert.lengths) == [len(s) for s in samplers] == [11] * 4  # 46 kept, 2 dropped
    assert len(set(read)) == len(read) == cert.covered and not set(read) & {1, 5, 8, 40}
    assert cert.config == samplers[0].verify().config and (cert.dropped, cert.padding) == (2, 0)


def test_presharded_subset_without_a_group_warns_and_is_not_refused():
    full = list(range(100))
    for w in (2, 4):
        for r in range(w):
            with pytest.warns(UserWarning, match=f"1/{w * w} of the data.*shard once"):
                s = ShardedSampler(Subset(full, range(r, 100, w)), num_replicas=w, rank=r)
            assert len(list(s)) == -(-len(range(r, 100, w)) // w)
            with pytest.warns(UserWarning, match="shard once"):
                ShardedSampler(Subset(full, list(range(r, 100, w))), num_replicas=w, rank=r)
    # The legitimate every-other-sample subset, the same on every rank, is accepted: one
    # process cannot tell it from a shard, so it warns and yields the whole subset.
    with pytest.warns(UserWarning, match="same subset is on every rank, this is fine"):
        samplers = [ShardedSampler(Subset(full, range(0, 100, 2)), num_replicas=2, rank=r) for r in (0, 1)]
    assert sorted(i for s in samplers for i in s) == list(range(50))
    # A pre-sharded dataset with num_replicas=1 is the documented fix: silent.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(ShardedSampler(Subset(full, range(1, 100, 2)), num_replicas=1, rank=0))) == 50
        # An ordinary subset (a train split) is not a shard.
        check_not_presharded(Subset(full, range(0, 80)), 4, cross_rank=False)
        check_not_presharded(Subset(full, [3, 1, 4, 1, 5]), 4, cross_rank=False)
        # With cross-rank evidence the first iteration decides (tests/test_distributed.py).
        check_not_presharded(Subset(full, range(0, 100, 4)), 4, cross_rank=True)


def test_dataset_fingerprint_is_cheap_and_discriminating():
    full = list(range(1000))
    assert dataset_fingerprint(full) == dataset_fingerprint(list(range(1000)))
    assert dataset_fingerprint(full[0::2]) != dataset_fingerprint(full[1::2])
    assert (
        dataset_fingerprint(Subset(full, range(0, 10)))["content"]
        != dataset_fingerprint(Subset(full, range(1, 11)))["content"]
    )
    assert dataset_fingerprint(7) == {"type": "int", "len": 7, "content": None}
    # Values whose repr is not their content (addresses) give no content hash.
    assert dataset_fingerprint([object(), object()])["content"] is None
    assert dataset_fingerprint([{"text": "a", "ids": [1, 2]}])["content"] is not None
    fp = dataset_fingerprint(torch.utils.data.TensorDataset(torch.zeros(5)))
    assert fp["len"] == 5 and fp["content"] is None


def test_check_loader():
    data = list(range(1000))
    good = DataLoader(data, batch_size=8, sampler=ShardedSampler(data, num_replicas=4, rank=1))
    assert check_loader(good) == 250
    shard = Subset(data, list(range(1, 1000, 4)))
    twice = DataLoader(shard, batch_size=8, sampler=DistributedSampler(shard, num_replicas=4, rank=1))
    with pytest.raises(ShardingError, match="split more than once"):
        check_loader(twice, total=1000)
    # Checking does not advance the sampler: no repeat warning, same order afterwards.
    s = ShardedSampler(data, num_replicas=4, rank=1)
    loader = DataLoader(data, batch_size=8, sampler=s)
    check_loader(loader)
    assert [x for b in loader for x in b.tolist()] == list(ShardedSampler(data, num_replicas=4, rank=1))
    nested = DataLoader(
        data, batch_sampler=BatchSampler(ShardedSampler(data, num_replicas=2, rank=0), 10, False)
    )
    assert check_loader(nested) == 500


def test_sharding_error_is_exported():
    assert issubclass(permshard.ShardingError, ValueError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: permshard.verify(2**64 - 1, 2),
        lambda: native.sharding(10, 3).partition(3).take_positions_list(2, 3),
        lambda: native.sharding(10, 3).partition(3).sample_at(12),
    ],
)
def test_argument_errors_are_never_sharding_errors(call):
    with pytest.raises(ValueError) as e:
        call()
    assert not isinstance(e.value, ShardingError), e.value


def test_a_proof_too_large_for_memory_is_a_memory_error():
    # 2**64 - 1 samples over 3 ranks fit in positions, but the bitmap would be 2 EiB.
    with pytest.raises(MemoryError, match="prove by the inverse instead"):
        permshard.verify(2**64 - 1, 3, method="bitmap")


def test_a_failing_share_raises_the_core_s_counter_example():
    # items, real, padding, outside, failures, has a first failure; rank 1's item 2 at
    # position 9 holds sample 7, which inverts to 5 (not a dealing failure).
    failing = _core.Share.from_words([4, 4, 0, 0, 3, 1, 9, 1, 2, 7, 5, 0, 0, 0])
    assert (failing.items, failing.failures, failing.first.rank, failing.first.sample) == (4, 3, 1, 7)
    part = ShardConfig(12, 4).partition()
    with pytest.raises(ShardingError) as e:
        part.judge_alone(failing)
    assert str(e.value) == (
        "rank 1 at local position 2 (global position 9) holds sample 7, but the order's inverse puts "
        "that sample at position 5: a sample twice, or dealt from the wrong position (3 failures in all)"
    )
    # The same share among every rank's: the judgement names it too.
    shares = [part.prove_share(r).words() for r in range(4)]
    shares[1] = failing.words()
    with pytest.raises(ShardingError, match="rank 1 at local position 2"):
        part.judge(shares)
    assert verify(12, 4, rank=1).ranks == (1,)


def test_a_pending_certificate_joins_its_thread_and_reraises_there():
    import threading

    from permshard import PendingCertificate

    cert = permshard.verify(1000, 4)
    threads: list[str] = []

    def prove() -> int:
        threads.append(threading.current_thread().name)
        return 7

    pending = PendingCertificate(prove, lambda value: cert if value == 7 else None)
    assert pending.wait() is cert and pending.done() and threads == ["permshard-proof"]
    now = PendingCertificate(prove, lambda value: cert, background=False)
    assert now.done() and now.wait() is cert and threads[-1] == threading.current_thread().name
    failing = PendingCertificate(lambda: 1 // 0, lambda value: cert)
    with pytest.raises(ZeroDivisionError):
        failing.wait()
    with pytest.raises(ValueError, match="torch.distributed to be initialized"):
        permshard.ShardedSampler(100, 2, 0).verify_in_background()
