"""Guards against splitting the data twice: a per-rank shard handed to a sampler that
splits it again, accelerate's wrapper around a permshard sampler, a DataLoader whose chain
splits more than once. (A dataset's identity, by which a resume over another dataset is
refused, is :mod:`~permshard._hooks`'s.)"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any, Optional

import torch.distributed as dist
from torch.utils.data import DistributedSampler, Subset

from . import _core
from ._config import ShardConfig, as_u64
from ._core import ShardingError

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

FIX_DOUBLE_SPLIT = "shard once: pass the full dataset, or use num_replicas=1 on a pre-sharded dataset"


def _each_rank_sees(*splits: int) -> str:
    """What splitting the data by each of ``splits`` in turn leaves a rank."""
    return f"each rank would see 1/{math.prod(splits)} of the data"


def _share(total: int, world: int, drop_last: bool) -> int:
    """A rank's share of ``total`` samples dealt round-robin over ``world`` ranks, as
    ``DistributedSampler`` deals them: the core's length of the same pass."""
    return ShardConfig(total, world, shuffle=False, drop_last=drop_last).partition().num_samples


def _arithmetic_step(indices: Sequence[int]) -> Optional[tuple[int, int]]:
    """``(first, step)`` when ``indices`` is an arithmetic progression, else None."""
    if isinstance(indices, range):
        return (indices.start, indices.step) if len(indices) > 1 else None
    if len(indices) < 2:
        return None
    first, step = int(indices[0]), int(indices[1]) - int(indices[0])
    probe = range(0, len(indices), max(1, len(indices) // 64))
    if (
        all(int(indices[i]) == first + i * step for i in probe)
        and int(indices[-1]) == first + (len(indices) - 1) * step
    ):
        return first, step
    return None


def subset_progression(dataset: Any) -> Optional[tuple[int, int]]:
    """``(first, step)`` of a Subset whose indices cover ``range(first, N, step)`` of its
    full dataset with ``first < step`` (what slicing per rank by hand gives), else None.

    Args:
        dataset: any dataset (only a ``Subset`` can match).
    """
    if not isinstance(dataset, Subset):
        return None
    progression = _arithmetic_step(dataset.indices)
    if progression is None:
        return None
    first, step = progression
    full = len(dataset.dataset)  # type: ignore[arg-type]
    if step > 1 and 0 <= first < step and len(dataset) == len(range(first, full, step)):
        return first, step
    return None


def check_not_presharded(dataset: Any, num_replicas: int, *, cross_rank: bool) -> None:
    """Warns when ``dataset`` looks like a per-rank shard (``Subset(full, range(r, N, W))``)
    handed to a sampler that splits it again across ``num_replicas``.

    One process cannot tell a per-rank shard from a legitimate every-other-sample subset
    (the same on every rank). With ``cross_rank`` (a process group and consensus) the
    first iteration decides from every rank's evidence, so nothing is said here; without
    it, a warning.

    Args:
        dataset: the sampler's dataset.
        num_replicas (int): the ranks the sampler splits it across.
        cross_rank (bool): whether the consensus will decide across ranks.
    """
    if num_replicas < 2 or cross_rank:
        return
    progression = subset_progression(dataset)
    if progression is None:
        return
    first, step = progression
    full = len(dataset.dataset)
    warnings.warn(
        f"the dataset is a Subset with indices range({first}, {full}, {step}): if each rank "
        f"holds its own such slice, the sampler splits it again across {num_replicas} replicas "
        f"and {_each_rank_sees(step, num_replicas)} ({FIX_DOUBLE_SPLIT}). If the "
        "same subset is on every rank, this is fine; with torch.distributed initialized the "
        "first iteration checks it across ranks",
        UserWarning,
        stacklevel=3,
    )


def check_not_wrapped_by_accelerate(num_replicas: int, owners: Sequence[Any]) -> None:
    """Raises ShardingError when a sampler that already splits across ``num_replicas``
    is being iterated by accelerate's ``BatchSamplerShard``, which splits again (what
    ``accelerator.prepare`` does to every map-style loader). Called at the start of each
    pass, with the objects on the call stack. This is the one place that knows
    accelerate's class name; tests fail loudly if accelerate renames it.

    Args:
        num_replicas (int): the ranks the sampler already splits across.
        owners (sequence): the objects iterating the sampler (``callers.iterating()``).
    """
    if num_replicas < 2:
        return
    for owner in owners:
        if type(owner).__name__ == "BatchSamplerShard" and getattr(owner, "num_processes", 1) > 1:
            raise ShardingError(
                f"accelerate's BatchSamplerShard (num_processes={owner.num_processes}) is "
                f"splitting a permshard sampler that already splits across {num_replicas} "
                f"replicas: {_each_rank_sees(owner.num_processes, num_replicas)}. Use "
                "permshard.accelerate.prepare_data_loader(accelerator, loader) instead "
                "of accelerator.prepare(loader)"
            )


def double_split(everyone: list[dict[str, int]]) -> Optional[str]:
    """The message for processes whose datasets are per-rank slices of one dataset
    (``Subset(full, range(rank, N, step))`` on each), or None.

    Args:
        everyone (list of dict): every process's consensus record.
    """
    steps = {c["subset_step"] for c in everyone}
    firsts = {c["subset_first"] for c in everyone}
    if len(steps) != 1 or len(firsts) < 2:
        return None
    step = steps.pop()
    if step < 2 or max(firsts) >= step:
        return None
    return (
        f"every process holds a different per-rank shard of the dataset (a Subset with "
        f"indices range(first, N, {step}), first = {sorted(firsts)}) and the sampler splits it "
        f"again across {everyone[0]['num_replicas']} replicas: "
        f"{_each_rank_sees(step, everyone[0]['num_replicas'])}. {FIX_DOUBLE_SPLIT}"
    )


def _unwrap(obj: Any) -> Iterator[Any]:
    """The chain of samplers under a DataLoader or batch sampler, outermost first."""
    seen = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        yield obj
        nxt = None
        for attr in ("batch_sampler", "sampler"):
            nxt = getattr(obj, attr, None)
            if nxt is not None and nxt is not obj:
                break
        obj = nxt


def _kept(value: Any) -> Any:
    """``value`` as :func:`_preserved` keeps it: a copy of a run's history (one mutable
    object), the value itself otherwise."""
    return copy.copy(value) if isinstance(value, _core.Run) else value


@contextlib.contextmanager
def _preserved(objs: Sequence[Any]) -> Iterator[None]:
    """Restores the attributes of ``objs`` afterwards: counting a loader's indices must not
    advance its samplers."""
    # A run's history is one mutable object: kept as a copy.
    saved = [(o, {k: _kept(v) for k, v in vars(o).items()}) for o in objs if hasattr(o, "__dict__")]
    try:
        yield
    finally:
        for o, state in saved:
            vars(o).clear()
            vars(o).update(state)


def check_loader(dataloader: DataLoader[Any], total: Optional[int] = None) -> int:
    """Raises ShardingError unless this rank's DataLoader draws its fair share.

    Walks the loader's batch sampler and samplers (also accelerate's ``BatchSamplerShard``
    and ``DataLoaderShard`` around them): a sampler that already splits by rank inside a
    wrapper that splits again is the 1/N² bug. Then counts the indices this rank will
    draw this epoch (index lists only, no data is loaded) and compares with the closed
    form ``ceil(total / world_size)``.

    Args:
        dataloader: the DataLoader to check, as the training loop will iterate it.
        total (int, optional): the full dataset length. Default: the length of the
            sampler's dataset.

    Returns:
        int: the number of indices this rank draws per epoch.
    """
    if not hasattr(dataloader, "batch_sampler") and not hasattr(dataloader, "sampler"):
        raise TypeError(
            f"check_loader needs the DataLoader the training loop iterates, got "
            f"{type(dataloader).__name__}: pass the DataLoader (or accelerate's prepared loader)"
        )
    chain = list(_unwrap(dataloader))
    splitters = []
    for obj in chain:
        processes = getattr(obj, "num_processes", None)
        if isinstance(processes, int) and processes > 1 and hasattr(obj, "process_index"):
            splitters.append((f"{type(obj).__name__}(num_processes={processes})", processes))
        elif isinstance(obj, DistributedSampler) and obj.num_replicas > 1:
            splitters.append((f"{type(obj).__name__}(num_replicas={obj.num_replicas})", obj.num_replicas))
    if len(splitters) > 1:
        names = " around ".join(name for name, _ in splitters)
        raise ShardingError(
            f"the DataLoader splits the data twice ({names}): {_each_rank_sees(*(w for _, w in splitters))}. "
            f"{FIX_DOUBLE_SPLIT}; with accelerate use permshard.accelerate.prepare_data_loader "
            "instead of accelerator.prepare for this loader"
        )
    samplers = [o for o in chain if isinstance(o, DistributedSampler)]
    world = splitters[0][1] if splitters else 1
    if not splitters and samplers:  # a sampler of one replica (model parallelism, or one rank)
        world = samplers[0].num_replicas
    elif not splitters and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
    if total is None:
        base = samplers[0].dataset if samplers else getattr(dataloader, "dataset", None)
        if not isinstance(base, (int, Sized)):
            raise TypeError(
                f"check_loader cannot tell the dataset's length (a {type(base).__name__}): "
                "pass total=len(full_dataset)"
            )
        total = len(base) if not isinstance(base, int) else base
    total = as_u64("total", total, minimum=1)
    batches = getattr(dataloader, "batch_sampler", None)
    source = batches if batches is not None else getattr(dataloader, "sampler", dataloader)
    with _preserved(chain):
        drawn = 0
        for item in source:
            drawn += len(item) if isinstance(item, (list, tuple)) else 1
    low, share = _share(total, world, drop_last=True), _share(total, world, drop_last=False)
    batch = getattr(dataloader, "batch_size", None) or 1
    if not low <= drawn <= share + batch:  # even_batches may top up the last batch
        raise ShardingError(
            f"this rank draws {drawn} samples per epoch but its share of {total} samples over "
            f"{world} ranks is {low}..{share}: the data is split "
            f"{'more than once' if drawn < low else 'too little'}. {FIX_DOUBLE_SPLIT}"
        )
    return drawn
