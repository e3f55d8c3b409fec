"""One rank's data path, end to end through a real DataLoader (pin_memory on), side by
side in one run: what users run today (DistributedSampler + per-item ``__getitem__``),
nanoGPT's ``get_batch`` (token windows), permshard with list batches and with array
batches, and the physical limit measured on the same file (numpy alone gathering as many
rows by random index from the memmap; a contiguous copy of the same bytes beside it).

    python benches/loader_end_to_end.py [--markdown docs/loader.md]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from permshard import ShardedBatchSampler, ShardedSampler
from permshard.data import MemmapRows, TokenWindows

WORLD, RANK = 8, 3
#: Pinned memory needs a CUDA driver; DataLoader(pin_memory=True) skips it without one.
PIN = torch.cuda.is_available()


class ItemRows(Dataset[torch.Tensor]):
    """What users write today: one memmap read and one tensor per item."""

    def __init__(self, path: str, dtype: Any, width: int) -> None:
        self.path, self.dtype, self.width = path, dtype, width
        self.n = os.path.getsize(path) // (np.dtype(dtype).itemsize * width)
        self.map: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.map is None:
            self.map = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.n, self.width))
        return torch.from_numpy(np.array(self.map[i]))

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, map=None)


class ItemWindows(ItemRows):
    """Per-item token windows of ``seq_len + 1`` tokens (nanoGPT-style files)."""

    def __init__(self, path: str, seq_len: int) -> None:
        super().__init__(path, np.uint16, 1)
        self.seq_len = seq_len
        self.windows = (self.n - 1) // seq_len

    def __len__(self) -> int:
        return self.windows

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.map is None:
            self.map = np.memmap(self.path, dtype=np.uint16, mode="r")
        start = i * self.seq_len
        return torch.from_numpy(self.map[start : start + self.seq_len + 1].astype(np.int64))


def rate(loader: Any, samples: int, *, limit_s: float) -> float:
    """Samples per second over the loader (stopped after ``limit_s`` seconds)."""
    began, seen = time.perf_counter(), 0
    for batch in loader:
        seen += len(batch)
        if time.perf_counter() - began > limit_s or seen >= samples:
            break
    return seen / (time.perf_counter() - began)


def physical(view: np.ndarray, batch: int, *, limit_s: float) -> tuple[float, float]:
    """Samples per second of numpy alone: random-index gathers, and contiguous copies."""
    rng = np.random.default_rng(0)
    began, seen = time.perf_counter(), 0
    while time.perf_counter() - began < limit_s:
        np.ascontiguousarray(view[np.sort(rng.integers(0, len(view), batch))])
        seen += batch
    gathered = seen / (time.perf_counter() - began)
    began, seen, start = time.perf_counter(), 0, 0
    while time.perf_counter() - began < limit_s:
        if start + batch > len(view):
            start = 0
        np.array(view[start : start + batch])
        seen, start = seen + batch, start + batch
    return gathered, seen / (time.perf_counter() - began)


def nanogpt_rate(tokens: np.ndarray, batch: int, *, limit_s: float) -> float:
    """Samples per second of nanoGPT's ``get_batch`` (random offsets into the memmap, one
    slice per sample, stacked), pinned, without the copy to the GPU."""
    rng = np.random.default_rng(2)
    began, seen = time.perf_counter(), 0
    while time.perf_counter() - began < limit_s:
        ix = rng.integers(0, len(tokens) - 1025, batch)
        x = torch.stack([torch.from_numpy(tokens[i : i + 1025].astype(np.int64)) for i in ix])
        seen += len(x.pin_memory() if PIN else x)
    return seen / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time per measurement")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    limit = args.seconds
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        # (b) records of 64 bytes: 16 float32, 4M rows (256 MiB, in the page cache once written).
        rows_path = os.path.join(folder, "rows.f32")
        np.random.default_rng(0).standard_normal((1 << 22, 16)).astype(np.float32).tofile(rows_path)
        # (a) token windows of 1,025 uint16 tokens: 2**27 tokens (256 MiB).
        tokens_path = os.path.join(folder, "tokens.bin")
        np.random.default_rng(1).integers(0, 50_000, 1 << 27, dtype=np.uint16).tofile(tokens_path)

        for kind, batch in [("64-byte records", 1024), ("token windows, 1,025 tokens", 32)]:
            if kind.startswith("64"):
                fast: Any = MemmapRows(rows_path, np.float32, (16,))
                slow: Any = ItemRows(rows_path, np.float32, 16)
                collate: Callable[..., Any] = MemmapRows.collate
                view = np.memmap(rows_path, dtype=np.float32, mode="r", shape=(1 << 22, 16))
            else:
                fast = TokenWindows(tokens_path, 1024)
                slow = ItemWindows(tokens_path, 1024)
                collate = TokenWindows.collate
                tokens = np.memmap(tokens_path, dtype=np.uint16, mode="r")
                view = np.lib.stride_tricks.as_strided(
                    tokens, shape=((len(tokens) - 1) // 1024, 1025), strides=(2048, 2)
                )
            n = len(fast)
            samples = n // WORLD
            gathered, contiguous = physical(view, batch, limit_s=limit)
            lines.append(
                f"| {kind} | numpy gather by random index (the limit) | - | {gathered:,.0f} | 1.00 |"
            )
            lines.append(
                f"| {kind} | numpy contiguous copy | - | {contiguous:,.0f} | {contiguous / gathered:.2f} |"
            )
            if not kind.startswith("64"):
                nano = nanogpt_rate(np.memmap(tokens_path, dtype=np.uint16, mode="r"), batch, limit_s=limit)
                lines.append(f"| {kind} | nanoGPT get_batch | - | {nano:,.0f} | {nano / gathered:.2f} |")
            for workers in (0, 2):
                extra: dict[str, Any] = {"num_workers": workers, "pin_memory": True}
                if workers:
                    extra["prefetch_factor"] = 4
                candidates = {
                    "DistributedSampler + per-item __getitem__": DataLoader(
                        slow, batch_size=batch, sampler=DistributedSampler(slow, WORLD, RANK, seed=1), **extra
                    ),
                    "permshard, list batches": DataLoader(
                        fast,
                        batch_sampler=ShardedBatchSampler(
                            ShardedSampler(fast, WORLD, RANK, seed=1), batch, as_array=False
                        ),
                        collate_fn=collate,
                        **extra,
                    ),
                    "permshard, array batches": DataLoader(
                        fast,
                        batch_sampler=ShardedBatchSampler(
                            ShardedSampler(fast, WORLD, RANK, seed=1), batch, as_array=True
                        ),
                        collate_fn=collate,
                        **extra,
                    ),
                }
                for name, loader in candidates.items():
                    r = rate(loader, samples, limit_s=limit)
                    lines.append(f"| {kind} | {name} | {workers} | {r:,.0f} | {r / gathered:.2f} |")
    table = "\n".join(
        [
            f"One rank ({RANK} of {WORLD}) through `DataLoader(pin_memory=True)` (pinning "
            f"{'on' if PIN else 'skipped: no CUDA driver here'}), files in the page cache, "
            f"{os.cpu_count()} cores, {limit:.0f} s per row; the last column is the share of the "
            "limit measured in the same run (numpy alone gathering rows by random index).",
            "",
            "| data | pipeline | workers | samples/s | of the limit |",
            "|---|---|---:|---:|---:|",
            *lines,
        ]
    )
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# The data path end to end\n\nRegenerate: `make bench-loader`.\n\n" + table + "\n")


if __name__ == "__main__":
    main()
