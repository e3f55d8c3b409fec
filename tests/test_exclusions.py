"""ShardedSampler(exclude=...): the kept samples in their order, DistributedSampler's
padding over them, proofs, locate, plans, batch samplers, resumes with a growing set, the
CLI and real processes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers import stream_workers
from helpers.distributed import launch
from permshard import ShardedBatchSampler, ShardedSampler, StepBatchSampler


@pytest.fixture
def ranks(rank_streams):
    """``ranks(n, world, **kwargs)``: every rank's items of ``ShardedSampler(n, ...)``."""
    return lambda n, world, **kwargs: rank_streams(
        lambda r: ShardedSampler(n, num_replicas=world, rank=r, **kwargs), world
    )


def kept_order(n, exclude, **kwargs) -> list[int]:
    """The reference: the order without exclusions, the excluded skipped."""
    whole = list(ShardedSampler(n, num_replicas=1, rank=0, **kwargs))
    gone = set(exclude)
    return [s for s in whole if s not in gone]


def dealt(order: list[int], world: int, drop_last: bool) -> list[list[int]]:
    """DistributedSampler's dealing of ``order`` (its padding wraps around)."""
    per = len(order) // world if drop_last else -(-len(order) // world)
    padded = (order * (1 + world))[: per * world]
    return [padded[r::world] for r in range(world)]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_deal_the_kept_samples_in_their_order(shuffle, drop_last, ranks):
    rng = random.Random(1)
    for n in (7, 100, 70_001):
        exclude = rng.sample(range(n), max(1, n // 10)) + [0]
        order = kept_order(n, exclude, shuffle=shuffle, seed=3)
        for world in (1, 2, 3, 4):
            got = ranks(n, world, shuffle=shuffle, seed=3, drop_last=drop_last, exclude=exclude)
            assert got == dealt(order, world, drop_last), (n, world)


def test_block_orders_and_perm_v1_exclude_alike(ranks):
    exclude = list(range(0, 5000, 3))
    for kwargs in ({"block_size": 64, "window_blocks": 4}, {"algorithm": "perm-v1"}):
        assert ranks(5000, 2, exclude=exclude, **kwargs) == dealt(
            kept_order(5000, exclude, **kwargs), 2, False
        )


def test_proofs_locate_and_plans_cover_the_kept_samples(ranks, where):
    n, exclude = 1000, list(range(5, 1000, 10))
    s = ShardedSampler(n, num_replicas=3, rank=1, exclude=exclude)
    for method in ("inverse", "bitmap"):
        cert = s.verify(method=method)
        assert cert.covered == 900 and cert.padding == 0 and cert.lengths == (300,) * 3
    assert all(s.locate(e) == [] for e in exclude)
    found = where(ranks(n, 3, exclude=exclude))
    for sample in (0, 1, 999):
        assert s.locate(sample) == found[sample]
    plan = s.plan()
    assert plan.total_size == 900 and plan.num_samples == 300 and "excluded: 100" in str(plan)
    padded = ShardedSampler(n, num_replicas=7, rank=0, exclude=exclude).plan()
    assert padded.padding_positions == (900, 901, 902) and padded.total_size == 903
    assert padded.padding_samples == tuple(kept_order(n, exclude)[:3])


def test_batch_samplers_deal_the_same_kept_stream():
    exclude = list(range(0, 300, 7))
    s = ShardedSampler(300, num_replicas=2, rank=0, exclude=exclude)
    items = list(s)
    s.set_epoch(0)
    assert [i for b in ShardedBatchSampler(s, 8) for i in b] == items
    step = StepBatchSampler(ShardedSampler(300, num_replicas=2, rank=1, exclude=exclude), 8)
    assert step.verify().covered == 300 - len(exclude)
    got = {i for b in step for i in b}
    assert got.isdisjoint(exclude)


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_resume_with_more_exclusions_reads_every_kept_sample_once(drop_last):
    rng = random.Random(7)
    n = 2000
    for _ in range(25):
        first = rng.sample(range(n), rng.randint(0, 50))
        more = first + rng.sample(range(n), rng.randint(0, 80))
        w1, w2 = rng.randint(1, 4), rng.randint(1, 4)
        before = [
            ShardedSampler(n, num_replicas=w1, rank=r, exclude=first, drop_last=drop_last) for r in range(w1)
        ]
        steps = rng.randint(0, len(before[0]))
        state = before[0].state_dict(consumed_samples=steps * w1)
        after = []
        for r in range(w2):
            s = ShardedSampler(n, num_replicas=w2, rank=r, exclude=more, drop_last=drop_last)
            s.load_state_dict(state)
            after.append(list(s))
        # Brute force: the new order is the old one without the newly excluded; the
        # resume starts at the first sample the first run had not reached.
        old, new = kept_order(n, first), kept_order(n, more)
        consumed = steps * w1
        reached = old[:consumed]
        start = len([x for x in reached if x not in set(more)]) + max(0, consumed - len(old))
        left = max(0, len(new) - start)
        per = left // w2 if drop_last else -(-left // w2)
        positions = [start + r + w2 * k for k in range(per) for r in range(w2)]
        want = [new[p % len(new)] for p in positions]
        assert [after[r][k] for k in range(per) for r in range(w2)] == want
        assert set(x for a in after for x in a).isdisjoint(more)  # the newly excluded: never


def test_state_dicts_carry_the_ids_and_refuse_a_smaller_set():
    s = ShardedSampler(100, num_replicas=2, rank=0, exclude=np.array([9, 3, 3]))
    state = s.state_dict(consumed_samples=10)
    assert state["exclude"] == [3, 9]
    assert "exclude" not in ShardedSampler(100, num_replicas=2, rank=0).state_dict()
    for smaller in (None, [3], [3, 8]):
        with pytest.raises(ValueError, match="may only exclude more"):
            ShardedSampler(100, num_replicas=2, rank=0, exclude=smaller).load_state_dict(state)
    same = ShardedSampler(100, num_replicas=4, rank=0, exclude=torch.tensor([3, 9]))
    same.load_state_dict(state)
    assert same.state_dict()["consumed"] == 10
    with pytest.raises(TypeError, match="list of int sample ids"):
        same.load_state_dict(dict(state, exclude="3,9"))


def test_bad_exclusions_name_the_fix():
    with pytest.raises(ValueError, match="out of range"):
        ShardedSampler(10, num_replicas=1, rank=0, exclude=[10])
    with pytest.raises(ValueError, match=">= 0"):
        ShardedSampler(10, num_replicas=1, rank=0, exclude=[-1])
    with pytest.raises(ValueError, match="nothing is left"):
        ShardedSampler(3, num_replicas=1, rank=0, exclude=[0, 1, 2])
    with pytest.raises(TypeError, match="int sample ids"):
        ShardedSampler(10, num_replicas=1, rank=0, exclude=[1.5])
    with pytest.raises(TypeError, match="sample ids"):
        ShardedSampler(10, num_replicas=1, rank=0, exclude="12")
    assert ShardedSampler(10, num_replicas=1, rank=0, exclude=[]).config.exclude is None


@pytest.mark.multiprocess
def test_loaders_with_workers_and_processes_agree(ranks):
    n, exclude = 203, [0, 5, 77, 202]
    s = ShardedSampler(n, num_replicas=1, rank=0, exclude=exclude)
    expected = list(s)
    s.set_epoch(0)
    loader = DataLoader(range(n), sampler=s, batch_size=16, num_workers=2)
    assert [int(i) for b in loader for i in b] == expected
    results = launch(stream_workers.excluded_ranks, 2, n, exclude, False)
    assert all(r["covered"] == n - len(exclude) for r in results)
    assert [r["items"] for r in results] == ranks(n, 2, exclude=exclude, seed=2)
    errors = launch(stream_workers.excluded_ranks, 2, n, exclude, True)
    assert all("ShardingError" in r["error"] and "exclude" in r["error"] for r in errors)
