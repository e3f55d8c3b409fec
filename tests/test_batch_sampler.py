"""ShardedBatchSampler and StepBatchSampler: torch's BatchSampler's batches, their
arguments; and every sampler proves the stream it yields: the dealing of its positions
(round-robin, step, a token-budget plan) is named by its certificate and checked by the
one proof."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from torch.utils.data import BatchSampler

import permshard
from helpers.reference_perm_v2 import ReferencePermutation
from permshard import (
    ShardedBatchSampler,
    ShardedSampler,
    StepBatchSampler,
    TokenBudgetBatchSampler,
)


def accelerate_layout(n: int, w: int, bs: int, seed: int, epoch: int = 0, start: int = 0) -> dict[int, list]:
    """accelerate's step layout written out directly, over the reference perm-v2: at step
    s rank r takes [start + s·B·W + r·b, ... + b), b = B but maybe at the last step."""
    perm = ReferencePermutation(n, seed, epoch)
    per_rank = -(-(n - start) // w) if start < n else 0
    out: dict[int, list] = {r: [] for r in range(w)}
    for step in range(-(-per_rank // bs)):
        b = min(bs, per_rank - step * bs)
        for r in range(w):
            first = start + step * bs * w + r * b
            out[r].append([perm.forward(p % n) for p in range(first, first + b)])
    return out


def test_batch_sampler_equals_torch_batch_sampler():
    for drop_last in (False, True):
        for n, w, bs in [(1000, 3, 7), (10, 4, 64), (5000, 2, 64), (20_000, 1, 1000)]:
            for r in range(w):
                a = ShardedSampler(n, num_replicas=w, rank=r, seed=4)
                b = ShardedSampler(n, num_replicas=w, rank=r, seed=4)
                ours = ShardedBatchSampler(a, bs, drop_last=drop_last)
                ref = list(BatchSampler(b, bs, drop_last=drop_last))
                got = list(ours)
                assert got == ref and len(ours) == len(ref)
                assert all(type(i) is int for batch in got for i in batch)


def test_batch_sampler_errors():
    s = ShardedSampler(10, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        ShardedBatchSampler(s, 0)
    with pytest.raises(TypeError, match="ShardedSampler"):
        ShardedBatchSampler(range(10), 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="drop_last"):
        ShardedBatchSampler(s, 2, drop_last=1)  # type: ignore[arg-type]


def sampler(n: int, w: int, r: int, **kw) -> ShardedSampler:
    return ShardedSampler(n, num_replicas=w, rank=r, seed=5, check_consensus=False, **kw)


@pytest.mark.parametrize("n, w, bs", [(100, 2, 8), (29, 3, 4), (7, 4, 3)])
def test_the_step_sampler_proves_the_step_stream_it_yields(n, w, bs):
    # The issue's own case (n=100, 2 ranks, B=8): the proof certified round-robin while
    # the batches held the step layout. Now the certificate names the dealing it proved.
    expected = accelerate_layout(n, w, bs, seed=5)
    for r in range(w):
        batches = StepBatchSampler(sampler(n, w, r), bs)
        assert list(batches) == expected[r]
        for method in ("inverse", "bitmap"):
            cert = batches.verify(method)
            assert (cert.dealing, cert.method, cert.covered, cert.dropped) == ("step", method, n, 0)
            assert cert.padding == -n % w and "step" in str(cert)
    cert = permshard.verify(n, w, seed=5, dealing="step", batch_size=bs)
    assert cert.dealing == "step" and cert.covered == n


def test_every_sampler_names_its_dealing():
    lengths = np.arange(1, 101) % 17 + 1
    certificates = {
        "item": sampler(100, 2, 0).verify(),
        "batches": ShardedBatchSampler(sampler(100, 2, 0), 8).verify(),
        "step": StepBatchSampler(sampler(100, 2, 0), 8).verify(),
        "budget": TokenBudgetBatchSampler(lengths, 64, 2, 0, window=32, check_consensus=False).verify(),
    }
    assert {k: c.dealing for k, c in certificates.items()} == {
        "item": "round-robin",
        "batches": "round-robin",
        "step": "step",
        "budget": "budget-v2",
    }


@pytest.mark.parametrize("cls", [ShardedBatchSampler, StepBatchSampler])
def test_a_dropped_last_batch_is_declared_dropped(cls):
    n, w, bs = 103, 3, 8  # 35 items per rank: 4 whole batches, 3 items dropped per rank
    yielded = []
    for r in range(w):
        batches = cls(sampler(n, w, r), bs, drop_last=True)
        yielded += [x for b in batches for x in b]
        cert = batches.verify()
        assert (cert.covered, cert.padding, cert.dropped) == (96, 0, 7)
        assert cert.lengths == (32,) * w
    assert len(set(yielded)) == len(yielded) == 96


def test_a_resumed_step_pass_is_proven_from_its_resume_point():
    # Saved by 3 ranks after 2 steps of 4, resumed on 2: the rest, each sample once.
    n, bs = 50, 4
    donor = StepBatchSampler(sampler(n, 3, 0), bs)
    list(itertools.islice(iter(donor), 2))
    state = donor.state_dict()
    assert state["consumed"] == 2 * bs * 3
    expected = accelerate_layout(n, 2, bs, seed=5, start=24)
    rest = []
    for r in range(2):
        resumed = StepBatchSampler(sampler(n, 2, r), bs)
        resumed.load_state_dict(state)
        cert = resumed.verify()
        assert (cert.start, cert.consumed, cert.covered, cert.dealing) == (24, 24, 26, "step")
        batches = list(resumed)
        assert batches == expected[r]
        rest += [x for b in batches for x in b]
    consumed = [ReferencePermutation(n, 5, 0).forward(p) for p in range(24)]
    assert Counter(consumed + rest) == Counter(range(n))  # 26 left over 2 ranks: no padding


def test_bad_dealings_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="batch_size"):
        permshard.verify(10, 2, dealing="step")
    with pytest.raises(ValueError, match="'round-robin' or 'step'"):
        permshard.verify(10, 2, dealing="zigzag", batch_size=2)
    with pytest.raises(TypeError, match="dealing must be a str"):
        permshard.verify(10, 2, dealing=1)  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_cli_verifies_a_step_dealing():
    out = subprocess.run(
        [sys.executable, "-m", "permshard", "verify", "-n", "1000", "--world", "4",
         "--dealing", "step", "--batch-size", "8"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.startswith("PROVEN (inverse, perm-v2, step): n=1,000 over 4 ranks")


def test_a_consensus_refuses_a_rank_with_another_dealing_message():
    # (The real-rank test below runs it; here the message the consensus uses.)
    from permshard._distributed import _FIXES

    assert "StepBatchSampler" in _FIXES["dealing"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 4])
def test_the_step_dealing_is_proven_on_real_ranks_and_after_a_resume(world):
    from helpers import dealing_workers
    from helpers.distributed import launch

    n, bs, saved_world, saved_steps = 1001, 8, 3, 5
    results = launch(dealing_workers.step_proofs, world, n, bs, saved_world, saved_steps)
    for drop_last in (False, True):
        expected = accelerate_layout(n, world, bs, seed=3)
        per_rank = -(-n // world)
        kept = per_rank - per_rank % bs if drop_last else per_rank
        for r, out in enumerate(results):
            batches = out[f"batches_{drop_last}"]
            want = expected[r][: kept // bs] if drop_last else expected[r]
            assert batches == want
            local, exact, fingerprint, background = out[f"proofs_{drop_last}"]
            assert local[0] == exact[0] == fingerprint[0] == background[0] == "step"
            assert local[2:5] == exact[2:5] == fingerprint[2:5] == background[2:5]
            assert exact[6] == tuple(range(world))
            assert exact[1] == "inverse" and fingerprint[1] == "fingerprint"
            covered = min(n, kept * world)
            assert exact[2] == covered and exact[4] == n - covered
    consumed_positions = saved_steps * bs * saved_world
    rest = accelerate_layout(n, world, bs, seed=3, epoch=1, start=consumed_positions)
    perm = ReferencePermutation(n, 3, 1)
    consumed = [perm.forward(p) for p in range(consumed_positions)]
    resumed_items = []
    for r, out in enumerate(results):
        assert out["resumed"] == rest[r]
        resumed_items += [x for b in out["resumed"] for x in b]
        dealing, method, covered, padding, dropped, start, ranks = out["resumed_proof"]
        assert (dealing, method, start, covered) == (
            "step",
            "inverse",
            consumed_positions,
            n - consumed_positions,
        )
        assert "ranks disagree on dealing" in out["mixed"] and "StepBatchSampler" in out["mixed"]
    counts = Counter(consumed + resumed_items)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n == -(n - consumed_positions) % world  # padding only


@pytest.mark.parametrize("drop_last", [False, True])
def test_what_each_sampler_proves_is_the_stream_it_yields(drop_last):
    # The proof's partition, read back rank by rank, is exactly what the sampler yields:
    # the certificate is of the yielded stream, not of another dealing of the same epoch.
    n, w, bs = 61, 3, 4
    for r in range(w):
        for s in (
            sampler(n, w, r),
            ShardedBatchSampler(sampler(n, w, r), bs, drop_last),
            StepBatchSampler(sampler(n, w, r), bs, drop_last),
        ):
            target = s._proof_target()
            part, config, rank = target.pass_, target.config, target.rank
            yielded = [x for item in s for x in (item if isinstance(item, list) else [item])]
            assert part.take_list(rank, 0, part.num_samples) == yielded, type(s).__name__
            assert part.dealing == config.dealing == s.verify().dealing


def test_the_batches_iterated_are_the_batches_proven(monkeypatch):
    """The batch sampler iterates the very plan it proves: break the plan the core hands it
    (another batch size) and both what it yields and what it proves change with it."""

    def run(batch_size_of_the_plan=None):
        sampler = ShardedSampler(1000, 4, 1, seed=3, check_consensus=False)
        batches = ShardedBatchSampler(sampler, 8)
        if batch_size_of_the_plan is not None:
            broken = sampler.dealt(dealing="round-robin", batch_size=batch_size_of_the_plan)
            monkeypatch.setattr(batches, "dealt", lambda: broken)
        return [list(b) for b in batches], batches.verify()

    honest, proven = run()
    assert [len(b) for b in honest] == [8] * 31 + [2] and proven.config.batch_size == 8
    broken, proven_broken = run(batch_size_of_the_plan=5)
    assert [len(b) for b in broken] == [5] * 50 and proven_broken.config.batch_size == 5
    assert sum(broken, []) == sum(honest, [])  # the same items, cut as the plan says
