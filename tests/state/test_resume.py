"""State dicts and resume: O(1), exactly once across interrupted and resumed runs, also with
another number of ranks; torchdata's StatefulDataLoader."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from permshard import Permutation, ShardedBatchSampler, ShardedSampler

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
            state = s.state_dict(consumed_samples=steps * w1) if explicit else s.state_dict()
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
                        n,
                        w1,
                        w2,
                        steps,
                        seed=rng.randrange(2**64),
                        epoch=rng.randrange(100),
                        drop_last=drop_last,
                        explicit=explicit,
                    )
                    case = (n, w1, w2, steps, drop_last)
                    # Every rank of the first run took `steps` items: positions [0, steps·W1).
                    assert state["consumed"] == steps * w1, case
                    # DistributedSampler's rule for the rest, [start, end), written out here.
                    start = steps * w1
                    left = max(n - start, 0)
                    end = start + (left // w2 if drop_last else -(-left // w2)) * w2
                    order = Permutation(n, seed=state["seed"], epoch=state["epoch"])
                    counts = Counter(real)
                    assert all(c == 1 for c in counts.values()), case
                    # Missing: exactly the dropped tail [end, n) of the order.
                    assert set(range(n)) - set(counts) == {order[p] for p in range(end, n)}, case
                    # Padding: exactly the positions dealt past n, repeating the order's start.
                    padded = [*range(n, start), *range(max(n, start), end)]
                    assert Counter(padding) == Counter(order[p % n] for p in padded), case
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
        "algorithm": "perm-v2",
        "n": 10**12,
        "seed": 7,
        "epoch": 4,
        "shuffle": True,
        "drop_last": False,
        "consumed": 8000,
        "num_replicas": 8,
        "block_size": 0,
        "window_blocks": 0,
        "weight_changes": 0,
        "kind": "sharded",
        # One segment: opened by the run's start, epoch 4, positions [0, 8000), step 0, 8
        # ranks, no batch (an item sampler), round-robin, nothing excluded.
        "history": [[0, 4, 0, 8000, 0, 8, 0, 0, 0, 0]],
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
        ({"shuffle": False}, "'shuffle': False"),
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
    with pytest.raises(TypeError, match="consumed_local_samples"):  # removed in 0.2: its message went in 0.6
        s.state_dict(consumed_local_samples=6)  # type: ignore[call-arg]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(num_workers):
    import torchdata.stateful_dataloader as torchdata

    data = list(range(203))
    make = lambda: torchdata.StatefulDataLoader(  # noqa: E731
        data,
        batch_size=4,
        sampler=ShardedSampler(data, num_replicas=2, rank=1, seed=8),
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
    import torchdata.stateful_dataloader as torchdata

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


def test_epoch_counter_across_many_resumes_and_world_sizes():
    """A loop that counts consumed samples from the epoch start (step x batch x world,
    accumulated over every resume) and prefetches ahead of what it consumed: across four
    interrupted runs on 4, 3, 2 and 5 ranks every sample of the epoch is consumed exactly
    once (plus declared padding)."""
    n, batch, seed, epoch = 1009, 4, 5, 3
    counter, state = 0, None
    consumed = Counter()
    padding = 0
    for w, steps in [(4, 7), (3, 11), (2, 5), (5, None)]:
        samplers = [ShardedSampler(n, num_replicas=w, rank=r, seed=seed) for r in range(w)]
        iterators = []
        for s in samplers:
            if state is not None:
                s.load_state_dict(state)
            s.set_epoch(epoch)
            iterators.append(s.iter_with_padding())
        pulled = [list(itertools.islice(it, batch * (steps or 10**9) + 2 * batch)) for it in iterators]
        taken = len(samplers[0]) if steps is None else min(batch * steps, len(samplers[0]))
        for items in pulled:
            consumed.update(x for x, pad in items[:taken] if not pad)
            padding += sum(pad for _, pad in items[:taken])
        counter += taken * w
        # Prefetching pulled more than the loop consumed: the default would skip samples.
        assert samplers[0].state_dict()["consumed"] > counter or steps is None
        state = samplers[0].state_dict(consumed_samples=counter)
        assert state["consumed"] == counter
    assert sorted(consumed) == list(range(n)) and set(consumed.values()) == {1}
    assert padding == counter - n  # positions dealt past n are exactly the padding


def test_batch_samplers_take_the_same_epoch_counter():
    from permshard.accelerate import StepBatchSampler

    n, w, batch = 103, 3, 4
    for kind in (ShardedBatchSampler, StepBatchSampler):
        seen = Counter()
        counter, state = 0, None
        for steps in (2, 3, None):
            for r in range(w):
                s = ShardedSampler(n, num_replicas=w, rank=r, seed=1)
                if state is not None:
                    s.load_state_dict(state)
                batches = kind(s, batch)
                it = iter(batches)
                got = list(itertools.islice(it, steps)) if steps else list(it)
                seen.update(i for b in got for i in b)
                if r == 0:
                    step_count = len(got)
                    last = len(got[-1]) if got else 0
                    new_counter = counter + (step_count - 1) * batch * w + last * w if got else counter
                    saved = batches.state_dict(consumed_samples=new_counter)
            counter, state = new_counter, saved
        # Every sample, plus the padding of the last pass (positions n..end, fewer than w).
        assert set(seen) == set(range(n)) and sum(seen.values()) == counter, kind.__name__
        assert 0 < counter - n < w


def test_epoch_counter_is_checked_against_the_pass():
    s = ShardedSampler(100, num_replicas=4, rank=0)
    s.load_state_dict(dict(s.state_dict(), consumed=40))
    list(itertools.islice(iter(s), 3))
    with pytest.raises(ValueError, match=r"\[40, 100\].*resume point.*got 39"):
        s.state_dict(consumed_samples=39)  # behind the resume point: a pass-relative count
    with pytest.raises(ValueError, match=r"\[40, 100\].*got 101"):
        s.state_dict(consumed_samples=101)
    with pytest.raises(TypeError, match="consumed_samples must be an integer"):
        s.state_dict(consumed_samples=48.0)  # type: ignore[arg-type]
    assert s.state_dict(consumed_samples=52)["consumed"] == 52
    assert s.state_dict()["consumed"] == 40 + 3 * 4  # lockstep default, from the epoch start


@pytest.mark.parametrize(
    "consumed, exc, text",
    [
        (10**6, ValueError, r"must be in \[0, 101\].*got 1000000"),
        (-1, ValueError, r"must be in \[0, 101\]"),
        ("5", TypeError, "must be an integer"),
        (5.0, TypeError, "must be an integer"),
        (True, TypeError, "must be an integer"),
    ],
)
def test_load_rejects_a_consumed_outside_the_epoch(consumed, exc, text):
    s = ShardedSampler(100, num_replicas=2, rank=0)
    with pytest.raises(exc, match=text):
        s.load_state_dict(dict(s.state_dict(), consumed=consumed))
    # The furthest end a pass can reach (resumed at n - 1 over 2 ranks) is accepted.
    s.load_state_dict(dict(s.state_dict(), consumed=101))
    assert len(s) == 0


@pytest.mark.parametrize("through", ["sampler", "stateful_dataloader"])
def test_a_state_saved_through_dcp_keeps_its_history(through, tmp_path):
    """torch.distributed.checkpoint loads into the fresh object's own state as a template,
    keeping only the keys it has: the history (and the weight changes) are written even when
    empty, so the record survives, and ``where`` of the resumed run equals what was read."""
    import warnings

    import torch.distributed.checkpoint as dcp
    import torchdata.stateful_dataloader as torchdata

    from permshard import Run

    data = list(range(100))

    def make():  # the sampler, and what DCP saves and loads
        sampler = ShardedSampler(data, num_replicas=1, rank=0, seed=8)
        if through == "sampler":
            return sampler, ShardedBatchSampler(sampler, 4)
        loader = torchdata.StatefulDataLoader(data, batch_size=4, sampler=sampler, num_workers=2)
        return sampler, loader

    read = []
    _, saved = make()
    it = iter(saved)
    read += [x for _ in range(5) for x in list(next(it))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP warns that it runs without a process group
        dcp.save({"state": saved}, checkpoint_id=tmp_path)
        sampler, fresh = make()
        dcp.load({"state": fresh}, checkpoint_id=tmp_path)
    read += [x for batch in fresh for x in list(batch)]
    state = sampler.state_dict() if through == "stateful_dataloader" else fresh.state_dict()
    run = Run(state)
    assert [(s["start"], s["stop"]) for s in run.segments] == [(0, 20), (20, 100)]
    assert sorted(int(x) for x in read) == data
    batch = 4 if through == "stateful_dataloader" else None  # an item sampler counts no steps itself
    for k, x in enumerate(int(x) for x in read[:20]):
        assert [(r.step, r.position) for r in run.where(x, batch_size=batch)] == [(k // 4, k % 4)]
