"""Who iterates a sampler's pass, and what the DataLoader among them has handed to the
training loop, so that a default ``state_dict()`` is exact while workers prefetch, or
refuses.

A pass starts with one walk up the call stack (:func:`iterating`): the objects whose methods
are on it are the DataLoader iterator and whatever wraps the sampler (accelerate's guard reads
them too).

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

import os
import sys
import weakref
from collections.abc import Sequence
from types import CodeType, FrameType
from typing import Any, Callable, Optional

#: permshard's own frames (a sampler's ``__iter__``, a batch sampler's) hold neither a
#: DataLoader iterator nor accelerate's wrapper: the walk does not read their locals.
_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _torch_files() -> tuple[str, ...]:
    """torch's own folder (its DataLoader iterates samplers), where torch is importable."""
    import torch

    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)


#: The libraries between a user's line and a warning permshard raises.
_LIBRARY_FILES = (_OWN_FILES, *_torch_files())


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised inside permshard that points at the user's
    line: the first frame, from the caller's up, that is neither permshard's nor torch's
    (a sampler's pass starts inside torch's DataLoader, a fixed level would name torch)."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARY_FILES):
        frame, level = frame.f_back, level + 1
    return level


def iterating(depth: int = 16, until: Optional[type] = None) -> tuple[Any, ...]:
    """The ``self`` of each method among the ``depth`` frames from the caller's up (but
    permshard's own): the one walk of a pass, read by the accelerate guard and by the
    DataLoader count.

    Whatever iterates a sampler — a DataLoader iterator, and the batch samplers between
    it and the sampler (torch's, accelerate's, Lightning's) — does so from methods and
    generators. The walk ends at the first frame that is neither: a plain function or a
    module's code is the training loop itself, and nothing above it is iterating the
    sampler. Only frames whose code names a ``self`` build their locals (``f_locals``
    costs a dict per frame; a pass starts every epoch), and what each code object is gets
    decided once.

    Args:
        depth (int, optional): frames to look through at most. Default: ``16``.
        until (type, optional): stop after the first owner of this type (the DataLoader
            iterator: whatever iterates the sampler sits between it and the sampler).
    """
    owners = []
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        kind = _KINDS.get(code)
        if kind is None:
            kind = _KINDS[code] = _kind_of(code)
        if kind == _METHOD:
            owner = frame.f_locals.get("self")
            if owner is not None:
                owners.append(owner)
                if until is not None and isinstance(owner, until):
                    break
        elif kind == _LOOP:
            break
        frame = frame.f_back
    return tuple(owners)


# What a frame of a code object is to the walk:
_OWN = 0  # permshard's own (a sampler's __iter__, a batch sampler's): passed by
_METHOD = 1  # a method outside permshard: its ``self`` may iterate the sampler
_GENERATOR = 2  # a generator or coroutine without a ``self``: passed by
_LOOP = 3  # a plain function or a module's code: the loop, where the walk ends

#: Each code object's kind, decided once (a program has few).
_KINDS: dict[CodeType, int] = {}

#: A generator's or coroutine's code (``inspect``'s flags, without importing it).
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR


def _kind_of(code: CodeType) -> int:
    """What frames of ``code`` are to the walk (see :func:`iterating`)."""
    if code.co_filename.startswith(_OWN_FILES):
        return _OWN
    if "self" in code.co_varnames or "self" in code.co_freevars:
        return _METHOD
    return _GENERATOR if code.co_flags & _RESUMABLE else _LOOP


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
