"""perm-v2 beside perm-v1 and torch's DistributedSampler, side by side in one run.

1. One epoch of one rank (set_epoch, then the whole iteration) for n = 10 ... 10^7
   (10^8 with ``--large``): DistributedSampler, ShardedSampler on perm-v1 and on perm-v2,
   epochs interleaved, medians and the ratios. Each epoch is a new one, so perm-v2's table (n <= 2^16) is built in it.
2. ``Permutation.take`` per index on every SIMD level this CPU has (``PERMSHARD_SIMD``,
   a fresh process per level), perm-v1 against perm-v2.
3. One rank's share of the exact proof (ns per item per core), perm-v1 against perm-v2.
4. A mixture of 1,000 equal sources of 100, 1,000 and 10^5 samples: ns per position of
   consecutive positions (``take``) and of random batches of 32 (``at_positions``),
   mix-v1 against mix-v2.

Run: ``python benches/perm_v2.py [--large] [--markdown PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

W = 8


def epoch_costs(n: int, epochs: int, kinds: tuple[str, ...]) -> dict[str, float]:
    """Median seconds of set_epoch + one epoch of rank 0, for each sampler of ``kinds``
    (``"DistributedSampler"``, ``"perm-v1"``, ``"perm-v2"``), epochs interleaved (one of
    each in turn): every sampler meets the machine in the same state, so a slow stretch
    of a shared machine does not fall on one of them."""
    from torch.utils.data import DistributedSampler

    from permshard import ShardedSampler

    samplers = {
        kind: DistributedSampler(range(n), num_replicas=W, rank=0)
        if kind == "DistributedSampler"
        else ShardedSampler(n, num_replicas=W, rank=0, algorithm=kind)
        for kind in kinds
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for epoch in range(epochs):
        for kind, sampler in samplers.items():
            began = time.perf_counter()
            sampler.set_epoch(epoch + 1)
            count = sum(1 for _ in sampler)
            times[kind].append(time.perf_counter() - began)
            assert count == -(-n // W)
    return {kind: statistics.median(t) for kind, t in times.items()}


def take_per_index(level: str) -> dict[str, float]:
    """ns per index of ``take`` at n = 10^7 on ``level``, in a fresh process."""
    code = """
import json, time
from permshard import Permutation, simd_level
out = {"level": simd_level()}
for algorithm in ("perm-v1", "perm-v2"):
    p = Permutation(10**7, seed=1, algorithm=algorithm)
    best = 1e9
    for _ in range(7):
        began = time.perf_counter()
        p.take(0, 1 << 21)
        best = min(best, (time.perf_counter() - began) / (1 << 21) * 1e9)
    out[algorithm] = best
print(json.dumps(out))
"""
    env = dict(os.environ, PERMSHARD_SIMD=level)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def share_cost(algorithm: str) -> float:
    """ns per item per core of one rank's share of the exact proof, n = 10^9 over 64 ranks."""
    import permshard

    began = time.perf_counter()
    cert = permshard.verify(10**9, 64, rank=5, algorithm=algorithm, threads=1)
    seconds = time.perf_counter() - began
    return seconds / cert.lengths[0] * 1e9


def mixture_cost(size: int, algorithm: str) -> tuple[float, float]:
    """ns per position of a 1,000-source mixture: ``take`` of 200,000 consecutive
    positions, and random batches of 32 (best of 5)."""
    import numpy as np

    import permshard

    m = permshard.Mixture([size] * 1000, [1.0] * 1000, num_samples=10**7, algorithm=algorithm)
    batches = [np.random.default_rng(k).integers(0, 10**7, 32).tolist() for k in range(300)]
    best_take = best_batch = 1e9
    for round_ in range(5):
        began = time.perf_counter()
        m.take(round_ * 200_000, (round_ + 1) * 200_000)
        best_take = min(best_take, (time.perf_counter() - began) / 200_000 * 1e9)
        began = time.perf_counter()
        for b in batches:
            m.at_positions(b)
        best_batch = min(best_batch, (time.perf_counter() - began) / (32 * len(batches)) * 1e9)
    return best_take, best_batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also n = 10^8 (minutes, GBs)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables as markdown")
    args = parser.parse_args()
    import permshard

    lines = [
        f"perm-v2 side by side on this machine ({os.cpu_count()} cores, SIMD level {permshard.simd_level()})",
        "",
    ]
    lines += [
        "| n | DistributedSampler | perm-v1 | perm-v2 | perm-v1 / DS | perm-v2 / DS |",
        "|---|---|---|---|---|---|",
    ]
    sizes = [10, 100, 1000, 10**4, 10**5, 10**6, 10**7] + ([10**8] if args.large else [])
    for n in sizes:
        # Many epochs where one costs microseconds: the median of a few is the machine's noise.
        epochs = 2001 if n <= 1000 else 31 if n <= 10**5 else 5 if n <= 10**6 else 3
        # Each order beside DistributedSampler alone: perm-v1's large small-n tables would
        # evict the caches of whatever runs between its epochs.
        ds, v2 = epoch_costs(n, epochs, ("DistributedSampler", "perm-v2")).values()
        ds1, v1 = epoch_costs(n, epochs, ("DistributedSampler", "perm-v1")).values()
        lines.append(
            f"| {n:,} | {ds * 1e6:,.1f} µs | {v1 * 1e6:,.1f} µs | {v2 * 1e6:,.1f} µs | {v1 / ds1:.2f}× | {v2 / ds:.2f}× |"
        )
    lines += ["", "`Permutation.take` per index at n = 10^7 (best of 7, 2^21 indices):", ""]
    lines += ["| SIMD level | perm-v1 | perm-v2 | perm-v2 / perm-v1 |", "|---|---|---|---|"]
    code = "from permshard._core import simd_level; print(simd_level())"
    levels = ["avx512", "avx2", "scalar", "neon"]
    for level in levels:
        env = dict(os.environ, PERMSHARD_SIMD=level)
        if subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode:
            continue  # not a level of this CPU
        t = take_per_index(level)
        lines.append(
            f"| {t['level']} | {t['perm-v1']:.2f} ns | {t['perm-v2']:.2f} ns | {t['perm-v2'] / t['perm-v1']:.2f}× |"
        )
    v1, v2 = share_cost("perm-v1"), share_cost("perm-v2")
    lines += [
        "",
        f"One rank's share of the exact proof (n = 10^9 over 64 ranks, one thread): perm-v1 "
        f"{v1:.1f} ns per item, perm-v2 {v2:.1f} ns per item ({v2 / v1:.2f}×).",
    ]
    lines += ["", "A mixture of 1,000 equal sources, ns per position (best of 5):", ""]
    lines += [
        "| source size | take, mix-v1 | take, mix-v2 | mix-v2 / mix-v1 "
        "| batches of 32, mix-v1 | batches of 32, mix-v2 | mix-v2 / mix-v1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in (100, 1000, 10**5):
        (t1, b1), (t2, b2) = mixture_cost(size, "mix-v1"), mixture_cost(size, "mix-v2")
        lines.append(
            f"| {size:,} | {t1:,.0f} ns | {t2:,.0f} ns | {t2 / t1:.2f}× | {b1:,.0f} ns | {b2:,.0f} ns | {b2 / b1:.2f}× |"
        )
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
