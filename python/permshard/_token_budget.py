"""``TokenBudgetBatchSampler``: batches under a padded token budget, balanced across ranks,
planned a window of the perm-v2 order at a time (budget-v2; budget-v1 over perm-v1), with
its configuration (``BudgetConfig``) and its plan in sum (``BudgetPlan``). The core plans,
counts, walks, re-plans a resume and proves; this module speaks torch."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from . import _core
from ._config import EpochConfig, EpochFields, as_int, as_lengths, as_positive, as_u64, refuse_assignment
from ._distributed import FIX_RESUME, Agreed, MeshDim, check_consensus, resolve_world
from ._hooks import check_same_dataset, content_id, digest
from ._pass import LoaderCount, PassLifecycle
from ._proof import ProofTarget, ProvenStream

__all__ = ["BUDGET_ALGORITHM", "BudgetConfig", "BudgetPlan", "TokenBudgetBatchSampler"]


#: The algorithm id of the token-budget plan of new runs (budget-v2), recorded in state dicts.
BUDGET_ALGORITHM = _core.BUDGET_ALGORITHM


@dataclass(frozen=True, init=False)
class BudgetConfig(EpochConfig):
    """The configuration of :class:`~permshard.TokenBudgetBatchSampler`: an
    :class:`EpochConfig` (the order of ``permutation`` the windows are read from, or the
    identity without ``shuffle``) and the budget. Its ``algorithm`` and ``dealing`` are
    ``budget-v2`` (over perm-v2) or ``budget-v1`` (over perm-v1): batches dealt by the plan.

    Args:
        n, num_replicas, seed, epoch, shuffle, drop_last, permutation: as in
            :class:`EpochConfig`.
        max_tokens (int, keyword-only): the padded token budget of a batch.
        window (int, keyword-only): positions planned together, ``>= num_replicas``.

    Example::

        >>> BudgetConfig(n=1000, num_replicas=2, max_tokens=4096).algorithm
        'budget-v2'
    """

    max_tokens: int = 0  # required (__init__ has no default): a dataclass field after defaults
    window: int = 1 << 16

    dealing_keys: ClassVar[tuple[str, ...]] = ("dealing",)

    def __init__(
        self, n: int, num_replicas: int, *, max_tokens: int, window: int = 1 << 16, **epoch: Any
    ) -> None:
        super().__init__(n, num_replicas, **epoch)
        self._set(
            {"max_tokens": as_positive("max_tokens", max_tokens), "window": as_positive("window", window)}
        )
        algorithm = self.budget_epoch().algorithm  # the core checks the fields together
        self._set({"algorithm": algorithm, "dealing": algorithm})

    def budget_epoch(self) -> _core.BudgetEpoch:
        """The core's description of this epoch (algorithm id, state dicts, resumes)."""
        return _core.BudgetEpoch(self)

    def planner(self) -> _core.TokenBudget:
        """The core's planner of this epoch's windows."""
        return _core.TokenBudget(self)

    def state_dict(self, start: _core.BudgetStart) -> dict[str, Any]:
        """A resume point at ``start``, as the core writes it: this configuration, the
        window being planned, its steps done and its samples taken before (base64 bits).

        Args:
            start (BudgetStart): the resume point.
        """
        return self.budget_epoch().state_dict(start)

    def check_resumable(self, saved: BudgetConfig) -> None:
        """Raises ValueError unless a state saved under ``saved`` continues under this one
        (the same plan; the epoch and the number of ranks may differ).

        Args:
            saved (BudgetConfig): the configuration a state dict recorded.
        """
        self.budget_epoch().check_resumable(saved.budget_epoch())

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, Any], *, strict: bool = True
    ) -> tuple[BudgetConfig, dict[str, Any]]:
        """``(config, resume)`` from a state dict saved by :meth:`state_dict`, checked by
        the core as :meth:`ShardConfig.from_state_dict` is (0.3's states, which wrote block
        fields, too); ``resume`` is the keywords of the core's ``BudgetStart`` (``window``,
        ``steps``, ``taken``), which checks that the resume point fits the plan.

        Args:
            state (Mapping): a dict saved by ``TokenBudgetBatchSampler.state_dict()``.
            strict (bool, optional): refuse keys this release does not write.
                Default: ``True``.
        """
        epoch, resume = _core.BudgetEpoch.from_state(state, strict)
        return cls(**epoch.fields()), resume


@dataclass(frozen=True)
class BudgetPlan(EpochFields):
    """What every rank yields in one pass of a token-budget epoch, in sum.

    Attributes:
        config: the configuration planned (``max_tokens``, ``window``, ...); the fields
            every epoch has (``n``, ``num_replicas``, ``seed``, ...) read as attributes too.
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
            f"seed={self.seed} max_tokens={self.config.max_tokens:,} window={self.config.window:,}"
            + (f" resumed in window {self.first_window:,}" if self.first_window else "")
            + f"\nsteps={self.steps:,} per rank  padding={self.padding:,}  dropped={self.dropped:,}"
        )


def lengths_probe(lengths: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The lengths' ends: what identifies them cheaply at any ``n`` (with ``n``)."""
    return np.concatenate([lengths[:1024], lengths[-1024:]]).astype(np.int64)


def lengths_fingerprint(lengths: npt.NDArray[Any]) -> str:
    """An identity of ``lengths`` a state records: a resume (or a run's answers) over other
    lengths is refused."""
    return content_id("lengths", len(lengths), digest(lengths_probe(lengths)))


class TokenBudgetBatchSampler(PassLifecycle, ProvenStream, Sampler[list[int]]):
    r"""Batches of variable-length samples under a padded token budget, the same number
    on every rank, every sample once per epoch across ranks.

    The epoch's perm-v2 order is read a ``window`` of positions at a time (memory never
    depends on the dataset's size). A window's samples are sorted by length and cut into
    batches with ``len(batch) * max(lengths[batch]) <= max_tokens`` (so little padding);
    the batches are grouped into steps of ``num_replicas`` batches of similar load (so no
    rank waits on another), and the steps are shuffled (so consecutive batches are not
    ordered by length). A window whose batch count is not a multiple of ``num_replicas``
    splits its largest batches. Every rank computes the same plan: no communication.

    Args:
        lengths (1-D integer array): one length per sample, e.g. an ``np.memmap``.
        max_tokens (int): the padded token budget of a batch.
        num_replicas (int, optional): data-parallel ranks (default: the process group).
        rank (int, optional): this rank (default: the process group's).
        seed (int, optional): key of the order. Default: ``0``.
        shuffle (bool, optional): the permutation's order (``False``: samples in index
            order, still batched by length within each window). Default: ``True``.
        drop_last (bool, optional): drop the few samples that cannot fill a step of the
            last window instead of repeating samples. Default: ``False``.
        window (int, optional): positions planned together; larger windows pad less and
            balance better, and cost more memory and time per window. Default: ``65536``.
        auto_epoch (bool, optional): advance the epoch by one each time the sampler is
            iterated again without :meth:`set_epoch`. Default: ``False`` (warn instead).
        check_consensus (bool, optional): check across the group at each epoch's first
            batch that every rank has the same configuration (a small all-gather).
        as_array (bool, optional): yield each batch as one int64 ``numpy.ndarray``
            instead of a list. Default: ``False``.
        device_mesh, mesh_dim: data-parallel ranks from a DeviceMesh (model parallelism).
        algorithm (str, optional): the permutation of the order and of each window's
            steps: ``"perm-v2"`` (budget-v2, default) or ``"perm-v1"`` (budget-v1, the plan
            of 0.3 and before). A loaded state dict continues with the plan it names.

    Example::

        >>> lengths = np.load("lengths.npy", mmap_mode="r")
        >>> sampler = TokenBudgetBatchSampler(lengths, max_tokens=16384, seed=0)
        >>> loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_collate)
        >>> for epoch in range(epochs):
        ...     sampler.set_epoch(epoch)
        ...     for batch in loader: pass
    """

    config: BudgetConfig  # the configuration of the current epoch, as every rank must agree on it

    @property
    def max_tokens(self) -> int:
        """The padded token budget of a batch."""
        return self.config.max_tokens

    @max_tokens.setter
    def max_tokens(self, value: int) -> None:
        refuse_assignment(self, "max_tokens", value)

    @property
    def window(self) -> int:
        """Positions planned together."""
        return self.config.window

    @window.setter
    def window(self, value: int) -> None:
        refuse_assignment(self, "window", value)

    def __init__(
        self,
        lengths: npt.ArrayLike,
        max_tokens: int,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        window: int = 1 << 16,
        auto_epoch: bool = False,
        check_consensus: bool = True,
        device_mesh: Any = None,
        mesh_dim: Optional[MeshDim] = None,
        as_array: bool = False,
        algorithm: str = _core.ALGORITHM,
    ) -> None:
        self.as_array = bool(as_array)
        self.lengths, self._lengths = as_lengths(lengths)  # the core reads _lengths in place
        num_replicas, self.rank = resolve_world(num_replicas, rank, device_mesh, mesh_dim)
        self._init_lifecycle(auto_epoch=auto_epoch, check_consensus=check_consensus)
        self._set_config(
            BudgetConfig(
                len(self.lengths),
                num_replicas,
                max_tokens=max_tokens,
                window=window,
                seed=seed,
                shuffle=shuffle,
                drop_last=drop_last,
                permutation=algorithm,
            )  # fmt: skip
        )
        self._run = _core.BudgetRun(self.config.budget_epoch())  # the run's history, in the core

    def _set_config(self, config: BudgetConfig, planner: Optional[_core.TokenBudget] = None) -> None:
        """A new epoch's configuration and its planner, from the epoch's start."""
        self.config, self._planner = config, planner if planner is not None else config.planner()
        self._resume_at(_core.BudgetStart(self._planner), config.num_replicas)
        self._forget_pass()

    def _resume_at(self, start: _core.BudgetStart, world: int) -> None:
        """The pass resumes at ``start``, saved by ``world`` ranks (the epoch's start: no resume)."""
        self._resume, self._resume_world = start, world
        self._summary: Optional[tuple[int, int, int]] = None  # the pass's (steps, padding, dropped)

    def _forget_pass(self) -> None:
        # The core's walk through the pass being run: its batches, and the resume point
        # after any count of them.
        self._batches: Optional[_core.BudgetBatches] = None
        self._loader: Optional[LoaderCount] = None  # what the DataLoader pulling the batches handed out

    def __getstate__(self) -> dict[str, Any]:
        if not self._settled:  # a started pass is accounted for first (a copy does not resume it again)
            self._settle()
        unpicklable = ("_planner", "_batches", "_loader", "_resume", "_summary")
        state = {k: v for k, v in self.__dict__.items() if k not in unpicklable}
        if self._run.is_open:  # the copy's history ends where this pass is
            state["_run"] = self._run.closed(self._done())
        r = self._resume
        state["_resume"] = {"window": r.window, "steps": r.steps, "taken": r.taken}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        resume = state.pop("_resume")
        self.__dict__.update(state, _planner=state["config"].planner())  # native: rebuilt
        self._resume_at(_core.BudgetStart(self._planner, **resume), self._resume_world)
        self._forget_pass()

    def set_epoch(self, epoch: int) -> None:
        """A new plan for ``epoch`` (keeps a loaded resume point of that epoch).

        Args:
            epoch (int): the epoch, in ``[0, 2**64 - 1]``.
        """
        config = self.config.replace(epoch=epoch)
        self._epoch_set()
        if config != self.config:
            if self._run.is_open:  # the history's last pass ends where the loop left it
                self._run = self._run.closed(self._done())
            self._set_config(config)

    def _pass(self) -> _core.BudgetPass:
        """The pass from the resume point (its first window, taken samples and steps done,
        under this world size), as the core plans, locates and proves it."""
        start = self._planner.resume(self._lengths, self._resume, self._resume_world, self.num_replicas)
        return _core.BudgetPass(self._planner, self._lengths, start, self.num_replicas)

    def __iter__(self) -> Iterator[Any]:
        loader = self._begin_pass()  # at the first next(): a generator
        pass_ = self._pass()
        previous = self._done() if self._run.is_open else None
        self._run.begin(self.config.budget_epoch(), pass_.start, previous)
        batches = _core.BudgetBatches(pass_, self.rank, as_array=self.as_array)
        self._forget_pass()
        self._batches, self._loader = batches, loader  # what it hands the loop is consumed
        yield from batches

    def __len__(self) -> int:
        """Batches per rank in this epoch (from the resume point): the core plans every
        window on all cores (GIL released), once per resume point, O(window) per core."""
        return self._sums()[0]

    def _sums(self) -> tuple[int, int, int]:
        """``(steps, padding, dropped)`` of the pass from the resume point: the core plans
        every window, once per resume point (``len()`` and :meth:`plan` share it)."""
        if self._summary is None:
            self._summary = self._pass().summary()
        return self._summary

    def plan(self) -> BudgetPlan:
        """The pass from the resume point (or the epoch's start), in sum: its steps per
        rank, padding and drops. The core plans every window on all cores (GIL released),
        O(window) memory per core."""
        steps, padding, dropped = self._sums()
        return BudgetPlan(self.config, self.rank, self._pass().start.window, steps, padding, dropped)

    def locate(self, sample: int, epoch: Optional[int] = None) -> list[tuple[int, int]]:
        """Every ``(rank, step)`` whose batch holds ``sample`` in ``epoch`` (steps counted
        from the pass's first, as the sampler yields them): empty when the sample is
        dropped or was taken before a resume, several entries when padding repeats it.
        The core plans the windows up to the sample's (all cores, GIL released).

        Args:
            sample (int): a dataset index in ``range(len(lengths))``.
            epoch (int, optional): the epoch to look in (from its start, unless it is the
                current one). Default: the current epoch, from its resume point.
        """
        sample = as_int("sample", sample)
        if not 0 <= sample < self.n:
            raise ValueError(f"sample {sample} is not in range({self.n})")
        if epoch is None or as_u64("epoch", epoch) == self.epoch:
            return self._pass().locate(sample)
        planner = self.config.replace(epoch=epoch).planner()
        return _core.BudgetPass(planner, self._lengths, _core.BudgetStart(planner), self.num_replicas).locate(
            sample
        )

    # -- the lifecycle's questions (PassLifecycle) ------------------------------------------

    def _handed(self) -> int:
        """Batches handed out in the pass being run."""
        return 0 if self._batches is None else self._batches.handed

    def _pass_started(self) -> bool:
        return self._handed() > 0

    def _resuming(self) -> bool:
        r = self._resume
        return (r.window, r.steps) != (0, 0) or any(r.taken)

    def _forget_resume_point(self) -> None:
        self._resume_at(_core.BudgetStart(self._planner), self.num_replicas)

    def _check_consensus(self, dealing: Mapping[str, Any]) -> None:
        check_consensus(self.config, self.rank, agreed=self._agreed())

    def _agreed(self) -> list[Agreed]:
        """What every process of the group must share beside the configuration: the resume
        point and the lengths (model-parallel peers share a rank)."""
        r = self._resume
        probe = lengths_probe(self.lengths)
        return [
            Agreed("window_index", r.window, FIX_RESUME),
            Agreed("steps", r.steps, FIX_RESUME),
            Agreed("saved num_replicas", self._resume_world, FIX_RESUME),
            Agreed("taken", digest(r.taken), FIX_RESUME, digest=True),
            Agreed(
                "lengths", digest(probe), "build the sampler from the same lengths on every rank", digest=True
            ),
        ]

    def state_dict(self, consumed_steps: Optional[int] = None) -> dict[str, Any]:
        """The resume point, O(window): the configuration, the window being planned, its
        samples taken before (``taken``, base64 bits) and the steps of its plan done; and
        the run's history (``history``, 7 integers per change), which
        :class:`~permshard.Run` answers from (``Run(state, lengths=lengths)``).

        Args:
            consumed_steps (int, optional): steps of the pass being run that the training
                loop consumed (default: the batches the DataLoader handed to the loop, not
                what its workers prefetched; without a DataLoader, the batches this rank
                handed out; pass the loop's count when a wrapper draws batches ahead).
        """
        done = self._done(consumed_steps)
        start = self._pass().start if self._batches is None else self._batches.resume_point(done)
        state = self._run.state_dict(self.config.budget_epoch(), start, done if self._run.is_open else None)
        state["dataset"] = lengths_fingerprint(self.lengths)  # a resume over other lengths is refused
        return state

    def _done(self, consumed_steps: Optional[int] = None) -> int:
        """Steps of the pass being run that count as consumed: ``consumed_steps``, checked,
        or the batches the DataLoader handed to the loop (without one, this rank's)."""
        handed = self._handed()
        if consumed_steps is None:
            counted = None if self._loader is None else self._loader.batches(handed)
            return handed if counted is None else counted
        done = as_int("consumed_steps", consumed_steps)
        if not 0 <= done <= handed:
            raise ValueError(
                f"consumed_steps must be in [0, {handed}] (batches this rank handed out in "
                f"this pass), got {done}"
            )
        return done

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores a resume point, possibly saved with another number of ranks: the rest
        of that window is re-planned, every sample still exactly once.

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict` (0.2's load too); every
                field is type- and range-checked.
            strict (bool, optional): refuse keys this sampler does not save (``False``
                ignores them). Default: ``True``.

        Raises:
            TypeError: ``state_dict`` is not a mapping, or a value has the wrong type.
            ValueError: it was saved by another sampler or configuration, or edited.
        """
        state = state_dict
        if isinstance(state, Mapping):  # else from_state_dict names the type
            check_same_dataset(state, lengths_fingerprint(self.lengths))
            state = {k: v for k, v in state.items() if k != "dataset"}
        saved, resume = BudgetConfig.from_state_dict(state, strict=strict)
        run = _core.BudgetRun.from_state(state, strict)
        # The state's epoch, continued with the plan it names; nothing else changes.
        config = self.config.replace(permutation=saved.permutation, epoch=saved.epoch)
        config.check_resumable(saved)
        planner = self._planner if config == self.config else config.planner()
        start = _core.BudgetStart(planner, **resume)  # checked by the core, before any change
        # Its steps within the resume window's plan (O(window)), before any change too.
        planner.resume(self._lengths, start, saved.num_replicas, self.num_replicas)
        self._set_config(config, planner)
        self._resume_at(start, saved.num_replicas)
        self._run = run
        self._state_loaded()

    def _proof_target(self) -> ProofTarget:
        """The pass being run (from its resume point, if any), as the core plans it: its
        exact proof plans each window as the sampler hands it out and checks it through
        the order's inverse — every position of the window not consumed before exactly
        once (but for declared padding and drops), in whole steps of one batch per rank,
        every batch under the budget; a window per core at a time, O(window) memory per
        core at any ``n``. Distributed, rank ``r`` proves the windows ``first + r, first +
        r + W, ...`` against the plan of the configuration every rank agreed on. There is
        no fingerprint proof (``exact=False``) and no bitmap of these plans."""
        pass_ = self._pass()
        agreed_plan = _core.BudgetPass(self.config.planner(), self._lengths, pass_.start, self.num_replicas)
        return ProofTarget(pass_, self.config, self.rank, agreed=self._agreed(), reference=agreed_plan)
