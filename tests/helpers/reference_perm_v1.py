"""perm-v1 written again from its specification in plain Python, slow and obvious.

It is the independent reference for the golden vectors (``tests/golden/perm-v1.json``)
and, with ``rounds=4``, the weak Feistel that the quality battery must flag.

Run ``python -m helpers.reference_perm_v1`` in ``tests/`` to regenerate the golden file.
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

    def round_function(self, half: int, key: int) -> int:
        return splitmix64(half ^ key)

    def encrypt(self, x: int) -> int:
        for i, k in enumerate(self.keys):
            h, l = self._widths(i)
            lo, hi = x & ((1 << l) - 1), x >> l
            hi ^= self.round_function(lo, k) & ((1 << h) - 1)
            x = (lo << h) | hi
        return x

    def decrypt(self, y: int) -> int:
        for i in reversed(range(len(self.keys))):
            h, l = self._widths(i)
            lo, hi = y >> h, y & ((1 << h) - 1)
            hi ^= self.round_function(lo, self.keys[i]) & ((1 << h) - 1)
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


GOLDEN = pathlib.Path(__file__).parent.parent / "golden" / "perm-v1.json"
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


def generate(
    algorithm: str = "perm-v1",
    cases: list[tuple[int, int, int, list[int]]] = CASES,
    make: type = ReferencePermutation,
) -> dict[str, object]:
    """The golden cases of ``algorithm``: each position's value from ``make(n, seed, epoch)``,
    checked back through its inverse."""
    out = []
    for n, seed, epoch, positions in cases:
        perm = make(n, seed, epoch)
        values = [perm.forward(p) for p in positions]
        assert [perm.inverse(v) for v in values] == positions
        # Strings keep u64 values exact for JSON readers that parse numbers as doubles.
        out.append(
            {
                "n": str(n),
                "seed": str(seed),
                "epoch": str(epoch),
                "positions": [str(p) for p in positions],
                "values": [str(v) for v in values],
            }
        )
    return {"algorithm": algorithm, "cases": out}


def write(golden: dict[str, object], path: pathlib.Path) -> None:
    """``golden`` as the committed file: one case a line."""
    lines = ",\n  ".join(json.dumps(case) for case in golden["cases"])  # type: ignore[attr-defined]
    algorithm = golden["algorithm"]
    path.write_text(f'{{"algorithm": "{algorithm}", "cases": [\n  {lines}\n]}}\n')
    print(f"wrote {path}")


if __name__ == "__main__":
    write(generate(), GOLDEN)
