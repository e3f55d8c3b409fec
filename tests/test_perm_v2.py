"""perm-v2 through the samplers: opted into with ``algorithm="perm-v2"``, DistributedSampler's
layout over the perm-v2 order, proven, and every state dict continuing with the order it names."""

from __future__ import annotations

import subprocess
import sys

import pytest
from reference_perm_v2 import ReferencePermutation

import permshard
from permshard import ShardedBatchSampler, ShardedSampler, StepBatchSampler


def expected(n: int, world: int, rank: int, seed: int, epoch: int) -> list[int]:
    """DistributedSampler's layout written out over the plain-Python perm-v2."""
    ref = ReferencePermutation(n, seed, epoch)
    order = [ref.forward(p) for p in range(n)]
    total = -(-n // world) * world
    padded = (order * (total // n + 1))[:total]
    return padded[rank:total:world]


@pytest.mark.parametrize("n", [1, 7, 100, 65_536, 65_537, 200_003])
def test_the_sampler_deals_the_perm_v2_order_as_distributed_sampler_does(n):
    for rank in (0, 2):
        s = ShardedSampler(n, num_replicas=3, rank=rank, seed=5, algorithm="perm-v2")
        s.set_epoch(2)
        assert list(s) == expected(n, 3, rank, 5, 2)
        assert s.config.algorithm == s.plan().algorithm == "perm-v2"
    cert = s.verify()
    assert (cert.algorithm, cert.covered) == ("perm-v2", n)
    assert permshard.verify(n, 3, seed=5, epoch=2, algorithm="perm-v2").algorithm == "perm-v2"


def test_the_batch_samplers_prove_their_perm_v2_streams():
    sampler = ShardedSampler(1000, num_replicas=4, rank=1, algorithm="perm-v2")
    for batches in (ShardedBatchSampler(sampler, 8), StepBatchSampler(sampler, 8)):
        cert = batches.verify()
        assert cert.algorithm == "perm-v2" and cert.covered == 1000


def test_a_state_continues_with_the_order_it_names():
    v2 = ShardedSampler(1000, num_replicas=4, rank=1, algorithm="perm-v2")
    it = iter(v2)
    [next(it) for _ in range(30)]
    state = v2.state_dict()
    assert state["algorithm"] == "perm-v2" and "permutation" not in state
    resumed = ShardedSampler(1000, num_replicas=4, rank=1)  # built with the default, perm-v1
    resumed.load_state_dict(state)
    assert resumed.config.algorithm == "perm-v2" and list(resumed) == list(it)
    # And a perm-v1 state into a sampler built for perm-v2: perm-v1 goes on.
    v1 = ShardedSampler(1000, num_replicas=4, rank=1)
    it = iter(v1)
    [next(it) for _ in range(30)]
    back = ShardedSampler(1000, num_replicas=4, rank=1, algorithm="perm-v2")
    back.load_state_dict(v1.state_dict())
    assert back.config.algorithm == "perm-v1" and list(back) == list(it)


def test_bad_choices_are_refused_with_the_fix():
    with pytest.raises(ValueError, match='unknown permutation algorithm "perm-v9"'):
        ShardedSampler(100, num_replicas=2, rank=0, algorithm="perm-v9")
    with pytest.raises(ValueError, match="built on perm-v1"):
        ShardedSampler(100, 2, 0, block_size=4, window_blocks=2, algorithm="perm-v2")
    with pytest.raises(TypeError, match="algorithm must be a str"):
        ShardedSampler(100, 2, 0, algorithm=2)  # type: ignore[arg-type]
    unshuffled = ShardedSampler(100, 2, 0, shuffle=False, algorithm="perm-v2")
    assert unshuffled.config.algorithm == "identity" and list(unshuffled) == list(range(0, 100, 2))


def test_the_cli_takes_the_algorithm():
    done = subprocess.run(
        [sys.executable, "-m", "permshard", "verify", "-n", "1e5", "-w", "4", "--algorithm", "perm-v2"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "PROVEN (inverse, perm-v2, round-robin)" in done.stdout, done.stderr
