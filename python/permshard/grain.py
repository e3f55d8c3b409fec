"""permshard for grain's ``DataLoader`` and ``MapDataset`` pipelines.

grain's shuffled ``IndexSampler`` and ``MapDataset.shuffle`` repeat one record and never
read another when ``n = 2**k + 1`` with ``k`` even. :class:`ShardedIndexSampler` follows
grain's sampler contract over permshard's order instead: with ``drop_remainder=False``
every record exactly once per epoch over uneven shards, with ``drop_remainder=True``
``n // k`` records a shard, with ``pad=True`` ``DistributedSampler``'s padding; each
epoch's stream can be proven. :func:`shuffle` is a ``MapDataset`` transformation with a fresh permutation per
epoch, correct at every ``n``.

grain is not a dependency of permshard: this module imports it on use.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from . import _core
from ._adapter import optional_import
from ._config import ShardConfig, as_int, as_positive, as_u64
from ._permutation import Permutation

__all__ = ["ShardedIndexSampler", "shuffle"]


def _grain() -> Any:
    return optional_import("grain", "grain")


class ShardedIndexSampler:
    r"""grain's ``Sampler`` protocol (``__getitem__(index) -> RecordMetadata``) over
    permshard's order, for ``grain.DataLoader(sampler=...)``.

    grain's loader reads global indices ``s, s + k, s + 2k, ...`` on shard ``s`` of ``k``.
    The epochs' positions are laid end to end in those indices: index ``i`` is position
    ``i mod T`` of epoch ``i div T`` (after a resume, the first epoch starts at its resume
    point), and holds the record the epoch's order puts there. What ``T`` is follows
    grain's own ``IndexSampler``:

    * ``drop_remainder=False`` (grain's default): ``T = n``. Every record exactly once per
      epoch over all shards, the shards uneven by at most one record (grain's uneven
      shards); ``len(sampler) = num_epochs · n`` as grain's.
    * ``drop_remainder=True``: ``T = k · (n // k)``; each shard reads ``n // k`` records an
      epoch, shard ``s`` exactly ``ShardedSampler(n, k, s, drop_last=True)``'s stream.
    * ``pad=True``: ``T = k · ceil(n / k)``, ``DistributedSampler``'s padding, for loops
      that need equal steps on every shard: shard ``s`` reads exactly
      ``ShardedSampler(n, k, s)``'s stream.

    O(1) memory and O(1) per index. Records come with grain's per-index ``rng``
    (``Philox(seed + index)``), as grain's own ``IndexSampler`` gives them.

    Args:
        num_records (int): records in the data source, ``>= 1``.
        shard_options (grain.sharding.ShardOptions): this process's shard and the shard
            count; ``drop_remainder=True`` drops the tail that does not fill a round of
            shards (see above).
        seed (int, optional): key of the order, in ``[0, 2**64 - 1]``. Default: ``0``.
        num_epochs (int, optional): epochs to read, ``>= 1``; ``None`` repeats forever.
            Default: ``1``.
        shuffle (bool, optional): a fresh permutation per epoch (``False``: in order).
            Default: ``True``.
        pad (bool, optional): pad every epoch to whole rounds of shards, repeating its first
            records (not with ``drop_remainder``). Default: ``False``.
        algorithm (str, optional): ``"perm-v2"`` (default) or ``"perm-v1"``.

    Example::

        >>> sampler = ShardedIndexSampler(len(source), grain.sharding.ShardOptions(rank, world), seed=0)
        >>> loader = grain.DataLoader(data_source=source, sampler=sampler,
        ...                           shard_options=grain.sharding.ShardOptions(rank, world), worker_count=2)
        >>> sampler.verify().covered  # the epoch's stream over every shard, proven
        1000
    """

    def __init__(
        self,
        num_records: int,
        shard_options: Any,
        *,
        seed: int = 0,
        num_epochs: Optional[int] = 1,
        shuffle: bool = True,
        pad: bool = False,
        algorithm: str = _core.ALGORITHM,
    ) -> None:
        for name in ("shard_index", "shard_count", "drop_remainder"):
            if not hasattr(shard_options, name):
                raise TypeError(
                    f"shard_options must be a grain.sharding.ShardOptions (with {name}), got {type(shard_options).__name__}"
                )
        if not isinstance(pad, bool):
            raise TypeError(f"pad must be a bool, got {pad!r}")
        if pad and shard_options.drop_remainder:
            raise ValueError("pad=True pads the tail that drop_remainder=True drops: pass one of them")
        self.shard_index = as_int("shard_options.shard_index", shard_options.shard_index)
        self.shard_options = shard_options
        self.pad = pad
        self.config = ShardConfig(
            as_u64("num_records", num_records, minimum=1),
            as_positive("shard_options.shard_count", shard_options.shard_count),
            seed=seed,
            shuffle=shuffle,
            drop_last=bool(shard_options.drop_remainder),
            permutation=algorithm,
        )
        if not 0 <= self.shard_index < self.config.num_replicas:
            raise ValueError(
                f"shard_options.shard_index must be in [0, {self.config.num_replicas}), got {self.shard_index}"
            )
        self.num_epochs = None if num_epochs is None else as_positive("num_epochs", num_epochs)
        self._start_at(0, 0)

    @property
    def uneven(self) -> bool:
        """Whether the shards are uneven (grain's ``drop_remainder=False`` without ``pad``):
        an epoch is its ``n`` positions, read by the shards in turn."""
        return not (self.pad or self.config.drop_last)

    def _epoch_positions(self, part: _core.Partition) -> int:
        """Global indices the pass ``part`` takes: its positions below ``n`` (uneven
        shards), else every position it deals (padded or dropped, in whole rounds)."""
        return max(0, part.n - part.start) if self.uneven else part.total_size  # padding consumed: none left

    def _start_at(self, epoch: int, consumed: int) -> None:
        """Global index 0 is the first position after ``consumed`` of ``epoch``: the
        lengths of that first, partial epoch and of a whole one, computed once."""
        self._current: Optional[tuple[tuple[int, int], _core.Partition]] = None
        self._resume = (epoch, consumed)
        self._epoch_len = self._epoch_positions(self.config.partition())
        self._first_len = self._epoch_positions(self._partition(epoch, consumed))

    def __getstate__(self) -> dict[str, Any]:
        # The native partition is rebuilt in each worker, not pickled.
        return dict(self.__dict__, _current=None)

    def _partition(self, epoch: int, start: int = 0) -> _core.Partition:
        if self._current is None or self._current[0] != (epoch, start):  # epochs come in turn
            self._current = ((epoch, start), self.config.replace(epoch=epoch).partition(start))
        return self._current[1]

    def __len__(self) -> int:
        """Global indices over every shard and epoch (``sys.maxsize`` without an end)."""
        if self.num_epochs is None:
            return sys.maxsize
        return self._first_len + (self.num_epochs - self._resume[0] - 1) * self._epoch_len

    def _locate(self, index: int) -> tuple[int, int, int]:
        """``(epoch, start, position)``: global index ``index`` is the ``position``-th
        position of ``epoch``'s pass from ``start``."""
        epoch, start = self._resume
        if index < self._first_len:
            return epoch, start, index
        later, position = divmod(index - self._first_len, self._epoch_len)
        return epoch + 1 + later, 0, position

    def record_key(self, index: int) -> int:
        """The record at global index ``index``; O(1).

        Args:
            index (int): a global index, ``0 <= index < len(self)``.
        """
        index = as_int("index", index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range: the sampler has indices [0, {len(self)})")
        epoch, start, position = self._locate(index)
        return int(self._partition(epoch, start).sample_at(start + position))

    def state_dict(self, consumed_records: int) -> dict[str, Any]:
        """A :class:`~permshard.ShardedSampler` state dict of where the shards are, after
        each read ``consumed_records`` records from this sampler (grain's shards move in
        lockstep; at the end of uneven shards, the shards that ran out count as done);
        :meth:`load_state_dict` on a sampler with another shard count resumes there,
        every record still once per epoch.

        Args:
            consumed_records (int): records this shard read, counted from index 0.
        """
        consumed_records = as_int("consumed_records", consumed_records)
        shards = self.config.num_replicas
        most = -(-len(self) // shards)  # the records of the longest shard
        if not 0 <= consumed_records <= most:
            raise ValueError(f"consumed_records must be in [0, {most}], got {consumed_records}")
        index = min(consumed_records * shards, len(self))  # the global indices read
        epoch, start, position = self._locate(index)  # a finished epoch: the next one's start
        return self.config.replace(epoch=epoch).state_dict(start + position)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Starts this sampler's indices at the resume point of ``state_dict`` (saved by
        :meth:`state_dict`, or by a ``ShardedSampler``), on this shard count: build grain's
        ``DataLoader`` afresh on it.

        Args:
            state_dict (Mapping): a ``ShardedSampler`` state dict.
            strict (bool, optional): refuse unknown keys. Default: ``True``.
        """
        saved, consumed = ShardConfig.from_state_dict(state_dict, strict=strict)
        config = self.config.replace(permutation=saved.permutation)  # the order it names
        config.check_resumable(saved)
        if self.num_epochs is not None and saved.epoch >= self.num_epochs:
            raise ValueError(f"the state is in epoch {saved.epoch}, past num_epochs={self.num_epochs}")
        self.config = config
        self._start_at(saved.epoch, consumed)

    def __getitem__(self, index: int) -> Any:
        key = self.record_key(index)
        rng = np.random.Generator(np.random.Philox(key=self.config.seed + index))
        return _grain().RecordMetadata(index=index, record_key=key, rng=rng)

    def sampler(self, epoch: int = 0) -> Any:
        """The stream of ``epoch`` as a :class:`~permshard.ShardedSampler` (the same records
        in the same order), for plans, ``locate``, proofs and state dicts: this shard's
        stream with ``pad`` or ``drop_remainder``; with uneven shards the epoch's whole
        stream (one rank), of which the shards read every ``k``-th position in turn.

        Args:
            epoch (int, optional): the epoch. Default: ``0``.
        """
        from ._sampler import ShardedSampler

        c = self.config
        out = ShardedSampler(
            c.n,
            num_replicas=1 if self.uneven else c.num_replicas,
            rank=0 if self.uneven else self.shard_index,
            seed=c.seed,
            shuffle=c.shuffle,
            drop_last=c.drop_last,
            check_consensus=False,
            algorithm=c.permutation,
        )
        out.set_epoch(epoch)
        return out

    def verify(self, epoch: int = 0) -> Any:
        """Proves the epoch's stream exactly (every record once; the padding or the dropped
        tail declared) and returns the :class:`~permshard.Certificate`.

        Args:
            epoch (int, optional): the epoch. Default: ``0``.
        """
        return self.sampler(epoch).verify()

    def __repr__(self) -> str:
        c = self.config
        layout = "uneven" if self.uneven else ("padded" if self.pad else "drop_remainder")
        return (
            f"ShardedIndexSampler(num_records={c.n}, shard {self.shard_index} of {c.num_replicas}, "
            f"seed={c.seed}, num_epochs={self.num_epochs}, shuffle={c.shuffle}, {layout}) ({c.algorithm})"
        )


def shuffle(dataset: Any, seed: int = 0, *, algorithm: str = _core.ALGORITHM) -> Any:
    """``dataset`` (a ``grain.MapDataset``) read in a keyed permutation, a fresh one per
    epoch: index ``i`` of epoch ``e = i div n`` is record ``π_e(i mod n)``. Correct at every
    ``n`` (grain's own ``MapDataset.shuffle`` repeats a record at ``n = 2**k + 1``).

    Args:
        dataset (grain.MapDataset): the dataset to shuffle.
        seed (int, optional): key of the permutation. Default: ``0``.
        algorithm (str, optional): ``"perm-v2"`` (default) or ``"perm-v1"``.

    Example::

        >>> ds = permshard.grain.shuffle(grain.MapDataset.source(source), seed=0).batch(32)
    """
    if not isinstance(dataset, _grain().MapDataset):
        raise TypeError(f"dataset must be a grain.MapDataset, got {type(dataset).__name__}")
    Permutation(1, as_u64("seed", seed), 0, algorithm)  # a bad algorithm is refused here, not on first read
    return _shuffled_class()(dataset, seed, algorithm)


@functools.cache
def _shuffled_class() -> type:
    """The ``MapDataset`` of :func:`shuffle`, defined once grain is imported (its base)."""

    class Shuffled(_grain().MapDataset):  # type: ignore[misc]
        def __init__(self, parent: Any, seed: int, algorithm: str) -> None:
            super().__init__(parent)
            self._seed, self._algorithm = seed, algorithm
            self._current: Optional[tuple[int, Permutation]] = None

        def __len__(self) -> int:
            return len(self._parent)

        def __getitem__(self, index: Any) -> Any:
            if isinstance(index, slice):
                return self.slice(index)
            epoch, i = divmod(as_int("index", index), len(self._parent))
            if self._current is None or self._current[0] != epoch:  # epochs come in turn
                order = Permutation(len(self._parent), self._seed, epoch, self._algorithm)
                self._current = (epoch, order)
            return self._parent[self._current[1][i]]

        def __str__(self) -> str:
            return f"permshard.grain.shuffle(seed={self._seed}, algorithm={self._algorithm!r})"

    Shuffled.__qualname__ = Shuffled.__name__ = "Shuffled"  # pickled by name
    Shuffled.__module__ = __name__
    return Shuffled


def __getattr__(name: str) -> Any:
    # Unpickling a shuffled dataset in a worker finds its class by name.
    if name == "Shuffled":
        return _shuffled_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
