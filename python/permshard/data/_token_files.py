"""The token files under :class:`~permshard.data.TokenWindows`: ``TokenFiles`` (flat or
Megatron indexed datasets, the part a split keeps, their dtype, sizes and memmaps) and
``WindowProvenance`` (where each window comes from: its file and token offset, its
documents, its bytes, and read-ahead)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt

from .._config import as_u64
from ._indexed import (
    MegatronIndex,
    distinct,
    find_prefix,
    map_readonly,
    search_sorted,
    starts_with_index_magic,
)

PathLike = Union[str, "os.PathLike[str]"]


class TokenFiles:
    """The files a dataset of token windows reads: flat files (headerless arrays of token
    ids) and Megatron prefixes (``prefix.bin`` read through its validated ``.idx``), each
    with the token range of the part read. Memmaps open lazily, in each process.

    Attributes:
        paths: the ``.bin`` or flat file of each source, in order.
        indexes: each file's :class:`~permshard.data.MegatronIndex` (``None``: flat).
        dtype: the one token dtype of all files.
        sequence_ranges: per file, the sequences ``[lo, hi)`` of the part read
            (Megatron files only).
        first_tokens: per file, the token offset of the part read.
        sizes: per file, the tokens of the part read.
    """

    paths: list[str]
    indexes: list[Optional[MegatronIndex]]
    dtype: np.dtype[Any]
    sequence_ranges: list[Optional[tuple[int, int]]]
    first_tokens: list[int]
    sizes: list[int]
    read_ahead: bool
    _maps: Optional[list[Optional[npt.NDArray[Any]]]]
    _coarse: dict[int, tuple[npt.NDArray[np.int64], int]]

    def _read_files(
        self,
        paths: Sequence[PathLike],
        dtype: Optional[npt.DTypeLike],
        split: Optional[Union[str, Sequence[float]]],
        part: str,
    ) -> None:
        """Finds, validates and measures the files (the part ``split`` keeps of each)."""
        if len(paths) == 0:
            raise ValueError("paths is empty: pass at least one token file")
        prefixes = [find_prefix(p) for p in paths]
        self.indexes = [None if prefix is None else MegatronIndex(prefix) for prefix in prefixes]
        self.dtype = self._resolve_dtype(dtype)
        self.paths = [os.fspath(p) if ix is None else ix.bin_path for p, ix in zip(paths, self.indexes)]
        missing = next(
            (p for p, ix in zip(self.paths, self.indexes) if ix is None and not os.path.exists(p)), None
        )
        if missing is not None:
            raise ValueError(
                f"no such token file or Megatron prefix: {missing} (neither {missing} nor "
                f"{missing}.bin + {missing}.idx exist): check the path"
            )
        if split is not None and any(ix is None for ix in self.indexes):
            flat = next(p for p, ix in zip(self.paths, self.indexes) if ix is None)
            raise ValueError(
                f"split= needs Megatron indexed datasets (prefix.bin + prefix.idx) to split by "
                f"documents, but {flat} is a flat token file: write it with write_indexed, or drop split"
            )
        self.sequence_ranges, self.first_tokens, self.sizes = [], [], []
        for path, ix in zip(self.paths, self.indexes):
            if ix is None:
                self.sequence_ranges.append(None)
                self.first_tokens.append(0)
                self.sizes.append(self._tokens_in(path))
                continue
            lo, hi = ix.sequence_range(split, part)
            self.sequence_ranges.append((lo, hi))
            first = ix.token_offset(lo)
            self.first_tokens.append(first)
            self.sizes.append(ix.token_offset(hi) - first)
        self._maps = None
        self._coarse = {}

    def _resolve_dtype(self, dtype: Optional[npt.DTypeLike]) -> np.dtype[Any]:
        """The one token dtype of all files: given, or the ``.idx``'s, else uint16."""
        found = {ix.dtype for ix in self.indexes if ix is not None}
        if dtype is not None:
            wanted = np.dtype(dtype)
            if wanted.kind not in "ui":
                raise ValueError(f"dtype must be an integer type, got {wanted}")
            for ix in self.indexes:
                if ix is not None and ix.dtype != wanted:
                    raise ValueError(
                        f"dtype={wanted} but {ix.idx_path} stores {ix.dtype}: drop dtype= to read "
                        "it from the index, or pass the right one"
                    )
            return wanted
        if len(found) > 1:
            raise ValueError(
                f"the Megatron indexes store different dtypes ({sorted(map(str, found))}): read "
                "them as separate TokenWindows (e.g. blended with MixedDataset)"
            )
        return found.pop() if found else np.dtype(np.uint16)

    def _tokens_in(self, path: str) -> int:
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise ValueError(f"cannot open token file {path}: {e.strerror}") from None
        if starts_with_index_magic(path):
            raise ValueError(
                f"{path} is a Megatron index (.idx), not a token file: pass its prefix, with the "
                ".bin beside it"
            )
        if size % self.dtype.itemsize:
            raise ValueError(
                f"{path} is {size} bytes, not a multiple of {self.dtype.itemsize} (the size of "
                f"{self.dtype}): the file is truncated or the dtype is wrong"
            )
        return size // self.dtype.itemsize

    def _mapped(self, f: int) -> npt.NDArray[Any]:
        """File ``f``'s tokens, mapped in this process (DataLoader workers included) when a
        window of it is first read, holding no file descriptor: a blend of 10,000 files
        opens only those its batches read (a shared file system pays per file opened)."""
        if self._maps is None:
            self._maps = [None] * len(self.paths)
        found = self._maps[f]
        if found is not None:
            return found
        path, ix = self.paths[f], self.indexes[f]
        # Globally shuffled windows are random reads: kernel read-ahead would only waste I/O
        # and page cache. A block order reads whole blocks (read_ahead).
        try:
            raw = map_readonly(path, random_access=not self.read_ahead)
        except OSError as e:
            raise ValueError(f"cannot open {path}: {e.strerror}") from None
        # The size of the file mapped, not of a second look at the path (one open per file).
        expected = (self.sizes[f] if ix is None else ix.num_tokens) * self.dtype.itemsize
        if len(raw) != expected:
            raise ValueError(
                f"{path} changed size since the dataset was built ({expected} -> {len(raw)} bytes): "
                "build the dataset again"
            )
        tokens = raw.view(self.dtype)
        self._maps[f] = tokens
        return tokens

    def _part_pointers(self, f: int) -> tuple[MegatronIndex, int, int, npt.NDArray[np.int64]]:
        """``(index, lo, hi, byte pointers of sequences [lo, hi))`` of Megatron file ``f``."""
        ix, part = self.indexes[f], self.sequence_ranges[f]
        assert ix is not None and part is not None  # a Megatron file has both
        lo, hi = part
        return ix, lo, hi, ix.arrays()[1][lo:hi]

    def _coarse_of(self, f: int) -> tuple[npt.NDArray[np.int64], int]:
        """``(pointers[lo:hi:step], step)`` of file ``f``'s part: an aligned sample of at
        most 2^16 sequence pointers that narrows every search to ``step`` entries."""
        found = self._coarse.get(f)
        if found is None:
            _, lo, hi, pointers = self._part_pointers(f)
            step = 1 << max(0, int(hi - lo - 1).bit_length() - 16)
            found = (np.array(pointers[::step], dtype=np.int64), step)
            self._coarse[f] = found
        return found


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
        for f in distinct(files):
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
        for f in distinct(files):
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
