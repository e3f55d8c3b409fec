"""``Certificate``: what a proof of sharding established."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

from . import _core
from ._config import Configured, EpochConfig


@dataclass(frozen=True)
class Certificate(Configured):
    """What a proof established.

    Attributes:
        config: the configuration proven (a :class:`ShardConfig` or a
            :class:`BudgetConfig`); its fields (``algorithm``, ``n``,
            ``num_replicas``, ``seed``, ``epoch``, ``shuffle``, ``drop_last``,
            ``dealing``) read as attributes too. ``dealing`` names how the proven stream
            was dealt: ``"round-robin"``, ``"step"``, or a token-budget plan's id.
        lengths: items (samples) per rank.
        covered: distinct samples yielded, all ranks together.
        padding: items that repeat a sample to make ranks even.
        dropped: samples of the epoch that no rank yields (``drop_last``).
        seconds: time the proof took.
        method: how it was proven: ``"inverse"`` (exact, every item inverted back to
            its position), ``"bitmap"`` (exact, a bit per sample) or ``"fingerprint"``
            (distributed sums and a keyed hash).
        start: global positions consumed before the proven pass (a resume point; ``0``
            for a whole epoch). The proof covers positions ``[start, ...)``.
        consumed: samples consumed before the pass (``min(start, n)`` for round-robin
            orders), which the pass must not yield again.
        batches: batches per rank, the same on every rank, for samplers that plan batches
            (``None`` otherwise).
        ranks: the ranks whose streams were proven (all of them, unless a single rank's
            share was: then ``covered`` and ``padding`` are that rank's; empty for a
            certificate built by hand).

    Example::

        >>> cert = permshard.verify(1000, 8, seed=1)
        >>> cert.covered, cert.padding, cert.dropped, cert.method, cert.algorithm, cert.dealing
        (1000, 0, 0, 'inverse', 'perm-v2', 'round-robin')
    """

    config: EpochConfig
    lengths: tuple[int, ...]
    covered: int
    padding: int
    dropped: int
    seconds: float
    method: str = "bitmap"
    start: int = 0
    consumed: int = 0
    batches: Optional[int] = None
    ranks: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, config: EpochConfig, verdict: _core.Verdict, method: str, ranks: Iterable[int], began: float
    ) -> Certificate:
        """The certificate of a proof's verdict (every proof's certificate is made here).

        Args:
            config (EpochConfig): the configuration proven.
            verdict (Verdict): what the core's proof established.
            method (str): ``"inverse"``, ``"bitmap"`` or ``"fingerprint"``.
            ranks (iterable of int): the ranks whose streams were proven.
            began (float): ``time.perf_counter()`` when the proof began.
        """
        return cls(
            config=config,
            lengths=tuple(verdict.lengths),
            covered=verdict.covered,
            padding=verdict.padding,
            dropped=verdict.dropped,
            seconds=time.perf_counter() - began,
            method=method,
            start=verdict.start,
            consumed=verdict.consumed,
            batches=verdict.batches,
            ranks=tuple(sorted(ranks)),
        )

    def _kept(self) -> str:
        """``"kept "`` and the excluded count when the epoch excludes samples, else ``""``."""
        excluded = getattr(self.config, "exclude", None)
        return "" if excluded is None else f"kept (excluded {len(excluded):,} never) "

    def __str__(self) -> str:
        resumed = (
            f", the pass resumed at position {self.start:,} ({self.consumed:,} consumed before)"
            if self.start or self.consumed
            else ""
        )
        low, high = min(self.lengths), max(self.lengths)
        each = f"{low:,} samples" if low == high else f"{low:,}-{high:,} samples"
        if self.batches is not None:
            each = f"{self.batches:,} batches ({each})"
        how = f"{self.method}, {self.algorithm}, {self.dealing}"
        if self.ranks and len(self.ranks) < self.num_replicas:
            shown = ", ".join(map(str, self.ranks))
            return (
                f"PROVEN ({how}): the share of rank {shown} of n={self.n:,} "
                f"over {self.num_replicas} ranks x {each} (seed={self.seed}, epoch={self.epoch}): its "
                f"stream of {self.lengths[0]:,} items ({self.covered:,} samples, {self.padding:,} "
                f"padding) and its slice of the positions outside the pass invert exactly; the "
                f"epoch is proven when every rank's share is [{self.seconds:.2f} s]"
            )
        return (
            f"PROVEN ({how}): n={self.n:,} over {self.num_replicas} "
            f"ranks x {each} (seed={self.seed}, epoch={self.epoch}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}{resumed}): every "
            f"{self._kept()}sample exactly once -- covered {self.covered:,}, padding {self.padding:,}, dropped "
            f"{self.dropped:,} [{self.seconds:.2f} s]"
        )


class PendingCertificate:
    """An exact distributed proof running in the background: its heavy part (every item
    of this rank's share inverted, in the core, GIL released) in a thread while training
    goes on; :meth:`wait` joins it and runs the proof's one small collective, then judges.

    Like any collective, :meth:`wait` must be called by every process of the group at the
    same point of its program (e.g. at the end of the epoch), from the thread that runs
    the other collectives: the background thread itself never communicates.

    Args:
        prove: the local part, run in the thread; returns what ``finish`` needs.
        finish: the collective and the judgement, run by :meth:`wait`.
        background (bool, optional): ``False`` runs ``prove`` now, in the caller's
            thread (the synchronous proofs). Default: ``True``.

    Example::

        >>> pending = sampler.verify_in_background()  # consensus now, the proof meanwhile
        >>> for batch in loader: pass
        >>> cert = pending.wait()  # every rank, at the same point
    """

    def __init__(
        self, prove: Callable[[], Any], finish: Callable[[Any], Certificate], *, background: bool = True
    ) -> None:
        self._finish = finish
        self._outcome: tuple[bool, Any] = (False, None)

        def run() -> None:
            try:
                self._outcome = (True, prove())
            except BaseException as error:  # re-raised by wait(), in the caller's thread
                self._outcome = (False, error)

        self._thread = threading.Thread(target=run, name="permshard-proof", daemon=True)
        if background:
            self._thread.start()
        else:
            self._outcome = (True, prove())

    def done(self) -> bool:
        """Whether the local part has finished (:meth:`wait` then only communicates)."""
        return not self._thread.is_alive()

    def wait(self) -> Certificate:
        """Joins the local part, runs the collective and returns the certificate.

        Raises:
            ShardingError: as the synchronous proof does, on every rank.
        """
        if self._thread.ident is not None:
            self._thread.join()
        finished, value = self._outcome
        if not finished:
            raise value
        return self._finish(value)
