"""Consensus: every process of a pass agrees on its configuration, its resume point and
its dataset (one fixed-size all-gather), and sampler ranks are laid out evenly."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections import Counter
from typing import Any, Optional

from torch.utils.data import Subset

from ._core import ShardingError
from .collectives import all_gather_u64
from .config import ShardConfig
from .guards import FIX_DOUBLE_SPLIT, double_split, subset_progression


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``repr(value)`` depends on the value only: numbers, strings, bytes, and
    shallow lists, tuples and dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if depth < 2 and isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if depth < 2 and isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """A cheap identity of ``dataset``: its type, length and, when cheap, a content hash
    (Subset indices, range bounds, a sequence's first and last items, an HF fingerprint)."""
    if isinstance(dataset, int):
        return {"type": "int", "len": dataset, "content": None}
    kind = f"{type(dataset).__module__}.{type(dataset).__qualname__}"
    content: Optional[str] = None
    h = hashlib.blake2b(digest_size=8)
    with contextlib.suppress(Exception):
        if isinstance(dataset, Subset):
            indices = dataset.indices
            if isinstance(indices, range):
                h.update(repr(indices).encode())
            elif len(indices) <= 10_000_000:
                h.update(repr(list(map(int, indices))).encode())
            content = h.hexdigest()
        elif isinstance(dataset, range):
            content = repr(dataset)
        elif isinstance(dataset, (list, tuple)):
            probe = list(dataset[:4]) + list(dataset[-4:])
            # Only plain values: a repr with an address or random synthetic tensors would
            # make identical (or harmlessly different) datasets look like a split.
            if all(_plain(item) for item in probe):
                h.update(repr(probe).encode())
                content = h.hexdigest()
        elif isinstance(getattr(dataset, "_fingerprint", None), str):
            content = dataset._fingerprint
    return {"type": kind, "len": len(dataset), "content": content}


def _digest(value: Any) -> int:
    """A 64-bit digest of ``repr(value)`` (plain data only), for fixed-size collectives."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=8).digest(), "little")


_FIXES = {
    "n": f"the ranks see datasets of different lengths; if each rank's dataset is a "
    f"per-rank slice, the data is split twice: {FIX_DOUBLE_SPLIT}",
    "seed": "pass the same seed=... to ShardedSampler on every rank",
    "epoch": "call sampler.set_epoch(epoch) on every rank before each epoch",
    "num_replicas": "every rank must use the same num_replicas (the world size)",
    "shuffle": "pass the same shuffle=... on every rank",
    "drop_last": "pass the same drop_last=... on every rank",
    "block_size": "pass the same block_size=... on every rank",
    "window_blocks": "pass the same window_blocks=... on every rank",
    "start": "load the same state dict on every rank (saved by any one rank) before iterating",
    "algorithm": "install the same permshard version on every rank",
    "dataset": f"the ranks hold different datasets of the same length; if each rank's "
    f"dataset is a per-rank slice, the data is split twice: {FIX_DOUBLE_SPLIT}",
}

_CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(ShardConfig))
#: What every process of a pass must agree on, in the order consensus checks it: the
#: configuration (algorithm first), the pass's resume point and the dataset.
_AGREED = ("algorithm", *(k for k in _CONFIG_KEYS if k != "algorithm"), "start", "dataset")
#: Sent along for the messages: the sampler rank and a Subset's progression (first, step).
_RECORD = _AGREED + ("rank", "subset_first", "subset_step")


def _consensus_record(config: ShardConfig, rank: int, dataset: Any, start: int) -> list[int]:
    """This process's consensus record: one int64 per key of ``_RECORD``."""
    record = dict(config.as_dict(), start=start, rank=rank)
    record["algorithm"] = _digest(config.algorithm)
    record["dataset"] = _digest(dataset_fingerprint(dataset if dataset is not None else config.n))
    progression = subset_progression(dataset)
    first, step = progression if progression is not None else (0, 0)
    record.update(subset_first=first, subset_step=step)
    return [int(record[key]) for key in _RECORD]


def check_consensus(
    config: ShardConfig, rank: int, dataset: Any = None, *, start: int = 0, group: Any = None
) -> None:
    """Gathers every process's configuration (fixed-size int64 tensors, any backend) and
    raises ShardingError naming the first process and value that differ, and the fix.

    Args:
        config: this process's configuration.
        rank: its sampler (data-parallel) rank.
        dataset: its dataset, fingerprinted (default: ``config.n`` only).
        start: the first global position of the pass being checked (a resume point).
        group: the process group (default: the world).
    """
    rows = all_gather_u64(_consensus_record(config, rank, dataset, start), group)
    everyone = [dict(zip(_RECORD, row)) for row in rows]
    double = double_split(everyone)
    if double is not None:
        raise ShardingError(double)
    reference = everyone[0]
    for key in _AGREED:
        for proc, other in enumerate(everyone):
            if other[key] != reference[key]:
                shown = {"algorithm": "<digest>", "dataset": "<fingerprint>"}
                mine = shown.get(key, repr(_as_python(key, reference[key])))
                theirs = shown.get(key, repr(_as_python(key, other[key])))
                raise ShardingError(
                    f"ranks disagree on {key}: rank {reference['rank']} has {key}={mine}, "
                    f"rank {other['rank']} (process {proc}) has {key}={theirs}. "
                    f"Fix: {_FIXES[key]}"
                )
    check_layout([c["rank"] for c in everyone], reference["num_replicas"])


def check_layout(ranks: list[int], num_replicas: int) -> None:
    """Each sampler rank ``0..num_replicas-1`` must appear equally often among the
    processes: once each in pure data parallelism, ``world / num_replicas`` times when
    model-parallel peers (tensor, pipeline, context) share a data-parallel rank."""
    world = len(ranks)
    counts = Counter(ranks)
    if world % num_replicas or any(counts[r] != world // num_replicas for r in range(num_replicas)):
        per_process = ", ".join(f"process {p}: rank {r}" for p, r in enumerate(ranks))
        raise ShardingError(
            f"the {world} processes of the group use sampler ranks {sorted(ranks)} with "
            f"num_replicas={num_replicas} ({per_process}): every rank 0..{num_replicas - 1} "
            f"must appear equally often ({world} / {num_replicas} processes each). In pure data "
            "parallelism leave num_replicas and rank unset; with model parallelism pass the "
            "data-parallel size and rank (or device_mesh=..., mesh_dim=...)"
        )


def _as_python(key: str, value: int) -> Any:
    return bool(value) if key in ("shuffle", "drop_last") else value
