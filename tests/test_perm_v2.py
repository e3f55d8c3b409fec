"""perm-v2 through the samplers: the default, DistributedSampler's layout over the perm-v2
order, proven, perm-v1 pinned with ``algorithm="perm-v1"``, and every state dict continuing
with the order it names (the committed states of 0.1-0.3 included)."""

from __future__ import annotations

import itertools
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import permshard
from helpers.reference_perm_v1 import chain
from helpers.reference_perm_v2 import ReferencePermutation
from permshard import ShardedBatchSampler, ShardedSampler, StepBatchSampler, TokenBudgetBatchSampler


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
    v2 = ShardedSampler(1000, num_replicas=4, rank=1)
    it = iter(v2)
    [next(it) for _ in range(30)]
    state = v2.state_dict()
    assert state["algorithm"] == "perm-v2" and "permutation" not in state
    resumed = ShardedSampler(1000, num_replicas=4, rank=1, algorithm="perm-v1")
    resumed.load_state_dict(state)
    assert resumed.config.algorithm == "perm-v2" and list(resumed) == list(it)
    # And a perm-v1 state into a sampler built with the default: perm-v1 goes on.
    v1 = ShardedSampler(1000, num_replicas=4, rank=1, algorithm="perm-v1")
    it = iter(v1)
    [next(it) for _ in range(30)]
    back = ShardedSampler(1000, num_replicas=4, rank=1)
    back.load_state_dict(v1.state_dict())
    assert back.config.algorithm == "perm-v1" and list(back) == list(it)


def test_bad_choices_are_refused_with_the_fix():
    with pytest.raises(ValueError, match='unknown permutation algorithm "perm-v9"'):
        ShardedSampler(100, num_replicas=2, rank=0, algorithm="perm-v9")
    with pytest.raises(TypeError, match="algorithm must be a str"):
        ShardedSampler(100, 2, 0, algorithm=2)  # type: ignore[arg-type]
    # A family takes the permutation's id or its own, and names both, the default first.
    with pytest.raises(
        ValueError,
        match='unknown mixture algorithm "mix-v9": use "mix-v3" \\(the default\\), or "mix-v2" / "mix-v1" '
        '\\("perm-v2" / "perm-v1"\\) to continue a run started with them',
    ):
        permshard.Mixture([3], [1.0], algorithm="mix-v9")
    with pytest.raises(ValueError, match='unknown block algorithm "mix-v2"'):
        permshard.BlockPermutation(10, 2, 2, algorithm="mix-v2")
    for permutation, block, mix in (("perm-v2", "block-v2", "mix-v2"), ("perm-v1", "block-v1", "mix-v1")):
        by_perm = permshard.BlockPermutation(100, 4, 2, seed=3, algorithm=permutation)
        assert by_perm.algorithm == block
        assert list(by_perm) == list(permshard.BlockPermutation(100, 4, 2, seed=3, algorithm=block))
        mixture = permshard.Mixture([30, 50], [1.0, 2.0], algorithm=permutation)
        assert mixture.algorithm == mix
    with pytest.raises(ValueError, match='unknown permutation algorithm "budget-v2": use "perm-v2"'):
        TokenBudgetBatchSampler([1, 2], 4, 1, 0, algorithm="budget-v2")  # it names the permutation
    with pytest.raises(TypeError, match="algorithm must be a str"):
        permshard.Mixture([3], [1.0], algorithm=3)  # type: ignore[arg-type]
    unshuffled = ShardedSampler(100, 2, 0, shuffle=False, algorithm="perm-v2")
    assert unshuffled.config.algorithm == "identity" and list(unshuffled) == list(range(0, 100, 2))


def test_the_cli_takes_the_algorithm():
    done = subprocess.run(
        [sys.executable, "-m", "permshard", "verify", "-n", "1e5", "-w", "4", "--algorithm", "perm-v2"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "PROVEN (inverse, perm-v2, round-robin)" in done.stdout, done.stderr


#: State dicts as 0.3.0, 0.4.0 and 0.6.0 wrote them (0.4's and 0.6's by
#: tests/helpers/write_states.py on that release; 0.6's on main at e8805d2, its history kept).
RELEASES = {
    version: json.loads(
        (pathlib.Path(__file__).parent / "golden" / f"state_dicts_{version}.json").read_text()
    )
    for version in ("0.3", "0.4", "0.6")
}


def _resumed(case: dict, world: int, rank: int):
    """A sampler of this release built for ``case`` with today's defaults, its state loaded."""
    kwargs = {k: v for k, v in case["kwargs"].items() if k != "algorithm"}  # not pinned
    if case["kind"] == "TokenBudgetBatchSampler":
        spec = case["lengths"]
        rng = np.random.default_rng(spec["seed"])
        lengths = np.clip(rng.lognormal(spec["mean"], spec["sigma"], size=spec["size"]), 1, 4096).astype(
            np.int64
        )
        sampler = TokenBudgetBatchSampler(lengths, case["max_tokens"], world, rank, **kwargs)
    else:
        sampler = ShardedSampler(case["n"], num_replicas=world, rank=rank, check_consensus=False, **kwargs)
        if case["kind"] != "ShardedSampler":
            sampler = getattr(permshard, case["kind"])(sampler, case["batch_size"])
    sampler.load_state_dict(case["state"])
    return sampler


@pytest.mark.parametrize(
    "version, case",
    [(v, case) for v, states in RELEASES.items() for case in states["cases"]],
    ids=lambda x: x if isinstance(x, str) else x["name"],
)
def test_every_state_of_a_release_resumes_exactly(version, case):
    """Each state 0.3.0, 0.4.0 and 0.6.0 wrote continues, on its world size and on another,
    with exactly the items (batches) that release yielded after loading it, in the order it
    names. A 0.6 state resumed onto another world and saved unread names no kind: its
    history ends with the segment before the resume, and still loads."""
    assert RELEASES[version]["version"] == f"{version}.0"
    for world, ranks in case["next"].items():
        for rank, expected in enumerate(ranks):
            sampler = _resumed(case, int(world), rank)
            config = getattr(sampler, "sampler", sampler).config  # a batch sampler's is its sampler's
            assert config.algorithm == case["state"]["algorithm"]
            assert list(itertools.islice(iter(sampler), len(expected))) == expected, (world, rank)
            # Saved again, the state still names the order it continues.
            assert sampler.state_dict()["algorithm"] == case["state"]["algorithm"]
    if case["state"].get("history"):  # its history answers too
        state = case["state"]
        lengths = None
        if case["kind"] == "TokenBudgetBatchSampler":
            lengths = _resumed(case, 1, 0).lengths
        assert permshard.Run(state, lengths=lengths).audit().reads > 0


def test_new_runs_of_every_sampler_use_the_perm_v2_orders():
    lengths = np.arange(1, 301) % 97 + 1
    records = {
        "perm-v2": ShardedSampler(300, 2, 0).state_dict(),
        "block-v2": ShardedSampler(300, 2, 0, block_size=8, window_blocks=2).state_dict(),
        "budget-v2": TokenBudgetBatchSampler(lengths, 512, 2, 0).state_dict(),
    }
    assert {state["algorithm"] for state in records.values()} == set(records)
    assert permshard.Mixture([10, 20], [1.0, 1.0]).algorithm == "mix-v3"  # perm-v2's and perm-v1's passes
    for pinned_mix in ("mix-v2", "perm-v2"):  # 0.4's and 0.5's, by its id or its permutation
        assert permshard.Mixture([10, 20], [1.0, 1.0], algorithm=pinned_mix).algorithm == "mix-v2"
    # Pinned: the orders of 0.3.
    pinned = {
        "perm-v1": ShardedSampler(300, 2, 0, algorithm="perm-v1"),
        "block-v1": ShardedSampler(300, 2, 0, block_size=8, window_blocks=2, algorithm="perm-v1"),
        "budget-v1": TokenBudgetBatchSampler(lengths, 512, 2, 0, algorithm="perm-v1"),
    }
    assert {k: s.state_dict()["algorithm"] for k, s in pinned.items()} == {k: k for k in pinned}
    assert permshard.Mixture([10, 20], [1.0, 1.0], algorithm="mix-v1").algorithm == "mix-v1"


def test_block_v2_is_block_v1s_construction_over_perm_v2():
    """Written out from the definition over the plain-Python perm-v2: blocks in a perm-v2
    order, the samples of each window of blocks shuffled by perm-v2 keyed by the window."""
    n, bs, wb, seed, epoch = 203, 8, 3, 5, 2
    tag = 0x626C6F636B2D7631  # "block-v1": the block order's key tag, either version
    blocks = ReferencePermutation(-(-n // bs), chain(tag, [seed]), epoch, 0)
    sequence = []
    for slot in range(-(-n // bs)):
        b = blocks.forward(slot)
        sequence += list(range(b * bs, min(n, (b + 1) * bs)))
    window = bs * wb
    expected = []
    for w in range(-(-n // window)):
        here = sequence[w * window : (w + 1) * window]
        order = ReferencePermutation(len(here), chain(tag, [seed, 1]), epoch, w)
        expected += [here[order.forward(p)] for p in range(len(here))]
    got = permshard.BlockPermutation(n, bs, wb, seed=seed, epoch=epoch)
    assert got.algorithm == "block-v2" and got.take(0, n).tolist() == expected
