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
        indices: one index, or a batch (list) of them.
    """
    if isinstance(indices, EpochIndex):
        return indices.epoch
    if isinstance(indices, (list, tuple)) and indices and isinstance(indices[0], EpochIndex):
        epochs = {getattr(i, "epoch", None) for i in indices}
        if len(epochs) != 1:
            raise ValueError(f"a batch mixes indices of epochs {sorted(map(str, epochs))}")
        return indices[0].epoch
    return None
