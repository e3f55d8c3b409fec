"""perm-v1 written again from its specification in plain Python, slow and obvious.

It is the independent reference for the golden vectors (``tests/golden/perm-v1.json``)
and, with ``rounds=4``, the weak Feistel that the quality battery must flag.

Run ``python tests/reference_perm_v1.py`` to regenerate the golden file.
"""

from __future__ import annotations

import json
import pathlib

MASK64 = (1 << 64) - 1
VERSION_TAG = 0x7065726D2D763101
MIN_BITS = 16


def splitmix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def chain(start: int, parts: list[int]) -> int:
    h = splitmix64(start)
    for part in parts:
        h = splitmix64(h ^ part)
    return h


class ReferencePermutation:
    def __init__(self, n: int, seed: int = 0, epoch: int = 0, stream: int = 0, rounds: int = 8):
        self.n = n
        bits = max(MIN_BITS, (n - 1).bit_length())
        self.hi, self.lo = (bits + 1) // 2, bits // 2
        key = chain(VERSION_TAG, [seed, epoch, n, stream])
        self.keys = [chain(key, [i]) for i in range(rounds)]

    def _widths(self, i: int) -> tuple[int, int]:
        return (self.hi, self.lo) if i % 2 == 0 else (self.lo, self.hi)

    def encrypt(self, x: int) -> int:
        for i, k in enumerate(self.keys):
            h, l = self._widths(i)
            lo, hi = x & ((1 << l) - 1), x >> l
            hi ^= splitmix64(lo ^ k) & ((1 << h) - 1)
            x = (lo << h) | hi
        return x

    def decrypt(self, y: int) -> int:
        for i in reversed(range(len(self.keys))):
            h, l = self._widths(i)
            lo, hi = y >> h, y & ((1 << h) - 1)
            hi ^= splitmix64(lo ^ self.keys[i]) & ((1 << h) - 1)
            y = (hi << l) | lo
        return y

    def forward(self, p: int) -> int:
        x = self.encrypt(p)
        while x >= self.n:
            x = self.encrypt(x)
        return x

    def inverse(self, x: int) -> int:
        p = self.decrypt(x)
        while p >= self.n:
            p = self.decrypt(p)
        return p


GOLDEN = pathlib.Path(__file__).parent / "golden" / "perm-v1.json"
CASES = [
    # (n, seed, epoch, positions)
    (1, 0, 0, [0]),
    (2, 0, 0, [0, 1]),
    (10, 0, 0, list(range(10))),
    (10, 1, 0, list(range(10))),
    (10, 0, 1, list(range(10))),
    (1000, 42, 3, [0, 1, 2, 500, 998, 999]),
    (65536, 0, 0, [0, 1, 65535]),
    (65537, 7, 0, [0, 1, 65535, 65536]),
    (1_000_003, 123, 9, [0, 1, 2, 999_999, 1_000_002]),
    (2**32 + 15, 5, 5, [0, 1, 2**31, 2**32 + 14]),
    (2**63, 2**64 - 1, 2**64 - 1, [0, 1, 2**62, 2**63 - 1]),
    (2**64 - 1, 0, 0, [0, 1, 2**63, 2**64 - 2]),
]


def generate() -> dict[str, object]:
    cases = []
    for n, seed, epoch, positions in CASES:
        perm = ReferencePermutation(n, seed, epoch)
        values = [perm.forward(p) for p in positions]
        assert [perm.inverse(v) for v in values] == positions
        # Strings keep u64 values exact for JSON readers that parse numbers as doubles.
        cases.append(
            {
                "n": str(n),
                "seed": str(seed),
                "epoch": str(epoch),
                "positions": [str(p) for p in positions],
                "values": [str(v) for v in values],
            }
        )
    return {"algorithm": "perm-v1", "cases": cases}


if __name__ == "__main__":
    golden = generate()
    lines = ",\n  ".join(json.dumps(case) for case in golden["cases"])  # type: ignore[attr-defined]
    GOLDEN.write_text(f'{{"algorithm": "perm-v1", "cases": [\n  {lines}\n]}}\n')
    print(f"wrote {GOLDEN}")
