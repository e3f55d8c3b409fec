"""What permshard's samplers read of a dataset and what they hand it back.

A dataset is any map-style dataset (or an int, its length: :func:`dataset_length`). What it
may declare to the samplers is optional, each hook found by its name, declared here once as
a :class:`typing.Protocol` and read only through the functions below:

* ``accepts_arrays = True`` (:class:`AcceptsArrays`): its ``__getitems__`` takes an int64
  array, so batch samplers yield arrays by default.
* ``epoch_dependent = True`` (:class:`EpochDependent`): its items depend on the epoch, so
  samplers yield :class:`EpochIndex` values. A DataLoader hands each index from the sampler
  (in the main process) to the dataset (in a worker), and workers hold their own copy of the
  dataset, made when they started: with ``persistent_workers=True`` a
  ``dataset.set_epoch(e)`` never reaches them, but the index does.
* ``prefetch(indices)`` (:class:`Prefetches`): told the samples of each block-order window
  as the iteration enters it (:class:`WindowPrefetch`).
* ``gather_ahead(indices)`` (:class:`GathersAhead`): told batch k + 1 as batch k is handed
  out.
* ``read_by(sampler)`` (:class:`ReadBy`): told which sampler reads it, as a pass starts.
* ``schedule_state()`` and ``load_schedule(state)`` (:class:`HasSchedule`): run-time
  changes that a sampler's state dict carries (``MixedDataset``'s weights).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from numbers import Integral
from typing import Any, Optional, Protocol, cast

import numpy as np
import numpy.typing as npt

from . import _core


class AcceptsArrays(Protocol):
    """A dataset whose ``__getitems__`` takes an int64 array of indices."""

    accepts_arrays: bool


class EpochDependent(Protocol):
    """A dataset whose items depend on the epoch (it receives :class:`EpochIndex` values)."""

    epoch_dependent: bool


class Prefetches(Protocol):
    """A dataset told ahead which samples a block-order window will read."""

    def prefetch(self, indices: Sequence[int]) -> None: ...


class GathersAhead(Protocol):
    """A dataset told the next batch (an int64 array) as the current one is handed out."""

    def gather_ahead(self, indices: Any) -> None: ...


class ReadBy(Protocol):
    """A dataset told which sampler reads it, as each pass starts."""

    def read_by(self, sampler: Any) -> None: ...


class HasSchedule(Protocol):
    """A dataset with run-time changes that a sampler's state dict carries."""

    def schedule_state(self) -> Optional[dict[str, Any]]: ...

    def load_schedule(self, state: Mapping[str, Any]) -> None: ...


class ExplainsFingerprint(Protocol):
    """A dataset that can say why a state's fingerprint is not its own (the same data under
    another setting: the fix to resume)."""

    def fingerprint_hint(self, saved: str) -> Optional[str]: ...


def _has(dataset: Any, *names: str) -> bool:
    """Whether ``dataset`` has a callable attribute of every one of ``names``."""
    return all(callable(getattr(dataset, name, None)) for name in names)


def prefetches(dataset: Any) -> Optional[Prefetches]:
    """``dataset`` where it has ``prefetch(indices)``, else ``None``."""
    return cast(Prefetches, dataset) if _has(dataset, "prefetch") else None


def gathers_ahead(dataset: Any) -> Optional[GathersAhead]:
    """``dataset`` where it has ``gather_ahead(indices)``, else ``None``."""
    return cast(GathersAhead, dataset) if _has(dataset, "gather_ahead") else None


def read_by(dataset: Any) -> Optional[ReadBy]:
    """``dataset`` where it has ``read_by(sampler)``, else ``None``."""
    return cast(ReadBy, dataset) if _has(dataset, "read_by") else None


def has_schedule(dataset: Any) -> Optional[HasSchedule]:
    """``dataset`` where it has ``schedule_state()`` and ``load_schedule(state)``, else ``None``."""
    return cast(HasSchedule, dataset) if _has(dataset, "schedule_state", "load_schedule") else None


def explains_fingerprint(dataset: Any) -> Optional[ExplainsFingerprint]:
    """``dataset`` where it has ``fingerprint_hint(saved)``, else ``None``."""
    return cast(ExplainsFingerprint, dataset) if _has(dataset, "fingerprint_hint") else None


def dataset_length(dataset: Any) -> int:
    """Length of ``dataset``: an int N, or anything with ``__len__``.

    Args:
        dataset: a dataset with ``__len__``, or an int.
    """
    if isinstance(dataset, bool):
        raise TypeError("dataset must be a dataset with __len__ or an int, got a bool")
    if isinstance(dataset, Integral):  # an int, or numpy's integers
        n = int(dataset)
        if n < 1:
            raise ValueError(
                f"a dataset length must be at least 1, got {n}: pass the number of samples "
                "(or the dataset itself)"
            )
    elif isinstance(dataset, Sized):
        n = len(dataset)
    else:
        raise TypeError(
            f"dataset must have __len__ or be an int, got {type(dataset).__name__}; for an "
            "IterableDataset use permshard.data.shard_iterable instead of a sampler"
        )
    if n < 1:
        raise ValueError(f"dataset is empty (length {n}); a sampler needs at least one sample")
    if n > 2**63:
        raise ValueError(f"dataset length {n} exceeds 2**63, the largest index torch can hold")
    return n


class EpochIndex(int):
    """An ``int`` dataset index with the sampler's ``epoch`` attached.

    It behaves as the plain index everywhere (arithmetic, numpy, ``range`` checks); a
    dataset that wants the epoch reads ``getattr(index, "epoch", None)``.

    Example::

        >>> i = EpochIndex(7, epoch=2)
        >>> i + 1, i.epoch
        (8, 2)
    """

    epoch: int

    def __new__(cls, value: int, epoch: int) -> EpochIndex:
        self = super().__new__(cls, value)
        self.epoch = epoch
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpochIndex, (int(self), self.epoch))

    def __repr__(self) -> str:
        return f"EpochIndex({int(self)}, epoch={self.epoch})"


class EpochIndices(np.ndarray):
    """An int64 array of dataset indices with the sampler's ``epoch`` attached: the array
    form of :class:`EpochIndex`, for batch samplers that yield arrays. Slices keep the
    epoch, and so does pickling to DataLoader workers.

    Example::

        >>> batch = EpochIndices([4, 9, 2], epoch=3)
        >>> batch[1:].epoch, batch.dtype
        (3, dtype('int64'))
    """

    epoch: Optional[int]

    def __new__(cls, values: npt.ArrayLike, epoch: int) -> EpochIndices:
        array = np.asarray(values, dtype=np.int64).view(cls)
        array.epoch = epoch
        return array

    def __array_finalize__(self, obj: Any) -> None:
        self.epoch = getattr(obj, "epoch", None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpochIndices, (np.asarray(self), self.epoch))


def wants_arrays(dataset: Any) -> bool:
    """Whether ``dataset`` declared that its ``__getitems__`` takes an int64 array of
    indices (``accepts_arrays = True``): batch samplers then yield arrays by default.

    Args:
        dataset: any dataset.
    """
    return bool(getattr(dataset, "accepts_arrays", False))


def tag(indices: Iterable[int], epoch: int) -> list[int]:
    """``indices`` as :class:`EpochIndex` values of ``epoch``.

    Args:
        indices (iterable of int): sample indices.
        epoch (int): the epoch they belong to.
    """
    return [EpochIndex(i, epoch) for i in indices]


def wants_epoch(dataset: Any) -> bool:
    """Whether ``dataset`` declared that its items depend on the epoch.

    Args:
        dataset: any dataset (``epoch_dependent = True`` declares it).
    """
    return bool(getattr(dataset, "epoch_dependent", False))


def epoch_of(indices: Any) -> Optional[int]:
    """The epoch an index (or the first index of a batch) carries; None for plain ints.

    Args:
        indices: one index, or a batch (list or array) of them.
    """
    if isinstance(indices, (EpochIndex, EpochIndices)):
        return indices.epoch
    if isinstance(indices, (list, tuple)) and indices and isinstance(indices[0], EpochIndex):
        epochs = {getattr(i, "epoch", None) for i in indices}
        if len(epochs) != 1:
            raise ValueError(f"a batch mixes indices of epochs {sorted(map(str, epochs))}")
        return indices[0].epoch
    return None


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

    def __init__(self, dataset: Prefetches, part: _core.Partition, rank: int, window_len: int) -> None:
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
