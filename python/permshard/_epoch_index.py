"""``EpochIndex``: a dataset index that carries the sampler's epoch to the dataset.

A DataLoader hands each index from the sampler (in the main process) to the dataset (in
a worker). Worker processes hold their own copy of the dataset, made when they started:
with ``persistent_workers=True`` a ``dataset.set_epoch(e)`` in the main process never
reaches them. What does reach them is the index itself, so a dataset whose items depend on
the epoch declares ``epoch_dependent = True`` and permshard's samplers yield
:class:`EpochIndex` values: ints that also know their epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import numpy as np
import numpy.typing as npt


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
