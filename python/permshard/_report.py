"""What permshard reports about an epoch: its plan before it runs (``ShardPlan``: the exact
split, readable by people and programs; a token-budget epoch's is ``BudgetPlan``, beside its
sampler) and its certificate after a proof (``Certificate``: what the proof established;
``PendingCertificate``: one proven in the background)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

from . import _core
from ._config import EpochConfig, EpochFields, ShardConfig, as_positive


@dataclass(frozen=True)
class ShardPlan(EpochFields):
    """What every rank yields in one epoch, in closed form.

    Attributes:
        config: the configuration planned; its fields (``n``, ``num_replicas``, ``seed``,
            ``epoch``, ``shuffle``, ``drop_last``, ``algorithm``) read as attributes too.
        rank: the rank this plan was made on.
        start: global positions consumed before this pass (non-zero after a resume).
        num_samples: items every rank yields.
        total_size: ``num_samples * num_replicas``.
        lengths: items per rank (all equal: that is what keeps DDP in step).
        padding_per_rank: how many of each rank's items are padding.
        padding_positions: global positions ``>= n`` dealt out to make ranks even.
        padding_samples: the samples those positions repeat.
        dropped_samples: samples no rank yields this epoch (``drop_last``).

    Example::

        >>> plan = ShardedSampler(1000, num_replicas=3, rank=0).plan()
        >>> plan.num_samples, plan.lengths, plan.padding_positions
        (334, (334, 334, 334), (1000, 1001))
    """

    config: ShardConfig
    rank: int
    start: int
    num_samples: int
    total_size: int
    lengths: tuple[int, ...]
    padding_per_rank: tuple[int, ...]
    padding_positions: tuple[int, ...]
    padding_samples: tuple[int, ...]
    dropped_samples: tuple[int, ...]

    def steps(self, batch_size: int, drop_last: bool = False) -> int:
        """Batches per rank for ``batch_size``.

        Args:
            batch_size (int): per-rank batch size.
            drop_last (bool, optional): drop a last partial batch. Default: ``False``.
        """
        dealt = self.config.replace(
            batch_size=as_positive("batch_size", batch_size), drop_last_batch=bool(drop_last)
        )
        return dealt.partition(self.start).num_batches

    def table(self, batch_size: Optional[int] = None) -> str:
        """The per-rank table of ``__str__``, with a ``steps`` column for ``batch_size``.

        Args:
            batch_size (int, optional): adds a ``steps`` column for this batch size.
        """
        head = f"{'rank':>6} {'samples':>14} {'padding':>8}"
        if batch_size:
            head += f" {'steps':>10}"
        rows = [head]
        for r, (length, pad) in enumerate(zip(self.lengths, self.padding_per_rank)):
            row = f"{r:>6} {length:>14,} {pad:>8}"
            if batch_size:
                row += f" {self.steps(batch_size):>10,}"
            rows.append(row)
        return "\n".join(rows)

    def text(self, batch_size: Optional[int] = None, shown: int = 10) -> str:
        """The plan for people: the configuration, the table of :meth:`table`, the totals,
        the first ``shown`` padding positions and dropped samples, and the exclusions.

        Args:
            batch_size (int, optional): also list each rank's batches.
            shown (int, optional): padding positions and dropped samples listed. Default: 10.
        """
        lines = [
            f"ShardPlan: n={self.n:,} num_replicas={self.num_replicas} epoch={self.epoch} "
            f"seed={self.seed} shuffle={self.shuffle} drop_last={self.drop_last}"
            + (f" resumed at position {self.start:,}" if self.start else ""),
            self.table(batch_size),
            f"total_size={self.total_size:,}  padding={len(self.padding_positions)}  "
            f"dropped={len(self.dropped_samples)}",
        ]
        for p, s in list(zip(self.padding_positions, self.padding_samples))[:shown]:
            lines.append(f"  padding: position {p:,} repeats sample {s:,}")
        if self.dropped_samples:
            listed = ", ".join(f"{s:,}" for s in self.dropped_samples[:shown])
            more = " ..." if len(self.dropped_samples) > shown else ""
            lines.append(f"  dropped samples: {listed}{more}")
        excluded = getattr(self.config, "exclude", None)
        if excluded is not None:
            lines.append(f"  excluded: {len(excluded):,} samples, never read")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def build_plan(part: _core.Partition, config: ShardConfig, rank: int) -> ShardPlan:
    """The plan of ``part`` (made under ``config``) as seen from ``rank``: O(num_replicas)
    work and memory plus the padding and dropped samples it lists.

    Args:
        part (Partition): the pass.
        config (ShardConfig): its configuration.
        rank (int): the rank the plan is seen from.
    """
    # The core deals: padding is the last `part.padding` positions of the pass, drops the
    # last `part.dropped` positions of the epoch.
    padding_positions = tuple(range(part.end - part.padding, part.end))
    dropped_positions = range(part.n - part.dropped, part.n)  # part.n: the samples dealt (kept)
    return ShardPlan(
        config=config,
        rank=rank,
        start=part.start,
        num_samples=part.num_samples,
        total_size=part.total_size,
        lengths=tuple(part.lengths),
        padding_per_rank=tuple(part.padding_of(r) for r in range(config.num_replicas)),
        padding_positions=padding_positions,
        padding_samples=tuple(part.sample_at(p) for p in padding_positions),
        dropped_samples=tuple(part.sample_at(p) for p in dropped_positions),
    )


@dataclass(frozen=True)
class Certificate(EpochFields):
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
        per_source: a mixture's proof (:meth:`Mixture.verify`): the positions proven per
            source (empty otherwise).
        complete_passes: a mixture's proof: per source, its passes whose every occurrence
            was proven, each so a permutation of the source (empty otherwise).

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
    per_source: tuple[int, ...] = ()
    complete_passes: tuple[int, ...] = ()

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
        if self.dealing == "mixture":
            passes = ", ".join(f"{p:,}" for p in self.complete_passes)
            return (
                f"PROVEN ({self.method}, {self.algorithm}): {self.covered:,} positions of a mixture "
                f"of {len(self.per_source)} sources (seed={self.seed}), from position {self.start:,}: "
                f"each reads back its (source, occurrence) and its sample; complete passes per "
                f"source: {passes} [{self.seconds:.2f} s]"
            )
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
