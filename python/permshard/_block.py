"""``BlockPermutation``: a locality-aware order for datasets bigger than RAM (block-v2, block-v1)."""

from __future__ import annotations

from typing import Any

from . import _core
from ._permutation import KeyedOrder
from ._validation import as_str, as_u64

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
