"""Workers of ``test_weighted.py``'s multi-process tests (real gloo groups)."""

from __future__ import annotations

from distributed import expect_error
from torch.utils.data import DataLoader

from permshard import WeightedShardedSampler


def weighted_ranks(rank: int, world: int, weights: list[float], num_samples: int, differ: bool) -> dict:
    """This rank's draws through a DataLoader with workers, or the consensus error when
    ``differ`` gives rank 1 other weights."""
    mine = [w * 2 if differ and rank == 1 else w for w in weights]
    sampler = WeightedShardedSampler(mine, num_samples, seed=3)
    if differ:
        return {"error": expect_error(lambda: list(sampler))}
    loader = DataLoader(range(len(weights)), sampler=sampler, batch_size=4, num_workers=2)
    return {
        "draws": [int(i) for batch in loader for i in batch],
        "proof": sampler.verify_distributed().covered,
    }
