"""budget-v1 and budget-v2 written again from their definition in plain Python, one sample
at a time.

It is the independent reference for the token-budget sampler's plans and for the golden
vectors (``tests/golden/budget-v1.json``, ``budget-v2.json``), which it computes over the
plain-Python perm-v1 (budget-v1) or perm-v2 (budget-v2) reference. Run
``python -m helpers.reference_budget`` (in ``tests/``) to regenerate the golden files.
"""

from __future__ import annotations

import json
import pathlib

from . import reference_perm_v1, reference_perm_v2

#: The golden file of each version.
GOLDEN = {
    v: pathlib.Path(__file__).parent.parent / "golden" / f"{v}.json" for v in ("budget-v1", "budget-v2")
}
#: The permutation of each version (the samples' order and each window's steps).
PERMUTATIONS = {
    "budget-v1": reference_perm_v1.ReferencePermutation,
    "budget-v2": reference_perm_v2.ReferencePermutation,
}


def reference_plan(
    lengths,
    max_tokens,
    world,
    *,
    seed=0,
    epoch=0,
    shuffle=True,
    drop_last=False,
    window=1 << 16,
    start=(0, None, 0),
    Permutation=reference_perm_v1.ReferencePermutation,
):
    """budget-v1 written from its definition, one sample at a time in plain Python: for
    each window of the epoch's order, its samples (minus those taken before a resume)
    sorted by length (ties: window order), cut greedily under the padded budget; batches
    split (largest first, halves), dropped or repeated until they fill whole steps; sorted
    by padded load; rank r of step s takes the (r + s) % world-th of the step's batches;
    steps shuffled by the permutation keyed per window. Returns every rank's batches.
    ``Permutation`` is the version's permutation class (default: the plain-Python perm-v1,
    budget-v1's; :data:`PERMUTATIONS` has each version's)."""
    n = len(lengths)
    perm = Permutation(n, seed, epoch) if shuffle else None
    order = perm.forward if perm else (lambda p: p)
    first_window, taken, first_step = start
    ranks = [[] for _ in range(world)]
    for k in range(first_window, -(-n // window)):
        samples = [order(p) for p in range(k * window, min(n, (k + 1) * window))]
        if k == first_window and taken is not None:
            samples = [x for x, t in zip(samples, taken) if not t]
        samples = sorted(samples, key=lambda x: int(lengths[x]))  # sorted() is stable
        batches = []
        for x in samples:
            if batches and (len(batches[-1]) + 1) * int(lengths[x]) <= max_tokens:
                batches[-1].append(x)
            else:
                batches.append([x])
        repeats = 0
        while len(batches) % world:
            sizes = [len(b) for b in batches]
            big = sizes.index(max(sizes))
            if sizes[big] > 1:
                half = sizes[big] // 2
                batches.append(batches[big][half:])
                batches[big] = batches[big][:half]
            elif drop_last:
                batches.pop()
            else:
                batches.append(list(batches[repeats % len(batches)]))
                repeats += 1
        batches.sort(key=lambda b: -len(b) * int(lengths[b[-1]]))
        steps = [
            [batches[s * world + (r + s) % world] for r in range(world)] for s in range(len(batches) // world)
        ]
        if shuffle and steps:
            key = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + k + 1) % 2**64
            shuffled = Permutation(len(steps), key, 0)
            steps = [steps[shuffled.forward(i)] for i in range(len(steps))]
        for step in steps[first_step if k == first_window else 0 :]:
            for r in range(world):
                ranks[r].append(step[r])
    return ranks


def lengths_of(n: int, seed: int) -> list[int]:
    """Lengths in [1, 4000] from splitmix64, so the Rust test rebuilds them."""
    from .reference_perm_v1 import splitmix64

    return [1 + splitmix64(seed ^ i) % 4000 for i in range(n)]


CASES = [  # (n, world, max_tokens, kwargs)
    (300, 1, 16384, {"seed": 1, "window": 64}),
    (300, 3, 16384, {"seed": 2, "window": 100, "epoch": 4}),
    (250, 4, 8192, {"seed": 3, "window": 128, "shuffle": False}),
    (205, 4, 16384, {"seed": 4, "window": 32, "drop_last": True}),
    (37, 8, 16384, {"seed": 5, "window": 16}),
    (5, 4, 6000, {"seed": 6, "window": 4}),
    (5, 4, 6000, {"seed": 6, "window": 4, "drop_last": True}),
]


def generate(algorithm: str) -> dict[str, object]:
    cases = []
    for n, world, max_tokens, kwargs in CASES:
        kwargs = {"seed": 0, "epoch": 0, "shuffle": True, "drop_last": False, **kwargs}
        ranks = reference_plan(
            lengths_of(n, n), max_tokens, world, Permutation=PERMUTATIONS[algorithm], **kwargs
        )
        cases.append({"n": n, "num_replicas": world, "max_tokens": max_tokens, **kwargs, "ranks": ranks})
    return {"algorithm": algorithm, "lengths": "1 + splitmix64(n ^ i) % 4000", "cases": cases}


if __name__ == "__main__":
    for version, path in GOLDEN.items():
        path.write_text(json.dumps(generate(version), indent=1) + "\n")
