"""The resume matrix: every way a run's stream is built (a plain sampler, exclusions that
grow at the resume, a weighted sampler, a mixture whose weights change mid-run, an
iterable), on 1-4 ranks, 0 or 2 DataLoader workers, batch sizes that change at the
resume, each resumed at a random step: compared with an uninterrupted run, nothing is
lost and nothing repeats beyond declared padding."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from helpers import stream_workers
from permshard import ShardedSampler, WeightedShardedSampler
from permshard.data import MixedDataset, ShardedIterable

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N = 150
KINDS = ("sampler", "exclusions", "weighted", "mixture", "iterable")
SOURCES = [list(range(100)), list(range(1000, 1040))]


def configurations() -> list[tuple]:
    rng = random.Random(2026)
    out = []
    for kind in KINDS:
        for _ in range(14):
            out.append(
                (
                    kind,
                    rng.randint(1, 4),
                    rng.randint(1, 4),
                    rng.choice([0, 2]),
                    rng.randint(1, 7),
                    rng.randint(1, 7),
                    rng.random(),
                )
            )
    return out


def mixture():
    return MixedDataset(SOURCES, [0.6, 0.4], num_samples=N, seed=1)


def build(kind, world, rank, state, more_excluded):
    """``(dataset, sampler)`` of one rank; the state loaded if any."""
    if kind == "iterable":
        ds = ShardedIterable(
            list(range(6)), open_shard=stream_workers.read_shard, rank=rank, world_size=world
        )
        if state is not None:
            ds.load_state_dict(state)
        return ds, None
    if kind == "weighted":
        ds, sampler = (
            range(20),
            WeightedShardedSampler([float(1 + i % 4) for i in range(20)], N, num_replicas=world, rank=rank),
        )
    elif kind == "mixture":
        ds = mixture()
        sampler = ShardedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    else:
        excluded = [3, 50, 77] + ([10, 11, 120] if more_excluded else []) if kind == "exclusions" else None
        ds, sampler = range(N), ShardedSampler(N, num_replicas=world, rank=rank, exclude=excluded)
    if state is not None:
        sampler.load_state_dict(state)
    return ds, sampler


def one_run(kind, world, workers, batch, steps, state, more_excluded=False):
    """Every rank's first ``steps`` batches (``None``: all), in lockstep (an iterable's
    ranks stop where the shortest does, as DDP would), and rank 0's state after them."""
    taken, saved = [], None
    for rank in range(world):
        ds, sampler = build(kind, world, rank, state, more_excluded)
        context = "fork" if workers else None
        batches = iter(
            DataLoader(
                ds, sampler=sampler, batch_size=batch, num_workers=workers, multiprocessing_context=context
            )
        )
        taken.append([[int(x) for x in b] for b in itertools.islice(batches, steps)])
        if rank == 0 and kind != "iterable":
            if kind == "mixture" and state is None:
                # Every rank would make this call; rank 0's dataset carries it into the state.
                ds.set_weights([0.1, 0.9], start=sampler.next_unhanded_position())
            saved = sampler.state_dict()  # what the loader delivered, prefetching aside
        del batches
    lockstep = min(map(len, taken)) if kind == "iterable" and steps is not None else None
    if kind == "iterable":
        saved = ds.state_dict(
            DataLoader(ds, batch_size=batch, num_workers=workers), consumed_batches=lockstep or 0
        )
    read = [x for rank in taken for b in rank[:lockstep] for x in b]
    return read, saved


def uninterrupted(kind, state_after_change=None):
    """The whole stream as one rank reads it."""
    if kind == "iterable":
        return [x for s in range(6) for x in stream_workers.read_shard(s)]
    if kind == "weighted":
        return list(WeightedShardedSampler([float(1 + i % 4) for i in range(20)], N, num_replicas=1, rank=0))
    return list(
        ShardedSampler(N, num_replicas=1, rank=0, exclude=[3, 50, 77] if kind == "exclusions" else None)
    )


@pytest.mark.parametrize("kind, w1, w2, workers, b1, b2, stop", configurations())
def test_a_resume_loses_nothing_and_repeats_only_padding(kind, w1, w2, workers, b1, b2, stop):
    first_total = -(-N // w1) if kind != "iterable" else 100
    steps = int(stop * (first_total // b1))
    first, state = one_run(kind, w1, workers, b1, steps, None)
    if kind == "mixture":
        # The state carries the change; every position after it reads by the new weights.
        start = state["schedule"]["changes"][0][0]
        assert start >= state["consumed"]
    second, _ = one_run(kind, w2, workers, b2, None, state, more_excluded=True)
    got = Counter(first + second)
    if kind == "mixture":
        reference = MixedDataset(SOURCES, [0.6, 0.4], num_samples=N, seed=1, stages=[(start, [0.1, 0.9])])
        want = Counter(reference[p] for p in range(N))
    elif kind == "exclusions":
        newly = {10, 11, 120} - set(first)
        want = Counter(x for x in uninterrupted(kind) if x not in newly)
    else:
        want = Counter(uninterrupted(kind))
    missing = want - got
    extra = got - want
    assert not missing, f"lost {sorted(missing.elements())[:10]}"
    padding = (w1 - 1) + (w2 - 1)  # each run pads less than one round of its ranks
    assert sum(extra.values()) <= padding, f"repeated {sorted(extra.elements())[:10]}"
    if kind in ("exclusions",):
        assert not set(second) & {10, 11, 120}
