"""``MemmapRows``: fixed-size records in a flat file or a ``.npy``, gathered a batch at a
time with one vectorised read."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import get_worker_info

from .. import _core
from .._config import as_positive
from .._hooks import content_id
from ._indexed import distinct, map_readonly

PathLike = Union[str, "os.PathLike[str]"]


def page_locked(asked: bool) -> bool:
    """Whether to gather a batch into page-locked memory: asked for, CUDA there, and in the
    main process (a worker's batch travels through shared memory, where its pages are not
    locked)."""
    return asked and get_worker_info() is None and torch.cuda.is_available()


class RowBatch(Sequence[torch.Tensor]):
    """The rows of one batch fetched with an int64 array of indices (permshard's batch
    samplers), held as one ``(batch, *shape)`` tensor (``.tensor``, which
    :meth:`MemmapRows.collate` returns without a copy); a sequence of rows to everything
    else, made on demand (no Python object per row until one is asked for). It is not a
    list: collate it with ``collate_fn=MemmapRows.collate`` (torch's default collation
    stacks only lists and tuples).

    Args:
        tensor (torch.Tensor): the gathered rows.

    Example::

        >>> batch = rows.__getitems__(np.array([4, 9, 2]))
        >>> batch.tensor.shape[0], len(batch), MemmapRows.collate(batch) is batch.tensor
        (3, 3, True)
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    def __getitem__(self, i: Any) -> Any:
        return self.tensor[i]


class MemmapRows:
    r"""Fixed-size records (tabular or feature rows, embeddings, short pre-tokenised
    sequences) in a flat binary file of ``shape``-shaped ``dtype`` records, or in a
    ``.npy`` (its header gives both), memory-mapped.

    ``__getitems__`` gathers a whole batch in Rust, straight from the memmap into one
    tensor, with the GIL released and the rows read ahead of the copy
    (``accepts_arrays = True``: permshard's batch samplers hand it int64 arrays, so no
    Python object is made per index); ``prefetch(indices)`` asks the kernel to read
    the rows ahead (the block orders' locality protocol); indices carrying an epoch
    (``EpochIndex``, ``EpochIndices``) are plain indices here. Where the loader has no
    workers, ``gather_ahead(indices)`` gathers the next batch on a thread of its own
    while the loop handles this one (permshard's batch samplers announce it). Pickles to
    DataLoader workers without the map (each worker maps the file again).

    Args:
        path (str or os.PathLike): the file; ``.npy`` files are read by their header.
        dtype (numpy dtype, optional): a record's element type (flat files; required).
        shape (tuple of int, optional): a record's shape (flat files). Default: ``()``,
            one element per record.
        pin_memory (bool, optional): gather each batch of ``__getitems__`` straight into a
            page-locked tensor when fetched in the main process and CUDA is available (as
            ``TokenWindows`` does). Default: ``False``.

    Example::

        >>> rows = MemmapRows("features.f32", dtype=np.float32, shape=(16,))
        >>> sampler = ShardedSampler(rows)
        >>> loader = DataLoader(rows, batch_sampler=ShardedBatchSampler(sampler, 1024),
        ...                     collate_fn=MemmapRows.collate, pin_memory=True)
    """

    accepts_arrays = True

    def __init__(
        self,
        path: PathLike,
        dtype: Optional[npt.DTypeLike] = None,
        shape: Sequence[int] = (),
        *,
        pin_memory: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.pin_memory = bool(pin_memory)
        if self.path.endswith(".npy"):
            array = np.load(self.path, mmap_mode="r")
            if array.ndim == 0:
                raise ValueError(f"{self.path} holds a scalar: a .npy of records needs at least one axis")
            if dtype is not None and np.dtype(dtype) != array.dtype:
                raise ValueError(f"{self.path} holds {array.dtype}, not {np.dtype(dtype)}; pass dtype=None")
            self.dtype, self.shape = array.dtype, tuple(array.shape[1:])
            self._offset, self._rows = int(array.offset), int(array.shape[0])
        else:
            if dtype is None:
                raise TypeError(f"{self.path} is a flat file: pass dtype= (and shape=) of its records")
            self.dtype = np.dtype(dtype)
            self.shape = tuple(as_positive("shape", s) for s in shape)
            size = os.path.getsize(self.path)
            record = self.dtype.itemsize * math.prod(self.shape)
            if size % record:
                raise ValueError(
                    f"{self.path} has {size} bytes, not a whole number of {record}-byte records "
                    f"({self.dtype} x {self.shape}): check dtype and shape"
                )
            self._offset, self._rows = 0, size // record
        if self._rows == 0:
            raise ValueError(f"{self.path} holds no records")
        self._record_bytes = self.dtype.itemsize * math.prod(self.shape)
        self._map: Optional[npt.NDArray[Any]] = None
        self._bytes: Optional[npt.NDArray[np.uint8]] = None
        self._ahead: Optional[_core.RecordsAhead] = None

    def _records(self) -> npt.NDArray[Any]:
        """The records as a plain ndarray view of the file's mapping (made in each process
        that reads, holding no file descriptor): numpy's gathers run several times faster on
        it than on a memmap."""
        if self._map is None:
            raw = map_readonly(self.path)[self._offset : self._offset + self._rows * self._record_bytes]
            self._map = raw.view(self.dtype).reshape(self._rows, *self.shape)
        return self._map

    def _raw(self) -> npt.NDArray[np.uint8]:
        """The records' bytes, one flat uint8 view of the memmap (what the gather reads)."""
        if self._bytes is None:
            self._bytes = self._records().reshape(-1).view(np.uint8)
        return self._bytes

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _map=None, _bytes=None, _ahead=None)

    def fingerprint(self) -> str:
        """An identity of these rows, the same in every process and run over the same file:
        its name (not its folder), the record's dtype and shape, the rows and their offset.
        A sampler's state dict records it; a resume over another file is refused."""
        return content_id(
            "MemmapRows", os.path.basename(self.path), self.dtype.str, self.shape, self._rows, self._offset
        )

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, index: int) -> torch.Tensor:
        i = int(index)
        if not -self._rows <= i < self._rows:
            raise IndexError(f"row {i} out of range for {self._rows} rows")
        return torch.from_numpy(np.array(self._records()[i]))

    def __getitems__(self, indices: Any) -> Union[RowBatch, list[torch.Tensor]]:
        """A whole batch: one gather in Rust from the memmap into one tensor (split over
        ``torch.get_num_threads()`` threads when it is large: one in a DataLoader worker).

        Returns the batch as a :class:`RowBatch` for an int64 array of indices
        (permshard's batch samplers: collate with :meth:`collate`, no copy), else as a
        list of its rows (torch's samplers: what torch's default collation stacks).

        Args:
            indices (int64 array or sequence of int): rows, in ``[-len, len)``; an
                index outside is an ``IndexError``.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        shape = (idx.size, *self.shape)
        if self._ahead is None:
            self._ahead = _core.RecordsAhead(self._raw(), self._record_bytes)
        ahead = self._ahead.take(idx)
        if ahead is not None:  # the batch gathered ahead, in memory of its own
            batch = torch.from_numpy(ahead.view(self.dtype).reshape(shape))
            return self._as_fetched(batch.pin_memory() if page_locked(self.pin_memory) else batch, indices)
        if page_locked(self.pin_memory):
            dtype = torch.from_numpy(np.empty(0, dtype=self.dtype)).dtype  # not the read-only map
            batch = torch.empty(shape, dtype=dtype, pin_memory=True)
            array = batch.numpy()
        else:  # numpy's buffer, lent to the tensor: no view of a tensor to make per batch
            array = np.empty(shape, dtype=self.dtype)
            batch = torch.from_numpy(array)
        out = array.reshape(-1).view(np.uint8)  # the batch's own memory
        _core.gather_records(self._raw(), self._record_bytes, idx, out, torch.get_num_threads())
        return self._as_fetched(batch, indices)

    @staticmethod
    def _as_fetched(batch: torch.Tensor, indices: Any) -> Union[RowBatch, list[torch.Tensor]]:
        """The batch as its fetcher takes it: whole, for an array of indices (permshard's
        batch samplers, collated by :meth:`collate`); as a list of row views for a list
        (torch's samplers, collated by torch's default, which stacks lists)."""
        if isinstance(indices, np.ndarray):
            return RowBatch(batch)
        return list(batch.unbind(0))

    def gather_ahead(self, indices: Any) -> None:
        """Starts gathering the batch ``indices`` on a thread of its own (GIL released),
        for the ``__getitems__`` that fetches it; permshard's batch samplers call it with
        the next batch as they hand out the current one, so a loader without workers
        gathers while the loop runs. What a fetch returns never depends on it: a fetch of
        other indices gathers them itself. It gathers ahead only where this object
        fetches batches (not for a DataLoader's worker processes, which fetch with their
        own copies), and stops where fetches keep asking for other indices.

        Args:
            indices (int64 array or sequence of int): the rows of the next batch.
        """
        if self._ahead is not None:  # made by the first fetch in this process
            self._ahead.start(np.asarray(indices, dtype=np.int64).reshape(-1), torch.get_num_threads())

    def prefetch(self, indices: Any) -> None:
        """Asks the kernel to start reading rows ``indices`` (``posix_fadvise(WILLNEED)``
        on each run of neighbouring rows), without waiting; a no-op where the platform has
        none.

        Args:
            indices (int64 array or sequence of int): rows this rank reads next.
        """
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or not len(indices):
            return
        record = self._record_bytes
        rows = distinct(indices)
        breaks = np.nonzero(np.diff(rows) > 1)[0] + 1  # runs of consecutive rows
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for run in np.split(rows, breaks):
                start = self._offset + int(run[0]) * record
                advise(fd, start, len(run) * record, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    @staticmethod
    def collate(batch: Any) -> torch.Tensor:
        """``collate_fn`` for a DataLoader: the batch tensor of :meth:`__getitems__` as is
        (no copy), or the stacked rows of per-item fetches.

        Args:
            batch: a :class:`RowBatch`, or a list of row tensors (stacked: a copy).
        """
        if isinstance(batch, RowBatch):
            return batch.tensor
        return torch.stack(list(batch))

    def __repr__(self) -> str:
        return f"MemmapRows({self.path!r}, {self._rows:,} rows of {self.dtype} x {self.shape})"
