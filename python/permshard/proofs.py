"""Proofs that sharding is right: exact (bitmap), distributed (consensus and coverage),
and the checks that catch a dataset split twice."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch.distributed as dist
from torch.utils.data import DistributedSampler, Subset

from . import _core
from ._core import ShardingError
from ._validation import as_u64
from .collectives import all_gather_u64
from .config import Configured, ShardConfig

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

_FIX_DOUBLE_SPLIT = "shard once: pass the full dataset, or use num_replicas=1 on a pre-sharded dataset"


@dataclass(frozen=True)
class Certificate(Configured):
    """What a proof established.

    Attributes:
        config: the configuration proven; its fields (``algorithm``, ``n``,
            ``num_replicas``, ``seed``, ``epoch``, ``shuffle``, ``drop_last``) read as
            attributes too.
        lengths: items per rank.
        covered: distinct samples yielded, all ranks together.
        padding: items that repeat a sample to make ranks even.
        dropped: samples of the epoch that no rank yields (``drop_last``).
        seconds: time the proof took.
        method: ``"bitmap"`` (exact) or ``"fingerprint"`` (distributed).
        start: global positions consumed before the proven pass (a resume point; ``0``
            for a whole epoch). The proof covers positions ``[start, ...)``.
        consumed: samples consumed before the pass (``min(start, n)``), which the pass
            must not yield again.
    """

    config: ShardConfig
    lengths: tuple[int, ...]
    covered: int
    padding: int
    dropped: int
    seconds: float
    method: str = "bitmap"
    start: int = 0
    consumed: int = 0

    def __str__(self) -> str:
        resumed = (
            f", the pass resumed at position {self.start:,} ({self.consumed:,} consumed before)"
            if self.start
            else ""
        )
        return (
            f"PROVEN ({self.method}, {self.algorithm}): n={self.n:,} over {self.num_replicas} "
            f"ranks x {self.lengths[0]:,} samples (seed={self.seed}, epoch={self.epoch}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}{resumed}): every sample exactly "
            f"once -- covered {self.covered:,}, padding {self.padding:,}, dropped "
            f"{self.dropped:,} [{self.seconds:.2f} s]"
        )


def verify_partition(
    part: _core.Partition,
    config: ShardConfig,
    *,
    threads: int = 0,
    on_progress: Optional[Callable[[int], None]] = None,
) -> Certificate:
    """Runs the exact bitmap proof on ``part``; ``on_progress(done)`` is called about
    ten times a second from this thread while the proof runs in Rust."""
    began = time.perf_counter()
    progress = _core.Progress()
    result: list[tuple[int, int, int]] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(_core.verify(part, threads, progress))
        except BaseException as e:  # handed back to the calling thread
            failure.append(e)

    if on_progress is None:
        run()
    else:
        worker = threading.Thread(target=run, name="permshard-verify")
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            on_progress(progress.done)
        on_progress(progress.done)
    if failure:
        raise failure[0]
    covered, padding, not_yielded = result[0]
    consumed = min(part.start, config.n)
    return Certificate(
        config=config,
        lengths=(part.num_samples,) * config.num_replicas,
        covered=covered,
        padding=padding,
        dropped=not_yielded - consumed,
        seconds=time.perf_counter() - began,
        start=part.start,
        consumed=consumed,
    )


def verify(
    n: int,
    num_replicas: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    *,
    threads: int = 0,
    on_progress: Optional[Callable[[int], None]] = None,
) -> Certificate:
    r"""Proves, exactly, that ``num_replicas`` ShardedSamplers over ``n`` samples yield
    every sample once (plus declared padding, minus declared drops).

    Every rank's indices are streamed through a bitmap of ``n`` bits (``n / 8`` bytes) in
    Rust, on all cores, with the GIL released.

    Args:
        n (int): dataset length.
        num_replicas (int): number of ranks.
        seed, epoch, shuffle, drop_last: as for :class:`ShardedSampler`.
        threads (int, optional): worker threads; ``0`` uses every core. Default: ``0``.
        on_progress (callable, optional): called with the number of items checked so far.

    Returns:
        Certificate: lengths, coverage, padding, drops and the time taken.

    Raises:
        ShardingError: with the first counter-example found.

    Example::

        >>> print(permshard.verify(1000, 8, seed=1))  # doctest: +ELLIPSIS
        PROVEN (bitmap, perm-v1): n=1,000 over 8 ranks x 125 samples ...
    """
    config = ShardConfig(n, num_replicas, seed, epoch, shuffle, drop_last)
    return verify_partition(config.partition(), config, threads=threads, on_progress=on_progress)


# -- the double split ------------------------------------------------------------------------


def _arithmetic_step(indices: Sequence[int]) -> Optional[tuple[int, int]]:
    """``(first, step)`` when ``indices`` is an arithmetic progression, else None."""
    if isinstance(indices, range):
        return (indices.start, indices.step) if len(indices) > 1 else None
    if len(indices) < 2:
        return None
    first, step = int(indices[0]), int(indices[1]) - int(indices[0])
    probe = range(0, len(indices), max(1, len(indices) // 64))
    if (
        all(int(indices[i]) == first + i * step for i in probe)
        and int(indices[-1]) == first + (len(indices) - 1) * step
    ):
        return first, step
    return None


def _subset_progression(dataset: Any) -> Optional[tuple[int, int]]:
    """``(first, step)`` of a Subset whose indices cover ``range(first, N, step)`` of its
    full dataset with ``first < step`` (what slicing per rank by hand gives), else None."""
    if not isinstance(dataset, Subset):
        return None
    progression = _arithmetic_step(dataset.indices)
    if progression is None:
        return None
    first, step = progression
    full = len(dataset.dataset)  # type: ignore[arg-type]
    if step > 1 and 0 <= first < step and len(dataset) == len(range(first, full, step)):
        return first, step
    return None


def check_not_presharded(dataset: Any, num_replicas: int, *, cross_rank: bool) -> None:
    """Warns when ``dataset`` looks like a per-rank shard (``Subset(full, range(r, N, W))``)
    handed to a sampler that splits it again across ``num_replicas``.

    One process cannot tell a per-rank shard from a legitimate every-other-sample subset
    (the same on every rank). With ``cross_rank`` (a process group and consensus) the
    first iteration decides from every rank's evidence, so nothing is said here; without
    it, a warning.
    """
    if num_replicas < 2 or cross_rank:
        return
    progression = _subset_progression(dataset)
    if progression is None:
        return
    first, step = progression
    full = len(dataset.dataset)
    warnings.warn(
        f"the dataset is a Subset with indices range({first}, {full}, {step}): if each rank "
        f"holds its own such slice, the sampler splits it again across {num_replicas} replicas "
        f"and each rank sees 1/{step * num_replicas} of the data ({_FIX_DOUBLE_SPLIT}). If the "
        "same subset is on every rank, this is fine; with torch.distributed initialized the "
        "first iteration checks it across ranks",
        UserWarning,
        stacklevel=3,
    )


def check_not_wrapped_by_accelerate(num_replicas: int) -> None:
    """Raises ShardingError when a sampler that already splits across ``num_replicas``
    is being iterated by accelerate's ``BatchSamplerShard``, which splits again (what
    ``accelerator.prepare`` does to every map-style loader). Called at the start of each
    pass; looks a few frames up the call stack. This is the one place that knows
    accelerate's class name; tests fail loudly if accelerate renames it."""
    if num_replicas < 2:
        return
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(16):
        if frame is None:
            return
        owner: Any = frame.f_locals.get("self")
        if type(owner).__name__ == "BatchSamplerShard" and getattr(owner, "num_processes", 1) > 1:
            raise ShardingError(
                f"accelerate's BatchSamplerShard (num_processes={owner.num_processes}) is "
                f"splitting a permshard sampler that already splits across {num_replicas} "
                f"replicas: each rank would see 1/{owner.num_processes * num_replicas} of the "
                "data. Use permshard.accelerate.prepare_data_loader(accelerator, loader) instead "
                "of accelerator.prepare(loader)"
            )
        frame = frame.f_back
    return


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


# -- distributed: consensus and coverage --------------------------------------------------


def _digest(value: Any) -> int:
    """A 64-bit digest of ``repr(value)`` (plain data only), for fixed-size collectives."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=8).digest(), "little")


_FIXES = {
    "n": f"the ranks see datasets of different lengths; if each rank's dataset is a "
    f"per-rank slice, the data is split twice: {_FIX_DOUBLE_SPLIT}",
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
    f"dataset is a per-rank slice, the data is split twice: {_FIX_DOUBLE_SPLIT}",
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
    progression = _subset_progression(dataset)
    first, step = progression if progression is not None else (0, 0)
    record.update(subset_first=first, subset_step=step)
    return [int(record[key]) for key in _RECORD]


def _double_split(everyone: list[dict[str, int]], world: int) -> Optional[str]:
    """The message for processes whose datasets are per-rank slices of one dataset
    (``Subset(full, range(rank, N, step))`` on each), or None."""
    steps = {c["subset_step"] for c in everyone}
    firsts = {c["subset_first"] for c in everyone}
    if len(steps) != 1 or len(firsts) < 2:
        return None
    step = steps.pop()
    if step < 2 or max(firsts) >= step:
        return None
    return (
        f"every process holds a different per-rank shard of the dataset (a Subset with "
        f"indices range(first, N, {step}), first = {sorted(firsts)}) and the sampler splits it "
        f"again across {everyone[0]['num_replicas']} replicas: each rank would see "
        f"1/{step * everyone[0]['num_replicas']} of the data. {_FIX_DOUBLE_SPLIT}"
    )


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
    world = len(everyone)
    double = _double_split(everyone, world)
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


def _merge(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int, int]:
    mask = 2**64 - 1
    return ((a[0] + b[0]) & mask, (a[1] + b[1]) & mask, (a[2] + b[2]) & mask, a[3] ^ b[3])


def verify_distributed(
    part: _core.Partition, config: ShardConfig, rank: int, dataset: Any = None, group: Any = None
) -> Certificate:
    """Consensus, then coverage of the pass ``part`` (from its resume point, if any): each
    rank fingerprints what it yields (count, sum, keyed-hash sum, XOR), plus a 1/W slice of
    the samples consumed before the pass, of those dropped and of ``[0, n)``; the sums
    across ranks must match. O((n + start) / W) time, O(1) memory per rank.

    Args:
        part: the pass this process iterates (``config.partition(start)``).
        config: its configuration.
        rank: this process's sampler (data-parallel) rank.
        dataset: its dataset, fingerprinted by the consensus.
        group: the process group (default: the world).

    Raises:
        ShardingError: naming the rank, the value that differs and the fix.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("verify_distributed needs torch.distributed to be initialized")
    began = time.perf_counter()
    check_consensus(config, rank, dataset, start=part.start, group=group)
    yielded, padding, consumed, dropped, reference = part.coverage_share(rank)
    mine = [rank, part.num_samples, *yielded, *padding, *consumed, *dropped, *reference]
    totals = [(0, 0, 0, 0)] * 5
    first_of_rank: dict[int, tuple[int, list[int]]] = {}
    for proc, row in enumerate(all_gather_u64(mine, group)):
        r, length = row[0], row[1]
        if length != part.num_samples:
            raise ShardingError(
                f"rank {r} yields {length} samples in this pass, rank {rank} "
                f"{part.num_samples}; DDP would hang on the last step. Use the same dataset "
                "and num_replicas everywhere"
            )
        if r in first_of_rank:  # a model-parallel peer: must read exactly the same stream
            peer, peer_row = first_of_rank[r]
            if row[2:] != peer_row[2:]:
                raise ShardingError(
                    f"processes {peer} and {proc} share sampler rank {r} but yield different "
                    "streams (their fingerprints differ): model-parallel peers must read "
                    "identical data. Check that both run the same sampler class and dataset"
                )
            continue
        first_of_rank[r] = (proc, row)
        columns = [row[2 + 4 * i : 6 + 4 * i] for i in range(5)]
        totals = [_merge(t, c) for t, c in zip(totals, columns)]
    total_yielded, total_padding, total_consumed, total_dropped, total_reference = totals
    if _merge(_merge(total_yielded, total_consumed), total_dropped) != total_reference:
        raise ShardingError(
            f"coverage fingerprint mismatch: the ranks together yield {total_yielded[0]:,} "
            f"samples (+{total_consumed[0]:,} consumed before the pass, +{total_dropped[0]:,} "
            f"dropped), but not each of [0, {config.n:,}) exactly once: some sample is "
            "repeated and another missing although every rank announced the same "
            "configuration. Check that every rank runs the same permshard build and sampler class"
        )
    return Certificate(
        config=config,
        lengths=(part.num_samples,) * config.num_replicas,
        covered=total_yielded[0],
        padding=total_padding[0],
        dropped=total_dropped[0],
        seconds=time.perf_counter() - began,
        method="fingerprint",
        start=part.start,
        consumed=total_consumed[0],
    )


# -- DataLoaders ------------------------------------------------------------------------------


def _unwrap(obj: Any) -> Iterator[Any]:
    """The chain of samplers under a DataLoader or batch sampler, outermost first."""
    seen = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        yield obj
        nxt = None
        for attr in ("batch_sampler", "sampler"):
            nxt = getattr(obj, attr, None)
            if nxt is not None and nxt is not obj:
                break
        obj = nxt


@contextlib.contextmanager
def _preserved(objs: Sequence[Any]) -> Iterator[None]:
    """Restores the attributes of ``objs`` afterwards: counting a loader's indices must not
    advance its samplers."""
    saved = [(o, dict(vars(o))) for o in objs if hasattr(o, "__dict__")]
    try:
        yield
    finally:
        for o, state in saved:
            vars(o).clear()
            vars(o).update(state)


def check_loader(dataloader: DataLoader[Any], total: Optional[int] = None) -> int:
    """Raises ShardingError unless this rank's DataLoader draws its fair share.

    Walks the loader's batch sampler and samplers (also accelerate's ``BatchSamplerShard``
    and ``DataLoaderShard`` around them): a sampler that already splits by rank inside a
    wrapper that splits again is the 1/N² bug. Then counts the indices this rank will
    draw this epoch (index lists only, no data is loaded) and compares with the closed
    form ``ceil(total / world_size)``.

    Args:
        dataloader: the DataLoader to check, as the training loop will iterate it.
        total (int, optional): the full dataset length. Default: the length of the
            sampler's dataset.

    Returns:
        int: the number of indices this rank draws per epoch.
    """
    chain = list(_unwrap(dataloader))
    splitters = []
    for obj in chain:
        processes = getattr(obj, "num_processes", None)
        if isinstance(processes, int) and processes > 1 and hasattr(obj, "process_index"):
            splitters.append((f"{type(obj).__name__}(num_processes={processes})", processes))
        elif isinstance(obj, DistributedSampler) and obj.num_replicas > 1:
            splitters.append((f"{type(obj).__name__}(num_replicas={obj.num_replicas})", obj.num_replicas))
    if len(splitters) > 1:
        names = " around ".join(name for name, _ in splitters)
        share = math.prod(w for _, w in splitters)
        raise ShardingError(
            f"the DataLoader splits the data twice ({names}): each rank sees 1/{share} of it. "
            f"{_FIX_DOUBLE_SPLIT}; with accelerate use permshard.accelerate.prepare_data_loader "
            "instead of accelerator.prepare for this loader"
        )
    samplers = [o for o in chain if isinstance(o, DistributedSampler)]
    world = splitters[0][1] if splitters else 1
    if not splitters and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
    if total is None:
        base = samplers[0].dataset if samplers else getattr(dataloader, "dataset", None)
        total = len(base) if not isinstance(base, int) else base  # type: ignore[arg-type]
    total = as_u64("total", total, minimum=1)
    batches = getattr(dataloader, "batch_sampler", None)
    source = batches if batches is not None else getattr(dataloader, "sampler", dataloader)
    with _preserved(chain):
        drawn = 0
        for item in source:
            drawn += len(item) if isinstance(item, (list, tuple)) else 1
    low = total // world
    batch = getattr(dataloader, "batch_size", None) or 1
    high = -(-total // world) + batch  # even_batches may top up the last batch
    if not low <= drawn <= high:
        raise ShardingError(
            f"this rank draws {drawn} samples per epoch but its share of {total} samples over "
            f"{world} ranks is {low}..{-(-total // world)}: the data is split "
            f"{'more than once' if drawn < low else 'too little'}. {_FIX_DOUBLE_SPLIT}"
        )
    return drawn
