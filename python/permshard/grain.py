"""permshard for grain's ``DataLoader`` and ``MapDataset`` pipelines.

grain's shuffled ``IndexSampler`` and ``MapDataset.shuffle`` repeat one record and never
read another when ``n = 2**k + 1`` with ``k`` even, and its ``DataLoader`` drops a record
whenever ``n`` is not divisible by the shard count. :class:`ShardedIndexSampler` follows
grain's sampler protocol over permshard's order instead: shard ``s`` of ``k`` reads
exactly ``ShardedSampler(n, num_replicas=k, rank=s)``'s stream, every record once per
epoch (``DistributedSampler``'s padding, nothing dropped), and each shard's stream can be
proven. :func:`shuffle` is a ``MapDataset`` transformation with a fresh permutation per
epoch, correct at every ``n``.

grain is not a dependency of permshard: this module imports it on use.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from . import _core
from ._validation import as_int, as_positive, as_u64
from .config import ShardConfig
from .permutation import Permutation

__all__ = ["ShardedIndexSampler", "shuffle"]


def _grain() -> Any:
    try:
        import grain
    except ImportError as e:  # pragma: no cover - exercised where grain is absent
        raise ImportError("permshard.grain needs grain: pip install grain") from e
    return grain


class ShardedIndexSampler:
    r"""grain's ``Sampler`` protocol (``__getitem__(index) -> RecordMetadata``) over
    permshard's order, for ``grain.DataLoader(sampler=...)``.

    grain's loader reads global indices ``s, s + k, s + 2k, ...`` on shard ``s`` of ``k``.
    Index ``i`` is position ``i mod T`` of epoch ``i div T``, with ``T`` the padded
    positions of an epoch (``DistributedSampler``'s ``total_size``), so shard ``s`` reads
    ``ShardedSampler(n, num_replicas=k, rank=s)``'s stream, epoch after epoch: O(1) memory
    and O(1) per index. Records come with grain's per-index ``rng`` (``Philox(seed +
    index)``), as grain's own ``IndexSampler`` gives them.

    Args:
        num_records (int): records in the data source, ``>= 1``.
        shard_options (grain.sharding.ShardOptions): this process's shard and the shard count;
            ``drop_remainder=True`` drops the tail that does not fill a round of shards
            (``drop_last``) instead of padding it.
        seed (int, optional): key of the order, in ``[0, 2**64 - 1]``. Default: ``0``.
        num_epochs (int, optional): epochs to read; ``None`` repeats forever. Default: ``1``.
        shuffle (bool, optional): a fresh permutation per epoch (``False``: in order).
            Default: ``True``.
        algorithm (str, optional): ``"perm-v2"`` (default) or ``"perm-v1"``.

    Example::

        >>> sampler = ShardedIndexSampler(len(source), grain.sharding.ShardOptions(rank, world), seed=0)
        >>> loader = grain.DataLoader(data_source=source, sampler=sampler,
        ...                           shard_options=grain.sharding.ShardOptions(rank, world), worker_count=2)
        >>> sampler.verify().covered  # every shard's stream, proven
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
        algorithm: str = _core.ALGORITHM,
    ) -> None:
        for name in ("shard_index", "shard_count", "drop_remainder"):
            if not hasattr(shard_options, name):
                raise TypeError(
                    f"shard_options must be a grain.sharding.ShardOptions (with {name}), got {type(shard_options).__name__}"
                )
        self.shard_index = as_int("shard_options.shard_index", shard_options.shard_index)
        self.shard_options = shard_options
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

    def _start_at(self, epoch: int, consumed: int) -> None:
        """Global index 0 is the first position after ``consumed`` of ``epoch``: the
        lengths of that first, partial epoch and of a whole one, computed once."""
        self._current: Optional[tuple[tuple[int, int], _core.Partition]] = None
        self._resume = (epoch, consumed)
        self._epoch_len = self.config.partition().total_size  # global positions of an epoch
        self._first_len = int(self._partition(epoch, consumed).num_samples) * self.config.num_replicas

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
        dealt position of ``epoch``'s pass from ``start``."""
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
            raise IndexError(f"index {index} is out of range: the sampler has {len(self)} indices")
        epoch, start, position = self._locate(index)
        rank, local = position % self.config.num_replicas, position // self.config.num_replicas
        return int(self._partition(epoch, start).take_list(rank, local, local + 1)[0])

    def state_dict(self, consumed_records: int) -> dict[str, Any]:
        """A :class:`~permshard.ShardedSampler` state dict of where the shards are, after
        each read ``consumed_records`` records from this sampler (grain's shards move in
        lockstep); :meth:`load_state_dict` on a sampler with another shard count resumes
        there, every record still once per epoch.

        Args:
            consumed_records (int): records this shard read, counted from index 0.
        """
        consumed_records = as_int("consumed_records", consumed_records)
        index = consumed_records * self.config.num_replicas
        if not 0 <= index <= len(self):
            raise ValueError(
                f"consumed_records must be in [0, {len(self) // self.config.num_replicas}], got {consumed_records}"
            )
        epoch, start, position = self._locate(index)  # a finished epoch: the next one's start
        return self.config.replace(epoch=epoch).state_dict(start + position)

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Starts this sampler's indices at the resume point of ``state`` (saved by
        :meth:`state_dict`, or by a ``ShardedSampler``), on this shard count: build grain's
        ``DataLoader`` afresh on it.

        Args:
            state (Mapping): a ``ShardedSampler`` state dict.
            strict (bool, optional): refuse unknown keys. Default: ``True``.
        """
        saved, consumed = ShardConfig.from_state_dict(state, strict=strict)
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
        """This shard's stream in ``epoch`` as a :class:`~permshard.ShardedSampler` (the
        same records in the same order): for plans, ``locate``, proofs and state dicts.

        Args:
            epoch (int, optional): the epoch. Default: ``0``.
        """
        from .sampler import ShardedSampler

        c = self.config
        out = ShardedSampler(
            c.n,
            num_replicas=c.num_replicas,
            rank=self.shard_index,
            seed=c.seed,
            shuffle=c.shuffle,
            drop_last=c.drop_last,
            check_consensus=False,
            algorithm=c.permutation,
        )
        out.set_epoch(epoch)
        return out

    def verify(self, epoch: int = 0) -> Any:
        """Proves the epoch over every shard exactly (every record once, the padding
        declared) and returns the :class:`~permshard.Certificate`.

        Args:
            epoch (int, optional): the epoch. Default: ``0``.
        """
        return self.sampler(epoch).verify()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"ShardedIndexSampler(num_records={c.n}, shard {self.shard_index} of {c.num_replicas}, "
            f"seed={c.seed}, num_epochs={self.num_epochs}, shuffle={c.shuffle}) ({c.algorithm})"
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


def _shuffled_class() -> type:
    """The ``MapDataset`` of :func:`shuffle`, defined once grain is imported (its base)."""
    global _Shuffled
    if _Shuffled is None:

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

        Shuffled.__qualname__ = Shuffled.__name__ = "Shuffled"
        Shuffled.__module__ = __name__
        _Shuffled = Shuffled
    return _Shuffled


_Shuffled: Optional[type] = None


def __getattr__(name: str) -> Any:
    # Unpickling a shuffled dataset in a worker finds its class by name.
    if name == "Shuffled":
        return _shuffled_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
