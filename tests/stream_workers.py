"""Workers of the stream tests' multi-process runs (real gloo groups): weighted draws, exclusions."""

from __future__ import annotations

from distributed import expect_error
from torch.utils.data import DataLoader

from permshard import ShardedSampler, WeightedShardedSampler


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


def excluded_ranks(rank: int, world: int, n: int, exclude: list[int], differ: bool) -> dict:
    """This rank's items and the exact distributed proof, or the consensus error when
    ``differ`` gives rank 1 one more excluded id."""
    mine = exclude + [1] if differ and rank == 1 else exclude
    sampler = ShardedSampler(n, exclude=mine, seed=2)
    if differ:
        return {"error": expect_error(lambda: list(sampler))}
    loader = DataLoader(range(n), sampler=sampler, batch_size=5, num_workers=2)
    return {
        "items": [int(i) for batch in loader for i in batch],
        "covered": sampler.verify_distributed().covered,
    }


def read_shard(shard: int) -> list[int]:
    """Shard ``shard``'s elements: ``shard * 1000 + j`` for ``j < 3 + shard * 7 % 11``
    (shards of uneven lengths)."""
    return [shard * 1000 + j for j in range(3 + shard * 7 % 11)]
