"""permshard run on this machine, for a newcomer to watch: ``permshard demo`` (a generated
token file, 4 real ranks, one epoch, the proofs, and a resume on 3 ranks; gloo on
127.0.0.1) and ``permshard bench`` (ShardedSampler and DistributedSampler side by side, in
one run)."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ._batch_sampler import ShardedBatchSampler
from ._proof import verify
from ._sampler import ShardedSampler
from .data import TokenWindows, WindowBatch
from .launch import launch

SEQ_LEN = 128
BATCH = 32
SEED = 2024


class _IndexedWindows(Dataset[tuple[int, torch.Tensor]]):
    """TokenWindows that also hands back each window's index, so the demo can count."""

    def __init__(self, windows: TokenWindows) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor]:
        return i, self.windows[i]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[int, torch.Tensor]]:
        batch = self.windows.__getitems__(indices)
        assert isinstance(batch, WindowBatch)  # windows, not documents
        return list(zip(indices, batch))


def _collate(items: list[tuple[int, torch.Tensor]]) -> tuple[list[int], torch.Tensor]:
    return [i for i, _ in items], torch.stack([w for _, w in items])


def make_corpus(folder: str, files: int = 4, tokens_per_file: int = 600_000) -> list[str]:
    """Synthetic token files (uint16, headerless, as nanoGPT writes them)."""
    rng = np.random.default_rng(SEED)
    paths = []
    for f in range(files):
        path = os.path.join(folder, f"train_{f:03d}.bin")
        rng.integers(0, 50_257, size=tokens_per_file + 977 * f, dtype=np.uint16).tofile(path)
        paths.append(path)
    return paths


def _rank_main(rank: int, world: int, paths: list[str], task: dict[str, Any]) -> dict[str, Any]:
    """One rank: one pass (or part of one) of the DataLoader, then the proofs asked for."""
    windows = TokenWindows(paths, seq_len=SEQ_LEN)
    ds = _IndexedWindows(windows)
    sampler = ShardedSampler(ds, seed=SEED)  # num_replicas / rank from the process group
    sampler.set_epoch(task["epoch"])
    if task.get("state") is not None:
        sampler.load_state_dict(task["state"])
    padding = len(sampler.plan().padding_positions)  # of this pass, before it starts
    loader = DataLoader(ds, batch_sampler=ShardedBatchSampler(sampler, BATCH), collate_fn=_collate)
    began = time.perf_counter()
    seen: list[int] = []
    tokens = 0
    state = None
    taken = 0  # the loop's own count of the items this rank received in this pass
    for step, (indices, batch) in enumerate(loader):
        assert batch.shape[1] == SEQ_LEN + 1
        seen.extend(indices)
        tokens += batch.numel()
        taken += len(indices)
        if task.get("stop_after") == step + 1:
            # The epoch's global count once every rank took as many: the sampler's rule.
            state = sampler.state_dict(consumed_samples=sampler.consumed_after(taken))
            break
    seconds = time.perf_counter() - began
    cert = sampler.verify_distributed(exact=False) if task.get("prove") else None
    # Exact, at any scale: each rank proves its own stream by the inverse, the counts added up.
    exact = sampler.verify_distributed(exact=True) if task.get("prove") else None
    return {
        "seen": seen,
        "tokens": tokens,
        "seconds": seconds,
        "state": state,
        "cert": str(cert) if cert else None,
        "exact": str(exact) if exact else None,
        "padding": padding,
    }


def _exactly_once(n: int, streams: list[list[int]], padding: int) -> tuple[bool, str]:
    counts = Counter(i for s in streams for i in s)
    missing = n - len(counts)
    extra = sum(c - 1 for c in counts.values())
    ok = missing == 0 and extra == padding
    return (
        ok,
        f"{len(counts):,} of {n:,} windows seen, {missing} missing, {extra} repeated (declared padding: {padding})",
    )


def demo(world: int = 4, resume_world: int = 3) -> int:
    """``permshard demo``: returns 0 when every check passed."""
    print(f"permshard demo: {world} ranks (gloo on 127.0.0.1), then a resume on {resume_world}")
    ok = True
    with tempfile.TemporaryDirectory(prefix="permshard-demo-") as folder:
        paths = make_corpus(folder)
        windows = TokenWindows(paths, seq_len=SEQ_LEN)
        n = len(windows)
        print(
            f"corpus: {len(paths)} token files, {sum(windows.sizes):,} tokens -> {n:,} windows of {SEQ_LEN + 1} tokens\n"
        )

        print(
            f"epoch 0: one pass of DataLoader(TokenWindows, batch_sampler=ShardedBatchSampler(ShardedSampler, {BATCH}))"
        )
        results = launch(_rank_main, world, paths, {"epoch": 0, "prove": True})
        print(f"{'rank':>6} {'windows':>9} {'tokens':>11} {'seconds':>8}")
        for r, res in enumerate(results):
            print(f"{r:>6} {len(res['seen']):>9,} {res['tokens']:>11,} {res['seconds']:>8.2f}")
        good, text = _exactly_once(n, [r["seen"] for r in results], results[0]["padding"])
        ok &= good
        print(f"exactly once: {'OK' if good else 'FAILED'} -- {text}")
        print(f"distributed proof: {results[0]['cert']}")
        print(f"exact, by ranks:   {results[0]['exact']}")
        exact = verify(n, world, seed=SEED, epoch=0, method="bitmap")
        print(f"exact, bitmap:     {exact}\n")

        steps = 40
        print(f"epoch 1: interrupted after {steps} steps on {world} ranks, resumed on {resume_world} ranks")
        first = launch(_rank_main, world, paths, {"epoch": 1, "stop_after": steps})
        state = first[0]["state"]
        print(f"  saved state (from rank 0): {state}")
        second = launch(_rank_main, resume_world, paths, {"epoch": 1, "state": state})
        plan_padding = second[0]["padding"]
        good, text = _exactly_once(n, [r["seen"] for r in first + second], plan_padding)
        ok &= good
        per_rank = ", ".join(f"{len(r['seen']):,}" for r in second)
        print(f"  resumed ranks read {per_rank} windows")
        print(f"exactly once across both runs: {'OK' if good else 'FAILED'} -- {text}")
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


# -- permshard bench: each measurement in a fresh Python process, so that peak memory is the
# sampler's own: time to the first index (build the sampler, iter, next), the cost per index
# of a whole epoch on one rank (that first step included), and the peak RSS growth.

BENCH_WORLD = 8  # ranks the dataset is split over; rank 0 is measured


def measure(kind: str, n: int) -> dict[str, float]:
    """One measurement, in this process."""
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.perf_counter()
    if kind == "permshard":
        sampler: Any = ShardedSampler(n, num_replicas=BENCH_WORLD, rank=0)
    else:
        sampler = DistributedSampler(range(n), num_replicas=BENCH_WORLD, rank=0)  # type: ignore[arg-type]
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
    code = f"import json; from permshard._demo import measure; print(json.dumps(measure({kind!r}, {n})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}  # type: ignore[dict-item]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def bench_rows(sizes: list[int], echo: Any = print) -> dict[str, Any]:
    """Measures both samplers at every size; returns machine-readable results."""
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
        "numpy": np.__version__,
        "permshard": __version__,
        "world": BENCH_WORLD,
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


def bench(sizes: list[int], as_json: bool, markdown_path: Optional[str], plot_path: Optional[str]) -> int:
    """``permshard bench``: prints (or writes) the table; returns 0."""
    echo = (lambda *_: None) if as_json else print
    echo(HEADER)
    results = bench_rows(sizes, echo)
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
