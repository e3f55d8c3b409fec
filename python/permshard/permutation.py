"""``Permutation``: perm-v1 as a read-only Python sequence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt

from . import _core
from ._validation import as_int, as_u64

#: Items computed per call into Rust while iterating.
_CHUNK = 1 << 14


class Permutation:
    r"""A keyed pseudo-random permutation of ``range(n)`` in O(1) memory (perm-v1).

    ``p[i]`` is the sample at position ``i`` and ``p.index_of(x)`` the position of sample
    ``x``; both are O(1). The order depends only on ``(n, seed, epoch)``, identically on
    every machine and Python version.

    Args:
        n (int): number of elements, ``1 <= n <= 2**64 - 1``.
        seed (int, optional): key of the shuffle, in ``[0, 2**64 - 1]``. Default: ``0``.
        epoch (int, optional): a fresh independent order per epoch, in
            ``[0, 2**64 - 1]``. Default: ``0``.

    Example::

        >>> p = Permutation(10, seed=42)
        >>> sorted(p) == list(range(10))
        True
        >>> p.index_of(p[3])
        3
        >>> p.take(0, 4).dtype
        dtype('int64')
    """

    __slots__ = ("_inner",)

    def __init__(self, n: int, seed: int = 0, epoch: int = 0) -> None:
        n = as_u64("n", n, minimum=1)
        self._inner = _core.Permutation(n, as_u64("seed", seed), as_u64("epoch", epoch))

    @property
    def n(self) -> int:
        return self._inner.n

    @property
    def seed(self) -> int:
        return self._inner.seed

    @property
    def epoch(self) -> int:
        return self._inner.epoch

    def __len__(self) -> int:
        # len() is limited to sys.maxsize; `n` is not.
        return self._inner.n

    def __getitem__(self, index: SupportsIndex) -> int:
        i = as_int("index", index)
        n = self._inner.n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"permutation index {as_int('index', index)} out of range for n={n}")
        return self._inner.forward(i)

    def index_of(self, sample: int) -> int:
        """Position of ``sample``: the inverse permutation, O(1).

        Raises:
            ValueError: if ``sample`` is not in ``range(n)``.
        """
        x = as_int("sample", sample)
        if not 0 <= x < self._inner.n:
            raise ValueError(f"sample {x} is not in range({self._inner.n})")
        return self._inner.inverse(x)

    def take(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """``p[start:stop]`` as a new int64 array, computed in Rust with the GIL released.

        Args:
            start (int): first position, ``0 <= start <= stop``.
            stop (int): one past the last position, ``stop <= n``.
        """
        start, stop = as_int("start", start), as_int("stop", stop)
        if not 0 <= start <= stop <= self._inner.n:
            raise ValueError(
                f"invalid range [{start}, {stop}): expected 0 <= start <= stop <= {self._inner.n}"
            )
        return self._inner.take(start, stop)

    def __iter__(self) -> Iterator[int]:
        n = self._inner.n
        for start in range(0, n, _CHUNK):
            yield from self._inner.take_list(start, min(start + _CHUNK, n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Permutation):
            return NotImplemented
        return (self.n, self.seed, self.epoch) == (other.n, other.seed, other.epoch)

    def __hash__(self) -> int:
        return hash((Permutation, self.n, self.seed, self.epoch))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Permutation, (self.n, self.seed, self.epoch))

    def __repr__(self) -> str:
        n = self._inner.n
        head = ", ".join(str(x) for x in self._inner.take_list(0, min(n, 5)))
        more = ", ..." if n > 5 else ""
        return f"Permutation(n={n}, seed={self.seed}, epoch={self.epoch}) [{head}{more}] ({_core.ALGORITHM})"
