"""TokenBudgetBatchSampler against transformers' DistributedLengthGroupedSampler and a
plain BatchSampler over DistributedSampler, side by side in one run.

Lognormal lengths (median ~245 tokens, clipped to [1, 4096]), 8 ranks, a budget of 16,384
padded tokens; the fixed-size samplers use the batch size with the same mean real tokens.
Per sampler and N: time to the first batch of rank 0 and the memory its iterator holds
then (resident set growth, fresh process each), then over the first 2,000 steps of all ranks: padding (padded
minus real tokens, over real tokens) and load imbalance (max/min real tokens across ranks
per step, median over steps).

    python benches/token_budget_vs_hf.py [--n 1e6,1e7] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORLD, BUDGET, STEPS = 8, 16384, 2000

FIRST_BATCH = r"""
import json, sys, time
import numpy as np
n, kind = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
lengths = np.empty(n, dtype=np.int64)  # built in chunks: no temporary raises the baseline peak
for start in range(0, n, 1 << 20):
    stop = min(n, start + (1 << 20))
    lengths[start:stop] = np.clip(rng.lognormal(5.5, 0.8, size=stop - start), 1, 4096)
batch = int(sys.argv[3])
import itertools, torch  # imports before the clock and the memory baseline
from torch.utils.data import BatchSampler, DistributedSampler
from permshard import TokenBudgetBatchSampler
from transformers.trainer_pt_utils import DistributedLengthGroupedSampler
as_list = lengths.tolist() if kind == "hf" else None  # HF takes a list: made before the clock
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
base = rss_mib()
began = time.perf_counter()
if kind == "permshard":
    it = iter(TokenBudgetBatchSampler(lengths, %(budget)d, %(world)d, 0, seed=0))
    first = next(it)
elif kind == "hf":
    # As HF's Trainer feeds it: the lengths as a list, batches of the rank's indices.
    s = DistributedLengthGroupedSampler(batch, num_replicas=%(world)d, rank=0, lengths=as_list)
    it = iter(BatchSampler(s, batch, False))
    first = next(it)
else:
    s = DistributedSampler(range(n), num_replicas=%(world)d, rank=0)
    it = iter(BatchSampler(s, batch, False))
    first = next(it)
seconds = time.perf_counter() - began
mib = rss_mib() - base  # held while the iterator is alive, as in a training loop
print(json.dumps({"seconds": seconds, "mib": mib}))
""".replace("%(budget)d", str(BUDGET)).replace("%(world)d", str(WORLD))


def lengths_for(n: int):  # type: ignore[no-untyped-def]
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = np.empty(n, dtype=np.int64)
    for start in range(0, n, 1 << 20):
        stop = min(n, start + (1 << 20))
        lengths[start:stop] = np.clip(rng.lognormal(5.5, 0.8, size=stop - start), 1, 4096)
    return lengths


def steps_of(kind: str, n: int, batch: int) -> list[list[list[int]]]:
    """The first STEPS steps: per step, each rank's batch."""
    import itertools

    from torch.utils.data import BatchSampler, DistributedSampler

    lengths = lengths_for(n)
    ranks = []
    for rank in range(WORLD):
        if kind == "permshard":
            from permshard import TokenBudgetBatchSampler

            it = iter(TokenBudgetBatchSampler(lengths, BUDGET, WORLD, rank, seed=0))
        elif kind == "hf":
            from transformers.trainer_pt_utils import DistributedLengthGroupedSampler

            s = DistributedLengthGroupedSampler(
                batch, num_replicas=WORLD, rank=rank, lengths=lengths.tolist()
            )
            it = iter(BatchSampler(s, batch, False))
        else:
            it = iter(BatchSampler(DistributedSampler(range(n), num_replicas=WORLD, rank=rank), batch, False))
        ranks.append(list(itertools.islice(it, STEPS)))
    return [list(step) for step in zip(*ranks)]


def measure(kind: str, n: int, batch: int) -> dict[str, float]:
    import numpy as np

    done = subprocess.run(
        [sys.executable, "-c", FIRST_BATCH, str(n), kind, str(batch)],
        capture_output=True,
        text=True,
        check=True,
    )
    first = json.loads(done.stdout)
    lengths = lengths_for(n)
    steps = steps_of(kind, n, batch)
    real = sum(int(lengths[b].sum()) for step in steps for b in step)
    padded = sum(len(b) * int(lengths[b].max()) for step in steps for b in step)
    loads = np.array([[lengths[b].sum() for b in step] for step in steps], dtype=float)
    return {
        "first_s": first["seconds"],
        "mib": first["mib"],
        "padding": 100 * (padded - real) / real,
        "imbalance": float(np.median(loads.max(1) / loads.min(1))),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", default="1e6,1e7")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    sizes = [int(float(x)) for x in args.n.split(",")]
    batch = BUDGET // int(lengths_for(10**5).mean())  # same mean real tokens per batch
    rows = [
        f"8 ranks, lognormal lengths, budget {BUDGET:,} padded tokens (fixed-size samplers: batch {batch}).",
        "",
        "| N | sampler | first batch | peak memory | padding | load max/min (median step) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    names = {
        "permshard": "TokenBudgetBatchSampler",
        "hf": "DistributedLengthGroupedSampler",
        "plain": "BatchSampler(DistributedSampler)",
    }
    for n in sizes:
        for kind, name in names.items():
            r = measure(kind, n, batch)
            row = (
                f"| {n:.0e} | {name} | {r['first_s'] * 1000:,.0f} ms | {r['mib']:,.0f} MiB "
                f"| {r['padding']:.1f}% | {r['imbalance']:.3f} |"
            )
            print(row, flush=True)
            rows.append(row)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(
                "# Token-budget batches\n\nGenerated by `benches/token_budget_vs_hf.py`.\n\n"
                + "\n".join(rows)
                + "\n"
            )


if __name__ == "__main__":
    main()
