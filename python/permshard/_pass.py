"""A sampler's pass: :class:`PassLifecycle`, what every sampler does around its passes
(epochs, ``auto_epoch`` and the repeated-epoch warning, the consensus once per epoch, the
accelerate guard, when a resume point is used up); :class:`SamplerPass`, the handle
through which batch samplers deal a pass's items; who iterates the pass (one walk up the
call stack where it starts, :func:`iterating`); and :class:`LoaderCount`, what the
DataLoader among them handed to the training loop.

A DataLoader iterates its sampler ahead of the loop (``num_workers * prefetch_factor``
batches with workers), so what the sampler yielded overcounts what the loop received, and a
resume from it would skip samples. The loader's iterator counts the batches it handed out
(``_num_yielded``); and since the usual loop saves its state after a ``break``, when a
loader without persistent workers has dropped its iterator, each batch is also counted as
it leaves (its ``_next_data``, wrapped on that one instance), a count that outlives the
iterator. A count that cannot be known is never guessed: :meth:`LoaderCount.batches`
raises, naming ``consumed_samples=``.
"""

from __future__ import annotations

import itertools
import os
import sys
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from types import CodeType, FrameType
from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch.utils.data import dataloader

from . import _core
from . import _guards as guards
from ._config import EpochFields
from ._hooks import EpochIndices, WindowPrefetch, tag

#: permshard's own frames (a sampler's ``__iter__``, a batch sampler's) hold neither a
#: DataLoader iterator nor accelerate's wrapper: the walk does not read their locals.
_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: The libraries between a user's line and a warning permshard raises (torch's DataLoader
#: iterates samplers).
_LIBRARY_FILES = (_OWN_FILES, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


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
    DataLoader count. Whatever iterates a sampler (a DataLoader iterator, the batch
    samplers between) does so from methods and generators; the walk ends at the first
    frame that is neither, the training loop. Only frames whose code names a ``self``
    build their locals (a dict per frame), and each code object's kind is decided once.

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
    """The count of the DataLoader iterator among ``owners`` (what :func:`iterating`
    found), or ``None`` when the sampler is iterated by anything else."""
    found = (o for o in owners if LOADER_ITERATOR is not None and isinstance(o, LOADER_ITERATOR))
    return next((LoaderCount(owner) for owner in found), None)


#: torch's DataLoader iterator class (``None`` where it was renamed).
LOADER_ITERATOR: Optional[type] = getattr(dataloader, "_BaseDataLoaderIter", None)


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
        if self._prefetches and not _missing(iterator):
            self._per_batch = _batch_size(iterator)
            self._counted = _count_batches_of(iterator, self)

    def received_any(self) -> Optional[bool]:
        """Whether the loop received a batch of the pass, where its batches are counted as
        they leave (``None``: they are not). An iterator made and dropped after prefetching
        (torchdata's, for a checkpointer's template state) handed the loop nothing."""
        return self._handed > 0 if self._counted else None

    def batches(self, handed: int) -> Optional[int]:
        """Batches of ``handed`` (what the batch sampler handed out in the pass) that the
        loop received, or ``None`` where the sampler's own count is the loop's. Raises
        ValueError, naming ``consumed_samples=``, where the count cannot be known."""
        received = self._received()
        return None if received is None else min(handed, received)

    def items(self, yielded: int) -> int:
        """Items of ``yielded`` (what an item sampler handed out in the pass) that the loop
        received: its batches times their size (every batch full but the last). Raises as
        :meth:`batches` does, or where the loader's batch sampler has no ``batch_size``."""
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
        if iterator is not None and self._counted and getattr(iterator, _ATTRIBUTE, None) is not self:
            # A persistent-workers iterator reset for its next pass: its count is that
            # pass's now, this pass's was counted as each batch left.
            return self._handed
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

    def left(self, handed: int) -> None:
        """The iterator is handing out its ``handed``-th batch of the pass."""
        self._handed = handed


def _counts_itself(iterator: Any) -> bool:
    """Whether ``iterator`` is torchdata's, which counts what it draws from the sampler."""
    return hasattr(iterator, "_sampler_iter_yielded")


def _missing(iterator: Any) -> list[str]:
    """What of its count ``iterator`` lacks (a torch that renamed it)."""
    return [name for name in _COUNTED if not hasattr(iterator, name)]


def _batch_size(iterator: Any) -> Optional[int]:
    """Items per batch the iterator hands out (``None``: its batch sampler has none)."""
    if not iterator._auto_collation:  # items one by one, collated by the dataset
        return 1
    size = getattr(iterator._index_sampler, "batch_size", None)
    return size if isinstance(size, int) and size >= 1 else None


def _count_batches_of(iterator: Any, count: LoaderCount) -> bool:
    """Counts each batch ``iterator`` hands out (what its ``_next_data`` returns, which
    ``__next__`` hands the loop) into ``count``, from now on; whether it could (not where
    another wrapper replaced ``_next_data``). The wrapper holds the iterator weakly, so
    nothing keeps it (and its workers) alive longer than the loop does."""
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
        getattr(iterator, _ATTRIBUTE).left(int(iterator._num_yielded) + 1)
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


#: A pass dealt as its sampler deals it (no batch sampler's fields).
_NO_DEALING: Mapping[str, Any] = {}


class PassLifecycle(EpochFields):
    """The epoch lifecycle of a sampler: a subclass calls :meth:`_begin_pass` where each
    pass starts, and says whether its pass has handed out an item (:meth:`_pass_started`),
    where a pass starts (:meth:`_resuming`, :meth:`_forget_resume_point`) and what every
    rank must agree on (:meth:`_check_consensus`).

    A pass counts as an iteration of its epoch once it has handed out an item (loaders
    that create an iterator and drop it unused, as torchdata's do, neither repeat the
    epoch nor use up a loaded resume point); it is settled when the next pass starts or
    the epoch changes.

    Example::

        >>> sampler = ShardedSampler(100, num_replicas=1, rank=0, auto_epoch=True)
        >>> first, second = list(sampler), list(sampler)  # epochs 0, then 1
        >>> sampler.epoch
        1
    """

    rank: int
    auto_epoch: bool
    check_consensus: bool

    def _init_lifecycle(self, *, auto_epoch: bool, check_consensus: bool) -> None:
        self.auto_epoch = bool(auto_epoch)
        self.check_consensus = bool(check_consensus)
        self._iterated_epoch: Optional[int] = None  # the epoch a settled pass iterated
        self._warned_repeat = False
        self._agreed_epoch: Optional[int] = None  # the epoch the consensus was run for
        self._pass_epoch: Optional[int] = None  # the epoch of the last pass begun
        self._settled = True  # the last pass has been accounted for

    # -- what a subclass says ---------------------------------------------------------------

    def _pass_started(self) -> bool:
        """Whether the last pass begun has handed out an item."""
        raise NotImplementedError

    def _resuming(self) -> bool:
        """Whether the next pass starts from a loaded resume point (not the epoch's start)."""
        raise NotImplementedError

    def _forget_resume_point(self) -> None:
        """The next pass of the epoch starts from the epoch's start."""
        raise NotImplementedError

    def _check_consensus(self, dealing: Mapping[str, Any]) -> None:
        """Every rank agrees on the configuration, ``dealing`` applied (a collective)."""
        raise NotImplementedError

    # -- the lifecycle ----------------------------------------------------------------------

    def _epoch_set(self) -> None:
        """Call before a ``set_epoch`` takes effect: the last pass is settled, and the
        epoch set is iterated afresh (no repeat warning)."""
        if not self._settled:
            self._settle()
        self._iterated_epoch = None

    def _state_loaded(self) -> None:
        """Call after a state dict was loaded: a new resume point, iterated afresh and
        agreed on again; no pass of it has started."""
        self._iterated_epoch = self._agreed_epoch = None
        self._settled = True

    def _settle(self) -> None:
        """Accounts for the last pass once it has handed out an item: its epoch counts as
        iterated, and a resume point it started from is used up."""
        if self._settled or not self._pass_started():  # callers skip the call when settled
            return
        self._settled = True
        self._iterated_epoch = self._pass_epoch
        if self._resuming():
            self._forget_resume_point()

    def _begin_pass(self, dealing: Mapping[str, Any] = _NO_DEALING) -> Any:
        """Starts a pass: settles the last one, refuses accelerate's second split, warns
        on (or with ``auto_epoch`` advances past) a repeated epoch, runs the consensus once
        per epoch, ``dealing`` (a batch sampler's dealing fields) agreed too. Returns the
        :class:`LoaderCount` of the DataLoader pulling the pass, or ``None``."""
        if not self._settled:
            self._settle()
        owners = iterating(until=LOADER_ITERATOR)  # the pass's one walk up the call stack
        config = self.config  # its fields read once
        if owners:
            guards.check_not_wrapped_by_accelerate(config.num_replicas, owners)
        epoch = config.epoch
        if self._iterated_epoch == epoch and not self._resuming():
            if self.auto_epoch:
                epoch += 1
                self.set_epoch(epoch)
            elif not self._warned_repeat:
                self._warned_repeat = True
                warnings.warn(
                    f"{type(self).__name__} is iterated again in epoch {epoch} without "
                    "set_epoch(): the order repeats. Call sampler.set_epoch(epoch) before each "
                    "epoch, or pass auto_epoch=True.",
                    UserWarning,
                    stacklevel=user_stacklevel(),
                )
        if self.check_consensus and self._agreed_epoch != epoch:
            if dist.is_available() and dist.is_initialized():
                self._check_consensus(dealing)
            self._agreed_epoch = epoch
        self._pass_epoch, self._settled = epoch, False
        return find_loader_iterator(owners) if owners else None

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (a subclass adopts its configuration of ``epoch``)."""
        raise NotImplementedError


class SamplerPass:
    """One iteration over a sampler (``ShardedSampler.open_pass()``): which positions it
    deals and how many items it has handed out. An item sampler iterates :meth:`items`
    (the core's ``RankPass``); a batch sampler deals this rank's items of ``partition`` its
    own way, through :meth:`for_dataset`, :meth:`announce` before and :meth:`handed` after.

    Args:
        epoch (int): the epoch of the pass.
        partition (Partition): the split of the pass's positions across the ranks.
        rank (int): this rank.
        epoch_dependent (bool): tag indices with the epoch (see ``EpochIndex``).
        prefetch (WindowPrefetch, optional): announces a block order's windows.
        loader (LoaderCount, optional): what the DataLoader iterator pulling the items
            handed to the loop (``find_loader_iterator``): what state dicts save.

    Example::

        >>> current = sampler.open_pass()
        >>> for i in range(0, current.num_samples, 4):
        ...     count = min(4, current.num_samples - i)
        ...     current.announce(i + count)
        ...     batch = current.for_dataset(current.partition.take_list(current.rank, i, i + count))
        ...     current.handed(i + count)
    """

    def __init__(
        self,
        epoch: int,
        partition: _core.Partition,
        rank: int,
        *,
        epoch_dependent: bool = False,
        prefetch: Optional[WindowPrefetch] = None,
        loader: Optional[LoaderCount] = None,
    ) -> None:
        self.epoch, self.partition, self.rank = epoch, partition, rank
        self._epoch_dependent = epoch_dependent
        self._prefetch = prefetch
        self._handed = 0  # items a batch sampler handed out (handed())
        self._items: Optional[_core.RankPass] = None  # the item iteration, once started
        self._loader = loader  # the DataLoader iterator pulling the items, if any

    @property
    def start(self) -> int:
        """Global positions consumed before the pass (its resume point)."""
        return self.partition.start

    @property
    def num_samples(self) -> int:
        """Items this rank deals in the pass."""
        return self.partition.num_samples

    def items(self, take: Optional[Callable[[int, int], list[int]]] = None) -> Iterator[int]:
        """This rank's items of the pass, one by one at C speed: the core reads them a
        chunk at a time (stopping at block-order windows, each announced first) and counts
        what was handed out, mid-chunk too. ``take(start, stop)``, where given, gives this
        rank's items ``[start, stop)`` for a sampler that maps the partition's samples."""
        if self._epoch_dependent:
            own = take or (lambda start, stop: self.partition.take_list(self.rank, start, stop))
            take = lambda start, stop: self.for_dataset(own(start, stop))  # noqa: E731
        prefetch = self._prefetch
        self._items = _core.RankPass(
            self.partition,
            self.rank,
            window_len=0 if prefetch is None else prefetch.window_len,
            announce=None if prefetch is None else prefetch.upto,
            take=take,
        )
        return itertools.chain.from_iterable(self._items)

    def for_dataset(self, indices: list[int]) -> list[int]:
        """``indices`` (samples about to be handed out) as the dataset receives them:
        tagged with the pass's epoch when the dataset is epoch-dependent (the epoch travels
        with the index to every worker)."""
        return tag(indices, self.epoch) if self._epoch_dependent else indices

    def for_dataset_array(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """As :meth:`for_dataset`, for an int64 array (an :class:`EpochIndices` when the
        dataset is epoch-dependent)."""
        return EpochIndices(indices, self.epoch) if self._epoch_dependent else indices

    def announce(self, local_end: int) -> None:
        """Before reading local items below ``local_end``: a dataset with ``prefetch`` is told
        the samples of each window they enter (block orders only; else nothing happens)."""
        if self._prefetch is not None:
            self._prefetch.upto(local_end)

    def handed(self, count: int) -> None:
        """Records that this rank has handed out its first ``count`` items of the pass."""
        self._handed = count

    @property
    def started(self) -> bool:
        """Whether the pass has handed out an item (to the loop, where a prefetching
        DataLoader counts what leaves it): only then does it count as an iteration of its
        epoch (loaders that create an iterator and drop it unused or only prefetched, as
        torchdata's do for a checkpointer's template, neither repeat the epoch nor use up a
        resume point)."""
        received = self._loader.received_any() if self._loader is not None else None
        if received is not None:
            return received
        return self._handed > 0 or (self._items is not None and self._items.started)

    def yielded(self) -> int:
        """Items this rank has handed out in this pass (exact, even mid-chunk)."""
        return self._items.yielded if self._items is not None else self._handed

    def consumed(self) -> int:
        """Global positions of the epoch consumed once this pass ended: what the loop
        received, or what the pass yielded where that is unknowable (a loader gone)."""
        try:
            taken = self.delivered()
        except ValueError:
            taken = self.yielded()
        return int(self.partition.consumed_after(taken))

    def delivered(self) -> int:
        """Items of this pass the training loop has received: what the DataLoader pulling
        them handed out (its workers may have prefetched more), else :meth:`yielded`."""
        yielded = self.yielded()
        return yielded if self._loader is None else self._loader.items(yielded)
