"""A sampler's pass: :class:`PassLifecycle`, what every sampler does around its passes
(epochs, ``auto_epoch`` and the repeated-epoch warning, the consensus once per epoch, the
accelerate guard, when a resume point is used up), and :class:`SamplerPass`, the handle
through which batch samplers deal a pass's items."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt
import torch.distributed as dist

from . import _core
from . import _guards as guards
from ._config import EpochFields
from ._hooks import EpochIndices, WindowPrefetch, tag
from ._loader import LOADER_ITERATOR, LoaderCount, find_loader_iterator, iterating, user_stacklevel

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
        """The pass that started from the loaded resume point has handed out an item: the
        next pass of the epoch starts from the epoch's start."""
        raise NotImplementedError

    def _check_consensus(self, dealing: Mapping[str, Any]) -> None:
        """Every rank of the process group agrees on the configuration (a collective), with
        ``dealing`` (the fields of a batch sampler's dealing) applied."""
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
        per epoch. Returns what the DataLoader iterator pulling the pass hands to the loop
        (a ``LoaderCount``, or ``None``): what state dicts count.

        Args:
            dealing (Mapping): the dealing fields of the batch sampler the pass is for
                (``dealing``, ``batch_size``, ``drop_last_batch``): agreed too.
        """
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
    """One iteration over a sampler: which positions it deals and how many items it has
    handed out. ``ShardedSampler._open_pass()`` returns one. An item sampler iterates
    :meth:`items` (the core's ``RankPass``: chunks of this rank's items, counted exactly);
    a batch sampler deals this rank's items ``[0, num_samples)`` of ``partition`` in its
    own layout, passes each group through :meth:`for_dataset`, calls :meth:`announce`
    before reading a group (block orders prefetch) and :meth:`handed` after handing it out
    (state dicts count it).

    Args:
        epoch (int): the epoch of the pass.
        partition (Partition): the split of the pass's positions across the ranks.
        rank (int): this rank.
        epoch_dependent (bool): tag indices with the epoch (see ``EpochIndex``).
        prefetch (WindowPrefetch, optional): announces a block order's windows.
        loader (LoaderCount, optional): what the DataLoader iterator pulling the items
            handed to the loop (``find_loader_iterator``): what state dicts save.

    Example::

        >>> current = sampler._open_pass()
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
        what was handed out, mid-chunk too.

        Args:
            take (callable, optional): ``take(start, stop)``, this rank's items
                ``[start, stop)`` as the sampler yields them, for a sampler that maps the
                partition's samples. Default: the partition's samples.
        """
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
        """``indices`` as the dataset receives them: tagged with the pass's epoch when the
        dataset is epoch-dependent (the epoch travels with the index to every worker).

        Args:
            indices (list of int): samples about to be handed out.
        """
        return tag(indices, self.epoch) if self._epoch_dependent else indices

    def for_dataset_array(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """As :meth:`for_dataset`, for an int64 array: an :class:`EpochIndices` carrying the
        pass's epoch when the dataset is epoch-dependent, else the array itself.

        Args:
            indices (numpy.ndarray): int64 samples about to be handed out.
        """
        return EpochIndices(indices, self.epoch) if self._epoch_dependent else indices

    def announce(self, local_end: int) -> None:
        """Before reading local items below ``local_end``: a dataset with ``prefetch`` is told
        the samples of each window they enter (block orders only; else nothing happens).

        Args:
            local_end (int): one past the last local item about to be read.
        """
        if self._prefetch is not None:
            self._prefetch.upto(local_end)

    def handed(self, count: int) -> None:
        """Records that this rank has handed out its first ``count`` items of the pass.

        Args:
            count (int): local items handed out so far, all groups together.
        """
        self._handed = count

    @property
    def started(self) -> bool:
        """Whether the pass has handed out an item: only then does it count as an
        iteration of its epoch (loaders that create an iterator and drop it unused, as
        torchdata's do, neither repeat the epoch nor use up a resume point)."""
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
