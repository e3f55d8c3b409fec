"""``WeightedShardedSampler``: torch's ``WeightedRandomSampler`` across ranks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Callable, ClassVar, Optional, Union

import numpy as np
import numpy.typing as npt
import torch

from . import _core
from ._config import as_u64
from ._distributed import Agreed, MeshDim
from ._pass import SamplerPass
from ._report import ShardPlan
from ._sampler import ShardedSampler

#: The id of the weighted draws (weighted-v1), recorded in state dicts.
WEIGHTED_ALGORITHM = _core.WEIGHTED_ALGORITHM


def as_weights(weights: Any) -> npt.NDArray[np.float64]:
    """``weights`` as a contiguous 1-D float64 array (a copy: later edits of the caller's
    weights change nothing).

    Args:
        weights: a numpy array, a torch tensor or a sequence of numbers.
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().to("cpu", torch.float64).numpy()
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, (np.ndarray, Sequence)):
        raise TypeError(
            f"weights must be a 1-D sequence, numpy array or tensor of numbers, got {type(weights).__name__}"
        )
    try:
        array = np.array(weights, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as e:
        raise TypeError(f"weights must be numbers: {e}") from None
    if array.ndim != 1:
        raise ValueError(f"weights must be 1-D, got shape {array.shape}; pass one weight per sample")
    return np.ascontiguousarray(array)


class WeightedShardedSampler(ShardedSampler):
    r"""Samples elements from ``[0, len(weights))`` with the given probabilities, split
    across ranks: :class:`torch.utils.data.WeightedRandomSampler` for distributed runs.

    One global stream of ``num_draws`` draws per ``(seed, epoch)``; rank ``r`` yields
    positions ``r, r + W, ...`` of it (DistributedSampler's round-robin, its padding and
    ``drop_last``), so the ranks together read the stream exactly once, whatever their
    number, and a resume on another world size continues it exactly. Position ``p`` is one
    draw from an alias table built in Rust (O(N), 16 bytes per weight), computed from
    ``(seed, epoch, p)`` alone: the first index comes at once, whatever ``num_draws``.

    Args:
        weights (sequence, numpy array or tensor): a sequence of weights, not necessary
            summing up to one; 1-D, finite, ``>= 0``, at least one positive.
        num_draws (int): number of draws per epoch, across all ranks (torch's
            ``num_samples``, renamed: :attr:`num_samples` is this rank's count, as on
            every sampler).
        replacement (bool, optional): if ``True`` (default), samples are drawn with
            replacement. If not, each sample is drawn at most once per epoch (by
            exponential keys in Rust: ``num_draws`` at most the positive weights; O(N)
            work at the start of each epoch, O(num_draws) memory).
        num_replicas (int, optional): number of data-parallel ranks (default: the world).
        rank (int, optional): this rank (default: the process's rank).
        seed (int, optional): key of the draws, identical on every rank. Default: ``0``.
        drop_last (bool, optional): drop the tail of the stream that does not fill a round
            of ranks instead of padding it (padding repeats the stream's first positions).
        auto_epoch, check_consensus, device_mesh, mesh_dim: as in
            :class:`~permshard.ShardedSampler`. The consensus also compares a digest of
            the weights across ranks.

    ``len(sampler)`` and :attr:`num_samples` are this rank's count, as for
    DistributedSampler; :attr:`num_draws` is the global number of draws. Wrap it in
    :class:`torch.utils.data.BatchSampler` for batches.

    Example::

        >>> weights = [0.1, 0.9, 0.4, 0.7, 3.0, 0.6]
        >>> sampler = WeightedShardedSampler(weights, 8, num_replicas=2, rank=0)
        >>> sampler.num_samples, sampler.num_draws  # this rank's draws, the stream's
        (4, 8)
        >>> sampler.draws().at(0) in range(6)  # the sample drawn at global position 0
        True
    """

    yields_partition_samples: ClassVar[bool] = False

    def __init__(
        self,
        weights: Union[Sequence[float], npt.NDArray[Any], torch.Tensor],
        num_draws: int,
        *,
        replacement: bool = True,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        seed: int = 0,
        drop_last: bool = False,
        auto_epoch: bool = False,
        check_consensus: bool = True,
        device_mesh: Any = None,
        mesh_dim: Optional[MeshDim] = None,
    ) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement!r}")
        if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws <= 0:
            raise ValueError(f"num_draws should be a positive integer value, but got num_draws={num_draws!r}")
        self._weights = as_weights(weights)
        self._replacement = replacement
        self._table = _core.Weights(self._weights, replacement)
        self._table.check_draws(num_draws)  # the core's rule, at construction
        self._draws: Optional[tuple[int, _core.EpochDraws]] = None
        super().__init__(
            num_draws,
            num_replicas,
            rank,
            shuffle=False,  # the positions in order; the draws are the randomness
            seed=as_u64("seed", seed),
            drop_last=drop_last,
            auto_epoch=auto_epoch,
            check_consensus=check_consensus,
            device_mesh=device_mesh,
            mesh_dim=mesh_dim,
        )

    @property
    def weights(self) -> torch.Tensor:
        """The weights, as float64 (a read-only view)."""
        return torch.from_numpy(self._weights)

    @property
    def num_draws(self) -> int:
        """Draws per epoch across all ranks (:attr:`num_samples`: this rank's)."""
        return self.n

    @property
    def replacement(self) -> bool:
        """Whether samples are drawn with replacement."""
        return self._replacement

    @property
    def weights_digest(self) -> str:
        """A 64-bit digest of the weights, in hex: ranks and resumes compare it."""
        return f"{self._table.digest:016x}"

    def draws(self, epoch: Optional[int] = None) -> _core.EpochDraws:
        """The stream of ``epoch`` (default: the current one): global position → sample.

        Args:
            epoch (int, optional): the epoch.
        """
        epoch = self.epoch if epoch is None else as_u64("epoch", epoch)
        cached = self._draws
        if cached is None or cached[0] != epoch:
            cached = (epoch, self._table.epoch(self.seed, epoch, self.n))
            self._draws = cached
        return cached[1]

    def _take(self, current: SamplerPass) -> Callable[[int, int], list[int]]:
        draws, part, rank = self.draws(current.epoch), current.partition, self.rank
        return lambda start, stop: draws.take_list(part, rank, start, stop)

    def _agreed(self) -> list[Agreed]:
        fix = "pass the same weights (and replacement=) on every rank"
        return [
            Agreed("weights", self._table.digest, fix, True),
            Agreed("replacement", int(self.replacement), fix),
        ]

    def plan(self) -> ShardPlan:
        """The exact split of the current epoch's positions; its padding and dropped
        samples are the samples drawn at those positions."""
        plan = super().plan()
        draws = self.draws()
        return dataclasses.replace(
            plan,
            padding_samples=tuple(draws.at(p) for p in plan.padding_samples),
            dropped_samples=tuple(draws.at(p) for p in plan.dropped_samples),
        )

    def locate(self, sample: int, epoch: Optional[int] = None) -> list[tuple[int, int]]:
        """Refused: a weighted stream draws a sample at any number of positions. Use
        :meth:`draws` (``draws().at(position)``) and :meth:`plan` instead."""
        raise TypeError(
            "WeightedShardedSampler.locate is not defined: a sample may be drawn at any number "
            "of positions; use sampler.draws().at(position) and sampler.plan()"
        )

    def describe(self) -> dict[str, Any]:
        return dict(super().describe(), **self._table.state())

    def state_dict(self, consumed_samples: Optional[int] = None, **kwargs: Any) -> dict[str, Any]:
        """The resume point, O(1): a :meth:`ShardedSampler.state_dict` (``consumed`` counts
        the stream's positions) with the draws' id, the weights' digest and
        ``replacement``.

        Args:
            consumed_samples (int, optional): global draws of the epoch consumed so far
                (see :meth:`ShardedSampler.state_dict`).
        """
        state = dict(super().state_dict(consumed_samples, **kwargs), **self._table.state())
        state["kind"] = "weighted"  # positions are draws: a Run answers in the samples drawn
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores a resume point of :meth:`state_dict`, on any number of ranks: the
        remaining draws of the epoch are dealt across them. Refuses a state of other
        weights or another ``replacement``.

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict`.
            strict (bool, optional): refuse keys this sampler does not save.
        """
        super().load_state_dict(self._table.sharded_state(state_dict), strict)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_table"] = None  # rebuilt from the weights
        state["_draws"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_table"] = _core.Weights(self._weights, self._replacement)

    def __repr__(self) -> str:
        return (
            f"WeightedShardedSampler(num_weights={len(self._weights)}, num_draws={self.num_draws}, "
            f"replacement={self.replacement}, num_replicas={self.num_replicas}, rank={self.rank}, "
            f"seed={self.seed}, drop_last={self.drop_last}, epoch={self.epoch}, "
            f"num_samples={self.num_samples})"
        )
