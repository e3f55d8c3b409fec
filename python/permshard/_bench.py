"""``permshard bench``: ShardedSampler and DistributedSampler side by side, in one run.

Each measurement runs in a fresh Python process, so peak memory is the sampler's own:
time to the first index (build the sampler, ``iter``, ``next``), the cost per index of a
whole epoch on one rank (including that first step), and the peak RSS growth.
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import time
from typing import Any, Optional

WORLD = 8  # ranks the dataset is split over; rank 0 is measured


def measure(kind: str, n: int) -> dict[str, float]:
    """One measurement, in this process."""
    import torch
    from torch.utils.data import DistributedSampler

    from ._sampler import ShardedSampler

    torch.set_num_threads(1)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.perf_counter()
    if kind == "permshard":
        sampler: Any = ShardedSampler(n, num_replicas=WORLD, rank=0)
    else:
        sampler = DistributedSampler(range(n), num_replicas=WORLD, rank=0)  # type: ignore[arg-type]
    it = iter(sampler)
    first = next(it)
    first_s = time.perf_counter() - began
    count = 1
    for _ in it:
        count += 1
    epoch_s = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    assert count == len(sampler) and 0 <= first < n
    return {
        "first_index_s": first_s,
        "ns_per_index": epoch_s / count * 1e9,
        "peak_mib": peak / 1024,
        "indices": count,
    }


def measure_in_subprocess(kind: str, n: int) -> dict[str, float]:
    code = f"import json; from permshard._bench import measure; print(json.dumps(measure({kind!r}, {n})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}  # type: ignore[dict-item]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(sizes: list[int], echo: Any = print) -> dict[str, Any]:
    """Measures both samplers at every size; returns machine-readable results."""
    import numpy
    import torch

    from . import __version__

    rows = []
    for n in sizes:
        ours = measure_in_subprocess("permshard", n)
        theirs = measure_in_subprocess("torch", n)
        row: dict[str, Any] = {"n": n, "permshard": ours, "torch": theirs}
        if "error" not in ours and "error" not in theirs:
            row["speedup_first_index"] = theirs["first_index_s"] / ours["first_index_s"]
            row["per_index_ratio"] = ours["ns_per_index"] / theirs["ns_per_index"]
        rows.append(row)
        echo(format_row(row))
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "permshard": __version__,
        "world": WORLD,
        "rows": rows,
    }


HEADER = (
    f"{'N':>14} | {'first index: DistributedSampler':>32} {'permshard':>11} {'speedup':>9} | "
    f"{'ns/index: DS':>12} {'permshard':>10} {'ratio':>6} | {'peak MiB: DS':>12} {'permshard':>10}"
)


def format_row(row: dict[str, Any]) -> str:
    ours, theirs = row["permshard"], row["torch"]
    if "error" in ours or "error" in theirs:
        return f"{row['n']:>14,} | permshard: {ours.get('error', 'ok')} | DistributedSampler: {theirs.get('error', 'ok')}"
    return (
        f"{row['n']:>14,} | {theirs['first_index_s']:>30.4f} s {ours['first_index_s'] * 1e6:>8.0f} µs "
        f"{row['speedup_first_index']:>8,.0f}x | {theirs['ns_per_index']:>12.1f} {ours['ns_per_index']:>10.1f} "
        f"{row['per_index_ratio']:>6.2f} | {theirs['peak_mib']:>12,.0f} {ours['peak_mib']:>10,.1f}"
    )


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Benchmarks: ShardedSampler vs torch DistributedSampler",
        "",
        f"Measured {results['date']} on {results['machine']}; Python {results['python']}, torch "
        f"{results['torch']}, numpy {results['numpy']}, permshard {results['permshard']}. One epoch "
        f"on rank 0 of {results['world']}, each measurement in a fresh process. Regenerate with "
        "`make bench`.",
        "",
        "| N | first index, DistributedSampler | first index, permshard | speedup "
        "| ns/index, DistributedSampler | ns/index, permshard | ratio "
        "| peak MiB, DistributedSampler | peak MiB, permshard |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        o, t = row["permshard"], row["torch"]
        if "error" in o or "error" in t:
            lines.append(f"| {row['n']:,} | {t.get('error', '')} | {o.get('error', '')} | | | | | | |")
            continue
        lines.append(
            f"| {row['n']:,} | {t['first_index_s']:.3f} s | {o['first_index_s'] * 1e6:.0f} µs | "
            f"{row['speedup_first_index']:,.0f}× | {t['ns_per_index']:.1f} | {o['ns_per_index']:.1f} | "
            f"{row['per_index_ratio']:.2f} | {t['peak_mib']:,.0f} | {o['peak_mib']:,.1f} |"
        )
    lines += ["", "![time to first index and peak memory vs N](benchmarks.png)", ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if "error" not in r["permshard"] and "error" not in r["torch"]]
    ns = [r["n"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, label, style in (("torch", "DistributedSampler", "o-"), ("permshard", "ShardedSampler", "s-")):
        ax1.plot(ns, [r[kind]["first_index_s"] for r in rows], style, label=label)
        ax2.plot(ns, [max(r[kind]["peak_mib"], 0.01) for r in rows], style, label=label)
    for ax, ylabel, title in (
        (ax1, "seconds", "time to first index (rank 0 of 8)"),
        (ax2, "MiB", "peak memory growth, one epoch"),
    ):
        ax.set(xscale="log", yscale="log", xlabel="dataset size N", ylabel=ylabel, title=title)
    if all(r["permshard"]["peak_mib"] <= 0.01 for r in rows):
        ax2.annotate(
            "ShardedSampler: no measurable growth\n(ru_maxrss; drawn at 0.01 MiB)",
            (ns[0], 0.02),
            fontsize=8,
            color="C1",
        )
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(
        f"permshard vs torch DistributedSampler — {results['date']}, {results['machine']}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(sizes: list[int], as_json: bool, markdown_path: Optional[str], plot_path: Optional[str]) -> int:
    echo = (lambda *_: None) if as_json else print
    echo(HEADER)
    results = run(sizes, echo)
    if as_json:
        print(json.dumps(results, indent=1))
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(markdown(results))
        echo(f"wrote {markdown_path}")
    if plot_path:
        plot(results, plot_path)
        echo(f"wrote {plot_path}")
    return 0
