"""The distributed proofs: consensus, then every rank's share of a proof, gathered once
per rank and judged in the core. :func:`prove_across_ranks` is the one path every
sampler's ``verify_distributed`` and ``verify_in_background`` take; the shares are a
coverage fingerprint, or (exact) each rank's own stream proven by the inverse."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Callable

import torch.distributed as dist

from . import _core
from ._certificate import Certificate, PendingCertificate
from ._collectives import gather_by_rank
from ._config import EpochConfig, ShardConfig
from ._consensus import FIX_RESUME, Agreed, check_consensus


def prove_across_ranks(
    config: EpochConfig,
    rank: int,
    *,
    prove: Callable[[], list[int]],
    judge: Callable[[list[list[int]]], _core.Verdict],
    method: str,
    agreed: Sequence[Agreed] = (),
    dataset: Any = None,
    group: Any = None,
    background: bool = False,
    caller: str = "verify_distributed",
) -> PendingCertificate:
    """Consensus now (a collective), then this rank's share: ``prove()``, the fixed-size
    record of words the core's share gives (in a thread when ``background``). The pending
    certificate's ``wait()`` gathers every rank's record once (model-parallel peers must
    send the same one) and ``judge`` turns them, in rank order, into the core's verdict.

    Args:
        config (EpochConfig): the configuration every rank must agree on.
        rank (int): this process's sampler (data-parallel) rank.
        prove (callable): this rank's share, as words.
        judge (callable): every rank's words, in rank order, to the core's verdict.
        method (str): the certificate's method.
        agreed (sequence of Agreed): what the ranks must share beside the configuration.
        dataset: the dataset the consensus fingerprints.
        group (ProcessGroup, optional): the process group (default: the world).
        background (bool, optional): prove in a background thread. Default: ``False``.
        caller (str, optional): the public method, for the error message.

    Raises:
        ValueError: torch.distributed is not initialized.
        ShardingError: on every rank, from the consensus or the judgement.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"{caller} needs torch.distributed to be initialized")
    began = time.perf_counter()
    check_consensus(config, rank, dataset, agreed=agreed, group=group)

    def finish(words: list[int]) -> Certificate:
        rows = gather_by_rank(rank, words, group, "proofs")
        return Certificate.of(config, judge([rows[r] for r in sorted(rows)]), method, rows, began)

    return PendingCertificate(prove, finish, background=background)


def prove_pass(
    part: _core.Partition,
    config: ShardConfig,
    rank: int,
    dataset: Any = None,
    group: Any = None,
    *,
    exact: bool = False,
    background: bool = False,
) -> PendingCertificate:
    """The distributed proof of the pass ``part`` (from its resume point, if any), dealt
    as ``config`` deals it. Each rank's share is either its coverage fingerprint (count,
    sum, keyed-hash sum, XOR of what it yields, plus a 1/W slice of the samples outside
    the pass and of ``[0, n)``: O((n + start) / W) time), or with ``exact`` its own stream
    proven by the inverse of the order every rank agreed on, and its slice of the
    positions outside the pass (O(n / W) work). O(1) memory per rank either way.

    Args:
        part: the pass this process iterates.
        config: its configuration.
        rank: this process's sampler (data-parallel) rank.
        dataset: its dataset, fingerprinted by the consensus.
        group: the process group (default: the world).
        exact (bool, optional): the exact proof instead of the fingerprint.
        background (bool, optional): prove in a background thread (exact only).

    Raises:
        ShardingError: naming the rank, the value that differs and the fix; with
            ``exact=True`` the first counter-example (rank, local position, sample), on
            every rank.
    """

    def prove() -> list[int]:
        if exact:  # against the order every rank agreed on: a rank on another one fails
            agreed_order = config.partition(part.start)
            return _core.prove_ranks(part, rank, rank + 1, reference=agreed_order).words()
        return part.coverage_share(rank).words()

    def judge(rows: list[list[int]]) -> _core.Verdict:
        if exact:
            return _core.judge(part, [_core.Share.from_words(r) for r in rows])
        return _core.judge_coverage(part, [_core.CoverageShare.from_words(r) for r in rows])

    return prove_across_ranks(
        config,
        rank,
        prove=prove,
        judge=judge,
        method="inverse" if exact else "fingerprint",
        agreed=[Agreed("start", part.start, FIX_RESUME)],
        dataset=dataset,
        group=group,
        background=background,
        caller="verify_in_background" if background else "verify_distributed",
    )


def verify_distributed(*args: Any, exact: bool = False, **kwargs: Any) -> Certificate:
    """Consensus, then the proof of a pass across the ranks of a group: a coverage
    fingerprint, or with ``exact=True`` every rank proving its own stream by the inverse.
    A collective: every process of the group must call it.

    Args:
        args, kwargs: ``part, config, rank, dataset=None, group=None``, as for
            :func:`prove_pass`.
        exact (bool, optional): the exact proof instead of the fingerprint.
    """
    return prove_pass(*args, exact=exact, **kwargs).wait()


def verify_in_background(*args: Any, **kwargs: Any) -> PendingCertificate:
    """The exact distributed proof of :func:`verify_distributed` (``exact=True``) with its
    heavy part in a background thread: the consensus now (a collective), this rank's share
    meanwhile, the gather and the judgement in :meth:`PendingCertificate.wait`.

    Args:
        args, kwargs: ``part, config, rank, dataset=None, group=None``, as for
            :func:`prove_pass`.
    """
    return prove_pass(*args, exact=True, background=True, **kwargs)
