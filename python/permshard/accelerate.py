"""accelerate without the double split: ``prepare_data_loader(accelerator, dataloader)``.

``accelerator.prepare(loader)`` wraps every map-style loader in ``BatchSamplerShard``, which
splits by process again — with a DistributedSampler inside, each rank trains on 1/W² of
the data. This module shards exactly once, with permshard, and keeps what accelerate users
rely on: device placement, the end-of-dataloader signal for gradient accumulation,
``gather_for_metrics`` dropping the padding of the last evaluation batch,
``set_epoch``, and ``save_state`` / ``load_state`` restoring the position in O(1).

accelerate's public ``DataLoaderShard`` does the loader work; the only other contact
with accelerate is :func:`register_for_checkpointing`. (A permshard sampler handed to
``accelerator.prepare`` directly raises ``ShardingError`` at the first iteration instead of
training on 1/W²; see ``permshard._guards.check_not_wrapped_by_accelerate``.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional

from torch.utils.data import BatchSampler, DataLoader

from ._adapter import check_group, check_world, kept_options, optional_import, sharded_sampler
from ._batch_sampler import ShardedBatchSampler, StepBatchSampler
from ._distributed import mesh_world
from ._sampler import ShardedSampler
from ._token_budget import TokenBudgetBatchSampler

__all__ = ["StepBatchSampler", "data_parallel_world", "prepare_data_loader"]

#: How accelerate comes to count the processes torchrun started.
FIX_ACCELERATE_GROUP = (
    "On a machine without a GPU, pass Accelerator(cpu=True) or set ACCELERATE_USE_CPU=1: "
    "accelerate then joins the process group. Under model parallelism, declare it "
    "(Accelerator(parallelism_config=ParallelismConfig(...))) so the data-parallel ranks come "
    "from its device mesh."
)


def _sharded_sampler(
    loader: DataLoader[Any], num_processes: int, process_index: int
) -> tuple[ShardedSampler, int, bool]:
    """The loader's ShardedSampler (by the one policy of every integration), its batch
    size and drop_last."""
    batch_sampler = loader.batch_sampler
    if not isinstance(batch_sampler, (ShardedBatchSampler, BatchSampler)):
        raise TypeError(
            "prepare_data_loader needs a map-style DataLoader with a batch_size (or a "
            f"batch_sampler that is a BatchSampler), got batch_sampler={type(batch_sampler).__name__}"
        )
    sampler = sharded_sampler(
        batch_sampler.sampler, loader.dataset, num_processes, process_index, "accelerate"
    )
    return sampler, int(batch_sampler.batch_size), bool(batch_sampler.drop_last)


def data_parallel_world(accelerator: Any) -> tuple[int, int]:
    """``(num_replicas, rank)`` of this process among the data-parallel ranks.

    Without model parallelism: accelerate's process count and index, which must be the
    process group's (``Accelerator()`` on a machine without a GPU runs as one process even
    under ``torchrun`` unless told ``cpu=True``: refused, never read on every rank). With a
    ``ParallelismConfig`` (tensor, context or sequence parallel dims), the coordinate along
    its data-parallel dims (``dp_replicate``, ``dp_shard``) of ``accelerator.torch_device_mesh``:
    model-parallel peers read the same batches.

    Args:
        accelerator (accelerate.Accelerator): the accelerator of this process.

    Raises:
        ShardingError: a process group of another size than accelerate's process count,
            and no parallelism config that says why.
    """
    config = getattr(accelerator, "parallelism_config", None)
    mesh = getattr(accelerator, "torch_device_mesh", None)
    if config is None or mesh is None:
        world = int(accelerator.num_processes)
        check_group(world, f"accelerate ({accelerator.distributed_type})", FIX_ACCELERATE_GROUP)
        return world, int(accelerator.process_index)
    dims = tuple(config.dp_dim_names)
    return mesh_world(mesh, dims) if dims else (1, 0)


class _Checkpoint:
    """What ``accelerator.save_state`` stores for a permshard loader: the sampler's
    state at the batches the training loop really received (accelerate's loader runs one
    batch ahead; workers prefetch more). ``state_after(batches)`` is that state after
    ``batches`` delivered in the sampler's epoch, ``None`` when none were."""

    def __init__(
        self, loader: Any, sampler: Any, state_after: Callable[[Optional[int]], dict[str, Any]]
    ) -> None:
        self.loader = loader
        self.sampler = sampler
        self.state_after = state_after

    def state_dict(self) -> dict[str, Any]:
        epoch, delivered = getattr(self.loader, "_permshard_delivered", (None, 0))
        return self.state_after(delivered if epoch == self.sampler.epoch else None)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        self.sampler.load_state_dict(state_dict, strict)
        # DataLoaderShard calls set_epoch(iteration) at each pass: make it the saved epoch.
        self.loader.iteration = int(state_dict["epoch"])


def prepare_data_loader(accelerator: Any, dataloader: DataLoader[Any]) -> Any:
    r"""Prepares ``dataloader`` for ``accelerator``, sharded once by permshard.

    Use it instead of ``accelerator.prepare(dataloader)`` (prepare models and optimizers
    as usual). The loader's sampler may be a :class:`ShardedSampler`, a
    ``DistributedSampler`` (replaced by the equivalent ShardedSampler, as in every
    integration) or the plain
    sampler of ``shuffle=True/False``; a loader whose ``batch_sampler`` is a
    :class:`~permshard.TokenBudgetBatchSampler` keeps it as is. With accelerate's
    ``ParallelismConfig``, the data
    is split across its data-parallel dims only (see :func:`data_parallel_world`).

    Args:
        accelerator (accelerate.Accelerator): the accelerator.
        dataloader (DataLoader): a map-style loader with a ``batch_size``.

    Returns:
        accelerate.data_loader.DataLoaderShard: batches on ``accelerator.device``; the
        sampler position is saved and restored by ``accelerator.save_state`` /
        ``load_state``.

    Example::

        >>> loader = DataLoader(ds, batch_size=32, sampler=ShardedSampler(ds))
        >>> loader = permshard.accelerate.prepare_data_loader(accelerator, loader)
        >>> model, optimizer = accelerator.prepare(model, optimizer)
    """
    world = data_parallel_world(accelerator)
    if isinstance(dataloader.batch_sampler, TokenBudgetBatchSampler):
        # Already one rank's batches: wrapped as is, its position saved with the state.
        batches: Any = dataloader.batch_sampler
        check_world(batches, *world, "accelerate")
        drop_last = False
    else:
        sampler, batch_size, drop_last = _sharded_sampler(dataloader, *world)
        batches = StepBatchSampler(sampler, batch_size, drop_last)
    kwargs = kept_options(dataloader)
    device: Optional[Any] = accelerator.device if getattr(accelerator, "device_placement", True) else None
    loader = _loader_class()(
        dataloader.dataset,
        device=device,
        batch_sampler=batches,
        _drop_last=drop_last,
        _non_blocking=getattr(accelerator, "non_blocking", False),
        **kwargs,
    )
    if isinstance(batches, TokenBudgetBatchSampler):
        budget = batches
        checkpoint = _Checkpoint(loader, budget, lambda steps: budget.state_dict(consumed_steps=steps or 0))
    else:

        def state_after(steps: Optional[int]) -> dict[str, Any]:
            if steps is None:
                return sampler.state_dict()
            return sampler.state_dict(batches.dealt()[0].consumed_after_batches(steps))

        checkpoint = _Checkpoint(loader, sampler, state_after)
    accelerator.register_for_checkpointing(checkpoint)
    return loader


@functools.cache
def _loader_class() -> Any:
    """accelerate's ``DataLoaderShard`` counting the batches handed to the loop (built on
    first use: importing permshard.accelerate does not import accelerate)."""
    DataLoaderShard: Any = optional_import("accelerate.data_loader", "accelerate").DataLoaderShard

    class PermshardDataLoaderShard(DataLoaderShard):  # type: ignore[misc]
        """DataLoaderShard that counts the batches handed to the training loop."""

        def __iter__(self) -> Iterator[Any]:
            # (epoch, batches handed to the loop in it); the epoch is set by the iteration.
            self._permshard_delivered = (None, 0)
            for batch in super().__iter__():
                epoch, delivered = self._permshard_delivered
                sampler: Any = getattr(self.batch_sampler, "sampler", self.batch_sampler)
                self._permshard_delivered = (sampler.epoch, delivered + 1)
                yield batch

    return PermshardDataLoaderShard
