"""``TokenBudgetBatchSampler``: batches under a padded token budget, balanced across ranks,
planned a window of the perm-v1 order at a time (budget-v1)."""

from __future__ import annotations

import base64
import copy
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import Sampler

from . import _core
from ._validation import as_int, as_positive, as_u64
from .certificate import Certificate, PendingCertificate
from .collectives import gather_by_rank
from .config import ShardConfig
from .consensus import FIX_RESUME, Agreed, check_consensus, digest
from .loader_count import delivered_batches, find_loader_iterator
from .mesh import MeshDim, resolve_world

#: The algorithm id of the token-budget plan (the core's), recorded in state dicts.
BUDGET_ALGORITHM = _core.BUDGET_ALGORITHM

#: A resume point under this sampler's world size: (window, its taken samples, steps done).
_Start = tuple[int, Optional[npt.NDArray[np.bool_]], int]

#: The keys of a saved resume point, beside the configuration.
_RESUME_KEYS = ("window_index", "steps", "taken")


@dataclass(frozen=True, init=False)
class BudgetConfig(ShardConfig):
    """The configuration of :class:`TokenBudgetBatchSampler`: a :class:`ShardConfig` (the
    perm-v1 order the windows are read from, or the identity without ``shuffle``) and the
    budget's fields. Its ``algorithm`` and ``dealing`` are ``budget-v1`` (batches dealt
    by the plan); state dicts, the consensus and certificates read it as they read any
    configuration.

    Args:
        n (int): number of samples.
        num_replicas (int): data-parallel ranks.
        max_tokens (int, keyword-only): the padded token budget of a batch.
        window (int, keyword-only): positions planned together, ``>= num_replicas``.
        seed, epoch, shuffle, drop_last (keyword-only): as in :class:`ShardConfig`.

    Example::

        >>> BudgetConfig(n=1000, num_replicas=2, max_tokens=4096).algorithm
        'budget-v1'
    """

    max_tokens: int = 1
    window: int = 1 << 16

    resume_keys: ClassVar[tuple[str, ...]] = (
        "algorithm",
        "n",
        "seed",
        "shuffle",
        "drop_last",
        "max_tokens",
        "window",
    )

    def __init__(
        self,
        n: int,
        num_replicas: int,
        *,
        max_tokens: int,
        window: int = 1 << 16,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        block_size: int = 0,
        window_blocks: int = 0,
        dealing: str = BUDGET_ALGORITHM,
        batch_size: int = 0,
        drop_last_batch: bool = False,
    ) -> None:
        if (dealing, batch_size, drop_last_batch) != (BUDGET_ALGORITHM, 0, False):
            raise ValueError(
                f"token-budget batches are dealt by their plan: dealing must be {BUDGET_ALGORITHM!r}"
            )
        if block_size or window_blocks:
            raise ValueError(
                "token-budget batches are planned over the perm-v1 order: block_size and "
                "window_blocks must be 0"
            )
        super().__init__(n, num_replicas, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=drop_last)
        checked = {
            "max_tokens": as_positive("max_tokens", max_tokens),
            "window": as_positive("window", window),
        }
        if checked["window"] < self.num_replicas:
            raise ValueError(
                f"window ({checked['window']}) must be at least num_replicas ({self.num_replicas})"
            )
        self._set(dict(checked, algorithm=BUDGET_ALGORITHM, dealing=BUDGET_ALGORITHM))

    def accepts_algorithm(self, algorithm: str) -> bool:
        """Whether a state saved under ``algorithm`` continues here: ``budget-v1`` only.

        Args:
            algorithm (str): the algorithm id a state dict recorded.
        """
        return algorithm == BUDGET_ALGORITHM

    def partition(self, start: int = 0) -> _core.Partition:
        """Not available: token-budget batches are dealt by their plan, not round-robin.

        Args:
            start (int, optional): unused.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            "token-budget batches are dealt by their plan (budget-v1), not round-robin: use "
            "TokenBudgetBatchSampler's iteration, len() and verify()"
        )


@dataclass(frozen=True)
class _Plan:
    """One window's plan, from the core: ``samples`` sorted by length and ``bounds[s, r]``
    the ``[start, stop)`` of rank ``r``'s batch at step ``s``; ``padding`` counts repeated
    samples, ``dropped`` samples left out (``drop_last``)."""

    samples: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    padding: int
    dropped: int

    @property
    def steps(self) -> int:
        return int(self.bounds.shape[0])

    def batch(self, step: int, rank: int) -> npt.NDArray[np.int64]:
        """Rank ``rank``'s batch at ``step`` (a new array)."""
        i, j = self.bounds[step, rank]
        return self.samples[i:j].copy()


def _native(lengths: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``lengths`` as the core reads it in place: contiguous, native byte order (a memmap
    usually is already, and is then not copied)."""
    if lengths.flags.c_contiguous and lengths.dtype.isnative:
        return lengths
    return np.ascontiguousarray(lengths, dtype=lengths.dtype.newbyteorder("="))


class TokenBudgetBatchSampler(Sampler[list[int]]):
    r"""Batches of variable-length samples under a padded token budget, the same number
    on every rank, every sample once per epoch across ranks.

    The epoch's perm-v1 order is read a ``window`` of positions at a time (memory never
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
        shuffle (bool, optional): perm-v1 order (``False``: samples in index order,
            still batched by length within each window). Default: ``True``.
        drop_last (bool, optional): drop the few samples that cannot fill a step of the
            last window instead of repeating samples. Default: ``False``.
        window (int, optional): positions planned together; larger windows pad less and
            balance better, and cost more memory and time per window. Default: ``65536``.
        check_consensus (bool, optional): check across the group at each epoch's first
            batch that every rank has the same configuration (a small all-gather).
        as_array (bool, optional): yield each batch as one int64 ``numpy.ndarray``
            instead of a list. Default: ``False``.
        device_mesh, mesh_dim: data-parallel ranks from a DeviceMesh (model parallelism).

    Example::

        >>> lengths = np.load("lengths.npy", mmap_mode="r")
        >>> sampler = TokenBudgetBatchSampler(lengths, max_tokens=16384, seed=0)
        >>> loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_collate)
        >>> for epoch in range(epochs):
        ...     sampler.set_epoch(epoch)
        ...     for batch in loader: ...
    """

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
        check_consensus: bool = True,
        device_mesh: Any = None,
        mesh_dim: Optional[MeshDim] = None,
        as_array: bool = False,
    ) -> None:
        self.as_array = bool(as_array)
        array = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths)
        if array.ndim != 1 or array.dtype.kind not in "ui":
            raise TypeError(
                f"lengths must be a 1-D integer array (one length per sample), got {array.ndim}-D {array.dtype}"
            )
        if array.size == 0:
            raise ValueError("lengths is empty: a sampler needs at least one sample")
        self.lengths = array
        self._lengths = _native(array)  # what the core reads
        self.num_replicas, self.rank = resolve_world(num_replicas, rank, device_mesh, mesh_dim)
        self.epoch = 0
        # The configuration checks every field (the core those of the order).
        config = BudgetConfig(
            n=int(array.shape[0]),
            num_replicas=self.num_replicas,
            max_tokens=max_tokens,
            window=window,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self.max_tokens, self.window, self.seed = config.max_tokens, config.window, config.seed
        self.shuffle, self.drop_last = config.shuffle, config.drop_last
        self.check_consensus = bool(check_consensus)
        # The resume point: window index, samples of that window already consumed, steps of
        # its plan done (under `_resume_replicas` ranks).
        self._resume: tuple[int, Optional[npt.NDArray[np.bool_]], int, int] = (0, None, 0, self.num_replicas)
        # The last steps handed out in this pass: (steps handed so far, window, taken, step).
        self._progress: deque[tuple[int, int, Optional[npt.NDArray[np.bool_]], int]] = deque(maxlen=4096)
        self._handed = 0
        self._loader: Any = None  # the DataLoader iterator pulling the batches, if any
        self._lengths_cache: dict[int, int] = {}
        self._budget: Optional[tuple[int, _core.TokenBudget]] = None  # (epoch, its planner)

    # -- the plan -----------------------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of samples (``len(lengths)``)."""
        return int(self.lengths.shape[0])

    @property
    def config(self) -> BudgetConfig:
        """The configuration of the current epoch, as every rank must agree on it."""
        return BudgetConfig(
            n=self.n,
            num_replicas=self.num_replicas,
            max_tokens=self.max_tokens,
            window=self.window,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
        )

    def _num_windows(self) -> int:
        return -(-self.n // self.window)

    def _core_plan(self) -> _core.TokenBudget:
        """The core's planner of this epoch (built once per epoch)."""
        if self._budget is None or self._budget[0] != self.epoch:
            planner = _core.TokenBudget(
                self.n, self.max_tokens, self.window, self.seed, self.epoch, self.shuffle, self.drop_last
            )
            self._budget = (self.epoch, planner)
        return self._budget[1]

    def _samples(self, k: int) -> npt.NDArray[np.int64]:
        """The samples at positions ``[k·window, (k+1)·window)`` of the epoch's order."""
        return self._core_plan().samples(k)

    def _plan(self, k: int, taken: Optional[npt.NDArray[np.bool_]], world: int) -> _Plan:
        """The steps of window ``k`` without its ``taken`` samples, for ``world`` ranks."""
        samples, bounds, padding, dropped = self._core_plan().plan(self._lengths, k, taken, world)
        return _Plan(samples, bounds.reshape(-1, world, 2), padding, dropped)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_budget"] = None  # native, rebuilt on demand
        state["_loader"] = None  # a weak reference, of this process only
        return state

    # -- iteration -----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """A new plan for ``epoch`` (keeps a loaded resume point of that epoch).

        Args:
            epoch (int): the epoch, in ``[0, 2**64 - 1]``.
        """
        epoch = as_u64("epoch", epoch)
        if epoch != self.epoch:
            self._resume = (0, None, 0, self.num_replicas)
        self.epoch = epoch

    def _start(self) -> _Start:
        """The resume point as (window, taken, steps) under this sampler's world size."""
        k, taken, steps, world = self._resume
        if world == self.num_replicas or k >= self._num_windows():
            return k, taken, steps
        # Another world size: what the saved plan consumed is taken; the rest is re-planned.
        plan = self._plan(k, taken, world)
        consumed = np.zeros(min(self.n, (k + 1) * self.window) - k * self.window, dtype=bool)
        if taken is not None:
            consumed |= taken
        done = np.concatenate(  # a saved step count past the plan (an edited state): all of it
            [plan.batch(s, r) for s in range(min(steps, plan.steps)) for r in range(world)]
            or [np.zeros(0, np.int64)]
        )
        window = self._samples(k)
        by_sample = np.argsort(window)  # the window's positions of the samples done
        consumed[by_sample[np.searchsorted(window, done, sorter=by_sample)]] = True
        return k, consumed, 0

    def __iter__(self) -> Iterator[Any]:
        if self.check_consensus and dist.is_available() and dist.is_initialized():
            check_consensus(self.config, self.rank, agreed=self._agreed())
        k, taken, first_step = self._start()
        self._progress.clear()
        self._handed = 0
        self._loader = None
        while k < self._num_windows():
            plan = self._plan(k, taken, self.num_replicas)
            for s in range(first_step, plan.steps):
                if self._handed == 0:
                    self._loader = find_loader_iterator()  # what it hands the loop is consumed
                self._handed += 1
                self._progress.append((self._handed, k, taken, s + 1))
                batch = plan.batch(s, self.rank)
                yield batch if self.as_array else batch.tolist()
            k, taken, first_step = k + 1, None, 0

    def __len__(self) -> int:
        """Batches per rank in this epoch (from the resume point): the core plans every
        window on all cores (GIL released), once per epoch, O(window) memory per core."""
        key = hash((self.epoch, self._resume[0], self._resume[2], self.num_replicas))
        if key not in self._lengths_cache:
            k, taken, first = self._start()
            total = self._core_plan().count_steps(self._lengths, k, taken, first, self.num_replicas)
            self._lengths_cache = {key: total}
        return self._lengths_cache[key]

    def _agreed(self) -> list[Agreed]:
        """What every process of the group must share beside the configuration: the resume
        point and the lengths (model-parallel peers share a rank)."""
        k, taken, steps, world = self._resume
        probe = np.concatenate([self.lengths[: min(self.n, 1024)], self.lengths[max(0, self.n - 1024) :]])
        return [
            Agreed("window_index", k, FIX_RESUME),
            Agreed("steps", steps, FIX_RESUME),
            Agreed("saved num_replicas", world, FIX_RESUME),
            Agreed("taken", digest(_encode_taken(taken)), FIX_RESUME, digest=True),
            Agreed(
                "lengths",
                digest(np.asarray(probe, dtype=np.int64)),
                "build the sampler from the same lengths on every rank",
                digest=True,
            ),
        ]

    # -- state and proofs -------------------------------------------------------------------------

    def state_dict(self, consumed_steps: Optional[int] = None) -> dict[str, Any]:
        """The resume point, O(window): the configuration, the window being planned, its
        samples taken before (``taken``, base64 bits) and the steps of its plan done.

        Args:
            consumed_steps (int, optional): steps of the pass being run that the training
                loop consumed (default: the batches the DataLoader handed to the loop, not
                what its workers prefetched; without a DataLoader, the batches this rank
                handed out; pass the loop's count when a wrapper draws batches ahead).
        """
        if consumed_steps is None:
            done = delivered_batches(self._loader, self._handed)
        else:
            done = as_int("consumed_steps", consumed_steps)
        oldest = self._handed - len(self._progress)
        if done == 0:
            k, taken, steps = self._start()
        elif oldest < done <= self._handed:
            _, k, taken, steps = self._progress[done - oldest - 1]
        else:
            raise ValueError(
                f"consumed_steps must be in [{max(oldest + 1, 0) if oldest else 0}, {self._handed}] (batches "
                f"this rank handed out in this pass, the last {len(self._progress)} remembered), got {done}"
            )
        return dict(self.config.saved_fields(), window_index=k, steps=steps, taken=_encode_taken(taken))

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Restores a resume point, possibly saved with another number of ranks: the rest
        of that window is re-planned, every sample still exactly once.

        Args:
            state (Mapping): a dict saved by :meth:`state_dict` (0.2's load too); every
                field is type- and range-checked.
            strict (bool, optional): refuse keys this sampler does not save (``False``
                ignores them). Default: ``True``.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: it was saved by another sampler or configuration, or edited.
        """
        saved = BudgetConfig.read_state(state, _RESUME_KEYS, strict=strict)
        self.config.check_resumable(saved)
        k = as_int("window_index", state["window_index"])
        steps = as_u64("state_dict['steps']", state["steps"])
        if not 0 <= k <= self._num_windows():
            raise ValueError(f"state_dict['window_index'] must be in [0, {self._num_windows()}], got {k}")
        size = min(self.n, (k + 1) * self.window) - k * self.window
        taken = _decode_taken(state["taken"], size)
        self.epoch = saved.epoch
        self._resume = (k, taken, steps, saved.num_replicas)
        self._progress.clear()
        self._handed = 0

    def _prove_window(self, k: int, start: _Start) -> Any:
        """The core's proof of window ``k``'s plan, as handed out, in the pass from
        ``start`` (see :meth:`verify`): ``(samples per rank, steps, consumed, covered,
        padding, dropped)``, or ShardingError."""
        first, taken, first_step = start
        window_taken, skip = (taken, first_step) if k == first else (None, 0)
        plan = self._plan(k, window_taken, self.num_replicas)
        return self._core_plan().prove(
            self._lengths, k, window_taken, skip, self.num_replicas, plan.samples, plan.bounds.ravel(),
            plan.padding, plan.dropped,
        )  # fmt: skip

    def _prove(self, windows: range, start: _Start) -> tuple[list[int], list[int], Optional[int]]:
        """Proves ``windows`` of the pass from ``start`` (:meth:`_start`), a window per core
        at a time (the core releases the GIL). Returns the totals ``[steps, consumed,
        covered, padding, dropped]``, the samples per rank, and the first window whose
        proof failed (``None``: none)."""
        self._core_plan()  # built here, not raced for by the threads

        def one(k: int) -> tuple[int, Any]:
            try:
                return k, self._prove_window(k, start)
            except _core.ShardingError:
                return k, None

        totals, per_rank = [0] * 5, [0] * self.num_replicas
        with ThreadPoolExecutor(max(1, min(len(windows), os.cpu_count() or 1))) as pool:
            for k, proven in pool.map(one, windows):  # in window order
                if proven is None:
                    pool.shutdown(cancel_futures=True)
                    return totals, per_rank, k
                ranks, *counts = proven
                totals = [t + c for t, c in zip(totals, counts)]
                per_rank = [t + c for t, c in zip(per_rank, ranks)]
        return totals, per_rank, None

    def _certificate(
        self, totals: list[int], per_rank: list[int], began: float, ranks: Any, first_window: int
    ) -> Certificate:
        steps, consumed, covered, padding, dropped = totals
        start = min(first_window * self.window, self.n)
        return Certificate(
            config=self.config,
            lengths=tuple(per_rank),
            covered=covered,
            padding=padding,
            dropped=dropped,
            seconds=time.perf_counter() - began,
            method="inverse",
            start=start,
            consumed=start + consumed,
            batches=steps,
            ranks=tuple(ranks),
        )

    def verify(self) -> Certificate:
        """Exact proof of the pass being run (from its resume point, if any), by the order's
        inverse: each window's plan, for every rank, as the sampler hands it out, holds
        every position of the window not consumed before exactly once (but for declared
        padding and drops), in whole steps of one batch per rank, every batch under the
        budget. A window per core at a time: O(window) memory per core at any ``n``.

        Returns:
            Certificate: ``lengths`` (samples per rank), ``batches`` (per rank), coverage,
            padding and drops, ``consumed`` (samples consumed before the pass).

        Raises:
            ShardingError: with what is missing, repeated or over the budget.
        """
        began = time.perf_counter()
        start = self._start()
        totals, per_rank, failed = self._prove(range(start[0], self._num_windows()), start)
        if failed is not None:
            self._prove_window(failed, start)  # raises the core's counter-example
            raise _core.ShardingError(f"the proof of window {failed} failed")
        return self._certificate(totals, per_rank, began, range(self.num_replicas), start[0])

    def verify_distributed(self, group: Any = None, *, exact: bool = True) -> Certificate:
        """Consensus, then the exact proof of :meth:`verify` split across the ranks of
        ``group``: rank ``r`` proves the windows ``first + r, first + r + W, ...`` of the
        pass for every rank, and one fixed-size all-gather adds the counts up. O(n / W)
        work and O(window) memory per rank. A collective: every process of the group
        must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).
            exact (bool, optional): ``True`` (the only proof of these plans; accepted
                so that every sampler's ``verify_distributed(exact=True)`` reads alike).

        Raises:
            ShardingError: on every rank, with the first failing window's counter-example.
        """
        if not exact:
            raise ValueError(
                "token-budget plans have no fingerprint proof: call verify_distributed() (exact)"
            )
        return self._distributed(group, background=False).wait()

    def verify_in_background(self, group: Any = None) -> PendingCertificate:
        """The proof of :meth:`verify_distributed` with this rank's windows proven in a
        background thread while training goes on (the plans of the pass as they are now:
        a later ``set_epoch`` or resume does not change what is proven); the consensus now,
        the one small collective when every rank calls :meth:`PendingCertificate.wait`.
        A collective: every process of the group must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).
        """
        return self._distributed(group, background=True)

    def _distributed(self, group: Any, background: bool) -> PendingCertificate:
        """Consensus, then this rank's windows proven (in a thread when ``background``),
        gathered and judged by the pending certificate's ``wait``."""
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("verify_distributed needs torch.distributed to be initialized")
        began = time.perf_counter()
        check_consensus(self.config, self.rank, agreed=self._agreed(), group=group)
        snapshot = copy.copy(self)  # the pass as it is now, whatever this sampler does next
        world, start = self.num_replicas, snapshot._start()
        windows = range(start[0] + self.rank, snapshot._num_windows(), world)

        def finish(proven: tuple[list[int], list[int], Optional[int]]) -> Certificate:
            totals, per_rank, failed = proven
            mine = [2**64 - 1 if failed is None else failed, *totals, *per_rank]
            rows = gather_by_rank(self.rank, mine, group, "proofs")
            failures = [row[0] for row in rows.values() if row[0] != 2**64 - 1]
            if failures:  # every rank proves the first failing window again, for its message
                snapshot._prove_window(min(failures), start)
                raise _core.ShardingError(f"the proof of window {min(failures)} failed on another rank")
            totals = [sum(row[1 + i] for row in rows.values()) for i in range(5)]
            per_rank = [sum(row[6 + r] for row in rows.values()) for r in range(world)]
            return snapshot._certificate(totals, per_rank, began, sorted(rows), start[0])

        return PendingCertificate(lambda: snapshot._prove(windows, start), finish, background=background)


def _encode_taken(taken: Optional[npt.NDArray[np.bool_]]) -> str:
    """The samples of the resume window taken before it, as base64 bits (``""``: none)."""
    return "" if taken is None else base64.b64encode(np.packbits(taken).tobytes()).decode()


def _decode_taken(text: Any, size: int) -> Optional[npt.NDArray[np.bool_]]:
    """:func:`_encode_taken`'s bits back, for a window of ``size`` positions."""
    if not isinstance(text, str):
        raise TypeError(f"state_dict['taken'] must be a base64 string, got {type(text).__name__}")
    if not text:
        return None
    try:
        bits = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8)
    except ValueError:
        raise ValueError("state_dict['taken'] is not valid base64: the state was edited") from None
    if bits.size != -(-size // 8):
        raise ValueError(
            f"state_dict['taken'] holds {bits.size * 8} bits for a window of {size} positions: the "
            "state was saved with another window or edited"
        )
    taken: npt.NDArray[np.bool_] = np.unpackbits(bits)[:size].astype(bool)
    return taken
