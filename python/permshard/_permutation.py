"""The keyed orders as read-only Python sequences: ``Permutation`` (perm-v2 or perm-v1, and the
sequence behaviour every keyed order shares) and ``BlockPermutation`` (a locality-aware order
for datasets bigger than RAM: block-v2, block-v1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, SupportsIndex, Union, overload

import numpy as np
import numpy.typing as npt

from . import _core
from ._config import as_int, as_str, as_u64

#: Items computed per call into Rust while iterating.
_CHUNK = 1 << 14


class KeyedOrder:
    """A bijection of ``range(n)`` computed in Rust, as a read-only sequence: ``p[i]`` is
    the sample at position ``i``, ``p.index_of(x)`` the position of sample ``x``, both O(1).
    Subclasses set ``_inner`` (a native order) and name their constructor arguments.

    One name for the inverse across the package: ``index_of`` where each sample has one
    position (these bijections); ``locate`` where a sample may be dealt several times or
    not at all (``ShardedSampler.locate``, ``Mixture.locate``, ``TokenWindows.locate``).

    Example::

        >>> p = permshard.Permutation(10, seed=1)
        >>> p.index_of(p[3])
        3
    """

    __slots__ = ("_inner",)
    _inner: Any

    def _arguments(self) -> tuple[Any, ...]:
        """The constructor arguments, for pickling, equality and repr."""
        raise NotImplementedError

    @property
    def n(self) -> int:
        return int(self._inner.n)

    @property
    def seed(self) -> int:
        return int(self._inner.seed)

    @property
    def epoch(self) -> int:
        return int(self._inner.epoch)

    def __len__(self) -> int:
        # len() is limited to sys.maxsize; `n` is not.
        return self.n

    @overload
    def __getitem__(self, index: SupportsIndex) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> npt.NDArray[np.int64]: ...
    def __getitem__(self, index: Union[SupportsIndex, slice]) -> Union[int, npt.NDArray[np.int64]]:
        if isinstance(index, slice):
            return self._slice(index)
        i = as_int("index", index)
        n = self.n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index {as_int('index', index)} out of range for n={n}")
        return int(self._inner.forward(i))

    def _slice(self, index: slice) -> npt.NDArray[np.int64]:
        """``p[a:b:c]``: the same int64 array as :meth:`take` (which it is for step 1)."""
        start, stop, step = index.indices(self.n)
        positions = range(start, stop, step)
        if not positions:
            return np.empty(0, dtype=np.int64)
        if step == 1:
            return self.take(start, stop)
        lo, hi = min(positions[0], positions[-1]), max(positions[0], positions[-1]) + 1
        if len(positions) * 8 >= hi - lo:  # dense: one batched take of the span, strided
            return self.take(lo, hi)[positions[0] - lo :: step].copy()
        forward = self._inner.forward
        return np.fromiter((forward(p) for p in positions), dtype=np.int64, count=len(positions))

    def index_of(self, sample: int) -> int:
        """Position of ``sample``: the inverse permutation, O(1).

        Raises:
            ValueError: if ``sample`` is not in ``range(n)``.

        Args:
            sample (int): a sample in ``range(n)``.
        """
        return int(self._inner.inverse(as_u64("sample", sample)))

    def take(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """``p[start:stop]`` as a new int64 array, computed in Rust with the GIL released.

        Args:
            start (int): first position, ``0 <= start <= stop``.
            stop (int): one past the last position, ``stop <= n``.
        """
        result: npt.NDArray[np.int64] = self._inner.take(as_u64("start", start), as_u64("stop", stop))
        return result

    def __iter__(self) -> Iterator[int]:
        n = self.n
        for start in range(0, n, _CHUNK):
            yield from self._inner.take_list(start, min(start + _CHUNK, n))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, KeyedOrder)
        return self._arguments() == other._arguments()

    def __hash__(self) -> int:
        return hash((type(self), self._arguments()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._arguments())

    def _head(self) -> str:
        n = self.n
        head = ", ".join(str(x) for x in self._inner.take_list(0, min(n, 5)))
        return f"[{head}{', ...' if n > 5 else ''}]"


class Permutation(KeyedOrder):
    r"""A keyed pseudo-random permutation of ``range(n)`` in O(1) memory.

    ``p[i]`` is the sample at position ``i`` and ``p.index_of(x)`` the position of sample
    ``x``; both are O(1). The order depends only on ``(n, seed, epoch, algorithm)``,
    identically on every machine and Python version.

    Args:
        n (int): number of elements, ``1 <= n <= 2**64 - 1``.
        seed (int, optional): key of the shuffle, in ``[0, 2**64 - 1]``. Default: ``0``.
        epoch (int, optional): a fresh independent order per epoch, in
            ``[0, 2**64 - 1]``. Default: ``0``.
        algorithm (str, optional): ``"perm-v2"`` (an exact shuffled table up to
            ``2**16``, 32-bit multiply rounds above: no cost floor at small n, vectorised
            on AVX2 and NEON too; see ``docs/perm-v2.md``) or ``"perm-v1"`` (splitmix64
            rounds, the default up to 0.3). Default: ``"perm-v2"``.

    Example::

        >>> p = Permutation(10, seed=42)
        >>> sorted(p) == list(range(10))
        True
        >>> p.index_of(p[3])
        3
        >>> p.take(0, 4).dtype
        dtype('int64')
    """

    __slots__ = ()

    def __init__(self, n: int, seed: int = 0, epoch: int = 0, algorithm: str = _core.ALGORITHM) -> None:
        n = as_u64("n", n, minimum=1)
        algorithm = as_str("algorithm", algorithm, " ('perm-v2' or 'perm-v1')")
        self._inner = _core.Permutation(n, as_u64("seed", seed), as_u64("epoch", epoch), algorithm)

    @property
    def algorithm(self) -> str:
        """The construction's id: ``perm-v1`` or ``perm-v2``."""
        return str(self._inner.algorithm)

    def _arguments(self) -> tuple[Any, ...]:
        return (self.n, self.seed, self.epoch, self.algorithm)

    def __repr__(self) -> str:
        return (
            f"Permutation(n={self.n}, seed={self.seed}, epoch={self.epoch}) {self._head()} ({self.algorithm})"
        )


#: The algorithm id of the block order of new runs (block-v2), recorded in state dicts and
#: certificates.
BLOCK_ALGORITHM: str = _core.BLOCK_ALGORITHM


class BlockPermutation(KeyedOrder):
    r"""A keyed permutation of ``range(n)`` that reads storage in large pieces.

    Samples are cut into blocks of ``block_size`` consecutive indices; the blocks are put
    in a keyed permutation's order, and the samples of each window of ``window_blocks`` consecutive
    blocks in that order are shuffled together. Every aligned window of
    ``window_blocks * block_size`` positions therefore reads at most ``window_blocks``
    blocks (plus one when the partial last block falls in it): a few large regions of a
    file per window instead of one small random read per sample. Same API as
    :class:`Permutation`: O(1) memory, O(1) both ways.

    Args:
        n (int): number of samples, ``1 <= n <= 2**64 - 1``.
        block_size (int): samples per block (e.g. the samples in 2 MiB of a token file).
        window_blocks (int): blocks shuffled together (their bytes should fit the page
            cache many times over).
        seed (int, optional): key of the order. Default: ``0``.
        epoch (int, optional): a fresh order per epoch. Default: ``0``.
        algorithm (str, optional): the permutation the order is built on, ``"perm-v2"``
            (block-v2) or ``"perm-v1"`` (block-v1, the default up to 0.3); the ids
            ``"block-v2"`` and ``"block-v1"`` are accepted too. ``.algorithm`` is the
            order's own id. Default: ``"block-v2"``.

    Example::

        >>> p = BlockPermutation(10_000, block_size=100, window_blocks=4, seed=1)
        >>> len({x // 100 for x in p.take(0, 400)})  # the first window: 4 blocks
        4
    """

    __slots__ = ()

    def __init__(
        self,
        n: int,
        block_size: int,
        window_blocks: int,
        seed: int = 0,
        epoch: int = 0,
        algorithm: str = BLOCK_ALGORITHM,
    ) -> None:
        self._inner = _core.BlockPermutation(
            as_u64("n", n, minimum=1),
            as_u64("block_size", block_size, minimum=1),
            as_u64("window_blocks", window_blocks, minimum=1),
            as_u64("seed", seed),
            as_u64("epoch", epoch),
            as_str("algorithm", algorithm, " ('perm-v2' or 'perm-v1')"),
        )

    @property
    def algorithm(self) -> str:
        """The construction's id: ``block-v2`` or ``block-v1``."""
        return str(self._inner.algorithm)

    @property
    def block_size(self) -> int:
        return int(self._inner.block_size)

    @property
    def window_blocks(self) -> int:
        return int(self._inner.window_blocks)

    def window_range(self, window: int) -> tuple[int, int]:
        """Positions ``[start, stop)`` of window ``window`` (the last one may be shorter).

        Args:
            window (int): a window index, ``0 <= window < ceil(n / (block_size * window_blocks))``.
        """
        start, stop = self._inner.window_range(as_u64("window", window))
        return int(start), int(stop)

    def _arguments(self) -> tuple[Any, ...]:
        return (self.n, self.block_size, self.window_blocks, self.seed, self.epoch, self.algorithm)

    def __repr__(self) -> str:
        return (
            f"BlockPermutation(n={self.n}, block_size={self.block_size}, "
            f"window_blocks={self.window_blocks}, seed={self.seed}, epoch={self.epoch}) "
            f"{self._head()} ({self.algorithm})"
        )
