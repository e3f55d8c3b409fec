"""The one adapter behind every framework integration (accelerate, Ray Train, the HF
Trainer, grain): which samplers a prepared loader keeps, which it replaces and which it
refuses; the check that what it keeps splits over the framework's world; what a rebuilt
DataLoader keeps of the loader it replaces; and the import of a framework permshard does
not depend on. Each integration module is a thin shim over these.

The policy, the same in every framework:

* permshard's samplers and batch samplers are kept, their world checked against the
  framework's;
* a ``DistributedSampler`` is replaced by the equivalent :class:`~permshard.ShardedSampler`
  (its world checked; its dataset, ``shuffle``, ``seed``, ``drop_last`` and epoch kept):
  sharded once, O(1) memory, proven, resumable;
* torch's default samplers (``shuffle=True`` / ``False``) by a ``ShardedSampler`` over the
  framework's world, shuffled as they were;
* any other sampler is refused (it would read the whole dataset on every rank).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch.distributed as dist
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

from ._batch_sampler import ShardedBatchSampler
from ._core import ShardingError
from ._sampler import ShardedSampler

#: The DataLoader arguments a rebuilt loader keeps (read from the loader's attributes).
KEPT = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "generator",
    "multiprocessing_context",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)

#: Arguments torch refuses without workers.
_WORKERS_ONLY = ("multiprocessing_context", "prefetch_factor", "persistent_workers")


def kept_options(loader: Any) -> dict[str, Any]:
    """The arguments ``loader`` was built with that a loader of the same data on another
    sampler keeps: its workers and their options, collation, pinning, ordering.

    Args:
        loader (DataLoader): the loader being replaced.
    """
    kept = {name: getattr(loader, name) for name in KEPT if hasattr(loader, name)}
    if not kept.get("num_workers"):
        for name in _WORKERS_ONLY:
            kept.pop(name, None)
    return kept


def check_group(world: int, framework: str, fix: str) -> None:
    """Raises ``ShardingError`` when torch.distributed runs a process group of another size
    than the framework's data-parallel world and no device mesh says which processes share
    a data-parallel rank: the framework would have each process read as if it were the
    only one (every sample read by every process), or split what another split already.

    Args:
        world (int): the data-parallel ranks the framework counts.
        framework (str): the framework's name, for the message.
        fix (str): what makes the framework join the group, for the message.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    size = dist.get_world_size()
    if size != world:
        harm = (
            f"each sample would be read by {size // world} processes"
            if size > world
            else f"{world - size} of its ranks' shares would never be read"
        )
        raise ShardingError(
            f"{framework} counts {world} data-parallel process(es), but torch.distributed's "
            f"process group has {size}: {harm}. {fix}"
        )


def check_world(sampler: Any, world: int, rank: int, framework: str) -> None:
    """Raises ``ShardingError`` unless ``sampler`` splits over ``world`` ranks as ``rank``
    (a ``ShardedBatchSampler``'s split is its ``ShardedSampler``'s).

    Args:
        sampler: a permshard sampler or batch sampler, or a ``DistributedSampler``.
        world (int): the framework's data-parallel ranks.
        rank (int): this process's rank among them.
        framework (str): the framework's name, for the message (``"Ray Train"``).
    """
    if isinstance(sampler, ShardedBatchSampler):
        sampler = sampler.sampler
    if (sampler.num_replicas, sampler.rank) != (world, rank):
        raise ShardingError(
            f"the {type(sampler).__name__} splits across num_replicas={sampler.num_replicas} as rank "
            f"{sampler.rank}, but {framework} has {world} data-parallel ranks and this process is "
            f"rank {rank} of them: leave num_replicas and rank unset (they come from the process "
            "group the framework starts; with model parallelism, build the sampler over the "
            "data-parallel dims of the device mesh)"
        )


def sharded_sampler(sampler: Any, dataset: Any, world: int, rank: int, framework: str) -> ShardedSampler:
    """The ``ShardedSampler`` a prepared loader reads ``dataset`` through, by the policy of
    this module, for a loader whose item sampler is ``sampler``.

    Args:
        sampler: the loader's sampler (of items, not of batches).
        dataset: the loader's dataset.
        world (int): the framework's data-parallel ranks.
        rank (int): this process's rank among them.
        framework (str): the framework's name, for messages.

    Raises:
        ShardingError: a sharded sampler splits over another world than the framework's.
        TypeError: a custom sampler, which permshard cannot shard.
    """
    if isinstance(sampler, ShardedSampler):
        check_world(sampler, world, rank, framework)
        return sampler
    if isinstance(sampler, DistributedSampler):
        check_world(sampler, world, rank, framework)
        equivalent = ShardedSampler(
            dataset, world, rank, shuffle=sampler.shuffle, seed=sampler.seed, drop_last=sampler.drop_last
        )
        equivalent.set_epoch(sampler.epoch)
        return equivalent
    if type(sampler) in (RandomSampler, SequentialSampler):
        return ShardedSampler(dataset, world, rank, shuffle=isinstance(sampler, RandomSampler))
    raise TypeError(
        f"cannot shard a DataLoader whose sampler is a {type(sampler).__name__} (it would read the "
        "whole dataset on every rank): build it on sampler=permshard.ShardedSampler(dataset) (or a "
        "permshard batch sampler), or shuffle=True/False"
    )


def optional_import(module: str, package: str) -> ModuleType:
    """``module`` of a framework permshard does not depend on, or an ``ImportError`` naming
    the package to install.

    Args:
        module (str): the module to import (``"grain"``).
        package (str): what ``pip install`` takes for it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"this part of permshard needs {package}: pip install {package}") from e
