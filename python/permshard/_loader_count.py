"""What a DataLoader has handed to the training loop, so that a default ``state_dict()``
is exact while workers prefetch.

A DataLoader iterates its sampler ahead of the loop (``num_workers * prefetch_factor``
batches with workers): a count of what the sampler yielded overcounts what the loop
received, and a resume from it would skip samples. The DataLoader's own iterator counts
the batches it handed out (``_num_yielded``); a sampler finds that iterator once per pass,
on the call stack where the pass starts, and reads the count when a state is saved.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Optional

#: What the count of a torch DataLoader iterator is read from.
_COUNTED = ("_num_yielded", "_index_sampler", "_auto_collation")


def find_loader_iterator(owners: Sequence[Any]) -> Optional[weakref.ref[Any]]:
    """The DataLoader iterator pulling the caller's items (a weak reference), or ``None``
    when the sampler is iterated by anything else. What it counts is read when a state is
    saved (:func:`counting`): the iterator may still be setting itself up when the pass
    starts.

    Args:
        owners (sequence): the objects iterating the sampler (``callers.iterating()``).
    """
    if LOADER_ITERATOR is None:
        _warn_once("this torch has no torch.utils.data.dataloader._BaseDataLoaderIter")
        return None
    for owner in owners:
        if isinstance(owner, LOADER_ITERATOR):
            return weakref.ref(owner)
    return None


def _loader_iterator_type() -> Optional[type]:
    """torch's DataLoader iterator class (``None`` where it was renamed)."""
    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
    except ImportError:
        return None
    return _BaseDataLoaderIter


#: torch's DataLoader iterator class, looked up once, or ``None``.
LOADER_ITERATOR: Optional[type] = _loader_iterator_type()


def counting(loader: Optional[weakref.ref[Any]]) -> Any:
    """The live DataLoader iterator behind ``loader`` whose count is the loop's, or ``None``
    where the sampler's own count is right: no loader, or torchdata's
    ``StatefulDataLoader``, which saves its sampler's state itself as it draws each batch's
    indices. A torch whose iterator no longer has the count warns once, naming
    ``consumed_samples=``, and counts what the sampler yielded.

    Args:
        loader (weakref, optional): from :func:`find_loader_iterator`.
    """
    iterator = loader() if loader is not None else None
    if iterator is None or hasattr(iterator, "_sampler_iter_yielded"):
        return None
    missing = [name for name in _COUNTED if not hasattr(iterator, name)]
    if missing:
        _warn_once(f"its iterator has no {', '.join(missing)}")
        return None
    return iterator


#: The reasons already warned about in this process.
_warned: set[str] = set()


def _warn_once(why: str) -> None:
    """Warns, once per process and reason, that a default ``state_dict()`` counts what the
    sampler yielded, which includes what a loader's workers prefetched."""
    if why in _warned:
        return
    _warned.add(why)
    warnings.warn(
        f"permshard cannot read what the DataLoader handed to the training loop ({why}): a "
        "state_dict() without an argument counts what the sampler yielded, prefetched "
        "samples included. Pass state_dict(consumed_samples=step_in_epoch * batch_size * "
        "world_size) to save an exact resume point",
        RuntimeWarning,
        stacklevel=4,
    )


def delivered_items(loader: Optional[weakref.ref[Any]], yielded: int) -> int:
    """Items of ``yielded`` that the DataLoader behind ``loader`` handed to the loop: its
    batches times their size (every batch full but the last), never more than
    ``yielded``; ``yielded`` itself where its count is not the loop's (:func:`counting`).

    Args:
        loader (weakref, optional): from :func:`find_loader_iterator`.
        yielded (int): items the sampler handed out in the pass.
    """
    iterator = counting(loader)
    if iterator is None:
        return yielded
    per_batch = 1
    if iterator._auto_collation:  # batches of the loader's batch sampler
        size = getattr(iterator._index_sampler, "batch_size", None)
        if not isinstance(size, int) or size < 1:
            name = type(iterator._index_sampler).__name__
            _warn_once(f"its batch sampler, a {name}, has no batch_size")
            return yielded
        per_batch = size
    return min(yielded, int(iterator._num_yielded) * per_batch)


def delivered_batches(loader: Optional[weakref.ref[Any]], handed: int) -> int:
    """Batches of ``handed`` that the DataLoader behind ``loader`` handed to the loop (a
    batch sampler's count); ``handed`` where its count is not the loop's.

    Args:
        loader (weakref, optional): from :func:`find_loader_iterator`.
        handed (int): batches the batch sampler handed out in the pass.
    """
    iterator = counting(loader)
    return handed if iterator is None else min(handed, int(iterator._num_yielded))
