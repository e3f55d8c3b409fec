"""Proof workers of the multi-process tests (real gloo groups): exact and distributed
proofs on real ranks, after a resume, of a token-budget plan, and of a broken sampler.

Each worker runs on every rank (see ``distributed.launch``) and returns plain data
(counts, certificates, error messages) for the test to check.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, Subset

import permshard
from permshard import ShardedSampler, ShardingError

from .distributed import expect_error


class _Lying(ShardedSampler):
    """A broken sampler: announces seed 0 but iterates with another seed on one rank.
    Consensus cannot see it; the coverage fingerprint must."""

    def _partition(self, epoch, start):  # type: ignore[override]
        seed = self.seed + (1 if self.rank == self.num_replicas - 1 else 0)
        return self.config.replace(epoch=epoch, seed=seed).partition(start)


def proofs(rank: int, world: int, n: int) -> dict:
    out: dict = {}
    last = rank == world - 1

    # Good configurations over several epochs: consensus runs at each first iteration.
    out["good"] = []
    for drop_last in (False, True):
        s = ShardedSampler(n, drop_last=drop_last)
        for epoch in range(3):
            s.set_epoch(epoch)
            items = list(s)
            cert = s.verify_distributed()
            out["good"].append(
                (epoch, drop_last, sorted(items), cert.covered, cert.padding, cert.dropped, cert.ranks)
            )

    # A rank with another seed.
    s = ShardedSampler(n, seed=1 if last else 0)
    out["seed"] = expect_error(lambda: list(s), ShardingError)

    # A rank that forgot set_epoch.
    s = ShardedSampler(n)
    if not last:
        s.set_epoch(1)
    out["epoch"] = expect_error(lambda: list(s), ShardingError)

    # A rank with a different N.
    s = ShardedSampler(n + 1 if last else n)
    out["n"] = expect_error(lambda: list(s), ShardingError)

    # A dataset sliced per rank by hand, then split again: the first iteration sees every
    # rank's slice and refuses, on every rank.
    full = list(range(n))
    out["subset"] = expect_error(
        lambda: list(ShardedSampler(Subset(full, range(rank, n, world)))), ShardingError
    )
    sliced = full[rank::world]
    out["list_slice"] = expect_error(lambda: list(ShardedSampler(sliced)), ShardingError)

    # Consensus passes, but one rank's stream differs: only coverage can tell.
    lying = _Lying(n, check_consensus=False)
    out["coverage"] = expect_error(lambda: lying.verify_distributed(exact=False), ShardingError)

    # A loader double-split by hand: DistributedSampler inside a DistributedSampler-sized
    # dataset slice; check_loader counts what this rank draws.
    shard = Subset(full, list(range(rank, n, world)))
    loader = DataLoader(shard, batch_size=4, sampler=DistributedSampler(shard))
    out["check_loader_double"] = expect_error(lambda: permshard.check_loader(loader, total=n), ShardingError)
    good_loader = DataLoader(full, batch_size=4, sampler=ShardedSampler(full))
    out["check_loader_good"] = permshard.check_loader(good_loader)
    dist.barrier()
    return out


def exact_proofs(rank: int, world: int, n: int, model_parallel: bool) -> dict:
    """verify_distributed(exact=True) on real ranks: whole epochs of perm-v1 and block-v1,
    after a resume, and the streams the fingerprint catches (a lying rank), each next to
    the local bitmap proof of the same pass. With ``model_parallel`` pairs of processes
    share a sampler rank."""
    w, r = (world // 2, rank // 2) if model_parallel else (world, rank)
    out: dict = {}

    def both(s: ShardedSampler) -> tuple:
        exact, bitmap = s.verify_distributed(exact=True), s.verify(method="bitmap")
        return (
            (exact.method, exact.ranks, exact.covered, exact.padding, exact.dropped, exact.consumed),
            ("inverse", tuple(range(w)), bitmap.covered, bitmap.padding, bitmap.dropped, bitmap.consumed),
        )

    for name, kwargs in [
        ("perm", {}),
        ("perm_drop", {"drop_last": True}),
        ("block", {"block_size": 64, "window_blocks": 4}),
    ]:
        s = ShardedSampler(n, num_replicas=w, rank=r, seed=3, **kwargs)
        s.set_epoch(2)
        out[name] = both(s)
    # Resumed onto this world size from a 3-rank run's state (100 samples consumed).
    donor = ShardedSampler(n, num_replicas=3, rank=0, seed=3, check_consensus=False)
    s = ShardedSampler(n, num_replicas=w, rank=r, seed=3)
    s.load_state_dict(donor.state_dict(consumed_samples=99))
    out["resumed"] = both(s)
    # A rank whose stream follows another seed while it announces the agreed one.
    lying = _Lying(n, num_replicas=w, rank=r)
    out["lying"] = expect_error(lambda: lying.verify_distributed(exact=True), ShardingError)
    # A rank with another seed, announced: the consensus the proof starts with refuses it.
    other = ShardedSampler(n, num_replicas=w, rank=r, seed=1 if rank == world - 1 else 0)
    out["seed"] = expect_error(lambda: other.verify_distributed(exact=True), ShardingError)
    # In the background: the share proven while the loop reads the epoch, the same counts.
    s = ShardedSampler(n, num_replicas=w, rank=r, seed=3)
    s.set_epoch(2)
    pending = s.verify_in_background()
    read = [int(i) for batch in DataLoader(range(n), sampler=s, batch_size=97) for i in batch]
    background = pending.wait()
    out["background"] = (both(s)[0], (background.method, background.ranks, background.covered,
                         background.padding, background.dropped, background.consumed), len(read))  # fmt: skip
    out.update(_exact_budget_proofs(rank, world, n, w, r))
    dist.barrier()
    return out


def _planned_with_another_seed(sampler):  # type: ignore[no-untyped-def]
    """``sampler``'s pass, planned with the seed after its own (what a process whose
    sampler silently differs iterates)."""
    from permshard import _core

    proper = sampler._pass

    def pass_():  # type: ignore[no-untyped-def]
        planner = sampler.config.replace(seed=sampler.seed + 1).planner()
        return _core.BudgetPass(planner, sampler._lengths, proper().start, sampler.num_replicas)

    return pass_


def _exact_budget_proofs(rank: int, world: int, n: int, w: int, r: int) -> dict:
    """TokenBudgetBatchSampler.verify_distributed: split across the ranks, next to the
    local proof; after a resume from 3 ranks; a plan broken on the last process."""
    import numpy as np

    from permshard._token_budget import TokenBudgetBatchSampler

    lengths = np.clip(np.random.default_rng(3).lognormal(5.5, 0.8, size=n), 1, 4096).astype(np.int32)

    def sampler() -> TokenBudgetBatchSampler:
        s = TokenBudgetBatchSampler(lengths, 16384, w, r, seed=3, window=1024)
        s.set_epoch(1)
        return s

    def both(s: TokenBudgetBatchSampler) -> tuple:
        exact, local = s.verify_distributed(exact=True), s.verify()
        fields = ("method", "ranks", "lengths", "batches", "covered", "padding", "dropped", "consumed")
        return tuple(getattr(exact, f) for f in fields), tuple(getattr(local, f) for f in fields), len(s)

    out = {"budget": both(sampler())}
    ahead = sampler()
    pending = ahead.verify_in_background()
    ahead.set_epoch(2)  # after the call: the proof is of the pass as it was
    later = pending.wait()
    out["budget_background"] = (later.epoch, later.batches, later.covered, later.lengths)
    donor = TokenBudgetBatchSampler(lengths, 16384, 3, 1, seed=3, window=1024, check_consensus=False)
    donor.set_epoch(1)
    it = iter(donor)
    [next(it) for _ in range(40)]
    resumed = sampler()
    resumed.load_state_dict(donor.state_dict())
    out["budget_resumed"] = both(resumed)
    # The last process plans with another seed while it announces the agreed one: its
    # plans agree with themselves, and fail against the agreed plan from its first window.
    broken = sampler()
    if rank == world - 1:
        broken._pass = _planned_with_another_seed(broken)  # type: ignore[method-assign]
    out["budget_broken"] = expect_error(broken.verify_distributed, ShardingError)
    return out


def resumed_proofs(rank: int, world: int, n: int) -> dict:
    """Proofs after a resume onto this world size, with no pickling collective at all
    (what NCCL would put on GPU 0): verify and verify_distributed prove the same pass."""
    import warnings

    def no_pickles(*args, **kwargs):
        raise AssertionError("all_gather_object used: unsafe on NCCL")

    dist.all_gather_object = no_pickles  # type: ignore[assignment]
    out: dict = {}
    # Saved by a 3-rank run after 7 steps of 5: 105 global samples of epoch 2 consumed.
    donor = ShardedSampler(n, num_replicas=3, rank=0, seed=9, check_consensus=False)
    donor.set_epoch(2)
    state = donor.state_dict(consumed_samples=105)
    s = ShardedSampler(n, seed=9)
    s.load_state_dict(state)
    s.set_epoch(2)
    out["len"] = len(s)
    out["items"] = list(s.iter_with_padding())
    local, distributed = s.verify(), s.verify_distributed()
    out["local"] = (local.start, local.consumed, local.covered, local.padding, local.dropped)
    out["distributed"] = (
        distributed.start,
        distributed.consumed,
        distributed.covered,
        distributed.padding,
        distributed.dropped,
        str(distributed),
    )
    # One rank resumed from another point: refused on every rank, naming the fix.
    s = ShardedSampler(n, seed=9)
    s.load_state_dict(dict(state, consumed=110 if rank == world - 1 else 105))
    out["start"] = expect_error(lambda: list(s), ShardingError)
    # The legitimate every-other-sample subset, the same on every rank: no warning, no error.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        subset = Subset(list(range(n)), range(0, n, 2))
        s = ShardedSampler(subset)
        out["subset_items"] = [subset.indices[i] for i in s]
    out["subset_warnings"] = [str(w.message) for w in caught]
    dist.barrier()
    return out


#: Each field every rank must agree on, the value of every rank but the last and the last's.
DISAGREEMENTS = {
    "shuffle": (True, False),
    "drop_last": (False, True),
    "algorithm": ("perm-v2", "perm-v1"),
    "block_size": (8, 16),
    "window_blocks": (4, 8),
    "exclude": ([3], [4]),
}


def disagreements(rank: int, world: int, n: int) -> dict:
    """For each agreed field, the last rank builds its sampler with another value: every
    rank's first iteration must refuse (a rank that read on would stall the others)."""
    import numpy as np

    from permshard import ShardedBatchSampler, StepBatchSampler, TokenBudgetBatchSampler

    last = rank == world - 1
    out: dict = {}
    for field, (value, other) in DISAGREEMENTS.items():
        fields = {field: other if last else value}
        if field in ("block_size", "window_blocks"):  # the two go together
            fields = {"block_size": 8, "window_blocks": 4, **fields}
        sampler = ShardedSampler(n, seed=3, **fields)
        out[field] = expect_error(lambda s=sampler: list(s), ShardingError)
    batch_fields = {
        "batch_size": lambda: StepBatchSampler(ShardedSampler(n), 9 if last else 8),
        "drop_last_batch": lambda: StepBatchSampler(ShardedSampler(n), 8, drop_last=last),
        "dealing": lambda: (StepBatchSampler if last else ShardedBatchSampler)(ShardedSampler(n), 8),
    }
    for field, make in batch_fields.items():
        batches = make()
        out[field] = expect_error(lambda b=batches: list(b), ShardingError)
    lengths = np.arange(n) % 7 + 1
    budget_fields = {"max_tokens": (32, 40), "window": (64, 128)}
    for field, (value, other) in budget_fields.items():
        kwargs = {"max_tokens": 32, "window": 64, field: other if last else value}
        budget = TokenBudgetBatchSampler(lengths, kwargs.pop("max_tokens"), **kwargs)
        out[field] = expect_error(lambda b=budget: list(b), ShardingError)
    dist.barrier()
    return out


def one_replica_loader(rank: int, world: int, n: int) -> dict:
    """check_loader on a loader whose sampler has one replica in a group of ``world``
    (every process a model-parallel peer of one data-parallel rank): its share is all."""
    data = list(range(n))
    loader = DataLoader(data, batch_size=4, sampler=ShardedSampler(data, num_replicas=1, rank=0))
    return {"drawn": permshard.check_loader(loader)}
