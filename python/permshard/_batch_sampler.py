"""The batch samplers over a :class:`~permshard.ShardedSampler`: ``ShardedBatchSampler``
(round-robin items, in batches) and ``StepBatchSampler`` (accelerate's whole batches per
step). Each proves the stream it yields (:class:`~permshard._proof.ProvenStream`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

from torch.utils.data import BatchSampler

from . import _core
from ._config import ShardConfig, as_positive
from ._hooks import gathers_ahead, wants_arrays
from ._proof import ProofTarget, ProvenStream
from ._sampler import ShardedSampler


class ShardedBatchSampler(BatchSampler, ProvenStream):
    r"""Wraps a :class:`ShardedSampler` to yield batches of indices, built in Rust.

    Same batches, in the same order, as ``BatchSampler(sampler, batch_size, drop_last)``;
    for ``DataLoader(dataset, batch_sampler=...)``, which lets a dataset with
    ``__getitems__`` fetch a whole batch at once. A batch is a ``list[int]``, or one int64
    ``numpy.ndarray`` (no Python object per index) for datasets that declare
    ``accepts_arrays = True`` (``TokenWindows`` does) or with ``as_array=True``; for an
    epoch-dependent dataset the array is an
    :class:`~permshard._hooks.EpochIndices` carrying the epoch. A dataset taking
    arrays that has ``gather_ahead(indices)`` (``MemmapRows``) is told each batch as the
    one before it is handed out, to gather it while the loop runs.

    Args:
        sampler (ShardedSampler): the per-rank sampler.
        batch_size (int): size of mini-batch.
        drop_last (bool): if ``True``, drop the last batch when it is smaller than
            ``batch_size``. Default: ``False``.
        as_array (bool, optional): yield int64 arrays (``True``) or lists (``False``).
            Default: ``None``, what the dataset declares (``accepts_arrays``).

    Example::

        >>> sampler = ShardedSampler(dataset, num_replicas=4, rank=0)
        >>> loader = DataLoader(dataset, batch_sampler=ShardedBatchSampler(sampler, 64))
    """

    def __init__(
        self,
        sampler: ShardedSampler,
        batch_size: int,
        drop_last: bool = False,
        *,
        as_array: Optional[bool] = None,
    ) -> None:
        if not isinstance(sampler, ShardedSampler):
            raise TypeError(
                f"sampler must be a ShardedSampler, got {type(sampler).__name__}; wrap other "
                "samplers in torch.utils.data.BatchSampler"
            )
        if not sampler.yields_partition_samples:
            raise TypeError(
                f"{type(sampler).__name__} draws its indices from positions, which a batch sampler "
                f"cannot take whole: wrap it in torch.utils.data.BatchSampler({type(sampler).__name__}(...), "
                "batch_size, drop_last)"
            )
        if not isinstance(drop_last, bool):
            raise TypeError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        if as_array is not None and not isinstance(as_array, bool):
            raise TypeError(f"as_array must be a bool or None, got {as_array!r}")
        self.sampler = sampler
        self._sharded = sampler
        self.batch_size = as_positive("batch_size", batch_size)
        self.drop_last = drop_last
        self.as_array = as_array

    #: How this sampler deals positions (see :class:`~permshard.ShardConfig`).
    dealing = "round-robin"

    def _dealing(self) -> dict[str, Any]:
        """How this sampler deals and batches a pass: the fields of :class:`ShardConfig`."""
        return {"dealing": self.dealing, "batch_size": self.batch_size, "drop_last_batch": self.drop_last}

    def dealt(self) -> tuple[_core.Partition, ShardConfig]:
        """The pass being run as this sampler deals and batches it."""
        return self._sharded.dealt(**self._dealing())

    def _proof_target(self) -> ProofTarget:
        """The pass being run, dealt and batched as this sampler yields it (a dropped
        last batch is declared dropped); see :class:`~permshard._proof.ProvenStream`."""
        part, config = self.dealt()
        return ProofTarget(part, config, self._sharded.rank, self._sharded.dataset)

    @property
    def yields_arrays(self) -> bool:
        """Whether batches are int64 arrays: ``as_array``, else the dataset's declaration."""
        return self.as_array if self.as_array is not None else wants_arrays(self._sharded.dataset)

    def __iter__(self) -> Iterator[Any]:
        current = self._sharded.open_pass(**self._dealing())  # the batches agreed too
        part, _ = self.dealt()  # what this sampler proves, dealt and batched by the core
        arrays = self.yields_arrays
        take: Callable[[int, int, int], list[Any]] = part.take_batches if arrays else part.take_batches_list
        wrap: Callable[[Any], Any] = current.for_dataset_array if arrays else current.for_dataset
        # A rank's positions keep their round-robin local index: block windows announce.
        announce = current.announce if part.dealing == "round-robin" else None
        # A dataset that gathers ahead is told batch k + 1 as batch k is handed out.
        ahead = gathers_ahead(self._sharded.dataset) if arrays else None
        gather_ahead = ahead.gather_ahead if ahead is not None else None
        per_call = part.batches_per_call  # whole batches, about the core's chunk a call
        end = 0  # local items handed out, batch after batch as the core cut them
        held: Optional[tuple[Any, int]] = None  # the batch cut, not yet handed out
        for first in range(0, part.num_batches, per_call):
            last = min(first + per_call, part.num_batches)
            for batch in take(current.rank, first, last):
                end += len(batch)
                if announce is not None:
                    announce(end)  # the windows this batch enters, before it is read
                out = wrap(batch)
                if held is not None:
                    if gather_ahead is not None:
                        gather_ahead(out)
                    current.handed(held[1])
                    yield held[0]
                held = (out, end)
        if held is not None:
            current.handed(held[1])
            yield held[0]

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the sampler under the batches (``sampler.set_epoch``), for
        loops that call it on the loader's batch sampler.

        Args:
            epoch (int): epoch number, in ``[0, 2**64 - 1]``.
        """
        self._sharded.set_epoch(epoch)

    def __len__(self) -> int:
        return self.dealt()[0].num_batches

    def state_dict(self, consumed_samples: Optional[int] = None) -> dict[str, Any]:
        """The sampler's state dict: the batches the training loop received (from the
        DataLoader, not what its workers prefetched) count as consumed, unless
        ``consumed_samples`` says otherwise; see :meth:`ShardedSampler.state_dict`.

        Args:
            consumed_samples (int, optional): global samples of the epoch consumed since
                its start.
        """
        return self._sharded.state_dict(consumed_samples)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores the sampler's resume point; see :meth:`ShardedSampler.load_state_dict`.

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict`.
            strict (bool, optional): refuse unknown keys. Default: ``True``.
        """
        self._sharded.load_state_dict(state_dict, strict)


class StepBatchSampler(ShardedBatchSampler):
    r"""Deals whole batches: at step ``s`` rank ``r`` takes global positions
    ``[s·B·W + r·b, s·B·W + (r + 1)·b)`` where ``b`` is the step's per-rank batch (``B``
    except maybe at the last step).

    This is accelerate's own layout (``gather`` at a step returns positions in order), so
    at the end of an evaluation epoch the padding is exactly the tail that
    ``gather_for_metrics`` cuts. After ``k`` steps the consumed positions are the prefix
    ``[0, k·B·W)``, as with :class:`ShardedSampler`: resume (also on another number of
    processes) stays exact. Lengths, argument checks and state dicts are those of
    :class:`~permshard.ShardedBatchSampler`. :func:`permshard.accelerate.prepare_data_loader`
    builds one.

    Args:
        sampler (ShardedSampler): gives the epoch's order, rank and world size.
        batch_size (int): per-process batch size ``B``.
        drop_last (bool): drop the last step when it is smaller than ``B``.

    Example::

        >>> sampler = ShardedSampler(dataset, num_replicas=2, rank=1)
        >>> loader = DataLoader(dataset, batch_sampler=StepBatchSampler(sampler, 32))
    """

    # Read by accelerate: total_batch_size = batch_size * num_processes; not a splitter
    # (process_index 0): the sampler already holds the rank.
    process_index = 0
    split_batches = False

    @property
    def num_processes(self) -> int:
        """The data-parallel ranks (accelerate reads it)."""
        return self._sharded.num_replicas

    dealing = "step"
