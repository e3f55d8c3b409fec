"""The exact proofs (by the inverse, or a bitmap over the samples, in Rust), and the namespace of every
proof and check: :mod:`~permshard._certificate` (what a proof established),
:mod:`~permshard._consensus` (all ranks agree on the configuration),
:mod:`~permshard._coverage` (the distributed proof) and :mod:`~permshard._guards` (datasets
and loaders split twice)."""

from __future__ import annotations

import inspect
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from . import _core
from ._certificate import Certificate
from ._config import EpochConfig, ShardConfig
from ._consensus import check_consensus, check_layout, dataset_fingerprint
from ._coverage import verify_distributed
from ._guards import check_loader, check_not_presharded, check_not_wrapped_by_accelerate
from ._validation import as_int

if TYPE_CHECKING:
    from ._coverage import AnyPass

__all__ = [
    "Certificate",
    "check_consensus",
    "check_layout",
    "check_loader",
    "check_not_presharded",
    "check_not_wrapped_by_accelerate",
    "dataset_fingerprint",
    "verify",
    "verify_distributed",
    "verify_pass",
]

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
