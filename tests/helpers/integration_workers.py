"""Integration workers of the multi-process tests (real gloo groups): accelerate, the HF
Trainer and Lightning on real ranks.

Each worker runs on every rank (see ``distributed.launch``) and returns plain data
(counts, certificates, error messages) for the test to check.
"""

from __future__ import annotations

from torch.utils.data import DataLoader, DistributedSampler

import permshard
from permshard import ShardedSampler, ShardingError

from .distributed import expect_error


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

    from permshard.transformers import ShardedTrainer

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
    # What TrainingArguments say of the loader reaches it (other values than the defaults).
    passed = TrainingArguments(
        output_dir=folder, per_device_train_batch_size=4, use_cpu=True, report_to=[], seed=11,
        dataloader_drop_last=True, dataloader_num_workers=1, dataloader_pin_memory=False,
    )  # fmt: skip
    loader = ShardedTrainer(model=Tiny(), args=passed, train_dataset=data).get_train_dataloader()
    batches = loader.batch_sampler
    settings = {
        "seed": batches.sampler.seed,
        "drop_last": batches.drop_last,
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "world": (batches.sampler.num_replicas, batches.sampler.rank),
        "batches": len(batches),
    }
    return {"seen": seen, "per_epoch": -(-n // world), "settings": settings}


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
