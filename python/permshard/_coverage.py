"""The distributed proofs: consensus, then every rank's share of a proof, gathered once
per rank and judged in the core. :func:`prove_across_ranks` is the one path every
sampler's ``verify_distributed`` and ``verify_in_background`` take; the shares are a
coverage fingerprint, or (exact) each rank's own stream proven by the inverse."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import torch.distributed as dist

from . import _core
from ._certificate import Certificate, PendingCertificate
from ._collectives import gather_by_rank
from ._config import EpochConfig, ShardConfig
from ._consensus import FIX_RESUME, Agreed, check_consensus

if TYPE_CHECKING:  # the proofs every pass answers, declared once in the core's stub
    from ._core import BudgetShare, ProvablePass, Share

    #: A pass of either dealing (a partition, a token budget's), as the proofs take it.
    AnyPass = ProvablePass[Union[Share, BudgetShare]]


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
    pass_: AnyPass,
    config: EpochConfig,
    rank: int,
    dataset: Any = None,
    group: Any = None,
    *,
    exact: bool = False,
    background: bool = False,
    agreed: Optional[Sequence[Agreed]] = None,
    reference: Optional[AnyPass] = None,
) -> PendingCertificate:
    """The distributed proof of ``pass_`` (from its resume point, if any), dealt as
    ``config`` deals it. Each rank's share is either its coverage fingerprint (count, sum,
    keyed-hash sum, XOR of what it yields, plus a 1/W slice of the samples outside the pass
    and of ``[0, n)``: O((n + start) / W) time; partitions only), or with ``exact`` its
    part of the exact proof (a partition: its own stream, inverted by the order every rank
    agreed on, and its slice of the positions outside the pass, O(n / W) work; a token
    budget: every W-th window's plans) checked against ``reference``. O(1) memory per rank
    (O(window) for a token budget).

    Args:
        pass_ (Partition or BudgetPass): the pass this process iterates.
        config: its configuration.
        rank: this process's sampler (data-parallel) rank.
        dataset: its dataset, fingerprinted by the consensus.
        group: the process group (default: the world).
        exact (bool, optional): the exact proof instead of the fingerprint.
        background (bool, optional): prove in a background thread (exact only).
        agreed (sequence of Agreed, optional): what the ranks must share beside the
            configuration. Default: a partition's start.
        reference (optional): the pass as ``config`` deals it, which the exact proof checks
            ``pass_`` against (a process on another order fails). Default: a partition's
            ``config.partition(pass_.start)``.

    Raises:
        ShardingError: naming the rank, the value that differs and the fix; with
            ``exact=True`` the first counter-example (rank, local position, sample), on
            every rank.
    """
    method = "inverse" if exact else "fingerprint"
    pass_.check_method(method)  # before any collective: every rank refuses alike
    if isinstance(pass_, _core.Partition):  # a partition's defaults (0.4's calls give none)
        agreed = [Agreed("start", pass_.start, FIX_RESUME)] if agreed is None else agreed
        if reference is None and isinstance(config, ShardConfig):
            reference = config.partition(pass_.start)

    def prove() -> list[int]:
        if exact:
            return pass_.prove_share(rank, reference=reference).words()
        return pass_.coverage_share(rank).words()

    def judge(rows: list[list[int]]) -> _core.Verdict:
        return pass_.judge(rows) if exact else pass_.judge_coverage(rows)

    return prove_across_ranks(
        config,
        rank,
        prove=prove,
        judge=judge,
        method=method,
        agreed=agreed or (),
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
