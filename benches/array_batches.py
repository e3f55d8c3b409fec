"""The samplers' own cost per index yielded, construction included: DistributedSampler +
BatchSampler, ShardedBatchSampler with list batches, and with int64 array batches, side
by side in one run (no dataset, no DataLoader).

    python benches/array_batches.py [--n 1e8] [--world 8] [--batch 1024]
"""

from __future__ import annotations

import argparse
import time

from torch.utils.data import BatchSampler, DistributedSampler

from permshard import ShardedBatchSampler, ShardedSampler


def per_index(make, indices: int) -> float:
    began = time.perf_counter()
    for _ in make():
        pass
    return (time.perf_counter() - began) / indices * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    n, w, bs = int(args.n), args.world, args.batch
    indices = -(-n // w)
    rows = {
        "DistributedSampler + BatchSampler": lambda: BatchSampler(
            DistributedSampler(range(n), w, 3, seed=1), bs, False
        ),
        "ShardedBatchSampler, list batches": lambda: ShardedBatchSampler(
            ShardedSampler(n, w, 3, seed=1), bs, as_array=False
        ),
        "ShardedBatchSampler, array batches": lambda: ShardedBatchSampler(
            ShardedSampler(n, w, 3, seed=1), bs, as_array=True
        ),
    }
    print(f"one rank's epoch: n={n:,} over {w} ranks ({indices:,} indices), batch {bs}")
    print("| sampler | ns per index (construction included) |\n|---|---:|")
    for name, make in rows.items():
        print(f"| {name} | {per_index(make, indices):.1f} |")


if __name__ == "__main__":
    main()
