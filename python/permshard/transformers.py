"""Hugging Face ``transformers``: its ``Trainer`` with a loader sharded once.

``ShardedTrainer`` — a ``transformers.Trainer`` whose training loader is sharded once, by
permshard. ``Trainer.get_train_dataloader`` hands a loader with a ``DistributedSampler``-
like sampler to ``accelerator.prepare``; this subclass builds it with a
:class:`~permshard.ShardedSampler` and :func:`permshard.accelerate.prepare_data_loader`
instead, so ranks read disjoint, perm-v2-shuffled parts of the data every epoch.

Lightning needs no recipe: it leaves a sampler alone when it is a ``DistributedSampler``,
which :class:`~permshard.ShardedSampler` is, and calls its ``set_epoch`` every epoch
(tested under Lightning's ddp).
"""

from __future__ import annotations

import functools
from typing import Any

from torch.utils.data import DataLoader

from ._adapter import optional_import

__all__ = ["ShardedTrainer"]  # noqa: F822 (built on first use by __getattr__)


@functools.cache
def _trainer_class() -> Any:
    Trainer: Any = optional_import("transformers", "transformers").Trainer

    from ._sampler import ShardedSampler
    from .accelerate import prepare_data_loader

    class ShardedTrainer(Trainer):  # type: ignore[misc]
        r"""``transformers.Trainer`` with a permshard training loader.

        Use it exactly like ``Trainer``. The training sampler is
        ``ShardedSampler(train_dataset, seed=args.seed)`` split over
        ``args.world_size`` processes; the Trainer's ``set_epoch`` calls reach it.

        Example::

            >>> trainer = ShardedTrainer(model=model, args=args, train_dataset=ds)
            >>> trainer.train()
        """

        def get_train_dataloader(self) -> DataLoader[Any]:
            if self.train_dataset is None:
                raise ValueError("ShardedTrainer needs a train_dataset")
            dataset: Any = self.train_dataset
            collator = self._get_collator_with_removed_columns(self.data_collator, description="training")
            sampler = ShardedSampler(
                dataset,
                num_replicas=self.args.world_size,
                rank=self.args.process_index,
                seed=self.args.seed,
            )
            loader: DataLoader[Any] = DataLoader(
                dataset,
                batch_size=self._train_batch_size,
                sampler=sampler,
                collate_fn=collator,
                num_workers=self.args.dataloader_num_workers,
                pin_memory=self.args.dataloader_pin_memory,
                drop_last=self.args.dataloader_drop_last,
            )
            return prepare_data_loader(self.accelerator, loader)  # type: ignore[no-any-return]

    return ShardedTrainer


def __getattr__(name: str) -> Any:
    # transformers is imported only when the recipe is used.
    if name == "ShardedTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
