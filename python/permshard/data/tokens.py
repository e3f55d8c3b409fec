"""``TokenWindows``: fixed-length training windows over flat token files, memory-mapped."""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch.utils.data import Dataset

from .._validation import as_int, as_positive, as_u64
from ..epoch_index import epoch_of

PathLike = Union[str, "os.PathLike[str]"]


class WindowBatch(list[torch.Tensor]):
    """The windows of one batch: views of one ``(batch, seq_len + 1)`` int64 tensor,
    kept as ``.tensor`` so :meth:`TokenWindows.collate` needs no copy. A plain list to
    everything else (the default collation stacks it)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__(tensor.unbind(0))
        self.tensor = tensor


class TokenWindows(Dataset[torch.Tensor]):
    r"""Windows of ``seq_len + 1`` tokens over one or many flat token files.

    Each file is a headerless array of token ids (nanoGPT / Megatron ``.bin``, a numpy
    ``tofile``), opened as a read-only memmap. Item ``i`` is an int64 tensor of
    ``seq_len + 1`` consecutive tokens: ``item[:-1]`` are the inputs and ``item[1:]`` the
    targets. Windows never cross a file boundary; consecutive windows of a file share one
    token (the last target of one is the first input of the next).

    The index -> (file, offset) map is a cumulative count per file: O(number of files)
    memory whatever the number of tokens. A file of ``m`` tokens holds ``(m - 1) // seq_len``
    windows. With ``shift_per_epoch=True`` every window boundary moves by a per-epoch
    offset in ``[0, seq_len)`` so each epoch sees new cuts (``(m - seq_len) // seq_len``
    windows per file, whatever the offset); the epoch comes with each index from
    permshard's samplers, so DataLoader workers, persistent ones included, follow it.

    Args:
        paths (str or list of str): token files, in order.
        seq_len (int): tokens per training sequence (the window holds ``seq_len + 1``).
        dtype (numpy dtype, optional): token type of the files. Default: ``numpy.uint16``.
        shift_per_epoch (bool, optional): new window boundaries each epoch.
            Default: ``False``.
        seed (int, optional): key of the per-epoch shifts. Default: ``0``.

    Example::

        >>> ds = TokenWindows(["train_000.bin", "train_001.bin"], seq_len=1024)
        >>> sampler = ShardedSampler(ds)
        >>> loader = DataLoader(ds, batch_sampler=ShardedBatchSampler(sampler, 64),
        ...                     collate_fn=TokenWindows.collate)
        >>> for batch in loader:  # (64, 1025) int64
        ...     x, y = batch[:, :-1], batch[:, 1:]
    """

    def __init__(
        self,
        paths: Union[PathLike, Sequence[PathLike]],
        seq_len: int,
        dtype: npt.DTypeLike = np.uint16,
        *,
        shift_per_epoch: bool = False,
        seed: int = 0,
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if len(paths) == 0:
            raise ValueError("paths is empty: pass at least one token file")
        self.paths = [os.fspath(p) for p in paths]
        self.seq_len = as_positive("seq_len", seq_len)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "ui":
            raise ValueError(f"dtype must be an integer type, got {self.dtype}")
        self.shift_per_epoch = bool(shift_per_epoch)
        self.seed = as_u64("seed", seed)
        self.shift = 0
        self._shifts: dict[int, int] = {}
        self.sizes = [self._tokens_in(p) for p in self.paths]
        # Window i of a file is tokens [s + i·L, s + i·L + L + 1): it fits while
        # s + i·L + L + 1 <= m. Unshifted (s = 0) that is (m - 1) // L windows; shifted,
        # counted for the largest shift s = L - 1 so the count never depends on it.
        slack = self.seq_len - 1 if self.shift_per_epoch else 0
        counts = [max(0, (m - 1 - slack) // self.seq_len) for m in self.sizes]
        for path, m, c in zip(self.paths, self.sizes, counts):
            if c == 0:
                extra = f" plus seq_len - 1 = {slack} for shifted epochs" if slack else ""
                raise ValueError(
                    f"{path} holds {m} tokens, fewer than one window of seq_len + 1 = "
                    f"{self.seq_len + 1} tokens{extra}; use a smaller seq_len or leave the "
                    "file out"
                )
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        #: Set by a ShardedSampler with ``block_size``: reads come in blocks, so the
        #: memmaps keep the kernel's read-ahead instead of asking for random access.
        self.block_order = False
        self._maps: Optional[list[np.memmap]] = None
        self._views: Optional[list[npt.NDArray[Any]]] = None

    def _tokens_in(self, path: str) -> int:
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise ValueError(f"cannot open token file {path}: {e.strerror}") from None
        if size % self.dtype.itemsize:
            raise ValueError(
                f"{path} is {size} bytes, not a multiple of {self.dtype.itemsize} (the size of "
                f"{self.dtype}): the file is truncated or the dtype is wrong"
            )
        return size // self.dtype.itemsize

    def _open(self) -> list[np.memmap]:
        """Memmaps, opened lazily in each process (DataLoader workers included)."""
        if self._maps is None:
            maps = []
            for path, m in zip(self.paths, self.sizes):
                now = self._tokens_in(path)
                if now != m:
                    raise ValueError(f"{path} changed size since the dataset was built ({m} -> {now} tokens)")
                mm = np.memmap(path, dtype=self.dtype, mode="r")
                # Globally shuffled windows are random reads: kernel read-ahead would only
                # waste I/O and page cache. A block order reads whole blocks: keep it.
                raw = getattr(mm, "_mmap", None)
                if raw is not None and hasattr(mmap, "MADV_RANDOM") and not self.block_order:
                    raw.madvise(mmap.MADV_RANDOM)
                maps.append(mm)
            self._maps = maps
        return self._maps

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_maps"] = state["_views"] = None  # re-opened in the worker
        return state

    @property
    def epoch_dependent(self) -> bool:
        """True with ``shift_per_epoch``: permshard's samplers then yield
        :class:`~permshard.epoch_index.EpochIndex` values, so every DataLoader worker
        (persistent ones included) cuts the windows of the epoch being sampled."""
        return self.shift_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Moves window boundaries for ``epoch`` when ``shift_per_epoch=True``.

        This process only: DataLoader workers keep the copy they started with. Indices
        from permshard's samplers carry their epoch, which wins over this setting."""
        self.shift = self.shift_for(as_u64("epoch", epoch))

    def shift_for(self, epoch: int) -> int:
        """The token offset of every window boundary in ``epoch`` (0 without shifting)."""
        if not self.shift_per_epoch:
            return 0
        shift = self._shifts.get(epoch)
        if shift is None:
            from ..permutation import Permutation

            shift = Permutation(self.seq_len, seed=self.seed, epoch=epoch)[0]
            if len(self._shifts) >= 64:
                self._shifts.clear()
            self._shifts[epoch] = shift
        return shift

    def _shift_of(self, indices: Any) -> int:
        """The shift for ``indices``: their epoch's when they carry one (EpochIndex)."""
        epoch = epoch_of(indices)
        return self.shift if epoch is None else self.shift_for(epoch)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def byte_ranges(self, indices: Sequence[int]) -> dict[str, list[tuple[int, int]]]:
        """Per file, the merged byte ranges ``(offset, length)`` that windows ``indices``
        cover (windows of a block are contiguous: a block becomes one range)."""
        idx = np.asarray(indices, dtype=np.int64)
        files = np.searchsorted(self.starts, idx, side="right") - 1
        offsets = self._shift_of(indices) + (idx - self.starts[files]) * self.seq_len
        width, size = (self.seq_len + 1) * self.dtype.itemsize, self.dtype.itemsize
        out: dict[str, list[tuple[int, int]]] = {}
        for f in np.unique(files):
            starts = np.sort(offsets[files == f]) * size
            ranges: list[list[int]] = []
            for start in starts.tolist():
                if ranges and start <= ranges[-1][1]:  # touching or overlapping: one range
                    ranges[-1][1] = max(ranges[-1][1], start + width)
                else:
                    ranges.append([start, start + width])
            out[self.paths[int(f)]] = [(a, b - a) for a, b in ranges]
        return out

    def prefetch(self, indices: Sequence[int]) -> None:
        """Asks the kernel to start reading windows ``indices`` into the page cache
        (``posix_fadvise(WILLNEED)`` on their merged byte ranges), without waiting.

        ``ShardedSampler(..., block_size=...)`` calls it from the main process with each
        window of the block order as it enters it; the page cache is shared, so the
        DataLoader workers then find the data in memory. A no-op where the platform has
        no ``posix_fadvise``."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or len(indices) == 0:
            return
        for path, ranges in self.byte_ranges(indices).items():
            fd = os.open(path, os.O_RDONLY)
            try:
                for offset, length in ranges:
                    advise(fd, offset, length, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)

    def locate(self, index: int, epoch: Optional[int] = None) -> tuple[str, int]:
        """``(path, token offset)`` of window ``index`` in ``epoch`` (default: the epoch
        the index carries, else the one of :meth:`set_epoch`)."""
        i = self._check(index)
        f = int(np.searchsorted(self.starts, i, side="right")) - 1
        shift = self._shift_of(index) if epoch is None else self.shift_for(as_u64("epoch", epoch))
        return self.paths[f], shift + (i - int(self.starts[f])) * self.seq_len

    def _check(self, index: int) -> int:
        i = as_int("index", index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"window index {as_int('index', index)} out of range for {n} windows")
        return i

    def __getitem__(self, index: int) -> torch.Tensor:
        i = self._check(index)
        f = int(np.searchsorted(self.starts, i, side="right")) - 1
        offset = self._shift_of(index) + (i - int(self.starts[f])) * self.seq_len
        window = self._open()[f][offset : offset + self.seq_len + 1]
        return torch.from_numpy(window.astype(np.int64))

    def __getitems__(self, indices: Sequence[int]) -> WindowBatch:
        """A whole batch with one vectorised gather per file touched.

        Returns a :class:`WindowBatch`: a sequence of the windows (default collation
        stacks them) that also holds the stacked ``(len(indices), seq_len + 1)`` tensor,
        which :meth:`collate` hands over without a copy."""
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"window index out of range for {n} windows")
        idx = np.where(idx < 0, idx + n, idx)
        files = np.searchsorted(self.starts, idx, side="right") - 1
        offsets = self._shift_of(indices) + (idx - self.starts[files]) * self.seq_len
        out = np.empty((idx.size, self.seq_len + 1), dtype=np.int64)
        for f in np.unique(files):
            rows = np.nonzero(files == f)[0]
            # A strided view whose row o is tokens[o : o + seq_len + 1] (no copy): indexing
            # it by offsets copies whole rows, several times faster than an index grid.
            out[rows] = self._windows()[f][offsets[rows]]
        return WindowBatch(torch.from_numpy(out))

    def _windows(self) -> list[npt.NDArray[Any]]:
        """Per file, a strided view whose row ``o`` is ``tokens[o : o + seq_len + 1]``
        (no copy): indexing it by offsets copies whole rows, several times faster than an
        index grid."""
        if self._views is None:
            self._views = [sliding_window_view(m, self.seq_len + 1) for m in self._open()]
        return self._views

    @staticmethod
    def collate(batch: Sequence[torch.Tensor]) -> torch.Tensor:
        """``collate_fn`` for a DataLoader: the batch tensor of :meth:`__getitems__`
        as is (no copy), or the stacked windows of per-item fetches."""
        if isinstance(batch, WindowBatch):
            return batch.tensor
        return torch.stack(list(batch))

    def __repr__(self) -> str:
        return (
            f"TokenWindows({len(self.paths)} files, {sum(self.sizes):,} tokens, seq_len="
            f"{self.seq_len}, {len(self):,} windows, dtype={self.dtype})"
        )
