"""The data path against its limits, side by side in one run: every row a ratio to a
reference measured in the same run on the same machine.

1. Records: ``MemmapRows`` (2^21 rows of 64 B, rank 0 of 4, batches of 1,024, a plain
   DataLoader with ``num_workers=0``) against numpy's bare single-threaded ``np.take``
   of the same rows (the rank's epoch, batch by batch) from the same map.
2. Token windows: ``TokenWindows`` (50 M uint16 tokens, seq 1,024, batches of 32, the
   same loader) against a plain memcpy of as many bytes (out of cache) and nanoGPT's
   ``get_batch``.
3. Blends: a mixture's map at random positions (none repeated for 2^22) against
   consecutive ones, read in batches of the same size (64 and 1,024), on 3 sources of
   15,625 windows up-sampled to 10^6 positions, on a Megatron-style blend of 8 sources,
   10^8 positions, two with ~100 passes, and on one of 1/100 of its sizes (two sources
   in 10^4 passes); mix-v2 against mix-v1; a blend's ``__getitems__`` against its
   source's per item, and on 8 token files of the Megatron-style sizes against the same
   windows read from its sources.
4. perm-v2's ``take`` per index against perm-v1's at n = 10^9, on every SIMD level this
   CPU has (a fresh process per level, ``PERMSHARD_SIMD``).
5. One rank's share of the exact proof (n = 10^10 over 64 ranks) per item against a
   ``take`` per index of the same order, one thread and two.

Run: ``python benches/data_path.py [--only 1,3] [--seconds 2] [--markdown PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from side_by_side import alternated, blend_and_sources, interleaved
from torch.utils.data import DataLoader

import permshard
from permshard import Mixture, ShardedBatchSampler, ShardedSampler
from permshard.data import MemmapRows, MixedDataset, TokenWindows

WORLD, RANK = 4, 0
# A Megatron-style blend: 8 sources, two of them small and read in ~100 passes.
MEGATRON_SIZES = [30_000, 60_000, 2_000_000, 5_000_000, 8_000_000, 12_000_000, 20_000_000, 40_000_000]
MEGATRON_WEIGHTS = [0.03, 0.06, 0.05, 0.1, 0.12, 0.14, 0.2, 0.3]


def loader_step(dataset: Any, batch: int, collate: Any) -> Callable[[], int]:
    """One batch of one rank's epoch through a plain DataLoader (restarted when it ends),
    as a step returning its samples; the first batch is read here (the map opened, the
    first pages touched)."""
    sampler = ShardedBatchSampler(ShardedSampler(dataset, WORLD, RANK, seed=1, auto_epoch=True), batch)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=0)
    state: dict[str, Any] = {"it": iter(loader)}

    def step() -> int:
        try:
            return len(next(state["it"]))
        except StopIteration:
            state["it"] = iter(loader)
            return len(next(state["it"]))

    step()
    return step


def records(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    rows, width, batch = 1 << 21, 16, 1024
    path = os.path.join(folder, "rows.f32")
    np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32).tofile(path)
    plain = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, width)).view(np.ndarray)
    plain.sum()  # in the page cache and mapped, as the loader's map will be
    dataset = MemmapRows(path, np.float32, (width,))
    # The same rows as the loader reads: this rank's epoch, batch by batch (a few fixed
    # index sets would stay in the CPU's caches and flatter the reference).
    epoch = list(ShardedBatchSampler(ShardedSampler(dataset, WORLD, RANK, seed=1), batch, as_array=True))
    out = np.empty((batch, width), np.float32)
    turn = iter(range(1 << 62))

    def take() -> int:
        np.take(plain, epoch[next(turn) % len(epoch)], axis=0, out=out)
        return batch

    numpy_rate, ours = interleaved([take, loader_step(dataset, batch, MemmapRows.collate)], 2 * seconds)
    return [
        ("records (64 B), rows/s", numpy_rate, "numpy `np.take` of the same rows, one thread"),
        ("records (64 B), rows/s", ours, "MemmapRows through a DataLoader"),
    ]


def windows(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    tokens, seq, batch = 50_000_000, 1024, 32
    path = os.path.join(folder, "tokens.bin")
    np.random.default_rng(1).integers(0, 50_000, tokens, dtype=np.uint16).tofile(path)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    int(data.sum())
    batch_bytes = batch * (seq + 1) * 8
    source = np.ones(256 << 17, np.int64)  # 256 MiB: out of every cache
    chunks = len(source) // (batch * (seq + 1))
    dest = np.empty(batch * (seq + 1), np.int64)
    turn = iter(range(1 << 62))

    def memcpy() -> int:
        k = next(turn) % chunks
        np.copyto(dest, source[k * len(dest) : (k + 1) * len(dest)])
        return batch_bytes

    rng = np.random.default_rng(2)

    def get_batch() -> int:  # nanoGPT's, without the GPU copy
        ix = rng.integers(0, len(data) - seq - 1, batch)
        torch.stack([torch.from_numpy(data[i : i + seq + 1].astype(np.int64)) for i in ix])
        return batch

    loader = loader_step(TokenWindows(path, seq), batch, TokenWindows.collate)
    copy_rate, nano, ours = interleaved([memcpy, get_batch, loader], 3 * seconds)
    return [
        ("token windows, bytes/s", copy_rate, "memcpy of as many bytes"),
        ("token windows, bytes/s", ours * (seq + 1) * 8, "TokenWindows through a DataLoader"),
        ("token windows, samples/s", nano, "nanoGPT `get_batch`"),
        ("token windows, samples/s", ours, "TokenWindows through a DataLoader"),
    ]


def map_rates(m: Mixture, batch: int, seconds: float) -> tuple[float, float]:
    """Positions per second of a mixture's map in batches of ``batch``: consecutive
    positions (``take``) and random ones (``at_positions``, as a shuffled sampler asks)."""
    n = len(m)
    # 2^22 random positions, a batch at a time (a shuffled sampler repeats none in an
    # epoch: a few batches read again and again would find their passes kept).
    randoms = np.random.default_rng(batch).integers(0, n, 1 << 22).reshape(-1, batch)
    starts = iter(range(0, 1 << 62, 7919 * batch))
    turn = iter(range(1 << 62))

    def consecutive() -> int:
        s = next(starts) % (n - batch)
        m.take(s, s + batch)
        return batch

    def shuffled() -> int:
        m.at_positions(randoms[next(turn) % len(randoms)])
        return batch

    consecutive_rate, shuffled_rate = interleaved([consecutive, shuffled], 2 * seconds)
    return consecutive_rate, shuffled_rate


def blends(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    out: list[tuple[str, float, str]] = []
    cases = {
        "3 sources of 15,625, 10^6 positions": ([15_625] * 3, [1.0, 1.0, 1.0], 10**6),
        "Megatron-style blend, 8 sources, 10^8 positions": (MEGATRON_SIZES, MEGATRON_WEIGHTS, 10**8),
        "4 sources of 80,000-400,000 read ~100 times, 10^8 positions": (
            [80_000, 120_000, 200_000, 400_000],
            [0.12, 0.14, 0.2, 0.3],
            10**8,
        ),
        "Megatron-style sizes / 100, 10^8 positions": (
            [size // 100 for size in MEGATRON_SIZES],
            MEGATRON_WEIGHTS,
            10**8,
        ),
    }
    # Per batch size: random positions against consecutive ones read as many at a time (a
    # call's own cost alike), mix-v2 against mix-v1.
    for name, (sizes, weights, n) in cases.items():
        for batch in (64, 1024):
            group = f"mixture map, {name}, batches of {batch:,}, positions/s"
            for algorithm in ("mix-v1", "mix-v2"):
                m = Mixture(sizes, weights, num_samples=n, algorithm=algorithm)
                consecutive, shuffled = map_rates(m, batch, seconds)
                out.append((group, consecutive, f"{algorithm}, consecutive positions"))
                out.append((group, shuffled, f"{algorithm}, random positions"))
    # A blend's __getitems__ against its source's, on up-sampled token windows.
    path = os.path.join(folder, "blend.bin")
    np.random.default_rng(3).integers(0, 50_000, 15_625 * 64 + 1, dtype=np.uint16).tofile(path)
    source = TokenWindows(path, 64)
    blend = MixedDataset([source, source, source], [1.0, 1.0, 1.0], num_samples=10**6)
    rows = [np.random.default_rng(k).integers(0, len(source), 64) for k in range(256)]
    positions = [np.random.default_rng(k).integers(0, len(blend), 64) for k in range(256)]
    alone, mixed = alternated([(source.__getitems__, rows), (blend.__getitems__, positions)], seconds)
    out.append(("blend of 3 up-sampled sources, items/s", alone, "the source's `__getitems__`"))
    out.append(
        ("blend of 3 up-sampled sources, items/s", mixed, "the blend's `__getitems__`, random positions")
    )
    out += megatron_style_blend(folder, seconds)
    return out


def megatron_style_blend(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    """A blend's ``__getitems__`` over 8 token files of the Megatron-style sizes (1/100 of
    the windows) against the same windows read straight from its sources."""
    rng = np.random.default_rng(4)
    parts = []
    for k, windows in enumerate(MEGATRON_SIZES):
        path = os.path.join(folder, f"part{k}.bin")
        rng.integers(0, 50_000, windows // 100 * 64 + 1, dtype=np.uint16).tofile(path)
        parts.append(TokenWindows(path, 64))
    blend = MixedDataset(parts, MEGATRON_WEIGHTS, num_samples=10**8)
    positions = [np.random.default_rng(k).integers(0, len(blend), 64) for k in range(256)]
    mixed, direct = blend_and_sources(blend, positions, seconds)
    group = "blend of 8 token files, Megatron-style weights, items/s"
    return [
        (group, direct, "the same windows from its sources, one `__getitems__`"),
        (group, mixed, "the blend's `__getitems__`, random positions"),
    ]


_TAKE = """
import json, time
from permshard import Permutation, simd_level
out = {"level": simd_level()}
for algorithm in ("perm-v1", "perm-v2"):
    p = Permutation(10**9, seed=1, algorithm=algorithm)
    best = 0.0
    for k in range(200):  # 2^14 indices a call: the output stays in cache (no fresh pages)
        began = time.perf_counter()
        p.take(k << 14, (k + 1) << 14)
        best = max(best, (1 << 14) / (time.perf_counter() - began))
    out[algorithm] = best
print(json.dumps(out))
"""


def rounds(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    out = []
    for level in ("avx512", "avx2", "scalar"):
        env = dict(os.environ, PERMSHARD_SIMD=level)
        done = subprocess.run([sys.executable, "-c", _TAKE], env=env, capture_output=True, text=True)
        if done.returncode:
            continue  # this CPU lacks the level
        rates = json.loads(done.stdout)
        out.append((f"take at n = 10^9, {level}, indices/s", rates["perm-v1"], "perm-v1"))
        out.append((f"take at n = 10^9, {level}, indices/s", rates["perm-v2"], "perm-v2"))
    return out


def proofs(folder: str, seconds: float) -> list[tuple[str, float, str]]:
    n, w, rank = 10**10, 64, 5
    p = permshard.Permutation(n, seed=0)
    take = 0.0
    for k in range(200):  # as in section 4: in cache, best of many
        began = time.perf_counter()
        p.take(k << 14, (k + 1) << 14)
        take = max(take, (1 << 14) / (time.perf_counter() - began))
    out = [("exact-proof share, n = 10^10 over 64, items/s", take, "`take` of the same order, one thread")]
    for threads in (1, 2):
        rate = 0.0
        for _ in range(2):  # best of two, as `take` is best of many (a share takes seconds)
            began = time.perf_counter()
            cert = permshard.verify(n, w, rank=rank, threads=threads)
            rate = max(rate, cert.lengths[0] / (time.perf_counter() - began))
        out.append(
            ("exact-proof share, n = 10^10 over 64, items/s", rate, f"one rank's share, {threads} thread(s)")
        )
    return out


SECTIONS = {1: records, 2: windows, 3: blends, 4: rounds, 5: proofs}


def table(rows: list[tuple[str, float, str]]) -> str:
    """Each group's first row is its reference (1.00)."""
    lines = ["| measure | pipeline | per second | ratio to the first of its group |", "|---|---|---:|---:|"]
    reference: dict[str, float] = {}
    for group, rate, name in rows:
        base = reference.setdefault(group, rate)
        lines.append(f"| {group} | {name} | {rate:,.0f} | {rate / base:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="1,2,3,4,5", help="sections to run, e.g. 1,3")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        for k in map(int, args.only.split(",")):
            rows += SECTIONS[k](folder, args.seconds)
    text = table(rows)
    print(text)
    header = (
        f"One run on {os.cpu_count()} cores (SIMD: {permshard.simd_level()}), files in the page "
        f"cache, rank {RANK} of {WORLD}; each group's first row is its reference, measured in the "
        "same run."
    )
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(
                f"# The data path: measured\n\n`make bench-data` (one run, side by side).\n\n{header}\n\n{text}\n"
            )


if __name__ == "__main__":
    main()
