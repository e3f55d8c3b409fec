"""weighted-v1 written again from its specification in plain Python, slow and obvious.

The independent reference for the golden vectors (``tests/golden/weighted-v1.json``):
an alias table by sweeping (light and heavy columns as two lists, where the core moves
two cursors), thresholds ``prob * 2**64``, a draw from two splitmix64 hashes of
``(seed, epoch, position)``; without replacement, the exponential keys ``-ln(U) / w``
sorted in full (the core keeps the smallest in O(k) memory), ``ln`` by the same IEEE
operations as the core's.

Run ``python -m helpers.reference_weighted`` in ``tests/`` to regenerate the golden file.
"""

from __future__ import annotations

import json
import math
import pathlib
import struct

from .reference_perm_v1 import MASK64, chain, splitmix64

GOLDEN = pathlib.Path(__file__).parent.parent / "golden" / "weighted-v1.json"
DOMAIN = 0x7765696768746564  # "weighted"


def alias_table(weights: list[float]) -> tuple[list[int], list[int]]:
    """``(threshold, alias)`` by sweeping, as the core builds it: the current heavy column
    fills the light ones in index order until what is left of it is light; its own column
    then takes the next heavy one as its alias."""
    n = len(weights)
    total = 0.0
    for w in weights:  # a plain left fold: Python's sum() of floats compensates
        total += w
    scale = n / total
    prob = [w * scale for w in weights]
    light_ones = [k for k in range(n) if weights[k] * scale < 1.0]
    heavy_ones = [k for k in range(n) if not weights[k] * scale < 1.0]
    alias = list(range(n))
    done_light, done_heavy = 0, 0  # how many of each list are behind their cursor
    leftover: list[int] = []
    if heavy_ones:
        left = prob[heavy_ones[0]]
        while True:
            heavy = heavy_ones[done_heavy]
            if left > 1.0:
                if done_light == len(light_ones):
                    break
                light = light_ones[done_light]
                alias[light] = heavy
                left = (left + prob[light]) - 1.0
                done_light += 1
            else:
                if done_heavy + 1 == len(heavy_ones):
                    break
                following = heavy_ones[done_heavy + 1]
                prob[heavy], alias[heavy] = left, following
                left = (prob[following] + left) - 1.0
                done_heavy += 1
        leftover = heavy_ones[done_heavy:]
    leftover += light_ones[done_light:]
    fallback = next(i for i, w in enumerate(weights) if w > 0)
    for k in leftover:
        if weights[k] > 0:
            prob[k], alias[k] = 1.0, k
        else:
            prob[k], alias[k] = 0.0, fallback
    threshold = [MASK64 if p >= 1.0 else int(p * 2.0**64) for p in prob]
    return threshold, alias


def draw_with_replacement(weights: list[float], seed: int, epoch: int, position: int) -> int:
    threshold, alias = alias_table(weights)
    key = chain(DOMAIN, [seed, epoch])
    column = splitmix64(key ^ splitmix64(position))
    coin = splitmix64(column ^ key)
    i = (column * len(weights)) >> 64
    return i if coin < threshold[i] else alias[i]


def ln(x: float) -> float:
    """The core's logarithm, operation for operation."""
    (bits,) = struct.unpack("<Q", struct.pack("<d", x))
    e = ((bits >> 52) & 0x7FF) - 1023
    (m,) = struct.unpack("<d", struct.pack("<Q", (bits & ((1 << 52) - 1)) | (1023 << 52)))
    if m > math.sqrt(2.0):
        m *= 0.5
        e += 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    total = 1.0 / 25.0  # Horner's rule, from the highest term
    k = 23.0
    while k >= 1.0:
        total = total * s2 + 1.0 / k
        k -= 2.0
    return 2.0 * (s * total) + float(e) * math.log(2.0)


def draws_without_replacement(weights: list[float], seed: int, epoch: int, k: int) -> list[int]:
    key = chain(DOMAIN, [seed, epoch])
    keys = []
    for i, w in enumerate(weights):
        if w > 0:
            h = splitmix64(key ^ splitmix64(i))
            u = (float(h >> 11) + 0.5) * (1.0 / 9007199254740992.0)
            keys.append((-ln(u) / w, i))
    keys.sort()
    return [i for _, i in keys[:k]]


CASES = [
    {"weights": [0.1, 0.9, 0.4, 0.7, 3.0, 0.6], "seed": 0, "epoch": 0, "num_samples": 6},
    {"weights": [1.0] * 7, "seed": 5, "epoch": 2, "num_samples": 7},
    {"weights": [0.0, 2.5, 0.0, 1e-3, 7.0, 0.0, 1.0], "seed": 2**64 - 1, "epoch": 9, "num_samples": 4},
    {
        "weights": [float((i * i) % 13) + 0.25 for i in range(50)],
        "seed": 12345,
        "epoch": 1,
        "num_samples": 50,
    },
    {"weights": [1e300, 1e-300, 1.0], "seed": 3, "epoch": 0, "num_samples": 2},
]


def generate() -> dict[str, object]:
    cases = []
    for case in CASES:
        weights, seed, epoch, k = case["weights"], case["seed"], case["epoch"], case["num_samples"]
        positions = list(range(40)) + [1000, 2**40, 2**63 + 7]
        cases.append(
            {
                "weights": [w.hex() for w in weights],
                "weight_bits": [str(struct.unpack("<Q", struct.pack("<d", w))[0]) for w in weights],
                "seed": str(seed),
                "epoch": str(epoch),
                "positions": [str(p) for p in positions],
                "with_replacement": [str(draw_with_replacement(weights, seed, epoch, p)) for p in positions],
                "num_samples": str(k),
                "without_replacement": [str(i) for i in draws_without_replacement(weights, seed, epoch, k)],
            }
        )
    return {"algorithm": "weighted-v1", "cases": cases}


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(generate(), indent=1) + "\n")
