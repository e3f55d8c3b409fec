"""``ScheduleChanges``: a mixture's weights changed while the run goes, in a table shared
with the DataLoader workers (torch shared memory: fork, spawn, forkserver and persistent
workers all map the same rows), so that every copy of the dataset reads the same stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from .._core import ShardingError
from .._distributed import all_gather_u64
from .._hooks import digest
from .._mixture import Mixture


def _shared(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` moved to shared memory: every DataLoader worker maps the same pages."""
    tensor.share_memory_()  # type: ignore[no-untyped-call]
    return tensor


class ScheduleChanges:
    """The stages added to ``base`` at run time: ``(start, weights)`` rows, and their count
    written last (a copy that reads the count sees complete rows).

    Args:
        base (Mixture): the mixture of the dataset's first arguments (its static stages too).
        capacity (int): the most changes.

    Example::

        >>> changes = ScheduleChanges(Mixture([100, 50], [0.5, 0.5]), capacity=8)
        >>> changes.append(60, [0.9, 0.1]).stages
        ((60, (0.9, 0.1)),)
    """

    def __init__(self, base: Mixture, capacity: int) -> None:
        self.base = base
        sources = len(base.sizes)
        self._starts = _shared(torch.zeros(capacity, dtype=torch.int64))
        self._weights = _shared(torch.zeros((capacity, sources), dtype=torch.float64))
        self._count = _shared(torch.zeros(1, dtype=torch.int64))
        self._view: Optional[np.ndarray] = None  # the count as numpy (cheap to read per item)

    @property
    def count(self) -> int:
        """Changes made so far."""
        if self._view is None:
            self._view = self._count.numpy()
        return int(self._view[0])

    def changed_since(self, mixture: Mixture) -> bool:
        """Whether ``mixture`` misses changes made since it was built.

        Args:
            mixture (Mixture): a mixture this table built.
        """
        return len(mixture.stages) - len(self.base.stages) != self.count

    def _stages(self, count: int) -> list[tuple[int, list[float]]]:
        added = [(int(self._starts[j]), self._weights[j].tolist()) for j in range(count)]
        return [(start, list(w)) for start, w in self.base.stages] + added

    def mixture(self, extra: Sequence[tuple[int, list[float]]] = ()) -> Mixture:
        """The base mixture with every change (and ``extra`` ones, to check them first).

        Args:
            extra (sequence of (int, list of float)): changes not written yet.
        """
        return self._built(self._stages(self.count) + list(extra))

    def _built(self, stages: list[tuple[int, list[float]]]) -> Mixture:
        """The base mixture's sources, weights, length, seed and order with ``stages``."""
        b = self.base
        return Mixture(b.sizes, b.weights, b.num_samples, b.seed, stages=stages, algorithm=b.algorithm)

    def append(self, start: int, weights: list[float]) -> Mixture:
        """Adds the change ``(start, weights)`` (checked as a stage first); the mixture
        with it.

        Args:
            start (int): the first position with the new weights.
            weights (list of float): one per source.
        """
        count = self.count
        if count == len(self._starts):
            raise ValueError(
                f"this MixedDataset took its max_changes={count} weight changes; build it with a "
                "larger max_changes=..."
            )
        stages = self._stages(count)
        if stages and start <= stages[-1][0]:
            raise ValueError(
                f"start={start} must come after the last stage of the weights, at {stages[-1][0]}"
            )
        changed = self.mixture([(start, weights)])  # the core checks the weights and the start
        self._starts[count] = start
        self._weights[count] = torch.tensor(weights, dtype=torch.float64)
        self._count[0] = count + 1  # last: a reader sees the row complete
        return changed

    def check_agreed(self, start: int, weights: list[float]) -> None:
        """Under torch.distributed, every rank must change the weights alike, at the same
        point of its schedule: a ``ShardingError`` on every rank otherwise.

        Args:
            start (int): the change's start.
            weights (list of float): its weights.
        """
        if not (dist.is_available() and dist.is_initialized()):
            return
        mine = [start, digest(tuple(weights)), self.count]
        rows = all_gather_u64(mine)
        for rank, row in enumerate(rows):
            if row != rows[0]:
                raise ShardingError(
                    f"ranks disagree on set_weights: rank 0 sets weights (digest {rows[0][1]:016x}) from "
                    f"position {rows[0][0]} as change {rows[0][2]}, rank {rank} (digest {row[1]:016x}) "
                    f"from {row[0]} as change {row[2]}. Fix: call set_weights on every rank with the same "
                    "arguments (compute the weights on one rank and broadcast them)"
                )

    def identity(self) -> str:
        """A digest of the base mixture (sources' sizes, weights, stages, length, seed,
        order), which a restored schedule must share."""
        b = self.base
        return f"{digest((b.sizes, b.weights, b.stages, b.num_samples, b.seed, b.algorithm)):016x}"

    def state(self) -> Optional[dict[str, Any]]:
        """``{"mixture": identity, "changes": [[start, weights], ...]}``, or ``None``."""
        count = self.count
        if not count:
            return None
        added = self._stages(count)[len(self.base.stages) :]
        return {"mixture": self.identity(), "changes": [[start, w] for start, w in added]}

    def restored(self, state: Optional[Mapping[str, Any]]) -> Mixture:
        """The mixture with the changes of :meth:`state` (``None``: none), leaving this
        table as it is.

        Args:
            state (Mapping, optional): a dict :meth:`state` returned.
        """
        if state is None:
            return self.base
        stages = [(start, list(w)) for start, w in self.base.stages] + self._changes_of(state)
        return self._built(stages)

    def _changes_of(self, state: Mapping[str, Any]) -> list[tuple[int, list[float]]]:
        """The changes of :meth:`state`, checked: its keys, its mixture, its rows.

        Args:
            state (Mapping): a dict :meth:`state` returned.
        """
        if not isinstance(state, Mapping) or set(state) != {"mixture", "changes"}:
            raise ValueError(
                "state_dict['schedule'] must be {'mixture': ..., 'changes': [...]}: pass a saved state"
            )
        if state["mixture"] != self.identity():
            raise ValueError(
                "state_dict['schedule'] was saved over another mixture (other sources, sizes, initial "
                "weights, length, seed or order): build the MixedDataset with the run's first arguments"
            )
        changes = state["changes"]
        if not isinstance(changes, (list, tuple)) or len(changes) > len(self._starts):
            raise ValueError(
                f"state_dict['schedule'] holds {len(changes) if isinstance(changes, (list, tuple)) else '?'} "
                f"changes; this dataset takes max_changes={len(self._starts)}"
            )
        out = []
        for change in changes:
            if not isinstance(change, (list, tuple)) or len(change) != 2:
                raise ValueError(f"a change must be [start, weights], got {change!r}")
            out.append((int(change[0]), [float(w) for w in change[1]]))
        return out

    def load(self, state: Mapping[str, Any]) -> Mixture:
        """Replaces the changes by those of :meth:`state`; the mixture with them.

        Args:
            state (Mapping): a dict :meth:`state` returned.
        """
        changes = self._changes_of(state)
        self._count[0] = 0
        restored = self.base
        for start, weights in changes:
            restored = self.append(start, weights)
        return restored

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None  # a numpy view of shared memory is made again where used
        return state
