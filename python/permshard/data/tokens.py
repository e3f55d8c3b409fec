"""``TokenWindows``: fixed-length training windows over flat token files, memory-mapped."""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view
import torch
from torch.utils.data import Dataset

from .._validation import as_int, as_positive, as_u64

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
    memory whatever the number of tokens. With ``shift_per_epoch=True``, :meth:`set_epoch`
    moves every window boundary by a per-epoch offset in ``[0, seq_len)`` so each epoch
    sees new cuts; the number of windows does not change with the offset.

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
        self.sizes = [self._tokens_in(p) for p in self.paths]
        # Counted for the largest shift (seq_len - 1), so the count never depends on it.
        counts = [max(0, (m - self.seq_len) // self.seq_len) for m in self.sizes]
        for path, m, c in zip(self.paths, self.sizes, counts):
            if c == 0:
                raise ValueError(
                    f"{path} holds {m} tokens, fewer than one window of seq_len + 1 = "
                    f"{self.seq_len + 1} tokens (plus seq_len - 1 for shifted epochs); "
                    "use a smaller seq_len or leave the file out"
                )
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
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
                # Shuffled windows are random reads: kernel read-ahead would only waste I/O
                # and page cache.
                raw = getattr(mm, "_mmap", None)
                if raw is not None and hasattr(mmap, "MADV_RANDOM"):
                    raw.madvise(mmap.MADV_RANDOM)
                maps.append(mm)
            self._maps = maps
        return self._maps

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_maps"] = state["_views"] = None  # re-opened in the worker
        return state

    def set_epoch(self, epoch: int) -> None:
        """Moves window boundaries for ``epoch`` when ``shift_per_epoch=True``."""
        epoch = as_u64("epoch", epoch)
        if self.shift_per_epoch:
            from .. import Permutation

            self.shift = Permutation(self.seq_len, seed=self.seed, epoch=epoch)[0]

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, index: int) -> tuple[str, int]:
        """``(path, token offset)`` of window ``index``."""
        i = self._check(index)
        f = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.paths[f], self.shift + (i - int(self.starts[f])) * self.seq_len

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
        offset = self.shift + (i - int(self.starts[f])) * self.seq_len
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
        offsets = self.shift + (idx - self.starts[files]) * self.seq_len
        out = np.empty((idx.size, self.seq_len + 1), dtype=np.int64)
        maps = self._open()
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
