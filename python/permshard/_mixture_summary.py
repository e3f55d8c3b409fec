"""``MixtureSummary``: what a mixture reads of each source, per stage and over the run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class SourceRead:
    """One source over one span of positions.

    Attributes:
        source: the source.
        start, stop: the positions ``[start, stop)`` (a stage, or the whole run).
        samples: positions of the span that read the source.
        share: ``samples / (stop - start)``.
        tokens: ``samples`` times the source's tokens per sample (``None`` unknown).
        passes: ``samples`` over the source's size: its repetition factor in the span.
    """

    source: int
    start: int
    stop: int
    samples: int
    share: float
    tokens: Optional[int]
    passes: float


@dataclass(frozen=True)
class MixtureSummary:
    """Each source's share, samples, tokens and passes per stage (``stages[j]``) and over
    the run (``total``), from the mixture's exact counts.

    Example::

        >>> from permshard import Mixture
        >>> print(Mixture([1000, 100], [0.7, 0.3], 2000, stages=[(1000, [0.5, 0.5])]).summary())
        positions                  source     share      samples       tokens   passes
        stage 0 [0, 1,000)              0    0.7000          700            -     0.70
        stage 0 [0, 1,000)              1    0.3000          300            -     3.00
        stage 1 [1,000, 2,000)          0    0.5000          500            -     0.50
        stage 1 [1,000, 2,000)          1    0.5000          500            -     5.00
        run [0, 2,000)                  0    0.6000        1,200            -     1.20
        run [0, 2,000)                  1    0.4000          800            -     8.00
    """

    stages: tuple[tuple[SourceRead, ...], ...]
    total: tuple[SourceRead, ...]

    def __str__(self) -> str:
        lines = [f"{'positions':<26} {'source':>6} {'share':>9} {'samples':>12} {'tokens':>12} {'passes':>8}"]
        spans = [*self.stages, self.total] if len(self.stages) > 1 else [self.total]
        for k, rows in enumerate(spans):
            span = "run" if rows is self.total else f"stage {k}"
            for row in rows:
                where = f"{span} [{row.start:,}, {row.stop:,})"
                tokens = "-" if row.tokens is None else f"{row.tokens:,}"
                lines.append(
                    f"{where:<26} {row.source:>6} {row.share:>9.4f} {row.samples:>12,} {tokens:>12} {row.passes:>8.2f}"
                )
        return "\n".join(lines)


def summarize(mixture: Any, tokens_per_sample: Optional[Sequence[Optional[int]]] = None) -> MixtureSummary:
    """The summary of ``mixture`` (a :class:`~permshard.Mixture`).

    Args:
        mixture (Mixture): the mixture.
        tokens_per_sample (sequence, optional): each source's tokens per sample (``None``
            where unknown).
    """
    sizes = mixture.sizes
    tokens = list(tokens_per_sample) if tokens_per_sample is not None else [None] * len(sizes)
    if len(tokens) != len(sizes):
        raise ValueError(f"{len(sizes)} sources but {len(tokens)} tokens_per_sample values")
    n = mixture.num_samples
    bounds = sorted({0, n, *(min(start, n) for start, _ in mixture.stages)})

    def span(lo: int, hi: int) -> tuple[SourceRead, ...]:
        before, after = mixture.counts(lo), mixture.counts(hi)
        return tuple(
            SourceRead(
                source=s,
                start=lo,
                stop=hi,
                samples=after[s] - before[s],
                share=(after[s] - before[s]) / max(1, hi - lo),
                tokens=None if tokens[s] is None else (after[s] - before[s]) * int(tokens[s]),  # type: ignore[arg-type]
                passes=(after[s] - before[s]) / sizes[s],
            )
            for s in range(len(sizes))
        )

    stages = tuple(span(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo)
    return MixtureSummary(stages=stages, total=span(0, n))
