"""ShardedSampler with exclusions beside the same sampler without, side by side in one run:
cost per index at 1% (and 10%) of the samples excluded, through the sampler's iteration
and through the core alone (one rank's share taken in chunks), and the set's memory.

Run: ``python benches/exclusions.py [--n 1e7] [--markdown FILE]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np

from permshard import ShardedSampler


def best(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def iterate(sampler: ShardedSampler) -> Callable[[], None]:
    def run() -> None:
        sampler.set_epoch(0)
        for _ in sampler:
            pass

    return run


def take(sampler: ShardedSampler) -> Callable[[], None]:
    part = sampler.config.partition()

    def run() -> None:
        for lo in range(0, part.num_samples, 1 << 16):
            part.take(sampler.rank, lo, min(lo + (1 << 16), part.num_samples))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e7)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    n = int(args.n)
    rng = np.random.default_rng(0)
    plain = ShardedSampler(n, num_replicas=4, rank=0)
    rows = [
        "| excluded | per index, iterating (ns) | ratio | per index, core take (ns) | ratio | set memory |",
        "|---|---|---|---|---|---|",
    ]
    base_iter = best(iterate(plain)) / len(plain) * 1e9
    base_take = best(take(plain)) / len(plain) * 1e9
    rows.append(f"| none | {base_iter:.1f} | 1.00× | {base_take:.2f} | 1.00× | 0 |")
    for share in (0.01, 0.10):
        ids = rng.choice(n, size=int(n * share), replace=False)
        built = time.perf_counter()
        sampler = ShardedSampler(n, num_replicas=4, rank=0, exclude=ids)
        build = time.perf_counter() - built
        per_iter = best(iterate(sampler)) / len(sampler) * 1e9
        per_take = best(take(sampler)) / len(sampler) * 1e9
        memory = f"{16 * len(ids) / 2**20:.1f} MiB (built in {build:.2f} s)"
        rows.append(
            f"| {share:.0%} ({len(ids):,}) | {per_iter:.1f} | {per_iter / base_iter:.2f}× | "
            f"{per_take:.2f} | {per_take / base_take:.2f}× | {memory} |"
        )
    text = f"n = {n:,}, rank 0 of 4, perm-v2\n\n" + "\n".join(rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n## Exclusions\n\n" + text + "\n")


if __name__ == "__main__":
    main()
