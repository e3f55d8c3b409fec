"""mix-v1, mix-v2 and mix-v3 written again from their specification in plain Python, slow
and obvious.

It is the independent reference for the golden vectors (``tests/golden/mix-v1.json``,
``mix-v2.json``, ``mix-v3.json``): exact rational weights (``float.as_integer_ratio``), the
weight-balanced tree of two-way splits, Beatty routing (``f(m) = floor(m·a/t + 1/2)`` lefts
among a node's first ``m`` positions) with Python's unbounded ints, and the per-pass orders
of ``reference_perm_v1`` (mix-v1) or ``reference_perm_v2`` (mix-v2); mix-v3 takes
``reference_perm_v1`` for sources of 513 to 2**16 samples and ``reference_perm_v2`` for the
others.

Run ``python -m helpers.reference_mix`` in ``tests/`` to regenerate the golden files.
"""

from __future__ import annotations

import json
import pathlib
from fractions import Fraction
from typing import Union

from . import reference_perm_v1, reference_perm_v2
from .reference_perm_v1 import chain

#: The golden file of each version.
GOLDEN = {
    version: pathlib.Path(__file__).parent.parent / "golden" / f"{version}.json"
    for version in ("mix-v1", "mix-v2", "mix-v3")
}
MIX_TAG = 0x6D69782D7631  # "mix-v1"


def pass_permutation(algorithm: str, size: int) -> type:
    """The permutation of a source's passes: perm-v1 (mix-v1), perm-v2 (mix-v2), or by
    the source's size (mix-v3: perm-v1 between 513 and 2**16 samples, perm-v2 else)."""
    if algorithm == "mix-v1" or (algorithm == "mix-v3" and 512 < size <= 2**16):
        return reference_perm_v1.ReferencePermutation
    return reference_perm_v2.ReferencePermutation


Tree = Union[int, tuple[int, int, "Tree", "Tree"]]  # a source, or (left weight, total, left, right)


def integer_weights(weights: list[float]) -> list[int]:
    """The exact integers ``w / 2^v`` (``v`` the smallest 2-adic valuation) when they fit
    63 bits in total; else ``w / total * 2^62`` truncated, in IEEE doubles summed in order."""
    exact = [Fraction(w) for w in weights]
    positive = [f for f in exact if f > 0]

    def valuation(f: Fraction) -> int:
        num, den = f.numerator, f.denominator  # den is a power of two
        return (num & -num).bit_length() - den.bit_length()

    low = min(valuation(f) for f in positive)
    q = [int(f / Fraction(2) ** low) for f in exact]
    if all(v < 2**64 for v in q) and sum(q) < 2**63:
        return q
    total = 0.0
    for w in weights:
        total += w
    return [int(w / total * float(2**62)) for w in weights]


def build(sources: list[int], q: list[int]) -> Tree:
    if len(sources) == 1:
        return sources[0]
    total = sum(q[s] for s in sources)
    best, gap = 1, None
    for i in range(1, len(sources)):
        g = abs(2 * sum(q[s] for s in sources[:i]) - total)
        if gap is None or g < gap:
            best, gap = i, g
    left = sum(q[s] for s in sources[:best])
    return (left, total, build(sources[:best], q), build(sources[best:], q))


def lefts(m: int, a: int, t: int) -> int:
    """Of a node's first ``m`` positions, how many go left: ``m·a/t`` rounded half up."""
    return (2 * m * a + t) // (2 * t)


def tree_of(weights: list[float]) -> Tree:
    q = integer_weights(weights)
    return build(sorted((s for s in range(len(q)) if q[s] > 0), key=lambda s: (-q[s], s)), q)


def tree_counts(node: Tree, m: int, out: list[int]) -> None:
    if isinstance(node, int):
        out[node] += m
    else:
        a, t, left, right = node
        tree_counts(left, lefts(m, a, t), out)
        tree_counts(right, m - lefts(m, a, t), out)


class ReferenceMixture:
    """``stages``: ``(start, weights)`` after the first stage (which starts at 0)."""

    def __init__(
        self,
        sizes: list[int],
        weights: list[float],
        num_samples: int,
        seed: int,
        stages: tuple = (),
        algorithm: str = "mix-v3",
    ) -> None:
        self.sizes, self.num_samples, self.seed = sizes, num_samples, seed
        self.algorithm = algorithm
        self.starts = [0] + [start for start, _ in stages]
        self.trees = [tree_of(weights)] + [tree_of(w) for _, w in stages]

    def stage(self, p: int) -> int:
        return max(j for j, start in enumerate(self.starts) if start <= p)

    def before(self, j: int) -> list[int]:
        """Per source: positions taken in the stages before stage ``j``."""
        out = [0] * len(self.sizes)
        for i in range(j):
            tree_counts(self.trees[i], self.starts[i + 1] - self.starts[i], out)
        return out

    def occurrence(self, p: int) -> tuple[int, int]:
        j = self.stage(p)
        s, local = self.tree_occurrence(self.trees[j], p - self.starts[j])
        return s, self.before(j)[s] + local

    @staticmethod
    def tree_occurrence(tree: Tree, p: int) -> tuple[int, int]:
        node, q = tree, p
        while not isinstance(node, int):
            a, t, left, right = node
            before = lefts(q, a, t)
            if lefts(q + 1, a, t) > before:
                node, q = left, before
            else:
                node, q = right, q - before
        return node, q

    def at(self, p: int) -> tuple[int, int]:
        s, k = self.occurrence(p)
        size = self.sizes[s]
        Permutation = pass_permutation(self.algorithm, size)
        order = Permutation(size, chain(MIX_TAG, [self.seed]), k // size, s)
        return s, order.forward(k % size)

    def counts(self, n: int) -> list[int]:
        j = self.stage(n)
        out = self.before(j)
        tree_counts(self.trees[j], n - self.starts[j], out)
        return out


CASES = [
    # sizes, weights, num_samples, seed, positions
    ([100, 200, 300], [0.2, 0.3, 0.5], 600, 0, list(range(20)) + [299, 599]),
    ([5, 7], [1.0, 1.0], 50, 3, list(range(50))),
    ([10**9, 10**6, 10**3], [0.6, 0.3, 0.1], 10**12, 7, [0, 1, 2, 10**6, 10**11 + 3, 10**12 - 1]),
    ([3] * 10, [float(i + 1) for i in range(10)], 1000, 11, list(range(0, 1000, 37))),
    ([1000, 2], [1.0, 1e-300], 5000, 1, [0, 4999]),
    ([2**40, 2**20], [0.1, 0.9], 2**63, 2**64 - 1, [0, 2**62, 2**63 - 1]),
]
#: Schedules: the same, with stages (start, weights) after the first.
SCHEDULED = [
    (
        [9, 13, 5],
        [0.7, 0.2, 0.1],
        700,
        4,
        list(range(0, 700, 9)) + [249, 250, 399, 400],
        [(250, [0.0, 0.5, 0.5]), (400, [0.1, 0.1, 0.8])],
    ),
    ([10**6, 10**3], [0.5, 0.5], 10**9, 2, [0, 10**8 - 1, 10**8, 10**9 - 1], [(10**8, [0.99, 0.01])]),
]
#: mix-v3's alone: sources on both sides of its two size bounds, up-sampled.
V3_CASES = [
    (
        [512, 513, 2**16, 2**16 + 1, 37_825],
        [0.1, 0.2, 0.3, 0.2, 0.2],
        10**7,
        5,
        list(range(0, 40)) + [10**6 + 7, 5 * 10**6, 10**7 - 1],
    ),
]


def generate(algorithm: str) -> dict[str, object]:
    cases = []
    extra = V3_CASES if algorithm == "mix-v3" else []
    for sizes, weights, num_samples, seed, positions, *rest in CASES + SCHEDULED + extra:
        stages = rest[0] if rest else []
        m = ReferenceMixture(sizes, weights, num_samples, seed, tuple(stages), algorithm)
        at = [m.at(p) for p in positions]
        prefixes = [1, 10, 1000, num_samples]
        cases.append(
            {
                "sizes": [str(s) for s in sizes],
                "weights": [repr(w) for w in weights],  # shortest repr: parses back to the same double
                "stages": [[str(start), [repr(w) for w in ws]] for start, ws in stages],
                "num_samples": str(num_samples),
                "seed": str(seed),
                "positions": [str(p) for p in positions],
                "sources": [str(s) for s, _ in at],
                "indices": [str(i) for _, i in at],
                "prefixes": [str(n) for n in prefixes],
                "counts": [[str(c) for c in m.counts(n)] for n in prefixes],
            }
        )
    return {"algorithm": algorithm, "cases": cases}


if __name__ == "__main__":
    for version, path in GOLDEN.items():
        lines = ",\n  ".join(json.dumps(case) for case in generate(version)["cases"])  # type: ignore[attr-defined]
        path.write_text(f'{{"algorithm": "{version}", "cases": [\n  {lines}\n]}}\n')
        print(f"wrote {path}")
