"""``WindowProvenance``: where each window of :class:`~permshard.data.TokenWindows`
comes from: its file and token offset, its documents, its bytes (and read-ahead)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import numpy.typing as npt

from .._validation import as_u64
from ._indexed import search_sorted
from ._token_files import TokenFiles


class WindowProvenance(TokenFiles):
    """The provenance of token windows: :meth:`locate` (file and token offset),
    :meth:`documents_of` (the documents a window holds), :meth:`byte_ranges` and
    :meth:`prefetch` (its bytes, for the page cache)."""

    seq_len: int
    starts: npt.NDArray[np.int64]

    # The windows' own arithmetic, which TokenWindows provides.

    def _check(self, index: int) -> int:
        raise NotImplementedError

    def _shift_of(self, indices: Any) -> int:
        raise NotImplementedError

    def shift_for(self, epoch: int) -> int:
        raise NotImplementedError

    def _offsets(
        self, idx: npt.NDArray[np.int64], indices: Any
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
        raise NotImplementedError

    def byte_ranges(self, indices: Sequence[int]) -> dict[str, list[tuple[int, int]]]:
        """Per file, the merged byte ranges ``(offset, length)`` that windows ``indices``
        cover (windows of a block are contiguous: a block becomes one range).

        Args:
            indices (sequence of int): window indices.
        """
        idx = np.asarray(indices, dtype=np.int64)
        files, offsets = self._offsets(idx, indices)
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
        no ``posix_fadvise``.

        Args:
            indices (sequence of int): window indices this rank reads next.
        """
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
        the index carries, else the one of :meth:`set_epoch`).

        Args:
            index (int): a window index, possibly an ``EpochIndex``.
            epoch (int, optional): the epoch; overrides the index's.
        """
        f, offset = self._located(index, epoch)
        return self.paths[f], offset

    def _located(self, index: int, epoch: Optional[int]) -> tuple[int, int]:
        """``(file, token offset in it)`` of window ``index`` (see :meth:`locate`)."""
        i = self._check(index)
        shift = self._shift_of(index) if epoch is None else self.shift_for(as_u64("epoch", epoch))
        return self._window_at(i, shift)

    def _window_at(self, i: int, shift: int) -> tuple[int, int]:
        """``(file, token offset in it)`` of window ``i`` (in range) under ``shift``."""
        f = int(np.searchsorted(self.starts, i, side="right")) - 1
        return f, self.first_tokens[f] + shift + (i - int(self.starts[f])) * self.seq_len

    def documents_of(self, index: int, epoch: Optional[int] = None) -> list[tuple[int, int, int]]:
        """The documents window ``index`` holds: ``(sequence, first token, stop token)``
        per document, token offsets inside that sequence of the ``.idx`` (Megatron files
        only; a flat file's window is one ``(-1, offset, offset + seq_len + 1)``).

        Args:
            index (int): a window index, possibly an ``EpochIndex``.
            epoch (int, optional): the epoch; overrides the index's.
        """
        f, offset = self._located(index, epoch)
        stop = offset + self.seq_len + 1
        if self.indexes[f] is None:
            return [(-1, offset, stop)]
        ix, lo, hi, pointers = self._part_pointers(f)
        coarse, stride = self._coarse_of(f)
        q = np.array([offset * self.dtype.itemsize], dtype=np.int64)
        first = lo + int(search_sorted(pointers, coarse, stride, q, "right")[0]) - 1
        out = []
        for seq in range(first, hi):
            begin = ix.token_offset(seq)
            if begin >= stop:
                break
            end = ix.token_offset(seq + 1)
            out.append((seq, max(offset, begin) - begin, min(stop, end) - begin))
        return out

    def _idx_starts(
        self, files: npt.NDArray[np.intp], offsets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """``(batch, seq_len)`` bool: True where a sequence of the ``.idx`` starts at an
        input position of the windows at ``offsets``."""
        seq, isz = self.seq_len, self.dtype.itemsize
        starts = np.zeros((offsets.size, seq), dtype=np.bool_)
        for f in np.unique(files):
            pointers = self._part_pointers(int(f))[3]
            coarse, stride = self._coarse_of(int(f))
            rows = np.flatnonzero(files == f)
            o = offsets[rows]
            # Sequences starting strictly inside the inputs: byte pointers in (o, o + seq).
            a = search_sorted(pointers, coarse, stride, o * isz, "right")
            b = search_sorted(pointers, coarse, stride, (o + seq) * isz, "left")
            c = b - a
            if not c.any():
                continue
            row = np.repeat(np.arange(rows.size), c)
            k = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c) + np.repeat(a, c)
            starts[rows[row], np.asarray(pointers[k]) // isz - o[row]] = True
        return starts
