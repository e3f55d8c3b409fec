"""Megatron indexed datasets: ``prefix.bin`` (tokens) + ``prefix.idx`` (their index).

The ``.idx`` layout (megatron-core's ``_IndexWriter``), little-endian::

    magic "MMIDIDX\\x00\\x00" | version <Q (1) | dtype code <B | sequences <Q | document count <Q
    int32 lengths[sequences] | int64 byte pointers[sequences] | int64 document_indices[count]
    (int8 modes[sequences], multimodal indices only)

Everything is read memory-mapped and validated once, in one pass over the bytes (in Rust):
O(1) resident memory at any number of sequences. A mapping holds no file descriptor
(:func:`map_readonly`): a blend of 10,000 prefixes reads under ``ulimit -n 1024``.
Megatron's GPT datasets treat each *sequence* as a document (split by sequences, one
EOD-terminated sequence per document as its preprocessing writes them); so does this module.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import struct
import sys
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt

from .. import _core

PathLike = Union[str, "os.PathLike[str]"]


def _libc() -> Optional[ctypes.CDLL]:
    """The C library's ``mmap``/``munmap``/``madvise`` where the platform has them."""
    if sys.platform == "win32":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


_LIBC = _libc()


def map_readonly(path: str, *, random_access: bool = False) -> npt.NDArray[np.uint8]:
    """The bytes of ``path``, memory-mapped read-only, as a uint8 array that holds no file
    descriptor: the file is closed once mapped (a mapping does not need it), so a blend
    of thousands of files stays under the process's open-file limit. Unmapped when the
    array and its views are gone. (Where the C library cannot be called, a ``numpy.memmap``,
    which keeps one.)

    Args:
        path (str): the file.
        random_access (bool, optional): tell the kernel the reads are random (no
            read-ahead: shuffled windows would only waste I/O and page cache).
    """
    if _LIBC is None:
        return np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else np.empty(0, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size  # of the file opened: no second lookup of the path
        if size == 0:
            return np.empty(0, dtype=np.uint8)
        address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if address is None or address == ctypes.c_void_p(-1).value:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot map {path}: {os.strerror(error)}")
    if random_access and hasattr(mmap, "MADV_RANDOM"):
        _LIBC.madvise(address, size, mmap.MADV_RANDOM)
    buffer = (ctypes.c_ubyte * size).from_address(address)
    weakref.finalize(buffer, _LIBC.munmap, address, size)  # when no array views it any more
    array: npt.NDArray[np.uint8] = np.frombuffer(memoryview(buffer), dtype=np.uint8)
    array.flags.writeable = False
    return array


INDEX_MAGIC = b"MMIDIDX\x00\x00"
#: Indexes up to this size keep the map they were validated through (see MegatronIndex).
_KEPT_INDEX_BYTES = 64 << 20
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, document count
#: megatron-core's ``DType`` codes.
DTYPE_CODES: dict[int, type[np.generic]] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
PARTS = ("train", "valid", "test")


def find_prefix(path: PathLike) -> Optional[str]:
    """The Megatron prefix ``path`` names (``name``, or ``name.bin`` with ``name.idx``
    beside it), or ``None`` for a flat token file.

    Raises:
        ValueError: ``path`` is an ``.idx`` itself, or a ``.bin`` without its ``.idx``
            (a prefix without its ``.bin``: :class:`MegatronIndex` says so).

    Args:
        path (str or os.PathLike): a prefix, a ``.bin`` or a flat token file.
    """
    p = os.fspath(path)
    if p.endswith(".idx"):
        raise ValueError(
            f"{p} is a Megatron index, not a token file: pass the prefix {p[:-4]!r} (or {p[:-4]}.bin)"
        )
    prefix = p[:-4] if p.endswith(".bin") and os.path.exists(p[:-4] + ".idx") else p
    if os.path.exists(prefix + ".idx"):
        return prefix  # its .bin is looked for once, by MegatronIndex (a shared file system pays per lookup)
    if not os.path.exists(p) and os.path.exists(p + ".bin"):
        raise ValueError(
            f"{p}.idx is missing beside {p}.bin: a Megatron dataset is the pair prefix.bin + "
            f"prefix.idx; restore the .idx, or pass {p}.bin with dtype= to read it as a flat token file"
        )
    return None


def starts_with_index_magic(path: str) -> bool:
    """True when ``path`` begins like a Megatron ``.idx`` (a token file never should).

    Args:
        path (str): a file to look at (its first bytes only).
    """
    try:
        with open(path, "rb") as f:
            return f.read(len(INDEX_MAGIC)) == INDEX_MAGIC
    except OSError:
        return False


class MegatronIndex:
    r"""The validated ``.idx`` of one Megatron indexed dataset, memory-mapped.

    Checked once, in one pass over the memory-mapped bytes: the magic, the
    version, the dtype code (integer token types only), the array sizes against the file
    size (a trailing ``modes`` array means a multimodal index, refused), lengths ``>= 0``,
    pointers that lay the sequences end to end from byte 0, document indices from 0 to the
    sequence count, and the ``.bin`` size against the lengths. Each failure is a
    ``ValueError`` that names the file and what to do.

    Args:
        prefix (str): the path without ``.bin`` / ``.idx``.

    Example::

        >>> index = MegatronIndex("corpus/web_text_document")  # 1000 documents
        >>> index.dtype, index.num_sequences, index.num_tokens
        (dtype('uint16'), 1000, 303154)
        >>> index.sequence_range("969,30,1", "valid")
        (969, 999)
    """

    def __init__(self, prefix: PathLike) -> None:
        self.prefix = os.fspath(prefix)
        self.idx_path = self.prefix + ".idx"
        self.bin_path = self.prefix + ".bin"
        try:
            raw = map_readonly(self.idx_path)  # the one open of the file: see below
        except OSError as e:
            raise ValueError(f"cannot open Megatron index {self.idx_path}: {e.strerror}") from None
        size, head = len(raw), bytes(raw[: _HEADER.size])
        if not head.startswith(INDEX_MAGIC) and not INDEX_MAGIC.startswith(head):
            raise ValueError(
                f"{self.idx_path} is not a Megatron index (bad magic {head[:9]!r}, expected "
                f"{INDEX_MAGIC!r}): pass the prefix of a file written by Megatron's "
                "IndexedDatasetBuilder or permshard.data.write_indexed"
            )
        if len(head) < _HEADER.size:
            raise ValueError(
                f"{self.idx_path} is truncated ({size} bytes, shorter than the {_HEADER.size}-byte "
                "header): rewrite it with the dataset's preprocessing"
            )
        _, version, code, sequences, count = _HEADER.unpack(head)
        if version != 1:
            raise ValueError(f"{self.idx_path} has index version {version}; only version 1 is read")
        if code not in DTYPE_CODES:
            raise ValueError(
                f"{self.idx_path} has dtype code {code}, not one of Megatron's "
                f"{sorted(DTYPE_CODES)}: the file is corrupt"
            )
        self.dtype = np.dtype(DTYPE_CODES[code])
        if self.dtype.kind not in "ui":
            raise ValueError(
                f"{self.idx_path} stores {self.dtype} values: token ids must be integers, so this "
                "is not a token corpus"
            )
        self.num_sequences = int(sequences)
        expected = _HEADER.size + 12 * sequences + 8 * count
        if size == expected + sequences and sequences:
            raise ValueError(
                f"{self.idx_path} is a multimodal index (it has a per-sequence modes array): "
                "only token corpora are read; pass a text-only prefix"
            )
        if size != expected:
            raise ValueError(
                f"{self.idx_path} is {size} bytes but its header ({sequences} sequences, {count} "
                f"document indices) needs {expected}: the file is truncated or corrupt; rewrite "
                "it with the dataset's preprocessing"
            )
        self._document_count = int(count)
        self._arrays: Optional[tuple[npt.NDArray[Any], ...]] = None
        self.num_tokens = self._validate(raw)
        # A small index keeps the map it was validated through: one open a prefix (a blend
        # of thousands on a shared file system pays per open). A large one is unmapped: the
        # pages the validation read leave the RSS, and arrays() maps it again when needed.
        if size <= _KEPT_INDEX_BYTES:
            self._arrays = self._arrays_in(raw)

    # Offsets in the .idx of the three arrays (none is aligned: the header is 34 bytes).
    def _layout(self) -> tuple[int, int, int]:
        lengths = _HEADER.size
        pointers = lengths + 4 * self.num_sequences
        return lengths, pointers, pointers + 8 * self.num_sequences

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(sequence_lengths, sequence_pointers, document_indices)``, read-only views of
        the index's map (the one validated at construction for an index up to 64 MiB, else
        mapped at first use; in an unpickled copy, at first use)."""
        if self._arrays is None:
            self._arrays = self._arrays_in(map_readonly(self.idx_path))
        lengths, pointers, documents = self._arrays
        return lengths, pointers, documents

    def _arrays_in(self, raw: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], ...]:
        """The three arrays, as views of the index's bytes ``raw``."""
        lo, po, do = self._layout()
        return (
            raw[lo:po].view("<i4"),
            raw[po:do].view("<i8"),
            raw[do : do + 8 * self._document_count].view("<i8"),
        )

    def _validate(self, raw: npt.NDArray[np.uint8]) -> int:
        """Checks the arrays in one pass over the index's bytes ``raw`` (in Rust, GIL
        released); returns the number of tokens."""
        lo, po, do = self._layout()
        isz, where = self.dtype.itemsize, self.idx_path
        try:
            _core.check_document_indices(raw[do:], self.num_sequences)
            end = _core.check_sequence_layout(raw[lo:po], raw[po:do], isz)
        except ValueError as e:
            raise ValueError(f"{where}: {e}; the index is corrupt, rewrite it") from None
        try:
            bin_size = os.path.getsize(self.bin_path)
        except FileNotFoundError:
            raise ValueError(
                f"{self.bin_path} is missing beside {self.idx_path}: a Megatron dataset is the pair "
                "prefix.bin + prefix.idx; restore the .bin or pass another prefix"
            ) from None
        except OSError as e:
            raise ValueError(f"cannot open {self.bin_path}: {e.strerror}") from None
        if bin_size != end:
            raise ValueError(
                f"{self.bin_path} is {bin_size} bytes but {self.idx_path} describes "
                f"{end // isz} tokens of {self.dtype} ({end} bytes): the .bin is truncated or "
                "belongs to another index"
            )
        return end // isz

    def sequence_range(self, split: Union[str, Sequence[float], None], part: str) -> tuple[int, int]:
        """The sequences ``[lo, hi)`` of ``part`` under ``split``, by Megatron's arithmetic
        (``None``: all of them).

        Args:
            split (str or sequence of float, optional): Megatron's ``--split``
                (``"969,30,1"``).
            part (str): ``"train"``, ``"valid"`` or ``"test"``.
        """
        if split is None:
            return 0, self.num_sequences
        return split_bounds(split, self.num_sequences)[_part(part)]

    def token_offset(self, sequence: int) -> int:
        """Token offset in the ``.bin`` where ``sequence`` starts (``num_sequences``: the end).

        Args:
            sequence (int): a sequence index, ``0 <= sequence <= num_sequences``.
        """
        if sequence == self.num_sequences:
            return self.num_tokens
        return int(self.arrays()[1][sequence]) // self.dtype.itemsize

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_arrays"] = None  # re-mapped in the process that unpickles
        return state

    def __repr__(self) -> str:
        return (
            f"MegatronIndex({self.prefix!r}, {self.num_sequences:,} sequences, "
            f"{self.num_tokens:,} tokens, dtype={self.dtype})"
        )


def _part(part: str) -> int:
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    return PARTS.index(part)


def parse_split(split: Union[str, Sequence[float]]) -> list[float]:
    """Megatron's ``parse_and_normalize_split``: ``"969,30,1"`` -> normalised ratios.

    Args:
        split (str or sequence of float): ``"969,30,1"``, or the ratios.
    """
    if isinstance(split, str):
        values = [float(v) for v in re.findall(r"[.0-9]+", split)]
    else:
        values = [float(v) for v in split]
    if not 1 <= len(values) <= 3 or any(not np.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        raise ValueError(
            f"split must be up to three non-negative ratios (train, valid, test) with a positive sum, "
            f'e.g. "969,30,1"; got {split!r}'
        )
    values += [0.0] * (3 - len(values))
    w = np.array(values, dtype=np.float64)
    normalised: list[float] = (w / np.sum(w)).tolist()
    return normalised


def split_bounds(split: Union[str, Sequence[float]], num: int) -> list[tuple[int, int]]:
    """``[(lo, hi)]`` for train, valid, test over ``num`` sequences, exactly as
    megatron-core: cumulative bounds of the normalised split, ``int(round(bound · num))``
    (an empty part is ``(0, 0)``).

    Args:
        split (str or sequence of float): Megatron's ``--split``.
        num (int): sequences in the corpus.
    """
    ratios = parse_split(split)
    ends = [0.0]
    for r in ratios:
        ends.append(ends[-1] + r)
    out = []
    for lo, hi in zip(ends[:-1], ends[1:]):
        if hi <= lo:
            out.append((0, 0))
        else:
            out.append((int(round(lo * float(num))), int(round(hi * float(num)))))
    return out


def distinct(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The distinct values of ``values``, sorted, as int64: what ``np.unique`` gives,
    without calling it (its first call in a process imports ``numpy.ma``, 35 ms: most of
    a DataLoader worker's first batch).

    Args:
        values (array-like of int): the values.
    """
    ordered = np.sort(np.asarray(values, dtype=np.int64).ravel())
    keep = np.empty(ordered.size, dtype=np.bool_)
    keep[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def search_sorted(
    values: npt.NDArray[Any],
    coarse: npt.NDArray[np.int64],
    stride: int,
    queries: npt.NDArray[np.int64],
    side: str,
) -> npt.NDArray[np.int64]:
    """``np.searchsorted(values, queries, side)`` for a sorted memmap that numpy would
    copy whole (the ``.idx`` arrays are unaligned): ``coarse = values[::stride]`` narrows
    each query to ``stride`` entries, then a vectorised bisection reads only those.

    Args:
        values (numpy.ndarray): the sorted array (a memmap).
        coarse (numpy.ndarray): ``values[::stride]`` as int64.
        stride (int): every how many entries ``coarse`` samples.
        queries (numpy.ndarray): int64 values to place.
        side (str): ``"left"`` or ``"right"``, as numpy's.
    """
    j = np.searchsorted(coarse, queries, side=side)  # type: ignore[call-overload]
    lo: npt.NDArray[np.int64] = np.maximum(j - 1, 0) * stride
    hi: npt.NDArray[np.int64] = np.minimum(j * stride, values.size)
    right = side == "right"
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        v = values[np.minimum(mid, values.size - 1)]
        go = (v <= queries) if right else (v < queries)
        lo = np.where(active & go, mid + 1, lo)
        hi = np.where(active & ~go, mid, hi)


def write_indexed(
    prefix: PathLike,
    documents: Iterable[npt.ArrayLike],
    dtype: npt.DTypeLike = np.uint16,
) -> str:
    """Writes ``prefix.bin`` and ``prefix.idx`` in Megatron's format, one sequence per
    document (as megatron-core's ``IndexedDatasetBuilder`` with ``add_document``).

    Args:
        prefix (str): output path without extension.
        documents (iterable of int arrays): the token ids of each document, streamed.
        dtype (numpy dtype, optional): token type, one of Megatron's integer codes.
            Default: ``numpy.uint16``.

    Returns:
        str: the prefix.

    Example::

        >>> write_indexed("/tmp/corpus", [[5, 6, 0], [7, 8, 9, 0]])
        '/tmp/corpus'
    """
    prefix = os.fspath(prefix)
    dt = np.dtype(dtype)
    code = next((c for c, t in DTYPE_CODES.items() if np.dtype(t) == dt and dt.kind in "ui"), None)
    if code is None:
        raise ValueError(f"dtype must be an integer type Megatron can store, got {dt}")
    lengths: list[int] = []
    with open(prefix + ".bin", "wb") as out:
        for k, doc in enumerate(documents):
            tokens = np.asarray(doc)
            if tokens.ndim != 1:
                raise ValueError(f"documents[{k}] must be a 1-D array of token ids, got shape {tokens.shape}")
            cast = tokens.astype(dt)
            if tokens.size and not np.array_equal(cast, tokens):
                raise ValueError(f"documents[{k}] holds token ids that do not fit {dt}: choose a wider dtype")
            out.write(cast.tobytes())
            lengths.append(int(tokens.size))
    n = np.asarray(lengths, dtype=np.int64)
    pointers = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64) * dt.itemsize if n.size else n
    with open(prefix + ".idx", "wb") as out:
        out.write(_HEADER.pack(INDEX_MAGIC, 1, code, n.size, n.size + 1))
        out.write(n.astype("<i4").tobytes())
        out.write(np.asarray(pointers, dtype="<i8").tobytes())
        out.write(np.arange(n.size + 1, dtype="<i8").tobytes())
    return prefix
