"""The exact proof (a bitmap over the samples, in Rust), and the namespace of every
proof and check: :mod:`~permshard.certificate` (what a proof established),
:mod:`~permshard.consensus` (all ranks agree on the configuration),
:mod:`~permshard.coverage` (the distributed proof) and :mod:`~permshard.guards` (datasets
and loaders split twice)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from . import _core
from .certificate import Certificate
from .config import ShardConfig
from .consensus import check_consensus, check_layout, dataset_fingerprint
from .coverage import verify_distributed
from .guards import check_loader, check_not_presharded, check_not_wrapped_by_accelerate

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
    "verify_partition",
]


def verify_partition(
    part: _core.Partition,
    config: ShardConfig,
    *,
    threads: int = 0,
    on_progress: Optional[Callable[[int], None]] = None,
) -> Certificate:
    """Runs the exact bitmap proof on ``part``; ``on_progress(done)`` is called about
    ten times a second from this thread while the proof runs in Rust.

    Args:
        part (Partition): the pass to prove.
        config (ShardConfig): its configuration (recorded in the certificate).
        threads (int, optional): worker threads; ``0`` uses every core.
        on_progress (callable, optional): called with the number of items checked.
    """
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
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
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
        seed, epoch, shuffle, drop_last (keyword-only): as for :class:`ShardedSampler`.
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
    config = ShardConfig(
        n=n, num_replicas=num_replicas, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=drop_last
    )
    return verify_partition(config.partition(), config, threads=threads, on_progress=on_progress)
