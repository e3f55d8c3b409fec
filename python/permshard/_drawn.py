"""A weighted run's answers in the samples its ranks drew: a WeightedShardedSampler's
history records positions of its stream, and the run's weights (its state keeps only their
digest) map each position of an epoch to the sample drawn there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from . import _core
from ._config import ShardConfig

#: Positions drawn at a time when a sample's draws are searched: 8 MiB of samples.
_CHUNK = 1 << 20


class DrawnSamples:
    """The samples a weighted run drew, position by position.

    Args:
        state_dict (Mapping): a WeightedShardedSampler's state dict.
        weights (1-D array of float): the run's weights, as the sampler was built with them
            (refused by their digest otherwise).
    """

    def __init__(self, state_dict: Mapping[str, Any], weights: Any) -> None:
        array = np.ascontiguousarray(np.asarray(weights, dtype=np.float64))
        self._table = _core.Weights(array, bool(state_dict.get("replacement")))
        self._table.sharded_state(state_dict)  # another digest or replacement: refused, naming the fix
        self._seed, self._n = int(state_dict["seed"]), int(state_dict["n"])
        # The stream's positions in order, one rank: what the draws map.
        self._positions = ShardConfig(self._n, 1, shuffle=False).partition(0)

    def samples_at(self, epoch: int, positions: Iterable[int]) -> list[int]:
        """The samples drawn at ``positions`` of ``epoch`` (its draws built once: without
        replacement that costs O(len(weights)))."""
        draws = self._table.epoch(self._seed, epoch, self._n)
        return [int(draws.at(p)) for p in positions]

    def positions_of(self, sample: int, epoch: int, spans: Iterable[tuple[int, int]]) -> list[int]:
        """The positions of ``epoch`` within ``spans`` (``[start, stop)`` each) that drew
        ``sample``, in order: the epoch's draws read a chunk at a time, never all at once."""
        draws = self._table.epoch(self._seed, epoch, self._n)
        found: set[int] = set()
        for start, stop in spans:
            for lo in range(start, min(stop, self._n), _CHUNK):
                hi = min(lo + _CHUNK, stop, self._n)
                drawn = np.asarray(draws.take_list(self._positions, 0, lo, hi), dtype=np.uint64)
                found.update((lo + np.flatnonzero(drawn == sample)).tolist())
        return sorted(found)
