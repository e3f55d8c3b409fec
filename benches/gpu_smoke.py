"""The GPU path, checked end to end on a machine with CUDA (one GPU is enough):

1. Records and token windows through a DataLoader with ``pin_memory=True`` and no
   workers: each batch gathered straight into page-locked memory, copied to the GPU with
   ``non_blocking=True``, and equal there to numpy's gather of the same indices.
2. The same with two DataLoader workers started by spawn (the loader pins their batches).
3. A process group of one on NCCL: the sampler's consensus at its first batch, and the
   exact distributed proof of its epoch (``verify_distributed``) at n = 10^8.

Each check prints one line with its time; the first that fails ends the run with status 1.
``--cpu`` runs the same checks without CUDA (gloo, nothing pinned), as the test suite does.

Run: ``python benches/gpu_smoke.py [--cpu]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from permshard import ShardedBatchSampler, ShardedSampler
from permshard.data import MemmapRows, TokenWindows

WORLD, RANK, SEED, BATCH = 4, 1, 3, 256


@contextmanager
def check(name: str) -> Iterator[None]:
    """Prints ``ok`` or ``FAILED`` (then exits 1) for the block it runs, with its time."""
    began = time.perf_counter()
    try:
        yield
    except Exception as error:  # noqa: BLE001 (reported, then the run ends)
        print(f"FAILED  {name}: {type(error).__name__}: {error}", flush=True)
        sys.exit(1)
    print(f"ok      {name} ({time.perf_counter() - began:.2f} s)", flush=True)


def through_loader(dataset: Any, collate: Any, want: Any, device: torch.device, *, workers: int) -> int:
    """Reads one rank's epoch of ``dataset`` through a pinning DataLoader onto ``device``;
    every batch must equal ``want(indices)`` there. Returns the batches read."""
    pin = device.type == "cuda"
    expected = list(
        ShardedBatchSampler(ShardedSampler(dataset, WORLD, RANK, seed=SEED), BATCH, as_array=True)
    )
    loader = DataLoader(
        dataset,
        batch_sampler=ShardedBatchSampler(ShardedSampler(dataset, WORLD, RANK, seed=SEED), BATCH),
        collate_fn=collate,
        pin_memory=pin,
        num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    )
    read = 0
    for indices, batch in zip(expected, loader):
        if pin and not batch.is_pinned():
            raise AssertionError(f"batch {read} is not in page-locked memory")
        on_device = batch.to(device, non_blocking=True)
        reference = torch.from_numpy(want(indices)).to(device)
        if not torch.equal(on_device, reference):  # waits for the copy on the same stream
            raise AssertionError(f"batch {read} differs from numpy's gather of its indices")
        read += 1
    if read != len(expected):
        raise AssertionError(f"the loader gave {read} batches, the sampler planned {len(expected)}")
    return read


def data_path(folder: str, device: torch.device, workers: int) -> None:
    rows = np.random.default_rng(0).standard_normal((1 << 16, 16)).astype(np.float32)
    rows.tofile(os.path.join(folder, "rows.f32"))
    tokens = np.random.default_rng(1).integers(0, 50_000, 1 << 20, dtype=np.uint16)
    tokens.tofile(os.path.join(folder, "tokens.bin"))
    pin = device.type == "cuda"
    seq = 128
    path = f"{'pinned batch' if pin else 'batch'} -> {device.type}, "
    path += f"{workers} spawn workers" if workers else "no workers"
    with check(f"records -> {path}"):
        records = MemmapRows(os.path.join(folder, "rows.f32"), np.float32, (16,), pin_memory=pin)
        through_loader(records, MemmapRows.collate, lambda i: rows[i], device, workers=workers)
    with check(f"token windows -> {path}"):
        windows = TokenWindows(os.path.join(folder, "tokens.bin"), seq, pin_memory=pin)
        starts = np.arange(len(windows)) * seq

        def by_hand(i: np.ndarray) -> np.ndarray:
            return np.stack([tokens[s : s + seq + 1] for s in starts[i]]).astype(np.int64)

        through_loader(windows, TokenWindows.collate, by_hand, device, workers=workers)


def group_of_one(folder: str, backend: str) -> None:
    dist.init_process_group(backend, init_method=f"file://{folder}/group", world_size=1, rank=0)
    try:
        n = 10**8
        with check(f"{backend}: consensus at the first batch, n = {n:,}"):
            sampler = ShardedSampler(n, seed=SEED)
            first = next(iter(sampler))
            if not 0 <= first < n:
                raise AssertionError(f"index {first} is outside [0, {n})")
        with check(f"{backend}: exact distributed proof of the epoch, n = {n:,}"):
            certificate = sampler.verify_distributed(exact=True)
            if certificate.covered != n or certificate.lengths != (n,):
                raise AssertionError(f"the proof covered {certificate.covered} of {n}: {certificate}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="no CUDA: gloo, nothing pinned")
    args = parser.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        parser.error("CUDA is not available here: run with --cpu to check the same path on the CPU")
    device = torch.device("cpu" if args.cpu else "cuda")
    if device.type == "cuda":
        torch.cuda.set_device(0)
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        data_path(folder, device, workers=0)
        data_path(folder, device, workers=2)
        group_of_one(folder, "gloo" if args.cpu else "nccl")


if __name__ == "__main__":
    main()
