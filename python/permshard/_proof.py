"""The proofs: the exact proof of a pass (by the inverse, or a bitmap over the samples, in
Rust), the distributed proof every sampler's ``verify_distributed`` and
``verify_in_background`` take (consensus, then every rank's share, gathered once and
judged in the core), and :class:`ProvenStream`, the proofs every sampler offers of the
stream it yields."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, TypeVar, Union

import torch.distributed as dist

from . import _core
from ._config import EpochConfig, ShardConfig, as_int
from ._distributed import FIX_RESUME, Agreed, check_consensus, gather_by_rank
from ._report import Certificate, PendingCertificate

if TYPE_CHECKING:  # the proofs every pass answers, declared once in the core's stub
    from ._core import BudgetShare, ProvablePass, Share

    #: A pass of either dealing (a partition, a token budget's), as the proofs take it.
    AnyPass = ProvablePass[Union[Share, BudgetShare]]


_T = TypeVar("_T")


#: The exact methods: by the inverse (O(1) memory, splits across ranks) or a bitmap.
METHODS = ("inverse", "bitmap")


def _run(work: Callable[[_core.Progress], _T], on_progress: Optional[Callable[[int], None]]) -> _T:
    """``work(progress)`` in Rust; with ``on_progress``, on a thread while this one reports
    ``progress.done`` about ten times a second."""
    progress = _core.Progress()
    if on_progress is None:
        return work(progress)
    result: list[_T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work(progress))
        except BaseException as e:  # handed back to the calling thread
            failure.append(e)

    worker = threading.Thread(target=run, name="permshard-verify")
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
        on_progress(progress.done)
    on_progress(progress.done)
    if failure:
        raise failure[0]
    return result[0]


def verify_pass(
    pass_: AnyPass,
    config: EpochConfig,
    *,
    method: str = "inverse",
    rank: Optional[int] = None,
    threads: int = 0,
    on_progress: Optional[Callable[[int], None]] = None,
) -> Certificate:
    """Runs an exact proof on ``pass_``; ``on_progress(done)`` is called about ten times a
    second from this thread while the proof runs in Rust.

    Args:
        pass_ (Partition or BudgetPass): the pass to prove.
        config (EpochConfig): its configuration (recorded in the certificate).
        method (str, optional): ``"inverse"`` (every item's sample must invert to the
            position it was dealt from: O(1) memory) or ``"bitmap"`` (``n / 8`` bytes; not
            for token-budget plans).
        rank (int, optional): prove only this rank's stream and its 1/W slice of the
            positions outside the pass (``"inverse"``, partitions only); every rank's share
            passing proves the epoch. Default: every rank.
        threads (int, optional): worker threads; ``0`` uses every core.
        on_progress (callable, optional): called with the number of items checked.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    pass_.check_method(method)
    began = time.perf_counter()
    if rank is None:
        verdict = _run(lambda progress: pass_.verify(method, threads, progress), on_progress)
        return Certificate.of(config, verdict, method, range(config.num_replicas), began)
    rank = as_int("rank", rank)
    if method != "inverse":
        raise ValueError("a single rank's share is proven by the inverse: pass method='inverse'")
    if not 0 <= rank < config.num_replicas:
        raise ValueError(f"rank must be in [0, {config.num_replicas}), got {rank}")
    if not isinstance(pass_, _core.Partition):
        raise ValueError("a token-budget pass is proven whole: leave rank=None")
    share = _run(lambda progress: pass_.prove_share(rank, threads, progress), on_progress)
    verdict = pass_.judge_alone(share)  # the epoch is proven once every share is
    return Certificate.of(config, verdict, method, (rank,), began)


def verify(
    n: int,
    num_replicas: int,
    *,
    algorithm: str = _core.ALGORITHM,
    method: str = "inverse",
    rank: Optional[int] = None,
    threads: int = 0,
    on_progress: Optional[Callable[[int], None]] = None,
    **fields: Any,
) -> Certificate:
    r"""Proves, exactly, that ``num_replicas`` ShardedSamplers over ``n`` samples yield
    every sample once (plus declared padding, minus declared drops), dealt round-robin
    (:class:`ShardedSampler`, :class:`ShardedBatchSampler`) or in accelerate's steps
    (:class:`StepBatchSampler`, ``dealing="step"``).

    By the inverse (default): for every item a rank yields, the order's inverse of its
    sample must be the position it was dealt from, and that position must deal back to the
    same rank and local index; the positions outside the pass are checked the same way.
    A map with such an inverse is injective, so the epoch is a bijection: O(1) memory at
    any ``n``, every core, the GIL released. ``rank=r`` proves one rank's share only, so a
    cluster proves an epoch with each machine doing its part. ``method="bitmap"`` streams
    every rank's indices through ``n`` bits instead (an independent check).

    Args:
        n (int): dataset length.
        num_replicas (int): number of ranks.
        algorithm (str, optional): the keyed permutation of the shuffle, ``"perm-v2"``
            (default) or ``"perm-v1"``.
        method (str, optional): ``"inverse"`` or ``"bitmap"``. Default: ``"inverse"``.
        rank (int, optional): prove this rank's share only. Default: every rank.
        threads (int, optional): worker threads; ``0`` uses every core. Default: ``0``.
        on_progress (callable, optional): called with the number of items checked so far.
        **fields: the pass's other fields, keyword-only, as :class:`ShardConfig` takes
            them: ``seed``, ``epoch``, ``shuffle``, ``drop_last``, ``block_size`` and
            ``window_blocks`` as for :class:`ShardedSampler` (``0`` block fields: no
            blocks); ``dealing`` (``"round-robin"``, the default, or ``"step"``);
            ``batch_size`` (items per batch of a batch sampler: ``>= 1`` for ``"step"``,
            ``0`` for an item sampler); ``drop_last_batch``; ``exclude`` (sample ids never
            to read).

    Returns:
        Certificate: lengths, coverage, padding, drops, the method, the ranks proven and
        the time taken.

    Raises:
        ShardingError: with the first counter-example found.

    Example::

        >>> print(permshard.verify(1000, 8, seed=1))  # doctest: +ELLIPSIS
        PROVEN (inverse, perm-v2, round-robin): n=1,000 over 8 ranks x 125 samples ...
    """
    known = sorted(
        name
        for config in (EpochConfig, ShardConfig)
        for name in inspect.signature(config.__init__).parameters
        if name not in ("self", "n", "num_replicas", "permutation", "epoch")
    ) + ["epoch"]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise TypeError(
            f"verify() got unexpected keyword argument(s) {unknown}: the fields of a pass are "
            f"{known} (with algorithm=, method=, rank=, threads=, on_progress=)"
        )
    config = ShardConfig(n, num_replicas, permutation=algorithm, **fields)
    return verify_pass(
        config.partition(), config, method=method, rank=rank, threads=threads, on_progress=on_progress
    )


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


class ProofTarget(NamedTuple):
    """What a sampler proves: the pass it yields (a partition, or a token-budget pass; the
    same proof methods either way), its configuration, this process's rank, the dataset the
    consensus fingerprints, and, for the distributed proof, what the ranks must share beside
    the configuration and the pass as that configuration deals it (``None``: a partition's
    start, and the partition of ``config``)."""

    pass_: AnyPass
    config: EpochConfig
    rank: int
    dataset: Any = None
    agreed: Optional[Sequence[Agreed]] = None
    reference: Optional[AnyPass] = None


class ProvenStream:
    """Proofs of the pass a sampler is running (from its resume point, if any), dealt the
    way the sampler deals it: a subclass says what it yields with :meth:`_proof_target`.

    Example::

        >>> batches = StepBatchSampler(ShardedSampler(1000, num_replicas=4, rank=0), 8)
        >>> batches.verify().dealing
        'step'
    """

    def _proof_target(self) -> ProofTarget:
        """The pass this sampler yields, dealt as it deals it, its configuration, this rank
        and the dataset the consensus fingerprints."""
        raise NotImplementedError

    def verify(self, method: str = "inverse") -> Certificate:
        """Exact proof of the stream this sampler yields in the pass being run: every item's
        sample, inverted by the order, is the position the dealing gives that item, and
        the positions outside the pass are checked once; see :func:`permshard.verify`.

        Args:
            method (str, optional): ``"inverse"`` (O(1) memory) or ``"bitmap"`` (not for
                token-budget plans, proven by the inverse only).
        """
        target = self._proof_target()
        return verify_pass(target.pass_, target.config, method=method)

    def verify_distributed(self, group: Any = None, *, exact: bool = True) -> Certificate:
        """Consensus, then a proof of the pass being run across the ranks of ``group``:
        every rank proving its own stream by the inverse (the exact proof, every sampler's
        default), or with ``exact=False`` a coverage fingerprint; see
        :func:`prove_pass`. A collective: every process of the group
        must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).
            exact (bool, optional): the exact proof (``True``, the default) or the
                fingerprint (``False``; not for token-budget plans).
        """
        return self._distributed(group, exact=exact, background=False).wait()

    def verify_in_background(self, group: Any = None) -> PendingCertificate:
        """The exact distributed proof of :meth:`verify_distributed` (``exact=True``) with
        this rank's share proven in a background thread while training goes on: the
        consensus now, the one small collective when every rank calls
        :meth:`PendingCertificate.wait` (at the same point, e.g. the epoch's end). A
        collective: every process of the group must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).

        Example::

            >>> pending = sampler.verify_in_background()
            >>> for batch in loader: pass
            >>> print(pending.wait())
            PROVEN (inverse, perm-v2, round-robin): n=1,000 over 1 ranks ...
        """
        return self._distributed(group, exact=True, background=True)

    def _distributed(self, group: Any, *, exact: bool, background: bool) -> PendingCertificate:
        """The distributed proof (consensus now; the rest in ``wait()``)."""
        target = self._proof_target()
        return prove_pass(
            target.pass_,
            target.config,
            target.rank,
            target.dataset,
            group,
            exact=exact,
            background=background,
            agreed=target.agreed,
            reference=target.reference,
        )
