"""``SamplerPass``: one iteration over a :class:`~permshard.ShardedSampler`, the public
handle through which batch samplers deal its items."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt

from . import _core
from ._epoch_index import EpochIndices, tag
from ._loader_count import LoaderCount


class WindowPrefetch:
    """Tells a dataset with ``prefetch(indices)`` the samples this rank reads in each window
    of a block order, as the iteration enters the window (see ``ShardedSampler``).

    Args:
        dataset: the dataset, with a ``prefetch(indices)`` method.
        part (Partition): the pass's partition.
        rank (int): this rank.
        window_len (int): positions per window of the block order.

    Example::

        >>> prefetch = WindowPrefetch(rows, part, rank=0, window_len=4096)  # rows.prefetch(indices)
        >>> prefetch.upto(prefetch.window_end(0))  # announces the first window
    """

    def __init__(self, dataset: Any, part: _core.Partition, rank: int, window_len: int) -> None:
        self.dataset, self.part, self.rank, self.window_len = dataset, part, rank, window_len
        self.announced = 0  # local items announced so far

    def window_end(self, local: int) -> int:
        """One past the last local item in the window of local item ``local``.

        Args:
            local (int): a local item of this rank in the pass.
        """
        return self.part.window_end(self.rank, local, self.window_len)

    def upto(self, local_end: int) -> None:
        """Announces every window holding a local item below ``local_end``.

        Args:
            local_end (int): one past the last local item about to be read.
        """
        while self.announced < min(local_end, self.part.num_samples):
            end = self.window_end(self.announced)
            self.dataset.prefetch(self.part.take_list(self.rank, self.announced, end))
            self.announced = end


class SamplerPass:
    """One iteration over a sampler: which positions it deals and how many items it has
    handed out. ``ShardedSampler.begin_pass()`` returns one. An item sampler iterates
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
            handed to the loop (``loader_count.find_loader_iterator``): what state dicts save.

    Example::

        >>> current = sampler.begin_pass()
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

    def delivered(self) -> int:
        """Items of this pass the training loop has received: what the DataLoader pulling
        them handed out (its workers may have prefetched more), else :meth:`yielded`."""
        yielded = self.yielded()
        return yielded if self._loader is None else self._loader.items(yielded)
