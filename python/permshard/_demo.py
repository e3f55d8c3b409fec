"""``permshard demo``: a generated token file, 4 real ranks, one epoch, the proofs, and a
resume on 3 ranks — all on this machine (gloo on 127.0.0.1)."""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

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


def main(world: int = 4, resume_world: int = 3) -> int:
    """Runs the demo; returns 0 when every check passed."""
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
