"""Dataset workers of the multi-process tests (real gloo groups): iterables, mixtures,
token budgets, memory-mapped rows and HF datasets on real ranks.

Each worker runs on every rank (see ``distributed.launch``) and returns plain data
(counts, certificates, error messages) for the test to check.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from permshard import ShardedSampler, ShardingError

from .distributed import expect_error


class Docs(IterableDataset):
    """A ConstantLengthDataset-style stream that shards itself inside ``__iter__`` with
    no rank passed: what a DataLoader worker must resolve on its own."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        from permshard.data import shard_iterable

        return shard_iterable(range(self.n))


def iterable_start_method(rank: int, world: int, n_docs: int, method: str) -> list[int]:
    """2 ranks x 3 workers started by ``method``, sharding inside ``__iter__``."""
    loader = DataLoader(Docs(n_docs), batch_size=None, num_workers=3, multiprocessing_context=method)
    return [int(x) for x in loader]


def iterable_sharding(rank: int, world: int, n_docs: int) -> dict:
    """2 ranks x 3 DataLoader workers over a stream of documents, plain and packed."""
    from torch.utils.data import DataLoader

    from permshard.data import PackedDataset, ShardedIterable

    out: dict = {}
    docs = list(range(n_docs))
    loader = DataLoader(ShardedIterable(docs), batch_size=None, num_workers=3)
    out["plain"] = [int(x) for x in loader]
    even = DataLoader(ShardedIterable(docs[:-5], even=True), batch_size=None, num_workers=3)
    out["even"] = [int(x) for x in even]
    token_docs = [[d * 1000 + j for j in range(1 + d % 17)] for d in range(n_docs)]
    packed = PackedDataset(
        token_docs, seq_len=64, eos_id=-1, pad_id=-2, drop_last=False, shuffle=True, seed=3
    )
    batches = list(DataLoader(packed, batch_size=None, num_workers=3))
    out["packed_lengths"] = sorted({len(b) for b in batches})
    out["packed_tokens"] = [int(t) for b in batches for t in b if t >= 0]
    out["packed_eos"] = sum(int((b == -1).sum()) for b in batches)
    return out


def _mixed(n: int):
    from permshard.data import MixedDataset

    sources = [
        [("web", i) for i in range(300)],
        [("code", i) for i in range(40)],
        [("books", i) for i in range(90)],
    ]
    return MixedDataset(sources, [0.6, 0.1, 0.3], num_samples=n, seed=2)


def _as_list(batch: list) -> list:
    return batch


def mixed_dataset_run(rank: int, world: int, n: int, steps, state) -> dict:
    """A DataLoader with workers over a MixedDataset: `steps` batches of 4 (all if None)
    from `state`; returns what this rank read, the state after it and the proof."""
    ds = _mixed(n)
    sampler = ShardedSampler(ds, seed=6)
    if state is not None:
        sampler.load_state_dict(state)
    sampler.set_epoch(3)
    cert = sampler.verify_distributed()
    loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2, collate_fn=_as_list)
    read = []
    consumed = sampler.state_dict()["consumed"]
    for step, batch in enumerate(loader):
        if steps is not None and step == steps:
            break
        read += [tuple(x) for x in batch]
        consumed += len(batch) * world
    padding = len(sampler.plan().padding_positions)
    return {
        "read": read,
        "state": sampler.state_dict(consumed_samples=consumed),
        "covered": cert.covered,
        "padding": padding,
    }


def token_budget(rank: int, world: int, n: int) -> dict:
    """TokenBudgetBatchSampler under a DataLoader with workers on real ranks, and a rank
    with another budget caught by the consensus."""
    import numpy as np

    from permshard._token_budget import TokenBudgetBatchSampler

    lengths = np.clip(np.random.default_rng(0).lognormal(5.5, 0.8, size=n), 1, 4096).astype(np.int64)
    sampler = TokenBudgetBatchSampler(lengths, 16384, seed=2, window=4096)
    loader = DataLoader(list(range(n)), batch_sampler=sampler, num_workers=2)
    batches = [batch.tolist() for batch in loader]
    bad = TokenBudgetBatchSampler(lengths, 8192 if rank == world - 1 else 16384, seed=2)
    disagree = expect_error(lambda: next(iter(bad)), ShardingError)
    other = lengths.copy()
    other[-1] += rank == world - 1  # one length differs on one rank
    differ = expect_error(lambda: next(iter(TokenBudgetBatchSampler(other, 16384, seed=2))), ShardingError)
    dist.barrier()
    return {"batches": batches, "disagree": disagree, "lengths": differ}


def hf_datasets(rank: int, world: int, path: str, n: int) -> dict:
    """A memory-mapped ``datasets.Dataset`` (``load_from_disk``) under ShardedSampler (spawn
    workers) and ShardedBatchSampler (fork), and a sharded ``datasets.IterableDataset``
    through ShardedIterable (2 spawn workers, 3 fork): the row ids each rank's loaders
    delivered. (Spawn once each: a spawned worker imports torch and datasets afresh.)"""
    import datasets

    from permshard import ShardedBatchSampler
    from permshard.data import ShardedIterable

    ds = datasets.load_from_disk(path).with_format("numpy")
    # Memory-mapped: the rows stay in the Arrow files under path.
    out: dict = {"files": [f["filename"] for f in ds.cache_files]}
    sampler = ShardedSampler(ds, seed=5)
    loader = DataLoader(ds, batch_size=7, sampler=sampler, num_workers=2, multiprocessing_context="spawn")
    out["sampler"] = [int(i) for batch in loader for i in batch["id"]]
    batches = ShardedBatchSampler(ShardedSampler(ds, seed=6), 8)
    loader = DataLoader(ds, batch_sampler=batches, num_workers=2, multiprocessing_context="fork")
    out["batch_sampler"] = [int(i) for batch in loader for i in batch["id"]]
    stream = datasets.Dataset.from_dict({"id": list(range(n))}).to_iterable_dataset(num_shards=6)
    for workers in (2, 3):
        loader = DataLoader(
            ShardedIterable(stream),
            batch_size=None,
            num_workers=workers,
            multiprocessing_context="spawn" if workers == 2 else "fork",
        )
        out[f"iterable_{workers}"] = [int(row["id"]) for row in loader]
    return out


def rows_run(rank: int, world: int, path: str, steps, state) -> dict:
    """``MemmapRows`` of int64 rows (each its own index) through a DataLoader without
    workers (each batch gathered ahead): ``steps`` batches of 16 (all if None) from
    ``state``; returns the rows this rank read, the state the loop's count gives, and
    the padding of the pass."""
    from permshard import ShardedBatchSampler
    from permshard.data import MemmapRows

    rows = MemmapRows(path, "int64")
    sampler = ShardedSampler(rows, seed=5)
    if state is not None:
        sampler.load_state_dict(state)
    batches = ShardedBatchSampler(sampler, 16)
    loader = DataLoader(rows, batch_sampler=batches, collate_fn=MemmapRows.collate)
    read: list[int] = []
    for step, batch in enumerate(loader, start=1):
        read += batch.tolist()
        if step == steps:  # saved after the step, as a training loop saves
            break
    plan = sampler.plan()
    return {"read": read, "state": batches.state_dict(), "padding": len(plan.padding_positions)}


def collate_with_mapped_files(batch):
    """``TokenWindows.collate``, and the token files this process (a DataLoader worker)
    has mapped so far, read from the kernel's list of its mappings."""
    from permshard.data import TokenWindows

    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if line.rstrip().endswith(".bin")}
    return TokenWindows.collate(batch), sorted(mapped)
