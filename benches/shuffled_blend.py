"""A blend read in a shuffled sampler's order: the mixture map's cost per position under
mix-v3 (the default), mix-v2 and mix-v1, side by side in one run, with the default
settings (the table store of 32 MiB each reading process keeps: a DataLoader worker is
such a process).

The positions are those a ``ShardedSampler(shuffle=True)`` hands out (the epoch's perm-v2
order), in batches of 64 and 1,024; each map first reads 2^17 of them (its store filled as
a worker's is after its first batches), then the three take turns
(``side_by_side.interleaved``), each with its own store. The same batches are read in
order too (``shuffle=False``), where tables pay off. Shapes:

1. the 8-prefix Megatron corpus of ``benches/megatron_corpus.py`` (train windows from
   236,596 down to 37,825, weights 0.15 and 0.10) up-sampled to 10^8 samples: mix-v2's
   tables of its small sources' passes outgrow the store;
2. the same at 10^7 samples, where they fit;
3. the sizes around mix-v3's bounds (512, 513, 4,096, 2^16, 2^16 + 1), 10^8 samples;
4. tiny sources (7, 100, 300) beside a large one, 10^8 samples.

Run: ``python benches/shuffled_blend.py [--seconds 1] [--markdown PATH]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np
from side_by_side import interleaved

from permshard import Mixture, Permutation

ALGORITHMS = ("mix-v1", "mix-v2", "mix-v3")
#: Train windows of the 8 prefixes (the extremes as measured; between, geometric).
CORPUS = [int(round(236_596 * (37_825 / 236_596) ** (k / 7))) for k in range(8)]
SHAPES = {
    "8-prefix Megatron corpus, 10^8 samples": (CORPUS, [0.15, 0.10] * 4, 10**8),
    "8-prefix Megatron corpus, 10^7 samples": (CORPUS, [0.15, 0.10] * 4, 10**7),
    "sizes at mix-v3's bounds, 10^8 samples": ([512, 513, 4_096, 2**16, 2**16 + 1], [1.0] * 5, 10**8),
    "tiny sources beside a large one, 10^8 samples": ([7, 100, 300, 10**7], [0.1, 0.1, 0.1, 0.7], 10**8),
}
WARM = 1 << 17


def rates(sizes: list[int], weights: list[float], n: int, batch: int, seconds: float) -> dict[str, float]:
    """Positions per second of each map, at the sampler's shuffled positions and in order."""
    order = Permutation(n, seed=1)
    shuffled = [order.take(k * batch, (k + 1) * batch).astype(np.uint64) for k in range(WARM // batch)]
    steps, names = [], []
    for algorithm in ALGORITHMS:
        m = Mixture(sizes, weights, num_samples=n, seed=1, algorithm=algorithm)
        for positions in shuffled:  # the store as a worker's is after its first batches
            m.at_positions(positions)
        turns, batches = iter(range(1 << 62)), iter(range(1 << 62))

        def random_step(m: Mixture = m, turns=turns) -> int:
            m.at_positions(shuffled[next(turns) % len(shuffled)])
            return batch

        def ordered_step(m: Mixture = m, batches=batches) -> int:  # batch after batch
            start = (next(batches) * batch) % (n - batch)
            m.take(start, start + batch)
            return batch

        steps += [random_step, ordered_step]
        names += [f"{algorithm} shuffled", f"{algorithm} in order"]
    return dict(zip(names, interleaved(steps, seconds * len(steps))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="time per map and order (default 1)")
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args()
    if os.environ.get("PERMSHARD_MIX_TABLE_MIB"):
        sys.exit("unset PERMSHARD_MIX_TABLE_MIB: this measures the default store")
    header = (
        "| shape | batch | mix-v1 shuffled µs | mix-v2 shuffled µs | mix-v3 shuffled µs | "
        "v2 / v1 | **v3 / v1** | mix-v1 in order µs | mix-v2 in order µs | mix-v3 in order µs |"
    )
    lines = [header, "|" + "---|" * 10]
    print(header)
    for name, (sizes, weights, n) in SHAPES.items():
        for batch in (64, 1024):
            r = rates(sizes, weights, n, batch, args.seconds)
            us = {k: 1e6 / v for k, v in r.items()}
            v1 = us["mix-v1 shuffled"]
            line = (
                f"| {name} | {batch:,} | {v1:.3f} | {us['mix-v2 shuffled']:.3f} | "
                f"{us['mix-v3 shuffled']:.3f} | {us['mix-v2 shuffled'] / v1:.2f} | "
                f"**{us['mix-v3 shuffled'] / v1:.2f}** | {us['mix-v1 in order']:.3f} | "
                f"{us['mix-v2 in order']:.3f} | {us['mix-v3 in order']:.3f} |"
            )
            lines.append(line)
            print(line, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(
                "# A blend read in a shuffled sampler's order\n\n"
                f"`python benches/shuffled_blend.py` on {platform.machine()}, {os.cpu_count()} cores, "
                "default settings (a table store of 32 MiB per reading process); µs per position, "
                "the three maps taking turns in one run. Corpus sizes: "
                f"{', '.join(f'{s:,}' for s in CORPUS)}.\n\n" + "\n".join(lines) + "\n"
            )


if __name__ == "__main__":
    main()
