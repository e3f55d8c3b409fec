"""Worker functions run on every rank of a real gloo group (see ``distributed.launch``).

Each returns plain data (counts, certificates, error messages) for the test to check.
"""

from __future__ import annotations

import torch.distributed as dist
from distributed import expect_error
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Subset

import permshard
from permshard import ShardedSampler, ShardingError


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


def _first_window_failed(sampler):  # type: ignore[no-untyped-def]
    """``sampler``'s window proofs, reporting the first window proven as failed (what a
    broken plan on one process gives)."""
    from permshard import _core

    proven = sampler._windows_proven

    def windows_proven(planner, start, first, stride):  # type: ignore[no-untyped-def]
        world = sampler.num_replicas
        words = proven(planner, start, first, stride).words(world)
        words[1:3] = [1, first]  # failed: the first window proven
        return _core.BudgetShare.from_words(words, world)

    return windows_proven


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
    broken = sampler()
    if rank == world - 1:  # one process's proof finds its first window broken
        broken._windows_proven = _first_window_failed(broken)  # type: ignore[method-assign]
    out["budget_broken"] = expect_error(broken.verify_distributed, ShardingError)
    return out


def accelerate_double_split(rank: int, world: int, n: int) -> dict:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    data = list(range(n))
    out: dict = {"world": accelerator.num_processes}
    # torch's DistributedSampler: accelerate really splits again (1/W²); check_loader says so.
    prepared = accelerator.prepare(DataLoader(data, batch_size=4, sampler=DistributedSampler(data)))
    drawn = sum(len(b) for b in prepared)
    out["distributed"] = (drawn, expect_error(lambda: permshard.check_loader(prepared), ShardingError))
    # A permshard sampler: check_loader says so too, and iterating fails at once.
    prepared = accelerator.prepare(DataLoader(data, batch_size=4, sampler=ShardedSampler(data)))
    out["sharded_check"] = expect_error(lambda: permshard.check_loader(prepared), ShardingError)
    out["sharded_iter"] = expect_error(lambda: next(iter(prepared)), ShardingError)
    return out


class Docs(IterableDataset):
    """A ConstantLengthDataset-style stream that shards itself inside ``__iter__`` with
    no rank passed: what a DataLoader worker must resolve on its own."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        from permshard.data import shard_iterable

        return shard_iterable(range(self.n))


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


def _accelerate_loader(n: int, batch_size: int):
    from accelerate import Accelerator

    import permshard.accelerate

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    data = list(range(n))
    loader = DataLoader(data, batch_size=batch_size, sampler=ShardedSampler(data, seed=5))
    return accelerator, permshard.accelerate.prepare_data_loader(accelerator, loader)


def accelerate_train_eval_interrupt(rank: int, world: int, n: int, folder: str, steps: int) -> dict:
    """Epoch 0 in full (+ an evaluation with gather_for_metrics), then epoch 1 stopped
    after `steps` steps and saved with accelerator.save_state."""
    accelerator, loader = _accelerate_loader(n, 8)
    out: dict = {"epoch0": [], "sync": []}
    for batch in loader:
        out["epoch0"] += batch.tolist()
        out["sync"].append((accelerator.gradient_state.end_of_dataloader, accelerator.sync_gradients))
    gathered = []
    for batch in loader:  # the second pass is epoch 1 (DataLoaderShard advances the epoch)
        gathered += accelerator.gather_for_metrics(batch).tolist()
    out["gathered"] = gathered
    loader.set_epoch(2)
    out["epoch2_head"] = []
    for step, batch in enumerate(loader):
        out["epoch2_head"] += batch.tolist()
        if step + 1 == steps:
            break
    accelerator.save_state(folder)
    out["padding"] = len(loader.batch_sampler.sampler.plan().padding_positions)
    # Straight through accelerator.prepare: an error at the first iteration, not 1/W².
    from torch.utils.data import DataLoader as DL

    data = list(range(n))
    wrapped = accelerator.prepare(DL(data, batch_size=8, sampler=ShardedSampler(data)))
    out["prepare_error"] = expect_error(lambda: next(iter(wrapped)), ShardingError)
    return out


def accelerate_resume(rank: int, world: int, n: int, folder: str) -> dict:
    accelerator, loader = _accelerate_loader(n, 8)
    accelerator.load_state(folder)
    sampler = loader.batch_sampler.sampler
    padding = len(sampler.plan().padding_positions)
    rest = [x for batch in loader for x in batch.tolist()]
    return {"rest": rest, "epoch": sampler.epoch, "padding": padding}


def hf_trainer(rank: int, world: int, n: int, folder: str) -> dict:
    """A tiny model built in code, trained one epoch by ShardedTrainer on real ranks."""
    import torch
    from transformers import TrainingArguments

    from permshard.integrations import ShardedTrainer

    seen: list[int] = []

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, labels, idx):  # type: ignore[no-untyped-def]
            seen.extend(idx.tolist())
            return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}

    data = [{"x": torch.randn(4), "labels": torch.tensor(0.5), "idx": torch.tensor(i)} for i in range(n)]
    args = TrainingArguments(
        output_dir=folder,
        per_device_train_batch_size=4,
        num_train_epochs=2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        seed=7,
    )
    trainer = ShardedTrainer(model=Tiny(), args=args, train_dataset=data)
    trainer.train()
    return {"seen": seen, "per_epoch": -(-n // world)}


def lightning_ddp(rank: int, world: int, n: int) -> dict:
    """A LightningDataModule with a ShardedSampler under Lightning's ddp (CPU, gloo), with
    the default use_distributed_sampler=True: the sampler must be used as is."""
    import os

    import lightning as L
    import torch

    # Lightning joins the process group this launcher started (torchelastic-style env).
    os.environ.update(TORCHELASTIC_RUN_ID="permshard-test", GROUP_RANK="0")
    data = list(range(n))
    seen: list[list[int]] = []

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def on_train_epoch_start(self) -> None:
            seen.append([])

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            seen[-1].extend(batch.tolist())
            return self.layer(batch.float().unsqueeze(-1)).sum()

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            return DataLoader(data, batch_size=4, sampler=ShardedSampler(data, seed=3))

    trainer = L.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), datamodule=Data())
    sampler = trainer.train_dataloader.sampler
    return {"seen": seen, "sampler": type(sampler).__name__, "epoch": sampler.epoch}


def model_parallel(rank: int, world: int, n: int) -> dict:
    """4 processes laid out as dp = 2 x tp = 2 (manual ranks and a DeviceMesh), tp only,
    a (2, 2, 1) mesh, and a tensor-parallel peer with another seed."""
    from torch.distributed.device_mesh import init_device_mesh

    out: dict = {}
    dp_rank, tp_rank = divmod(rank, 2)

    def run(sampler) -> dict:
        items = list(sampler)
        cert = sampler.verify_distributed()
        return {"items": items, "covered": cert.covered, "lengths": cert.lengths}

    out["manual"] = run(ShardedSampler(n, num_replicas=2, rank=dp_rank, seed=3))
    out["tp_only"] = run(ShardedSampler(n, num_replicas=1, rank=0, seed=3))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    s = ShardedSampler(n, device_mesh=mesh, mesh_dim="dp", seed=3)
    out["mesh"] = dict(run(s), dp=(s.num_replicas, s.rank))
    mesh3 = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
    s = ShardedSampler(n, device_mesh=mesh3, mesh_dim=("dp_replicate", "dp_shard"), seed=3)
    out["mesh3"] = dict(run(s), dp=(s.num_replicas, s.rank))
    bad = ShardedSampler(n, num_replicas=2, rank=dp_rank, seed=4 if rank == 3 else 3)
    out["bad_peer"] = expect_error(lambda: list(bad), ShardingError)
    uneven = ShardedSampler(n, num_replicas=2, rank=0 if rank < 3 else 1)
    out["uneven"] = expect_error(lambda: list(uneven), ShardingError)
    dist.barrier()
    return out


def model_parallel_loaders(rank: int, world: int, n: int) -> dict:
    """dp = 2 x tp = 2: shard_iterable / ShardedIterable from a mesh (with DataLoader
    workers), and the accelerate helper under accelerate's own ParallelismConfig."""
    from accelerate import Accelerator
    from accelerate.parallelism_config import ParallelismConfig
    from torch.distributed.device_mesh import init_device_mesh

    import permshard.accelerate
    from permshard.data import ShardedIterable

    out: dict = {}
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    docs = ShardedIterable(range(n), device_mesh=mesh, mesh_dim="dp")
    loader = DataLoader(docs, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    out["iterable"] = sorted(int(x) for x in loader)
    out["iterable_rank"] = (docs.rank, docs.world_size)
    out["iterable_error"] = expect_error(
        lambda: ShardedIterable(range(n), device_mesh=mesh, mesh_dim="dp", rank=0), ValueError
    )

    # accelerate 1.15 accepts a ParallelismConfig only on GPUs (FSDP2 / multi-GPU): on CPU
    # it is attached to the state as Accelerator.__init__ does there, with accelerate's own
    # mesh (built by the config, flattened dims included).
    accelerator = Accelerator(cpu=True)
    config = ParallelismConfig(dp_shard_size=2, tp_size=2)
    accelerator.state.parallelism_config = config
    accelerator.state.device_mesh = config.get_device_mesh("cpu")
    out["accelerate_world"] = permshard.accelerate.data_parallel_world(accelerator)
    data = list(range(n))
    prepared = permshard.accelerate.prepare_data_loader(
        accelerator, DataLoader(data, batch_size=4, shuffle=True)
    )
    out["accelerate"] = [x for batch in prepared for x in batch.tolist()]
    wrong = DataLoader(data, batch_size=4, sampler=ShardedSampler(data))  # 4 ranks: not the dp world
    out["accelerate_error"] = expect_error(
        lambda: permshard.accelerate.prepare_data_loader(accelerator, wrong), ShardingError
    )
    dist.barrier()
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


def accelerate_token_budget(rank: int, world: int, n: int, folder: str, steps) -> list:
    """The accelerate helper around a TokenBudgetBatchSampler: `steps` batches then
    save_state (steps=None: load_state and finish the epoch)."""
    import numpy as np
    from accelerate import Accelerator

    import permshard.accelerate
    from permshard._token_budget import TokenBudgetBatchSampler

    accelerator = Accelerator(cpu=True)
    lengths = np.clip(np.random.default_rng(1).lognormal(5.5, 0.8, size=n), 1, 4096).astype(np.int64)
    sampler = TokenBudgetBatchSampler(lengths, 16384, seed=4, window=2048)
    loader = permshard.accelerate.prepare_data_loader(
        accelerator, DataLoader(list(range(n)), batch_sampler=sampler)
    )
    if steps is None:
        accelerator.load_state(folder)
        return [x for batch in loader for x in batch.tolist()]
    read = []
    for step, batch in enumerate(loader):
        read += batch.tolist()
        if step + 1 == steps:
            break
    accelerator.save_state(folder)
    return read


def hf_datasets(rank: int, world: int, path: str, n: int) -> dict:
    """A memory-mapped ``datasets.Dataset`` (``load_from_disk``) under ShardedSampler and
    ShardedBatchSampler with spawn workers, and a sharded ``datasets.IterableDataset``
    through ShardedIterable: the row ids each rank's loaders delivered."""
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
    loader = DataLoader(ds, batch_sampler=batches, num_workers=2, multiprocessing_context="spawn")
    out["batch_sampler"] = [int(i) for batch in loader for i in batch["id"]]
    stream = datasets.Dataset.from_dict({"id": list(range(n))}).to_iterable_dataset(num_shards=6)
    for workers in (2, 3):
        loader = DataLoader(
            ShardedIterable(stream),
            batch_size=None,
            num_workers=workers,
            multiprocessing_context="spawn" if workers else None,
        )
        out[f"iterable_{workers}"] = [int(row["id"]) for row in loader]
    return out
