"""Datasets for the array-batch tests, importable by spawned DataLoader workers."""

from __future__ import annotations

import numpy as np


class Recording:
    """Returns, for each index, ``(index, type of the batch, epoch it carries)``."""

    def __init__(self, n: int, *, accepts_arrays: bool = False, epoch_dependent: bool = False) -> None:
        self.n, self.accepts_arrays, self.epoch_dependent = n, accepts_arrays, epoch_dependent
        self.prefetched: list[list[int]] = []

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, indices):
        kind = type(indices).__name__
        epoch = getattr(indices, "epoch", None)
        if epoch is None and isinstance(indices, list) and indices:
            epoch = getattr(indices[0], "epoch", None)
        return [(int(i), kind, epoch) for i in np.asarray(indices).tolist()]

    def prefetch(self, indices) -> None:
        self.prefetched.append(list(indices))


def keep(batch):
    """collate_fn: the fetched items as they are."""
    return batch


class GatheringAhead(Recording):
    """A ``Recording`` that declares arrays and notes each batch announced to it."""

    def __init__(self, n: int, **kwargs) -> None:
        super().__init__(n, accepts_arrays=True, **kwargs)
        self.announced: list[list[int]] = []

    def gather_ahead(self, indices) -> None:
        self.announced.append(np.asarray(indices).tolist())
