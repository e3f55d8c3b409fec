"""perm-v2 written again from its specification (``docs/perm-v2.md``) in plain Python,
slow and obvious: the independent reference for the golden vectors
(``tests/golden/perm-v2.json``).

Run ``python -m helpers.reference_perm_v2`` in ``tests/`` to regenerate the golden file.
"""

from __future__ import annotations

import pathlib

from . import reference_perm_v1
from .reference_perm_v1 import chain, splitmix64

MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1
VERSION_TAG = 0x7065726D2D763202  # "perm-v2" + 0x02
TABLE_MAX_N = 1 << 16
MUL = (0x9E3779B1, 0x85EBCA77)
GOLDEN_RATIO = 0x9E3779B97F4A7C15


def round_function(half: int, key: int) -> int:
    """Two 32x32->64 multiplies, each product folded (high word xor low word)."""
    a = ((half ^ key) & MASK32) * MUL[0]
    b = ((a ^ (a >> 32) ^ (key >> 32)) & MASK32) * MUL[1]
    return b ^ (b >> 32)


def fisher_yates(n: int, key: int) -> list[int]:
    """The shuffled table of n <= 2^16: i from n-1 down to 1 swaps entries i and j, j
    uniform in [0, i] by Lemire's multiply-and-reject on splitmix64(key + c * phi)."""
    table = list(range(n))
    counter = 0
    for i in range(n - 1, 0, -1):
        bound = i + 1
        while True:
            r = splitmix64((key + counter * GOLDEN_RATIO) & MASK64)
            counter += 1
            m = r * bound
            if (m & MASK64) >= ((1 << 64) - bound) % bound:
                j = m >> 64
                break
        table[i], table[j] = table[j], table[i]
    return table


class ReferencePermutation(reference_perm_v1.ReferencePermutation):
    """perm-v1's Feistel network and walk (the reference's), with perm-v2's key, domain,
    round function and table."""

    def __init__(self, n: int, seed: int = 0, epoch: int = 0, stream: int = 0):
        self.n = n
        key = chain(VERSION_TAG, [seed, epoch, n, stream])
        self.table = fisher_yates(n, key) if n <= TABLE_MAX_N else None
        if self.table is not None:
            self.inverse_table = [0] * n
            for p, x in enumerate(self.table):
                self.inverse_table[x] = p
        bits = max(1, (n - 1).bit_length())
        self.hi, self.lo = (bits + 1) // 2, bits // 2
        self.keys = [chain(key, [i]) for i in range(8)]

    def round_function(self, half: int, key: int) -> int:
        return round_function(half, key)

    def forward(self, p: int) -> int:
        return self.table[p] if self.table is not None else super().forward(p)

    def inverse(self, x: int) -> int:
        return self.inverse_table[x] if self.table is not None else super().inverse(x)


GOLDEN = pathlib.Path(__file__).parent.parent / "golden" / "perm-v2.json"
CASES = [
    # (n, seed, epoch, positions): tables (n <= 2^16) and the Feistel above, to 2^64 - 1.
    (1, 0, 0, [0]),
    (2, 0, 0, [0, 1]),
    (4, 0, 0, [0, 1, 2, 3]),
    (10, 0, 0, list(range(10))),
    (10, 1, 0, list(range(10))),
    (10, 0, 1, list(range(10))),
    (1000, 42, 3, [0, 1, 2, 500, 998, 999]),
    (65536, 0, 0, [0, 1, 65535]),
    (65537, 7, 0, [0, 1, 65535, 65536]),
    (131_073, 3, 1, [0, 1, 131_072]),
    (1_000_003, 123, 9, [0, 1, 2, 999_999, 1_000_002]),
    (2**32 + 15, 5, 5, [0, 1, 2**31, 2**32 + 14]),
    (2**63, 2**64 - 1, 2**64 - 1, [0, 1, 2**62, 2**63 - 1]),
    (2**64 - 1, 0, 0, [0, 1, 2**63, 2**64 - 2]),
]


if __name__ == "__main__":
    reference_perm_v1.write(reference_perm_v1.generate("perm-v2", CASES, ReferencePermutation), GOLDEN)
