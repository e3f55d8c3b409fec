"""grain's samplers beside permshard.grain's, side by side in one run: duplicates, missing
records and cost per index.

For each n: grain's shuffled ``IndexSampler`` (one shard), grain's ``DataLoader`` over 2
shards (records read by either), and ``permshard.grain.ShardedIndexSampler`` (one shard,
and the 2 shards through grain's DataLoader, uneven as grain's and with ``pad=True``). Needs grain (``pip install grain``).

Run: ``python benches/grain_index_sampler.py``.
"""

from __future__ import annotations

import time
from collections import Counter

import grain
from grain.sharding import NoSharding, ShardOptions

from permshard.grain import ShardedIndexSampler


def one_shard(sampler, n: int) -> tuple[int, int, float]:
    """(duplicates, missing, µs per index) of one epoch of ``sampler``."""
    began = time.perf_counter()
    keys = [sampler[i].record_key for i in range(n)]
    seconds = time.perf_counter() - began
    counts = Counter(keys)
    return sum(c - 1 for c in counts.values()), n - len(counts), seconds / n * 1e6


def two_shards(make, n: int) -> tuple[int, int]:
    """(duplicates, missing) of one epoch over 2 shards through grain's DataLoader."""
    counts: Counter = Counter()
    for shard in range(2):
        options = ShardOptions(shard, 2)
        loader = grain.DataLoader(data_source=range(n), sampler=make(n, options), shard_options=options)
        counts.update(int(x) for x in loader)
    real = {k: c for k, c in counts.items()}
    return sum(c - 1 for c in real.values()), n - len(real)


def main() -> None:
    grain_sampler = lambda n, options: grain.samplers.IndexSampler(  # noqa: E731
        n, options, shuffle=True, num_epochs=1, seed=1
    )
    ours = lambda n, options: ShardedIndexSampler(n, options, seed=1)  # noqa: E731
    padded = lambda n, options: ShardedIndexSampler(n, options, seed=1, pad=True)  # noqa: E731
    print(f"grain {grain.__version__} beside permshard.grain (one run, this machine)\n")
    print("| n | sampler | one shard: duplicates | missing | µs per index | 2 shards: duplicates | missing |")
    print("|---|---|---|---|---|---|---|")
    for n in (1001, 65_537, 262_145):
        for name, make in (
            ("grain IndexSampler", grain_sampler),
            ("permshard ShardedIndexSampler", ours),
            ("permshard ShardedIndexSampler(pad=True)", padded),
        ):
            dup, miss, cost = one_shard(make(n, NoSharding()), n)
            dup2, miss2 = two_shards(make, n) if n <= 65_537 else ("-", "-")
            print(f"| {n:,} | {name} | {dup} | {miss} | {cost:.1f} | {dup2} | {miss2} |")
    print(
        "\ngrain's DataLoader reads len(sampler) // shards indices on each shard: with uneven "
        "shards the last n mod 2 records of the run are not read (grain's sampler as ours); "
        "with pad=True the duplicates are DistributedSampler's declared padding (n mod 2 "
        "records, proven by verify()), nothing missing."
    )


if __name__ == "__main__":
    main()
