"""permshard for Ray Train: ``prepare_data_loader`` that keeps permshard's samplers.

Ray's own ``ray.train.torch.prepare_data_loader`` keeps a loader whose ``sampler`` is a
``DistributedSampler`` (a ``ShardedSampler`` is one), but rebuilds every other loader as
``DataLoader(batch_size=loader.batch_size, sampler=DistributedSampler(shuffle=...))``.
torch reports a custom ``batch_sampler`` (``ShardedBatchSampler``,
``TokenBudgetBatchSampler``) as a ``SequentialSampler`` with ``batch_size=None``, so Ray
replaces it without a warning: the batches come unbatched and unshuffled (rank 0 reading
0, 2, 4, ...), or crash in ``default_collate``. Ray's ``add_dist_sampler=False`` avoids
it; this module does the right thing by default:

* permshard's samplers and batch samplers are kept as they are (their rank and world
  checked against Ray's);
* a loader with torch's default sampler (``shuffle=True`` or ``False``) gets a
  :class:`~permshard.ShardedSampler` where Ray would put a ``DistributedSampler``, and a
  ``DistributedSampler`` is replaced by the equivalent ``ShardedSampler`` (the policy of
  every permshard integration; call ``set_epoch`` on the prepared ``loader.sampler``),
  keeping ``batch_size``, ``drop_last``, the workers, ``persistent_workers``,
  ``prefetch_factor`` and ``multiprocessing_context`` (Ray drops the last three);
* batches move to the worker's device, as Ray's do, without drawing one ahead: a
  sampler's default ``state_dict()`` counts exactly the batches the loop received.

ray is not a dependency of permshard: this module imports it on use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from ._adapter import check_group, check_world, kept_options, optional_import, sharded_sampler
from ._batch_sampler import ShardedBatchSampler
from ._token_budget import TokenBudgetBatchSampler

__all__ = ["DeviceLoader", "prepare_data_loader"]


def prepare_data_loader(
    data_loader: DataLoader[Any],
    *,
    add_dist_sampler: bool = True,
    move_to_device: bool = True,
    auto_transfer: bool = True,
) -> Any:
    """Prepares ``data_loader`` for this Ray Train worker: sharded once, by permshard, and
    (with ``move_to_device``) yielding batches on the worker's device. Call it inside the
    training function, as Ray's own.

    Args:
        data_loader (DataLoader): the loader to prepare.
        add_dist_sampler (bool, optional): shard a loader that is not sharded yet (torch's
            default sampler) with a :class:`~permshard.ShardedSampler` over Ray's world.
            Default: ``True``.
        move_to_device (bool, optional): move each batch's tensors to
            ``ray.train.torch.get_device()``. Default: ``True``.
        auto_transfer (bool, optional): on a GPU, copy without blocking (from page-locked
            memory with ``pin_memory=True``). Default: ``True``.

    Returns:
        DataLoader or DeviceLoader: the loader to iterate.

    Raises:
        ShardingError: a permshard sampler splits over another world than Ray's.
        TypeError: the loader's sampler is a custom one that does not shard.

    Example::

        >>> def train_loop_per_worker(config):
        ...     loader = DataLoader(dataset, batch_sampler=ShardedBatchSampler(ShardedSampler(dataset), 32))
        ...     loader = permshard.ray.prepare_data_loader(loader)
        ...     for epoch in range(config["epochs"]):
        ...         loader.sampler.set_epoch(epoch)
        ...         for batch in loader: pass
    """
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"data_loader must be a torch DataLoader, got {type(data_loader).__name__}")
    train = optional_import("ray.train", "ray[train]")
    torch_train = optional_import("ray.train.torch", "ray[train]")
    context = train.get_context()
    world, rank = int(context.get_world_size()), int(context.get_world_rank())
    check_group(
        world, "Ray Train", "Prepare the loader inside the training function Ray Train runs on each worker."
    )
    loader = data_loader
    if add_dist_sampler and world > 1 and not isinstance(loader.dataset, IterableDataset):
        loader = _sharded(loader, world, rank)
    if move_to_device:
        return DeviceLoader(loader, torch_train.get_device(), non_blocking=auto_transfer)
    return loader


def _sharded(loader: DataLoader[Any], world: int, rank: int) -> DataLoader[Any]:
    """``loader`` if a permshard sampler shards it already, else rebuilt on the
    ``ShardedSampler`` the integrations' one policy gives (for a ``DistributedSampler`` or
    torch's default samplers), with the same batches, workers and options."""
    batch_sampler = loader.batch_sampler
    batch: dict[str, Any]
    if isinstance(batch_sampler, (ShardedBatchSampler, TokenBudgetBatchSampler)):
        check_world(batch_sampler, world, rank, "Ray Train")
        return loader
    if type(batch_sampler) is BatchSampler:
        inner = batch_sampler.sampler
        batch = {"batch_size": batch_sampler.batch_size, "drop_last": batch_sampler.drop_last}
    elif batch_sampler is None:
        inner, batch = loader.sampler, {"batch_size": None}
    else:
        raise TypeError(
            f"cannot shard a DataLoader whose batch_sampler is a {type(batch_sampler).__name__} (it "
            "would read the whole dataset on every worker): build it on a permshard batch sampler, "
            "or pass add_dist_sampler=False"
        )
    sharded = sharded_sampler(inner, loader.dataset, world, rank, "Ray Train")
    if sharded is inner:
        return loader
    return DataLoader(loader.dataset, sampler=sharded, **batch, **kept_options(loader))


def _to(value: Any, device: torch.device, non_blocking: bool) -> Any:
    """``value`` with every tensor in it (through dicts, lists, tuples) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if isinstance(value, Mapping):
        return type(value)({k: _to(v, device, non_blocking) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_to(v, device, non_blocking) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device, non_blocking) for v in value)
    return value


class DeviceLoader:
    """A DataLoader whose batches arrive on ``device``. It draws a batch from the loader
    only when the loop asks for one, so a sampler's default ``state_dict()`` (which counts
    the batches the DataLoader handed out) is exact. Every other attribute (``sampler``,
    ``batch_sampler``, ``dataset``, ...) is the loader's.

    Args:
        loader (DataLoader): the loader to wrap.
        device (torch.device): where the batches go.
        non_blocking (bool, optional): copy without blocking (CUDA). Default: ``True``.
    """

    def __init__(self, loader: DataLoader[Any], device: Any, *, non_blocking: bool = True) -> None:
        self.loader, self.device = loader, torch.device(device)
        self.non_blocking = bool(non_blocking) and self.device.type == "cuda"

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield _to(batch, self.device, self.non_blocking)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _stateful(self) -> Any:
        for owner in (self.loader.batch_sampler, self.loader.sampler):
            if callable(getattr(owner, "state_dict", None)):
                return owner
        raise TypeError("the loader's sampler has no state_dict(): build it on a permshard sampler")

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state at the batches the loop received."""
        state: dict[str, Any] = self._stateful().state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores the sampler's resume point (onto another number of workers too).

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict`.
            strict (bool, optional): refuse keys the sampler does not save. Default: ``True``.
        """
        self._stateful().load_state_dict(state_dict, strict)

    def __repr__(self) -> str:
        return f"DeviceLoader({self.loader!r}, device={self.device})"
