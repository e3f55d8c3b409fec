"""The exact proofs side by side: by the inverse (O(1) memory, split across ranks) and the
bitmap (n / 8 bytes), in one run, each measurement in a fresh process (peak memory is its
own). Prints a markdown table; ``--markdown FILE`` writes it too.

    python benches/proofs_at_scale.py [--n 1e9] [--markdown docs/proofs.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

_MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    import permshard

    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    n, w, method, rank, threads = json.loads(sys.argv[1])
    permshard.verify(1000, w, method=method, rank=rank)  # imports everything it uses
    before = peak_mib()
    began = time.perf_counter()
    cert = permshard.verify(n, w, method=method, rank=rank, threads=threads)
    seconds = time.perf_counter() - began
    part = permshard.ShardConfig(n, w).partition()
    items = part.num_samples if rank is not None else part.total_size
    print(json.dumps({"seconds": seconds, "items": items, "growth_mib": peak_mib() - before}))
    """
)

# The other orders' proofs: `setup` builds, `timed` is measured; `items` counts what it proved.
_MEASURE_CODE = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import permshard
    from permshard._token_budget import TokenBudgetBatchSampler

    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    setup, timed, items = json.loads(sys.argv[1])
    exec(setup)
    before = peak_mib()
    began = time.perf_counter()
    exec(timed)
    seconds = time.perf_counter() - began
    print(json.dumps({"seconds": seconds, "items": eval(items), "growth_mib": peak_mib() - before}))
    """
)

_LENGTHS = (
    "lengths = np.clip(np.random.default_rng(0).lognormal(5.5, 0.8, size=10**7), 1, 4096).astype(np.int32)\n"
    "s = TokenBudgetBatchSampler(lengths, 16384, 8, 3, seed=1)\n"
)
_BLEND = "m = permshard.Mixture([10**5, 10**6, 7 * 10**6], [0.5, 0.3, 0.2], num_samples=10**12, seed=3)\n"

_DISTRIBUTED = textwrap.dedent(
    """
    import json, sys, time
    import permshard
    from permshard.launch import launch

    def worker(rank, world, n):
        import torch.distributed as dist
        s = permshard.ShardedSampler(n, seed=1)
        s.verify_distributed(exact=True) if n <= 1000 else None
        dist.barrier()
        began = time.perf_counter()
        cert = s.verify_distributed(exact=True)
        return time.perf_counter() - began, cert.covered

    if __name__ == "__main__":
        n, world = json.loads(sys.argv[1])
        began = time.perf_counter()
        results = launch(worker, world, n)
        print(json.dumps({"seconds": max(r[0] for r in results), "covered": results[0][1]}))
    """
)


def measure(n: int, w: int, method: str, rank: int | None = None, threads: int = 0) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps([n, w, method, rank, threads])],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def measure_code(setup: str, timed: str, items: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_CODE, json.dumps([setup, timed, items])],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e9, help="samples of the whole-epoch rows")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    n = int(args.n)
    rows = []

    def row(
        what: str, method: str, n_: int, ranks: str, result: dict, note: str = "", used: int = cores
    ) -> None:
        per_item = result["seconds"] * used / result["items"] * 1e9
        rows.append(
            f"| {what} | {method} | {n_:.3g} | {ranks} | {result['seconds']:.2f} | {per_item:.1f} | "
            f"{result['growth_mib']:.0f} | {note} |"
        )

    whole = {m: measure(n, 8, m) for m in ("bitmap", "inverse")}
    for method in ("bitmap", "inverse"):
        row("whole epoch", method, n, "all 8", whole[method])
    ratio = whole["bitmap"]["seconds"] / whole["inverse"]["seconds"]

    # One rank's share of 1e12 over 64 ranks is 1.5625e10 items; measured on the share of
    # 1e12 over 16,384 ranks (6.1e7 items, the same per-item work), projected to the full share.
    big, w_full, w_measured = 10**12, 64, 64 * 256
    share = measure(big, w_measured, "inverse", rank=5)
    full_items = -(-big // w_full)
    projected = share["seconds"] / share["items"] * full_items
    row(
        "one rank's share",
        "inverse",
        big,
        f"rank 5 of {w_measured:,}",
        share,
        f"1e12 over 64 ranks: {full_items:.4g} items a rank, projected {projected / 60:.0f} min per rank "
        "= the cluster's wall time (every rank its own share at once)",
    )

    # Token-budget plans (budget-v1) and mixture passes, through the same inverse.
    row(
        "token-budget len()",
        "plans",
        10**7,
        "all 8",
        measure_code(_LENGTHS, "len(s)", "10**7"),
        "plans every window on all cores (GIL released)",
    )
    row(
        "token-budget epoch",
        "inverse",
        10**7,
        "all 8",
        measure_code(_LENGTHS, "s.verify()", "10**7"),
        "each window's plan as handed out, O(window) memory",
    )
    row(
        "mixture pass",
        "inverse",
        10**12,
        "source 2, pass 9,999",
        measure_code(_BLEND, "m.verify_pass(2, 9999)", "7 * 10**6"),
        "one pass of a 7e6-sample source, anywhere in 1e12 positions (one core)",
        used=1,
    )
    row(
        "mixture range",
        "inverse",
        10**12,
        "positions [1e12 - 1e7, 1e12)",
        measure_code(_BLEND, "m.verify(10**12 - 10**7, 10**12)", "10**7"),
        "every pass wholly inside the range a permutation of its source (one core)",
        used=1,
    )

    with tempfile.TemporaryDirectory() as folder:  # spawned ranks import the worker from a file
        script = os.path.join(folder, "exact_proof_ranks.py")
        with open(script, "w") as f:
            f.write(_DISTRIBUTED)
        distributed = subprocess.run(
            [sys.executable, script, json.dumps([10**8, 4])], capture_output=True, text=True, check=True
        )
    dist_result = json.loads(distributed.stdout)
    alone = measure(10**8, 4, "inverse", rank=0)

    table = "\n".join(
        [
            f"Exact proofs on this machine ({cores} cores), each in a fresh process; memory is the growth "
            "of the peak RSS over the process after import.",
            "",
            "| proof | method | N | ranks proven | seconds | ns per item per core | memory growth MiB | note |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Whole epoch of {n:.3g} over 8 ranks: the inverse is {ratio:.2f}x the bitmap's speed, in "
            f"{whole['inverse']['growth_mib']:.0f} MiB instead of {whole['bitmap']['growth_mib']:.0f} MiB.",
            "",
            f"`verify_distributed(exact=True)` at N = 1e8 on 4 real gloo ranks (on {cores} cores): "
            f"{dist_result['seconds']:.2f} s wall, covered {dist_result['covered']:,}; one rank's share alone "
            f"in one process: {alone['seconds']:.2f} s (the 4 ranks share {cores} cores here; on a cluster "
            "each has its own, and the wall time is one share's).",
        ]
    )
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Exact proofs at scale\n\nRegenerate: `make bench-proofs`.\n\n" + table + "\n")


if __name__ == "__main__":
    main()
