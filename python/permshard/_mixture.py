"""``Mixture``: weighted sources as a map from position to ``(source, index)`` (mix-v3,
mix-v2, mix-v1), and ``MixtureSummary``: what it reads of each source, per stage and over the run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, SupportsIndex

import numpy as np
import numpy.typing as npt

from . import _core
from ._config import EpochConfig, as_int, as_str, as_u64
from ._report import Certificate


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


#: The algorithm id of the mixture map of new runs (mix-v3), named by certificates.
MIX_ALGORITHM: str = _core.MIX_ALGORITHM


def as_floats(weights: Sequence[Any], name: str = "weights") -> list[float]:
    """``weights`` as floats (a conversion only: the core checks their values, their
    count and that one is positive); TypeError naming the first that is not a number.

    Args:
        weights (sequence of numbers): one weight per source.
        name (str, optional): their name in messages.
    """
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(weights).__name__}")
    if all(type(w) is float for w in weights):  # the common case
        return list(weights)
    for s, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}[{s}] must be a number, got {type(w).__name__} {w!r}")
    return [float(w) for w in weights]


def _stages(stages: Sequence[Any]) -> list[tuple[int, list[float]]]:
    """``[(start, weights), ...]`` converted (the core checks that the starts increase)."""
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence):
        raise TypeError(f"stages must be a sequence of (start, weights) pairs, got {type(stages).__name__}")
    out: list[tuple[int, list[float]]] = []
    for j, stage in enumerate(stages):
        if not isinstance(stage, Sequence) or len(stage) != 2:
            raise TypeError(f"stages[{j}] must be a (start, weights) pair, got {stage!r}")
        out.append((as_u64(f"stages[{j}] start", stage[0]), as_floats(stage[1], f"stages[{j}] weights")))
    return out


class Mixture:
    r"""Weighted sources mixed position by position, in O(sources) memory: nothing to
    build, every position computed on demand (mix-v3, or mix-v2, mix-v1).

    ``m[p]`` is the ``(source, index)`` at global position ``p``. Among the first ``n``
    positions source ``s`` appears ``counts(n)[s]`` times, within 2 of
    ``n * weights[s] / sum(weights)`` for every ``n`` (the weights as given, not rounded;
    at most ``1 + log2(sources)`` in general). Each pass over a source visits all its
    samples once, in a fresh order keyed by ``(seed, source, pass)``. mix-v3 takes, by the
    source's size, the order that costs least at a random position (what a shuffled sampler
    reads): perm-v2's exact shuffle table up to 512 samples, perm-v1's walk up to 2**16,
    perm-v2 above, so that no blend costs more than mix-v1 per position whatever passes its
    readers meet. mix-v2 orders every source of at most 2**16 samples by a table (cheap
    while a reader's tables fit :attr:`table_store_bytes`; an up-sampled blend outgrows
    it), mix-v1 every source by perm-v1.

    With ``stages``, the weights change at given positions (a curriculum, an annealing
    phase): the bound holds within each stage, counted from its first position, and the
    passes over a source continue across stages.

    Args:
        sizes (sequence of int): number of samples of each source, each ``>= 1``.
        weights (sequence of float): relative weight of each source, ``>= 0`` and not all
            zero (they need not sum to 1).
        num_samples (int, optional): positions in the mixture. ``None``: the longest
            mixture in which no source repeats a sample; larger values oversample (more
            passes), smaller ones subsample. Default: ``None``.
        seed (int, optional): key of the per-pass orders, in ``[0, 2**64 - 1]``.
        stages (sequence of (int, sequence of float), optional): ``(start, weights)``:
            from global position ``start`` on, mix with these weights (``weights`` above
            holds from 0). Starts strictly increase. Default: none.
        algorithm (str, optional): ``"mix-v3"``, or ``"mix-v2"`` (0.4 and 0.5's map, also
            named by its permutation ``"perm-v2"``) or ``"mix-v1"`` (``"perm-v1"``, 0.3's)
            to continue a run started with them. ``.algorithm`` is the map's own id.
            Default: ``"mix-v3"``.

    Example::

        >>> m = Mixture([1000, 500], [0.7, 0.3], num_samples=100)
        >>> m.counts(100)
        [70, 30]
        >>> sources, indices = m.take(0, 8)
        >>> annealed = Mixture([1000, 500], [0.7, 0.3], stages=[(900, [0.2, 0.8])])
    """

    __slots__ = ("_inner", "_seed", "_sizes", "_stages", "_weights")  # the id is _inner's

    def __init__(
        self,
        sizes: Sequence[int],
        weights: Sequence[float],
        num_samples: Optional[int] = None,
        seed: int = 0,
        *,
        stages: Sequence[tuple[int, Sequence[float]]] = (),
        algorithm: str = MIX_ALGORITHM,
    ) -> None:
        algorithm = as_str("algorithm", algorithm, " ('mix-v3', 'mix-v2' or 'mix-v1')")
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise TypeError(f"sizes must be a sequence of ints, got {type(sizes).__name__}")
        if not sizes:
            raise ValueError("a mixture needs at least one source: sizes is empty")
        if all(type(n) is int for n in sizes) and 0 <= min(sizes) and max(sizes) < 2**64:
            self._sizes = tuple(sizes)  # the common case, converted in bulk
        else:
            self._sizes = tuple(as_u64(f"sizes[{s}]", n) for s, n in enumerate(sizes))
        self._weights = tuple(as_floats(weights))
        self._stages = tuple((start, tuple(w)) for start, w in _stages(stages))
        if num_samples is not None:
            num_samples = as_u64("num_samples", num_samples)
        self._seed = as_u64("seed", seed)
        schedule = [(0, list(self._weights))] + [(start, list(w)) for start, w in self._stages]
        self._inner = _core.Mixture(list(self._sizes), schedule, num_samples, self._seed, algorithm)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self._sizes

    @property
    def weights(self) -> tuple[float, ...]:
        return self._weights

    @property
    def stages(self) -> tuple[tuple[int, tuple[float, ...]], ...]:
        """The ``(start, weights)`` stages after the first (empty without a schedule)."""
        return self._stages

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def num_samples(self) -> int:
        return self._inner.num_samples

    @property
    def algorithm(self) -> str:
        """The map's id: ``mix-v3``, ``mix-v2`` or ``mix-v1``."""
        return str(self._inner.algorithm)

    @property
    def table_bytes(self) -> int:
        """Bytes of the tables of all its passes: mix-v3 orders a source of at most 512
        samples by an exact shuffle table (2 bytes a sample a pass), mix-v2 one of at most
        2**16; mix-v1 has none (0).
        Positions read in order need one pass of a source at a time. Random positions (a
        shuffled sampler) meet every pass throughout the epoch: each costs O(1) while all
        the tables fit :attr:`table_store_bytes`, else most rebuild one (O(source size)).

        Example::

            >>> m = Mixture([300, 10**6], [0.5, 0.5], num_samples=10**8)
            >>> m.table_bytes > m.table_store_bytes  # 166,667 passes of 300 samples
            True
        """
        return self._inner.table_bytes

    @property
    def table_store_bytes(self) -> int:
        """Bytes of tables this mixture keeps between reads, in each process that reads it
        (every DataLoader worker keeps its own): ``PERMSHARD_MIX_TABLE_MIB`` MiB as set when
        the mixture was built, else 32 MiB."""
        return self._inner.table_store_bytes

    def __len__(self) -> int:
        return self._inner.num_samples

    def __getitem__(self, position: SupportsIndex) -> tuple[int, int]:
        p = as_int("position", position)
        n = self._inner.num_samples
        if p < 0:
            p += n
        if not 0 <= p < n:
            raise IndexError(
                f"mixture position {as_int('position', position)} out of range for {n} positions"
            )
        return self._inner.at(p)

    def take(self, start: int, stop: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(sources, indices)`` of positions ``[start, stop)`` as int64 arrays, computed
        in Rust with the GIL released.

        Args:
            start (int): first position, ``0 <= start <= stop``.
            stop (int): one past the last position, ``stop <= num_samples``.
        """
        return self._inner.take(as_u64("start", start), as_u64("stop", stop))

    def at_positions(self, positions: Sequence[int]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(sources, indices)`` of the given positions (any order), batched.

        Args:
            positions (sequence of int or 1-D integer array): positions in
                ``[0, num_samples)``.
        """
        if isinstance(positions, np.ndarray) and positions.ndim == 1 and positions.dtype.kind in "iu":
            if positions.dtype.kind == "i" or positions.dtype.itemsize < 8:
                return self._inner.at_positions(positions.astype(np.int64, copy=False))  # read in place
        plain: list[int]
        if type(positions) is list and all(type(p) is int for p in positions):  # a sampler's batch
            plain = positions
        else:
            plain = [as_int("position", p) for p in np.asarray(positions).tolist()]
        if plain and min(plain) < 0:
            raise ValueError(f"a position must be >= 0, got {min(plain)}")
        return self._inner.at_positions(plain)

    def counts(self, n: int) -> list[int]:
        """How many of the positions ``[0, n)`` each source takes; O(sources) for any
        ``n`` (``n`` may exceed ``num_samples``: the same rule continues).

        Args:
            n (int): a number of positions from the start.
        """
        return self._inner.counts(as_u64("n", n))

    def summary(self, tokens_per_sample: Optional[Sequence[Optional[int]]] = None) -> MixtureSummary:
        """Each source's share, samples, tokens and passes (its repetition factor) per
        stage and over the run, exact: what a schedule will read before training, and
        what it read after a resume.

        Args:
            tokens_per_sample (sequence, optional): each source's tokens per sample, for
                the tokens column.
        """
        return summarize(self, tokens_per_sample)

    def covering_length(self) -> int:
        """The shortest mixture that reads every source weighted in the last stage in
        full at least once (sources with smaller shares of their size repeat): one epoch
        of the blend, the length :class:`~permshard.data.MixedDataset` defaults to."""
        return self._inner.covering_length()

    def locate(self, source: int, index: int) -> list[int]:
        """Every position at which sample ``index`` of ``source`` appears (one per pass
        over the source the mixture reaches), in increasing order.

        Args:
            source (int): a source, ``0 <= source < len(sizes)``.
            index (int): a sample of it, ``0 <= index < sizes[source]``.
        """
        return self._inner.locate(as_u64("source", source), as_u64("index", index))

    def verify(self, start: int = 0, stop: Optional[int] = None) -> Certificate:
        """Exact proof of positions ``[start, stop)`` by the inverse (what :meth:`locate`
        computes): each position's (source, occurrence) maps back to that position, its
        sample back to its offset through the pass's permutation, and each source is
        read there as often as :meth:`counts` says. So every pass wholly inside the
        range holds each sample of its source exactly once. O(stop - start) time, O(1)
        memory, GIL released.

        Args:
            start (int, optional): first position. Default: ``0``.
            stop (int, optional): one past the last. Default: ``num_samples``.

        Returns:
            Certificate: ``covered`` positions from ``start``, ``per_source`` and
            ``complete_passes`` per source; ``dealing`` is ``"mixture"``.

        Raises:
            ShardingError: with the first position that does not come back.
        """
        began = time.perf_counter()
        start, stop = as_u64("start", start), self.num_samples if stop is None else as_u64("stop", stop)
        return self._certificate(self._inner.prove(start, stop), start, began)

    def _certificate(self, proof: tuple[int, list[int], list[int]], start: int, began: float) -> Certificate:
        """The certificate of the core's proof ``(positions, per source, complete passes)``."""
        positions, per_source, complete = proof
        permutation = "perm-v1" if self.algorithm.endswith("v1") else "perm-v2"
        config = EpochConfig(self.num_samples, 1, seed=self._seed, permutation=permutation).labelled(
            algorithm=self.algorithm, dealing="mixture"
        )
        return Certificate(
            config=config,
            lengths=(positions,),
            covered=positions,
            padding=0,
            dropped=0,
            seconds=time.perf_counter() - began,
            method="inverse",
            start=start,
            consumed=start,
            ranks=(0,),
            per_source=tuple(per_source),
            complete_passes=tuple(complete),
        )

    def verify_pass(self, source: int, pass_: int) -> Certificate:
        """Exact proof of one pass over ``source``, wherever its positions lie (any
        number of positions: O(size of the source) time): each occurrence's position reads
        it back, and the pass's samples come back to their offsets, so a complete pass
        is a permutation of the source.

        Args:
            source (int): a source, ``0 <= source < len(sizes)``.
            pass_ (int): a pass the mixture reaches.

        Raises:
            ShardingError: with the first occurrence that does not come back.
        """
        began = time.perf_counter()
        return self._certificate(
            self._inner.prove_pass(as_u64("source", source), as_u64("pass_", pass_)), 0, began
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mixture):
            return NotImplemented
        return bool(self.__reduce__()[1] == other.__reduce__()[1])

    def __hash__(self) -> int:
        return hash((Mixture, self._sizes, self._weights, self._stages, self.num_samples, self._seed))

    def __reduce__(self) -> tuple[Any, ...]:
        arguments = (self._sizes, self._weights, self.num_samples, self._seed)
        return (_rebuild, (*arguments, self._stages, self.algorithm))

    def __repr__(self) -> str:
        stages = f", stages={[(start, list(w)) for start, w in self._stages]}" if self._stages else ""
        return (
            f"Mixture(sizes={list(self._sizes)}, weights={list(self._weights)}, "
            f"num_samples={self.num_samples}, seed={self._seed}{stages}) ({self.algorithm})"
        )


def _rebuild(
    sizes: Sequence[int],
    weights: Sequence[float],
    num_samples: int,
    seed: int,
    stages: Sequence[tuple[int, Sequence[float]]],
    algorithm: str = "mix-v1",  # pickles of 0.3, before the id was an argument
) -> Mixture:
    """Unpickles a Mixture (``stages`` and ``algorithm`` are keyword-only in the constructor)."""
    return Mixture(sizes, weights, num_samples, seed, stages=stages, algorithm=algorithm)
