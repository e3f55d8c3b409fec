"""The distributed proofs: consensus, then either every rank's coverage fingerprint
summed across ranks, or (``exact=True``) every rank's own stream proven by the inverse and
the counts added up. O(1) memory per rank either way."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from . import _core
from ._core import ShardingError
from .certificate import Certificate, PendingCertificate
from .collectives import all_gather_u64, gather_by_rank
from .config import ShardConfig
from .consensus import FIX_RESUME, Agreed, check_consensus


def _merge(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int, int]:
    mask = 2**64 - 1
    return ((a[0] + b[0]) & mask, (a[1] + b[1]) & mask, (a[2] + b[2]) & mask, a[3] ^ b[3])


def verify_distributed(
    part: _core.Partition,
    config: ShardConfig,
    rank: int,
    dataset: Any = None,
    group: Any = None,
    *,
    exact: bool = False,
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
        exact (bool, optional): prove instead, exactly: each rank proves its own stream
            by the inverse (see :func:`permshard.verify` with ``rank=``) and its slice of
            the positions outside the pass, then one fixed-size all-gather adds the counts
            up (items, failures, the first counter-example). The consensus first makes
            every rank's order the same one. O(n / W) work per rank. Default: ``False``.

    Raises:
        ShardingError: naming the rank, the value that differs and the fix; with
            ``exact=True`` the first counter-example (rank, local position, sample), on
            every rank.
    """
    began = _agree(part, config, rank, dataset, group, "verify_distributed")
    if exact:
        return _exact(part, config, rank, group, began, background=False).wait()
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
        ranks=tuple(sorted(first_of_rank)),
    )


def _agree(
    part: _core.Partition, config: ShardConfig, rank: int, dataset: Any, group: Any, caller: str
) -> float:
    """The consensus every distributed proof starts with; returns when it began."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"{caller} needs torch.distributed to be initialized")
    began = time.perf_counter()
    check_consensus(config, rank, dataset, agreed=[Agreed("start", part.start, FIX_RESUME)], group=group)
    return began


def _exact(
    part: _core.Partition, config: ShardConfig, rank: int, group: Any, began: float, *, background: bool
) -> PendingCertificate:
    """Each process proves its rank's share by the inverse (in a thread when
    ``background``); ``wait()`` adds the shares up, one per rank (model-parallel peers
    prove the same one and must agree), and judges."""
    return PendingCertificate(
        lambda: _prove_share(part, config, rank),
        lambda mine: _judge_shares(part, config, rank, group, began, mine),
        background=background,
    )


def _prove_share(part: _core.Partition, config: ShardConfig, rank: int) -> list[int]:
    """This rank's share of the exact proof, as the fixed-size record the ranks gather:
    the stream this process yields, inverted by the order every rank agreed on."""
    agreed = config.partition(part.start)
    return _core.prove_ranks(part, rank, rank + 1, reference=agreed).words()


def _judge_shares(
    part: _core.Partition, config: ShardConfig, rank: int, group: Any, began: float, mine: list[int]
) -> Certificate:
    """Gathers every rank's share (:func:`_prove_share`); the core adds them up and judges."""
    by_rank = gather_by_rank(rank, mine, group, "proofs")
    shares = [_core.Share.from_words(row) for row in by_rank.values()]
    covered, padding_total, not_yielded = _core.judge(part, shares)
    consumed = min(part.start, config.n)
    return Certificate(
        config=config,
        lengths=(part.num_samples,) * config.num_replicas,
        covered=covered,
        padding=padding_total,
        dropped=not_yielded - consumed,
        seconds=time.perf_counter() - began,
        method="inverse",
        start=part.start,
        consumed=consumed,
        ranks=tuple(sorted(by_rank)),
    )


def verify_in_background(
    part: _core.Partition, config: ShardConfig, rank: int, dataset: Any = None, group: Any = None
) -> PendingCertificate:
    """The exact distributed proof of :func:`verify_distributed` (``exact=True``) with its
    heavy part in a background thread: the consensus now (a collective), this rank's share
    meanwhile, the gather and the judgement in :meth:`PendingCertificate.wait`.

    Args:
        part, config, rank, dataset, group: as for :func:`verify_distributed`.
    """
    began = _agree(part, config, rank, dataset, group, "verify_in_background")
    return _exact(part, config, rank, group, began, background=True)
