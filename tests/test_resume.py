"""State dicts and resume: O(1), exactly once across interrupted and resumed runs, also with
another number of ranks; torchdata's StatefulDataLoader."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from permshard import ShardedBatchSampler, ShardedSampler

NS = [1, 2, 5, 97, 100, 1009, 4096]  # primes, N < W, powers of two
WORLDS = [1, 2, 3, 4, 8]


def run_interrupted(n, w1, w2, steps, seed, epoch, drop_last, explicit):
    """Ranks of a W1 run each consume `steps` items, then a W2 run resumes from rank 0's
    state. Returns (real items of both runs, padding items, resumed samplers)."""
    first = []
    state = None
    for r in range(w1):
        s = ShardedSampler(n, num_replicas=w1, rank=r, seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        it = s.iter_with_padding()
        taken = list(itertools.islice(it, steps))
        # A prefetching loader pulls more than the loop consumed; the explicit argument
        # states what was really consumed.
        if explicit:
            list(itertools.islice(it, 3))
        first.append(taken)
        if r == 0:
            state = s.state_dict(consumed_local_samples=steps) if explicit else s.state_dict()
    real = [x for items in first for x, pad in items if not pad]
    padding = [x for items in first for x, pad in items if pad]
    for r in range(w2):
        s = ShardedSampler(n, num_replicas=w2, rank=r, seed=seed, drop_last=drop_last)
        s.load_state_dict(state)
        s.set_epoch(epoch)  # the usual loop calls it again: the resume point survives
        expected = len(s)
        items = list(s.iter_with_padding())
        assert len(items) == expected
        real += [x for x, pad in items if not pad]
        padding += [x for x, pad in items if pad]
    return real, padding, state


def test_many_random_interruptions_are_exactly_once():
    rng = random.Random(1234)
    cases = 0
    for n in NS:
        for w1 in WORLDS:
            for w2 in WORLDS:
                per_rank = -(-n // w1)
                for _ in range(2):
                    steps = rng.randint(0, per_rank)
                    drop_last = rng.random() < 0.3
                    if drop_last:
                        steps = min(steps, n // w1)
                    explicit = rng.random() < 0.5
                    real, padding, state = run_interrupted(
                        n, w1, w2, steps, seed=rng.randrange(2**64), epoch=rng.randrange(100),
                        drop_last=drop_last, explicit=explicit,
                    )
                    counts = Counter(real)
                    assert all(c == 1 for c in counts.values()), (n, w1, w2, steps)
                    assert set(padding) <= set(real) | set(range(n))
                    if not drop_last:
                        assert set(counts) == set(range(n)), (n, w1, w2, steps)
                    else:
                        # Only the declared drops are missing: fewer than each run's W.
                        assert n - len(counts) < w1 + w2
                    assert state["consumed"] == min(steps * w1, state["consumed"])
                    cases += 1
    assert cases >= 200


def test_state_dict_contents_and_o1():
    s = ShardedSampler(10**12, num_replicas=8, rank=3, seed=7)
    s.set_epoch(4)
    it = iter(s)
    for _ in range(1000):
        next(it)
    state = s.state_dict()
    assert state == {
        "algorithm": "perm-v1", "n": 10**12, "seed": 7, "epoch": 4, "shuffle": True,
        "drop_last": False, "consumed": 8000, "num_replicas": 8,
    }
    t = ShardedSampler(10**12, num_replicas=8, rank=3, seed=7)
    t.load_state_dict(state)
    assert len(t) == (10**12 - 8000) // 8
    assert next(iter(t)) == next(it)


def test_same_world_resume_continues_the_stream():
    s = ShardedSampler(1000, num_replicas=4, rank=2, seed=1)
    full = list(s)
    s2 = ShardedSampler(1000, num_replicas=4, rank=2, seed=1)
    it = iter(s2)
    head = [next(it) for _ in range(37)]
    state = s2.state_dict()
    s3 = ShardedSampler(1000, num_replicas=4, rank=2, seed=1)
    s3.load_state_dict(state)
    assert head + list(s3) == full


def test_batch_sampler_state_counts_batches():
    s = ShardedSampler(1000, num_replicas=2, rank=0, seed=3)
    b = ShardedBatchSampler(s, 10)
    it = iter(b)
    for _ in range(5):
        next(it)
    assert b.state_dict()["consumed"] == 5 * 10 * 2
    rest = ShardedBatchSampler(ShardedSampler(1000, num_replicas=2, rank=0, seed=3), 10)
    rest.load_state_dict(b.state_dict())
    full = list(ShardedBatchSampler(ShardedSampler(1000, num_replicas=2, rank=0, seed=3), 10))
    assert list(rest) == full[5:]


def test_finished_epoch_then_next_epoch():
    s = ShardedSampler(10, num_replicas=2, rank=0)
    list(s)
    state = s.state_dict()
    assert state["consumed"] == 10
    t = ShardedSampler(10, num_replicas=2, rank=0)
    t.load_state_dict(state)
    assert list(t) == []
    t.set_epoch(1)
    assert len(list(t)) == 5


@pytest.mark.parametrize(
    "change, text",
    [
        ({"n": 11}, "n=11"),
        ({"seed": 1}, "seed=1"),
        ({"shuffle": False}, "shuffle=False"),
        ({"drop_last": True}, "drop_last=True"),
        ({"algorithm": "perm-v0"}, "perm-v0"),
        ({"consumed": -1}, "consumed"),
        ({"epoch": 1.5}, "epoch"),
        ({"num_replicas": 0}, "num_replicas"),
    ],
)
def test_foreign_or_malformed_state_is_rejected(change, text):
    s = ShardedSampler(10, num_replicas=2, rank=0)
    state = dict(s.state_dict(), **change)
    with pytest.raises((ValueError, TypeError), match=text):
        s.load_state_dict(state)


def test_missing_keys_and_bad_types():
    s = ShardedSampler(10, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="missing"):
        s.load_state_dict({"n": 10})
    with pytest.raises(TypeError, match="mapping"):
        s.load_state_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consumed_local_samples"):
        s.state_dict(consumed_local_samples=6)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(num_workers):
    torchdata = pytest.importorskip("torchdata.stateful_dataloader")
    data = list(range(203))
    make = lambda: torchdata.StatefulDataLoader(  # noqa: E731
        data, batch_size=4, sampler=ShardedSampler(data, num_replicas=2, rank=1, seed=8),
        num_workers=num_workers,
    )
    reference = [b.tolist() for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it).tolist() for _ in range(7)]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    tail = [b.tolist() for b in resumed]
    assert head + tail == reference


def test_stateful_dataloader_with_batch_sampler():
    torchdata = pytest.importorskip("torchdata.stateful_dataloader")
    data = list(range(100))
    make = lambda: torchdata.StatefulDataLoader(  # noqa: E731
        data, batch_sampler=ShardedBatchSampler(ShardedSampler(data, num_replicas=3, rank=0), 5)
    )
    reference = [b.tolist() for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it).tolist() for _ in range(3)]
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [b.tolist() for b in resumed] == reference
    assert torch.is_tensor(next(iter(make())))
