"""``ShardPlan``: the exact split of one epoch, readable by people and programs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import _core
from ._config import BudgetConfig, Configured, ShardConfig
from ._validation import as_positive


@dataclass(frozen=True)
class ShardPlan(Configured):
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
class BudgetPlan(Configured):
    """What every rank yields in one pass of a token-budget epoch, in sum.

    Attributes:
        config: the configuration planned; its fields (``n``, ``num_replicas``,
            ``max_tokens``, ``window``, ...) read as attributes too.
        rank: the rank this plan was made on.
        first_window: the window the pass starts in (non-zero after a resume).
        steps: batches every rank yields (one a step; every rank as many).
        padding: items the pass yields that repeat a sample it yields (each window's
            batches filled to whole steps).
        dropped: samples no rank yields this epoch (``drop_last``).

    Example::

        >>> lengths = np.full(1000, 100)  # 4 samples a batch
        >>> budget = permshard.TokenBudgetBatchSampler(lengths, max_tokens=400, num_replicas=3, rank=0)
        >>> plan = budget.plan()
        >>> plan.steps, plan.padding, plan.dropped
        (84, 0, 0)
    """

    config: BudgetConfig
    rank: int
    first_window: int
    steps: int
    padding: int
    dropped: int

    def __str__(self) -> str:
        return (
            f"BudgetPlan: n={self.n:,} num_replicas={self.num_replicas} epoch={self.epoch} "
            f"seed={self.seed} max_tokens={self.max_tokens:,} window={self.window:,}"
            + (f" resumed in window {self.first_window:,}" if self.first_window else "")
            + f"\nsteps={self.steps:,} per rank  padding={self.padding:,}  dropped={self.dropped:,}"
        )
