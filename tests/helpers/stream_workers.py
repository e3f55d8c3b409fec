"""Workers of the stream tests' multi-process runs (real gloo groups): weighted draws, exclusions."""

from __future__ import annotations

from torch.utils.data import DataLoader

from permshard import ShardedSampler, WeightedShardedSampler

from .distributed import expect_error


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


def scheduled_ranks(rank: int, world: int, differ: bool) -> dict:
    """Every rank sets new weights mid-run (rank 1 other ones when ``differ``): the
    items this rank read through a DataLoader with workers, or the error."""
    from permshard.data import MixedDataset

    ds = MixedDataset([list(range(100)), list(range(1000, 1060))], [0.5, 0.5], num_samples=240)
    sampler = ShardedSampler(ds, shuffle=False)
    loader = DataLoader(ds, sampler=sampler, batch_size=4, num_workers=2, persistent_workers=True)
    batches = iter(loader)
    read = [int(x) for _, batch in zip(range(5), batches) for x in batch]
    weights = [0.8, 0.2] if not (differ and rank == 1) else [0.7, 0.3]
    error = expect_error(lambda: ds.set_weights(weights, start=160))
    if differ:
        return {"error": error}
    read += [int(x) for batch in batches for x in batch]
    return {"read": read, "stages": ds.mixture.stages}
