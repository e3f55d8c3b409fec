"""Writes ``tests/golden/state_dicts_<version>.json``: state dicts as the installed release
of permshard writes them, each taken mid-epoch, with the first items (batches) that
release yields on every rank after loading it, on the world size it was saved with and
on another. Run it with a release installed (not this checkout) to freeze what that
release did; ``tests/test_perm_v2.py`` loads every such file into today's samplers.

Run: ``python -m helpers.write_states [VERSION]`` in ``tests/`` (the version is the installed
one's unless named).
"""

from __future__ import annotations

import itertools
import json
import pathlib
import sys

import numpy as np

import permshard
from permshard import ShardedSampler, TokenBudgetBatchSampler

LENGTHS = {"seed": 0, "mean": 5.5, "sigma": 0.8, "size": 3000}
ITEMS, BATCHES = 12, 4  # what each rank yields after a load, per case


def lengths(spec: dict) -> np.ndarray:
    rng = np.random.default_rng(spec["seed"])
    return np.clip(rng.lognormal(spec["mean"], spec["sigma"], size=spec["size"]), 1, 4096).astype(np.int64)


def build(case: dict, world: int, rank: int):
    """The case's sampler on ``world`` ranks (the installed release's defaults)."""
    kwargs = case["kwargs"]
    if case["kind"] == "TokenBudgetBatchSampler":
        return TokenBudgetBatchSampler(lengths(case["lengths"]), case["max_tokens"], world, rank, **kwargs)
    sampler = ShardedSampler(case["n"], num_replicas=world, rank=rank, check_consensus=False, **kwargs)
    if case["kind"] != "ShardedSampler":
        sampler = getattr(permshard, case["kind"])(sampler, case["batch_size"])
    return sampler


def state_of(case: dict, world: int) -> dict:
    """The case's state, taken mid-epoch on rank 0 of ``world`` ranks: after ``consumed``
    global samples, or after reading ``take`` items (batches), first resumed from a state of
    another world size (``after``: that world and what it took) where given. A resumed case
    that takes nothing is saved unread, at the resume point."""
    sampler = build(case, world, 0)
    sampler.set_epoch(case["epoch"])
    if "after" in case:  # first resumed from a state of another world size
        world_before, taken_before = case["after"]
        before = {k: v for k, v in case.items() if k != "after"}
        sampler.load_state_dict(state_of({**before, "take": taken_before}, world_before))
    if "take" in case:
        it = iter(sampler)
        for _ in range(case["take"]):
            next(it)
        return sampler.state_dict()
    return sampler.state_dict(consumed_samples=case["consumed"])


def next_items(case: dict, state: dict, world: int) -> list:
    count = ITEMS if case["kind"] == "ShardedSampler" else BATCHES
    out = []
    for rank in range(world):
        sampler = build(case, world, rank)
        sampler.load_state_dict(state)
        batches = itertools.islice(iter(sampler), count)
        out.append([b if isinstance(b, int) else [int(x) for x in b] for b in batches])
    return out


CASES = [
    {
        "name": "perm-v2",
        "kind": "ShardedSampler",
        "n": 1000,
        "kwargs": {"seed": 7},
        "worlds": (4, 3),
        "consumed": 120,
    },
    {
        "name": "perm-v2 large",
        "kind": "ShardedSampler",
        "n": 200_003,
        "kwargs": {"seed": 11},
        "worlds": (8, 5),
        "consumed": 8000,
    },
    {
        "name": "perm-v1",
        "kind": "ShardedSampler",
        "n": 1000,
        "kwargs": {"seed": 7, "algorithm": "perm-v1"},
        "worlds": (4, 3),
        "consumed": 120,
    },
    {
        "name": "identity",
        "kind": "ShardedSampler",
        "n": 1001,
        "kwargs": {"shuffle": False},
        "worlds": (3, 4),
        "consumed": 150,
    },
    {
        "name": "perm-v2 drop_last",
        "kind": "ShardedSampler",
        "n": 1001,
        "kwargs": {"seed": 3, "drop_last": True},
        "worlds": (4, 2),
        "consumed": 400,
    },
    {
        "name": "block-v2",
        "kind": "ShardedSampler",
        "n": 1000,
        "kwargs": {"seed": 7, "block_size": 16, "window_blocks": 4},
        "worlds": (4, 3),
        "consumed": 120,
    },
    {
        "name": "ShardedBatchSampler",
        "kind": "ShardedBatchSampler",
        "n": 1000,
        "kwargs": {"seed": 9},
        "batch_size": 8,
        "worlds": (4, 2),
        "consumed": 160,
    },
    {
        "name": "StepBatchSampler",
        "kind": "StepBatchSampler",
        "n": 1000,
        "kwargs": {"seed": 9},
        "batch_size": 8,
        "worlds": (4, 2),
        "consumed": 160,
    },
    {
        "name": "budget-v2",
        "kind": "TokenBudgetBatchSampler",
        "n": 3000,
        "lengths": LENGTHS,
        "max_tokens": 16384,
        "kwargs": {"seed": 4, "window": 512},
        "worlds": (3, 2),
        "take": 8,
    },
    {
        "name": "budget-v2 taken",
        "kind": "TokenBudgetBatchSampler",
        "n": 3000,
        "lengths": LENGTHS,
        "max_tokens": 16384,
        "kwargs": {"seed": 4, "window": 512},
        "worlds": (2, 4),
        "take": 2,
        "after": (3, 8),
    },
    # Since 0.6, whose states carry the run's history.
    {
        "name": "ShardedSampler history",
        "kind": "ShardedSampler",
        "n": 1000,
        "kwargs": {"seed": 7, "exclude": [5, 17]},
        "worlds": (4, 3),
        "take": 30,
    },
    {
        "name": "ShardedBatchSampler resumed onto 3 ranks, unread",
        "kind": "ShardedBatchSampler",
        "n": 1000,
        "kwargs": {"seed": 9},
        "batch_size": 8,
        "worlds": (3, 2),
        "take": 0,
        "after": (4, 5),
    },
    {
        "name": "StepBatchSampler resumed onto 2 ranks and read",
        "kind": "StepBatchSampler",
        "n": 1000,
        "kwargs": {"seed": 9},
        "batch_size": 8,
        "worlds": (2, 3),
        "take": 3,
        "after": (4, 5),
    },
]


def main() -> None:
    # The release to name the file after, where the package's own version lags (0.6.0, on
    # main at e8805d2 unreleased, still said 0.5.0).
    version = sys.argv[1] if len(sys.argv) > 1 else permshard.__version__
    cases = []
    for spec in CASES:
        case = {**spec, "epoch": 1 if spec["kind"] != "ShardedSampler" else 2}
        state = state_of(case, spec["worlds"][0])
        record = {k: v for k, v in case.items() if k not in ("worlds", "consumed", "take", "after", "epoch")}
        record["state"] = state
        record["next"] = {str(w): next_items(case, state, w) for w in spec["worlds"]}
        cases.append(record)
    about = (
        f"State dicts as permshard {version} wrote them, each taken mid-epoch, and the first items "
        f"(batches) {version} yielded on every rank after loading it, on the world size it was saved "
        "with and on another (key: the world size). Each must still load and continue exactly. "
        "Written by tests/helpers/write_states.py."
    )
    short = ".".join(version.split(".")[:2])
    path = pathlib.Path(__file__).parent.parent / "golden" / f"state_dicts_{short}.json"
    path.write_text(json.dumps({"about": about, "version": version, "cases": cases}) + "\n")
    print(f"wrote {path} ({len(cases)} states)")


if __name__ == "__main__":
    main()
