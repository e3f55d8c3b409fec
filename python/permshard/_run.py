"""``Run``: a training run's history, read from a checkpoint — where each sample was read,
what every rank read at a step, and the exactly-once audit — and the ``permshard`` commands
that answer from a checkpoint: ``where``, ``show STEP --state FILE`` and ``audit``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

from . import _core
from ._config import as_u64
from ._drawn import DrawnSamples

#: Keys a sampler adds beside the core's state: checked on load, not part of the stream.
_BESIDE = ("schedule", "dataset")


def written_beside(dataset: Any) -> tuple[int, dict[str, Any]]:
    """What a sampler's state dict carries beside the core's state, for ``dataset``: the
    number of weight changes it made (the history records it), and the keys themselves
    (``"schedule"``: its weights changed at run time; ``"dataset"``: its fingerprint, so
    that a resume over another dataset is refused).

    Args:
        dataset: the sampler's dataset.
    """
    from ._hooks import has_schedule, stable_fingerprint

    scheduled = has_schedule(dataset)
    changes = scheduled.schedule_state() if scheduled is not None else None
    beside: dict[str, Any] = {}
    if changes is not None:
        beside["schedule"] = changes
    fingerprint = stable_fingerprint(dataset)
    if fingerprint is not None:
        beside["dataset"] = fingerprint
    return (0 if changes is None else len(changes["changes"])), beside


def read_beside(state_dict: Any, dataset: Any) -> tuple[Any, Optional[Mapping[str, Any]]]:
    """``(the core's state, its schedule or None)`` of ``state_dict``, the keys beside the
    core's checked against ``dataset``: the same dataset's fingerprint, a schedule only over
    a dataset that takes one. A non-mapping is handed on (the core names its type).

    Args:
        state_dict: a sampler's state dict.
        dataset: the dataset of the sampler loading it.
    """
    from ._hooks import check_same_dataset, explains_fingerprint, has_schedule, stable_fingerprint

    if not isinstance(state_dict, Mapping):
        return state_dict, None
    explains = explains_fingerprint(dataset)
    hint = explains.fingerprint_hint if explains is not None else None
    check_same_dataset(state_dict, stable_fingerprint(dataset), hint)
    schedule = state_dict.get("schedule")
    if schedule is not None and has_schedule(dataset) is None:
        raise ValueError(
            "state_dict carries weights changed at run time (schedule), but this sampler's dataset "
            f"({type(dataset).__name__}) is not a MixedDataset: build the sampler over the run's dataset"
        )
    return {k: v for k, v in state_dict.items() if k not in _BESIDE}, schedule


def check_schedule(run: _core.Run, schedule: Optional[Mapping[str, Any]]) -> None:
    """Raises ValueError when ``run`` records weight changes and its state has no schedule
    (it would resume on the initial weights).

    Args:
        run (Run): the core's run, read from a state dict.
        schedule (Mapping, optional): that state's ``"schedule"``.
    """
    if run.weight_changes and schedule is None:
        raise ValueError(
            f"state_dict records {run.weight_changes} weight change(s) (MixedDataset.set_weights) but "
            "has no 'schedule': without it the run would resume on the initial weights. Pass the "
            "whole dict state_dict() saved"
        )


class Read(NamedTuple):
    """One read of a sample by the run.

    ``step`` counts the batches each rank had taken since the run's start, across epochs
    and resumes (``None`` for an item sampler's run without ``batch_size``: ``position``
    is then the item's place in its rank's stream of the epoch); ``position`` is the
    sample's place in that rank's batch; ``padding`` marks a read that repeats a sample to
    even out the ranks.
    """

    epoch: int
    step: Optional[int]
    rank: int
    position: int
    sample: int
    padding: bool

    def as_dict(self, *, sample: bool = False) -> dict[str, Any]:
        """The read as JSON-ready keys ``epoch``, ``step``, ``rank``, ``position``,
        ``padding`` (and ``sample`` with ``sample=True``).

        Args:
            sample (bool): include the sample id.
        """
        out: dict[str, Any] = {
            "epoch": self.epoch,
            "step": self.step,
            "rank": self.rank,
            "position": self.position,
        }
        if sample:
            out["sample"] = self.sample
        out["padding"] = self.padding
        return out


class Audit(NamedTuple):
    """What :meth:`Run.audit` proved: every kept sample of ``epochs`` read exactly once per
    epoch (the one in progress up to its resume point), none after its exclusion."""

    epochs: list[int]
    segments: int
    begins: tuple[int, int]  # (epoch, position) where the history starts
    reads: int  # reads of kept samples, padding aside
    recounted: bool  # every sample's reads were counted one by one too
    not_covered: str  # what the run may have read before its history begins ("": nothing)


def _not_covered(begins: tuple[int, int]) -> str:
    """What a history that begins at ``begins`` (epoch, position) does not prove."""
    epoch, position = begins
    parts = []
    if epoch > 0:
        parts.append(f"epochs before {epoch}, if the run read any")
    if position > 0:
        parts.append(f"positions [0, {position:,}) of epoch {epoch}")
    if not parts:
        return ""
    return (
        " and ".join(parts) + " were read before the history begins (a state saved by 0.5 or before, "
        "or a history cut short): the audit does not cover them"
    )


def _reads(native: list[Any]) -> list[Read]:
    return [Read(r.epoch, r.step, r.rank, r.position, r.sample, r.padding) for r in native]


def kind_of(state_dict: Mapping[str, Any]) -> str:
    """The kind of run a sampler's state dict records (one of ``_core.KINDS``): its
    ``"kind"``, or for a state of 0.1-0.6, which names none, what its keys say.

    Args:
        state_dict (Mapping): a state dict saved by a sampler or a torchft loader.
    """
    kind = state_dict.get("kind")
    if kind is not None:
        if kind not in _core.KINDS:
            raise ValueError(
                f"state_dict['kind'] is {kind!r}, not one of {_core.KINDS}: pass a dict a sampler saved"
            )
        return str(kind)
    if "max_tokens" in state_dict:
        return "budget"
    if "draws" in state_dict:
        return "weighted"
    if state_dict.get("algorithm") == _core.COMMITTED_ALGORITHM:
        return "committed"
    return "sharded"


class Run:
    r"""A run's history, from the state dict of its latest checkpoint.

    Every sampler over a :class:`~permshard.ShardedSampler` (item, batch, step and weighted
    samplers) keeps its run's history in its state dict: one segment of 10 integers per
    change — the start, an epoch, a resume (another world size, batch size or dealing,
    more exclusions), an epoch iterated again. The stream being a pure function of it, one
    state dict answers, in O(#changes + answer): :meth:`where` a sample was read, what
    every rank read at a step (:meth:`show`), and proves exactly-once (:meth:`audit`).
    A state saved by 0.5 or before has no history: the history starts at its load.

    A :class:`~permshard.TokenBudgetBatchSampler` keeps its history too, a segment of 7
    integers per change; a window's steps depend on its samples' lengths, so its answers
    take the run's ``lengths``: the first plans every window the history read, once, and
    each one after it one window per segment (the audit: every window read, one byte per
    sample).

    Args:
        state_dict (Mapping): a dict saved by a sampler's ``state_dict()``.
        lengths (1-D integer array, optional): a token-budget run's lengths (required for
            its state, refused for others).
        weights (1-D array of float, optional): a weighted run's weights (required for its
            ``where`` and ``show``, which answer in the samples drawn; refused for others).
        strict (bool, optional): refuse keys the sampler does not save. Default: ``True``.

    Example::

        >>> from permshard import Run, ShardedBatchSampler, ShardedSampler
        >>> batches = ShardedBatchSampler(ShardedSampler(1000, seed=1), 8)
        >>> for step, batch in enumerate(batches):
        ...     if step == 9:
        ...         break
        >>> run = Run(batches.state_dict(consumed_samples=10 * 8))
        >>> [(r.epoch, r.step, r.rank, r.position) for r in run.where(batch[2])]
        [(0, 9, 0, 2)]
        >>> run.audit().reads
        80
    """

    def __init__(
        self, state_dict: Mapping[str, Any], *, lengths: Any = None, weights: Any = None, strict: bool = True
    ) -> None:
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"state_dict must be a mapping saved by a sampler, got {type(state_dict).__name__}"
            )
        self._lengths: Any = None
        self._drawn: Optional[DrawnSamples] = None  # a weighted run's draws, given its weights
        self._budget: Optional[_core.BudgetRun] = None
        self._index: Optional[_core.BudgetIndex] = None  # a token-budget run's, at its first answer
        self.kind = kind_of(state_dict)  # what recorded the run: one of _core.KINDS
        if weights is not None and self.kind != "weighted":
            raise ValueError(
                f"weights= is for a WeightedShardedSampler's state; this state is a {self.kind} run's"
            )
        if self.kind == "committed":
            raise ValueError(
                "this is a torchft CommittedLoader's state: its record is every rank's, audited "
                "together by permshard.torchft.audit(states) (permshard audit --state FILE, repeated)"
            )
        if self.kind == "budget":
            self._budget_run(state_dict, lengths, strict)
            return
        if lengths is not None:
            raise ValueError(
                "lengths= is for a TokenBudgetBatchSampler's state; this state is another sampler's"
            )
        self.weighted = self.kind == "weighted"  # positions are draws: samples repeat by design
        self._drawn = None if weights is None else DrawnSamples(state_dict, weights)
        self.schedule = state_dict.get("schedule")
        core = {k: v for k, v in state_dict.items() if k not in _BESIDE}
        if self.weighted:
            core = {
                k: v for k, v in core.items() if k not in ("draws", "weights", "num_weights", "replacement")
            }
        self._run = _core.Run.from_state(core, strict)

    def _budget_run(self, state_dict: Mapping[str, Any], lengths: Any, strict: bool) -> None:
        """A TokenBudgetBatchSampler's run: its answers plan windows, over its lengths."""
        from ._config import as_lengths
        from ._hooks import check_same_dataset
        from ._token_budget import lengths_fingerprint

        if lengths is None:
            raise ValueError(
                "this is a TokenBudgetBatchSampler's state: its steps are planned from the samples' "
                "lengths; pass Run(state_dict, lengths=lengths) (permshard where/show/audit: --lengths FILE.npy)"
            )
        array, self._lengths = as_lengths(lengths)
        self.weighted, self.schedule = False, None
        core = {k: v for k, v in state_dict.items() if k != "dataset"}
        self._budget = _core.BudgetRun.from_state(core, strict)
        if len(array) != self._budget.n:
            raise ValueError(
                f"lengths holds {len(array)} samples, the run {self._budget.n}: pass the run's lengths"
            )
        check_same_dataset(state_dict, lengths_fingerprint(array))

    def _budget_index(self) -> _core.BudgetIndex:
        """A token-budget run's index: every window the history read planned, once."""
        assert self._budget is not None
        if self._index is None:
            self._index = self._budget.index(self._lengths)
        return self._index

    @property
    def n(self) -> int:
        """Samples in an epoch."""
        return int(self._run.n if self._budget is None else self._budget.n)

    @property
    def segments(self) -> list[dict[str, Any]]:
        """The history, a dict per segment: ``change`` (``start``, ``epoch``, ``resume``,
        ``repeat``), ``epoch``, the global positions ``[start, stop)`` of the epoch it
        read, ``step`` (the run's step where it starts), ``world``, ``batch_size`` (``0``:
        an item sampler), ``dealing``, ``drop_last_batch``, ``excluded`` (ids of the
        run's exclusion log in force). A token-budget run's: ``change``, ``epoch``, the
        ``window`` its pass starts in and ``steps`` of that window's plan done before,
        ``world``, ``step`` and ``done`` (steps every rank took in it)."""
        return list(self._run.segments() if self._budget is None else self._budget.segments())

    @property
    def not_covered(self) -> str:
        """What the run may have read before its history begins, in words (``""``: the
        history begins at position 0 of epoch 0). A state saved by 0.5 or before starts its
        history at its load; :meth:`where` and :meth:`audit` answer for the history only."""
        segments = self.segments
        if not segments:
            return ""
        first = segments[0]
        start = first["start"] if "start" in first else 0
        return _not_covered((int(first["epoch"]), int(start)))

    def where(self, sample: int, *, batch_size: Optional[int] = None) -> list[Read]:
        """Every read of ``sample`` over the run's history, in order.

        Args:
            sample (int): a dataset index (for a weighted run, one its ranks drew: every
                position of the history is searched, a chunk of draws at a time).
            batch_size (int, optional): an item sampler's DataLoader batch size, to count
                its steps. Default: ``None`` (steps are ``None`` for an item sampler).
        """
        sample = as_u64("sample", sample)
        if self.weighted:
            return self._where_drawn(sample, batch_size)
        if not sample < self.n:
            raise ValueError(f"sample {sample} is not in range({self.n})")
        if self._budget is not None:
            self._no_batch_size(batch_size)
            return _reads(self._budget.where_read(self._lengths, self._budget_index(), sample))
        return _reads(self._run.where_read(sample, self._batch(batch_size)))

    def _where_drawn(self, sample: int, batch_size: Optional[int]) -> list[Read]:
        """A weighted run's reads of ``sample``: every position of the history that drew it."""
        drawn = self._drawn_samples()
        spans: dict[int, list[tuple[int, int]]] = {}
        for segment in self.segments:
            spans.setdefault(segment["epoch"], []).append((segment["start"], segment["stop"]))
        reads = []
        for epoch, ranges in spans.items():
            for position in drawn.positions_of(sample, epoch, ranges):
                native = self._run.where_read(position, self._batch(batch_size))
                reads += [r._replace(sample=sample) for r in _reads(native) if r.epoch == epoch]
        return sorted(reads, key=lambda r: (r.epoch, -1 if r.step is None else r.step, r.rank, r.position))

    def _drawn_samples(self) -> DrawnSamples:
        if self._drawn is None:
            raise ValueError(
                "this is a WeightedShardedSampler's state: its history records positions of the stream, "
                "and the samples drawn there follow from the run's weights, which the state keeps only a "
                "digest of; pass Run(state_dict, weights=weights) (permshard where/show: --weights FILE.npy)"
            )
        return self._drawn

    def where_document(
        self, dataset: Any, source: int, document: int, *, batch_size: Optional[int] = None
    ) -> list[Read]:
        """Every read of sample ``document`` of source ``source`` of a
        :class:`~permshard.data.MixedDataset` run (its weights as the run changed them).

        Args:
            dataset (MixedDataset): the run's dataset, built with its first arguments.
            source (int): the source.
            document (int): the source's sample (for Megatron corpora: its sample index).
            batch_size (int, optional): as for :meth:`where`.
        """
        mixture = dataset.mixture_of(self.schedule) if hasattr(dataset, "mixture_of") else None
        if mixture is None:
            raise TypeError(
                f"where_document needs the run's MixedDataset, got {type(dataset).__name__}; "
                "for other datasets use where(sample)"
            )
        reads: list[Read] = []
        for position in mixture.locate(source, document):
            if position < self.n:
                reads.extend(self.where(position, batch_size=batch_size))
        return sorted(
            reads, key=lambda r: (r.epoch, r.step if r.step is not None else -1, r.rank, r.position)
        )

    def show(self, step: int, *, batch_size: Optional[int] = None) -> list[Read]:
        """What every rank read at ``step`` (batches each rank had taken since the run's
        start), rank by rank in batch order.

        Args:
            step (int): the step.
            batch_size (int, optional): an item sampler's DataLoader batch size (required
                for its runs, which know no batches).
        """
        if self._budget is not None:
            self._no_batch_size(batch_size)
            return _reads(self._budget.show(self._lengths, self._budget_index(), as_u64("step", step)))
        reads = _reads(self._run.show(as_u64("step", step), self._batch(batch_size)))
        if self.weighted:  # positions of the stream: the samples drawn there (a step is of one epoch)
            drawn = self._drawn_samples()
            epoch = reads[0].epoch if reads else 0
            samples = drawn.samples_at(epoch, [r.sample for r in reads])
            reads = [r._replace(sample=s) for r, s in zip(reads, samples)]
        return reads

    def audit(self, *, recount: bool = True, threads: int = 0) -> Audit:
        """Proves from the history that every kept sample was read exactly once per epoch
        (declared padding aside; the epoch in progress up to its resume point) and no
        excluded sample after its exclusion: each segment starts where the one before
        stopped, an epoch ends only once read to its end, the steps add up; with
        ``recount`` every sample's reads are counted by the inverse of each segment's
        order too (O(n · #segments), on every core). A token-budget run's audit always
        counts every read, planning every window the history read (one byte per sample).

        Args:
            recount (bool, optional): count every sample's reads. Default: ``True``.
            threads (int, optional): threads of the recount (``0``: every core).

        Raises:
            ShardingError: naming the first sample read twice or never, and its reads.
        """
        if self.weighted:
            raise ValueError(
                "a WeightedShardedSampler draws samples with replacement: a sample may be drawn "
                "several times by design, so exactly-once does not apply; its positions are audited "
                "by WeightedShardedSampler.verify()"
            )
        if self._budget is not None:  # a token budget's reads are counted batch by batch
            a = self._budget.audit(self._lengths)
        else:
            a = self._run.audit(bool(recount), as_u64("threads", threads))
        begins = (int(a.begins[0]), int(a.begins[1]))
        return Audit(
            list(a.epochs), int(a.segments), begins, int(a.reads), bool(a.recounted), _not_covered(begins)
        )

    @staticmethod
    def _no_batch_size(batch_size: Optional[int]) -> None:
        if batch_size is not None:
            raise ValueError(
                "a TokenBudgetBatchSampler's run counts its own batches: drop batch_size (it is for "
                "an item sampler's DataLoader)"
            )

    @staticmethod
    def _batch(batch_size: Optional[int]) -> int:
        return 0 if batch_size is None else as_u64("batch_size", batch_size, minimum=1)

    def __repr__(self) -> str:
        return f"Run(n={self.n}, segments={len(self.segments)})"


def _load_state(path: str) -> dict[str, Any]:
    """The sampler state dict in ``path``: JSON, or a ``torch.save`` file (the dict itself,
    or a checkpoint holding one sampler state under any key). Whatever cannot be read is a
    ValueError naming the file and the fix."""
    import os

    if os.path.isdir(path):
        raise ValueError(
            f"{path} is a folder (a torch.distributed.checkpoint?): pass one file holding a sampler's "
            "state_dict(), saved with torch.save or json.dump"
        )
    try:
        if path.endswith(".json"):
            with open(path) as f:
                obj = json.load(f)
        else:
            import torch

            obj = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except Exception as e:  # a truncated, empty or foreign file: torch and json raise many kinds
        how = "json.dump (a .json file)" if path.endswith(".json") else "torch.save"
        raise ValueError(
            f"{path} is not a state dict saved with {how} ({type(e).__name__}: {str(e)[:200]}): "
            "pass the file a sampler's state_dict() was saved to, whole"
        ) from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path} holds a {type(obj).__name__}, not a sampler's state_dict() (a dict)")
    if "consumed" not in obj and "steps" not in obj:
        found = [v for v in obj.values() if isinstance(v, dict) and ("consumed" in v or "steps" in v)]
        if len(found) != 1:
            raise ValueError(
                f"{path} holds no single sampler state dict ({len(found)} found): save sampler.state_dict() "
                "on its own, or as one value of the checkpoint dict"
            )
        return found[0]
    return obj


def _history_of(
    path: str, lengths: Optional[str], state: Optional[dict[str, Any]] = None, weights: Optional[str] = None
) -> Run:
    """The run of the state dict in ``path`` (``state``, where already read); a ValueError
    where it holds no history."""
    state = _load_state(path) if state is None else state
    run = Run(state, lengths=_load_array(lengths, "--lengths"), weights=_load_array(weights, "--weights"))
    if not run.segments:
        raise ValueError(
            f"{path} holds no history: it was saved by permshard 0.5 or before, or before any pass "
            "read a sample; a run's history starts at the first pass after a load, so save a state "
            "of this release after training resumes"
        )
    return run


def add_parsers(sub: Any, count: Callable[[str], int]) -> None:
    """Adds ``where``, ``audit`` (and the history's ``show``) to the command's subparsers."""
    p = sub.add_parser("where", help="every (epoch, step, rank, position) at which a run read a sample")
    p.add_argument("sample", type=count, nargs="?", help="dataset index (or --source and --document)")
    _history_args(p, count)
    p.add_argument("--source", type=count, help="a MixedDataset's source (with --document and --data-path)")
    p.add_argument("--document", type=count, help="the source's sample")
    p.add_argument("--data-path", help="Megatron's --data-path of the run's blend (with --source)")
    p.add_argument("--seq-len", type=count, help="Megatron's --seq-length (with --data-path)")
    p.add_argument("--num-samples", type=count, help="blend length (with --data-path)")
    p.add_argument("--mix-seed", type=count, default=0, help="seed of the blend's passes (default 0)")

    p = sub.add_parser(
        "audit", help="prove from a checkpoint that every sample was read exactly once per epoch"
    )
    p.add_argument(
        "--state",
        required=True,
        action="append",
        metavar="FILE",
        help="a sampler's state dict (.pt or .json); for a torchft run, one per rank of every group, repeated",
    )
    p.add_argument("--no-recount", action="store_true", help="the history's proof only (O(#changes))")
    p.add_argument("--lengths", metavar="FILE.npy", help=_LENGTHS_HELP)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def history_show_parser(count: Callable[[str], int]) -> argparse.ArgumentParser:
    """``permshard show STEP --state FILE``: what every rank read at a step of the run."""
    p = argparse.ArgumentParser(prog="permshard show", description="what every rank read at STEP of a run")
    p.add_argument("step", type=count, help="batches each rank had taken since the run's start")
    _history_args(p, count)
    return p


_LENGTHS_HELP = "a TokenBudgetBatchSampler run's lengths (a .npy file): its steps are planned from them"


def _load_array(path: Optional[str], option: str) -> Any:
    """The array in the ``.npy`` file at ``path`` (memory-mapped), or ``None``; ``option``
    names it in errors."""
    if path is None:
        return None
    import numpy as np

    try:
        return np.load(path, mmap_mode="r")
    except OSError as e:
        raise ValueError(f"cannot read {option} {path}: {e.strerror or e}") from None
    except Exception as e:  # a file that is not a .npy array
        raise ValueError(
            f"{option} {path} is not a .npy array ({type(e).__name__}: {str(e)[:200]}): save it with numpy.save"
        ) from None


def _history_args(p: argparse.ArgumentParser, count: Callable[[str], int]) -> None:
    p.add_argument("--state", required=True, metavar="FILE", help="a sampler's state dict (.pt or .json)")
    p.add_argument("--lengths", metavar="FILE.npy", help=_LENGTHS_HELP)
    p.add_argument(
        "--weights",
        metavar="FILE.npy",
        help="a WeightedShardedSampler run's weights: its answers name the samples drawn",
    )
    p.add_argument(
        "--batch-size", type=count, help="an item sampler's DataLoader batch size (to count steps)"
    )
    p.add_argument(
        "--json", action="store_true", help="print a JSON list of {epoch, step, rank, position, padding}"
    )


def _print(reads: list[Any], as_json: bool, *, sample: bool) -> None:
    if as_json:
        print(json.dumps([r.as_dict(sample=sample) for r in reads]))
        return
    for r in reads:
        step = "-" if r.step is None else f"{r.step:,}"
        pad = "  (padding)" if r.padding else ""
        print(
            f"epoch {r.epoch:>4}  step {step:>10}  rank {r.rank:>5}  position {r.position:>6}  sample {r.sample:,}{pad}"
        )


def where(args: argparse.Namespace) -> int:
    run = _history_of(args.state, args.lengths, weights=args.weights)
    if args.source is not None or args.document is not None:
        if args.source is None or args.document is None or args.data_path is None or args.seq_len is None:
            raise ValueError("--source needs --document, --data-path and --seq-len (the run's blend)")
        from .data._mixed import MixedDataset

        blend = MixedDataset.from_data_path(args.data_path, args.seq_len, args.num_samples, args.mix_seed)
        reads = run.where_document(blend, args.source, args.document, batch_size=args.batch_size)
    elif args.sample is None:
        raise ValueError("pass SAMPLE, or --source and --document")
    else:
        reads = run.where(args.sample, batch_size=args.batch_size)
    _print(reads, args.json, sample=False)
    if not args.json and not reads:
        print("never read in this run's history")
    if not args.json and run.not_covered:
        print(f"not covered: {run.not_covered}")
    return 0


def show(args: argparse.Namespace) -> int:
    run = _history_of(args.state, args.lengths, weights=args.weights)
    reads = run.show(args.step, batch_size=args.batch_size)
    _print(reads, args.json, sample=True)
    return 0


def audit(args: argparse.Namespace) -> int:
    states = [_load_state(path) for path in args.state]
    if any(kind_of(state) == "committed" for state in states):
        from ._committed import audit as committed_audit

        proof = committed_audit(states)
        print(
            json.dumps(dataclasses.asdict(proof))
            if args.json
            else f"exactly once: {proof.positions:,} committed positions ({proof.epochs} whole epochs) "
            f"over {proof.steps:,} steps of {len(states)} ranks' loaders"
        )
        return 0
    if len(states) > 1:
        raise ValueError("pass one --state: a sampler's (several only for the loaders of a torchft run)")
    result = _history_of(args.state[0], args.lengths, states[0]).audit(recount=not args.no_recount)
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        how = "history and every sample's reads" if result.recounted else "history"
        print(
            f"exactly once: epochs {result.epochs}, {result.segments} segment(s) from epoch "
            f"{result.begins[0]} position {result.begins[1]:,}, {result.reads:,} reads ({how} proven)"
        )
        if result.not_covered:
            print(f"not covered: {result.not_covered}")
    return 0
