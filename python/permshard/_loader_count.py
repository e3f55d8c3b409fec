"""What a DataLoader has handed to the training loop, so that a default ``state_dict()``
is exact while workers prefetch, or refuses.

A DataLoader iterates its sampler ahead of the loop (``num_workers * prefetch_factor``
batches with workers): a count of what the sampler yielded overcounts what the loop
received, and a resume from it would skip samples. The DataLoader's own iterator counts
the batches it handed out (``_num_yielded``); a sampler finds that iterator once per pass,
on the call stack where the pass starts, and reads the count when a state is saved.

The usual loop ends with a ``break`` and saves the state after it, when a loader without
persistent workers has already dropped its iterator. So the count is also kept beside the
iterator: each batch the iterator hands out is counted as it leaves (its ``_next_data``,
wrapped on that one instance), and the count outlives the iterator. A count that cannot be
known is never guessed: :meth:`LoaderCount.batches` raises, naming ``consumed_samples=``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Callable, Optional

#: What the count of a torch DataLoader iterator is read from.
_COUNTED = ("_num_yielded", "_index_sampler", "_auto_collation", "_next_data")

#: The attribute of a DataLoader iterator that holds the count of its current pass.
_ATTRIBUTE = "_permshard_count"


def find_loader_iterator(owners: Sequence[Any]) -> Optional[LoaderCount]:
    """The count of the DataLoader iterator pulling the caller's items, or ``None`` when
    the sampler is iterated by anything else.

    Args:
        owners (sequence): the objects iterating the sampler (``callers.iterating()``).
    """
    if LOADER_ITERATOR is None:
        return None
    for owner in owners:
        if isinstance(owner, LOADER_ITERATOR):
            return LoaderCount(owner)
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


class LoaderCount:
    """The batches one DataLoader iterator handed to the training loop in one pass, read
    while the iterator lives and kept after it is gone.

    Args:
        iterator: the DataLoader iterator pulling the pass (found where the pass starts,
            before it hands out a batch of it).

    Example::

        >>> sampler = ShardedSampler(64, num_replicas=1, rank=0)
        >>> loader = DataLoader(range(64), batch_size=4, sampler=sampler, num_workers=1)
        >>> for step, batch in enumerate(loader, 1):
        ...     if step == 3:
        ...         break
        >>> sampler.state_dict()["consumed"]  # what the loop took, not what was prefetched
        12
    """

    def __init__(self, iterator: Any) -> None:
        self._iterator = weakref.ref(iterator)
        # torchdata's StatefulDataLoader saves its sampler's state itself as it draws each
        # batch's indices: the sampler's own count is its count.
        self._own_count = _counts_itself(iterator)
        # Without workers the iterator pulls a batch's indices as it hands the batch out.
        self._prefetches = int(getattr(iterator, "_num_workers", 0) or 0) > 0
        self._per_batch: Optional[int] = None
        self._batch_sampler = type(getattr(iterator, "_index_sampler", None)).__name__
        self._handed = 0  # batches handed to the loop, as counted when they left
        self._counted = False  # whether every batch of the pass is counted as it leaves
        if self._prefetches and not self._own_count and not _missing(iterator):
            self._per_batch = _batch_size(iterator)
            self._counted = _count_batches_of(iterator, self)

    def batches(self, handed: int) -> Optional[int]:
        """Batches of ``handed`` (what the sampler handed out, in batches) that the loop
        received, or ``None`` where the sampler's own count is the loop's.

        Args:
            handed (int): batches the batch sampler handed out in the pass.

        Raises:
            ValueError: the count cannot be known (a torch whose iterator renamed its
                count): a state must be saved with ``consumed_samples=``.
        """
        received = self._received()
        return None if received is None else min(handed, received)

    def items(self, yielded: int) -> int:
        """Items of ``yielded`` (what an item sampler handed out) that the loop received:
        its batches times their size (every batch full but the last).

        Args:
            yielded (int): items the sampler handed out in the pass.

        Raises:
            ValueError: as :meth:`batches`, or the loader's batch sampler has no
                ``batch_size``.
        """
        received = self._received()
        if received is None:
            return yielded
        iterator = self._iterator()
        per_batch = _batch_size(iterator) if iterator is not None else self._per_batch
        if per_batch is None:
            raise _refusal(f"its batch sampler, a {self._batch_sampler}, has no batch_size")
        return min(yielded, received * per_batch)

    def _received(self) -> Optional[int]:
        """The batches the loop received in the pass, or ``None`` where the sampler's own
        count is the loop's (torchdata's loader; a loader without workers, once gone)."""
        iterator = self._iterator()
        # Read where the state is saved, too: the iterator may have been setting up.
        if self._own_count or (iterator is not None and _counts_itself(iterator)):
            return None
        if iterator is not None:
            missing = _missing(iterator)
            if missing:
                raise _refusal(f"its iterator has no {', '.join(missing)}")
            return int(iterator._num_yielded)
        if not self._prefetches:
            return None  # it pulled no batch it did not hand out
        if not self._counted:
            raise _refusal("its iterator is gone and its batches were not counted as they left")
        return self._handed

    def _left(self, handed: int) -> None:
        """The iterator is handing out its ``handed``-th batch of the pass."""
        self._handed = handed


def _counts_itself(iterator: Any) -> bool:
    """Whether ``iterator`` is torchdata's, which counts what it draws from the sampler."""
    return hasattr(iterator, "_sampler_iter_yielded")


def _missing(iterator: Any) -> list[str]:
    """What of its count ``iterator`` lacks (a torch that renamed it)."""
    return [name for name in _COUNTED if not hasattr(iterator, name)]


def _batch_size(iterator: Any) -> Optional[int]:
    """Items per batch the iterator hands out (``None`` when its batch sampler has no
    ``batch_size``)."""
    if not iterator._auto_collation:  # items one by one, collated by the dataset
        return 1
    size = getattr(iterator._index_sampler, "batch_size", None)
    return size if isinstance(size, int) and size >= 1 else None


def _count_batches_of(iterator: Any, count: LoaderCount) -> bool:
    """Counts each batch ``iterator`` hands out into ``count`` (from now on: its current
    pass). Returns whether it could (not where another wrapper replaced ``_next_data``).

    ``__next__`` calls ``_next_data()`` and hands its result to the loop: a batch that
    came out of ``_next_data`` is the loop's. The wrapper holds the iterator weakly and
    the count is held by the iterator, so nothing keeps the iterator (and its workers)
    alive longer than the loop does.
    """
    setattr(iterator, _ATTRIBUTE, count)
    own = vars(iterator).get("_next_data")
    if own is not None:
        return getattr(own, "_permshard_counts", False) is True
    wrapper = _counting(weakref.ref(iterator), type(iterator)._next_data)
    iterator._next_data = wrapper
    return True


def _counting(ref: weakref.ref[Any], next_data: Callable[[Any], Any]) -> Callable[[], Any]:
    """``next_data`` (the iterator class's) for the iterator behind ``ref``, counting each
    batch it returns into the iterator's current :class:`LoaderCount`."""

    def counted_next_data() -> Any:
        iterator = ref()
        assert iterator is not None  # the wrapper is called through the iterator
        data = next_data(iterator)
        getattr(iterator, _ATTRIBUTE)._left(int(iterator._num_yielded) + 1)
        return data

    counted_next_data._permshard_counts = True  # type: ignore[attr-defined]
    return counted_next_data


def _refusal(why: str) -> ValueError:
    """A default ``state_dict()`` cannot know what the loop received: refused, with the fix."""
    return ValueError(
        f"permshard cannot tell what the DataLoader handed to the training loop ({why}), and "
        "a count of what the sampler yielded would include what the loader's workers "
        "prefetched: a resume from it would skip samples. Pass state_dict(consumed_samples="
        "step_in_epoch * batch_size * world_size) (a batch sampler: consumed_steps=step_in_epoch)"
    )
