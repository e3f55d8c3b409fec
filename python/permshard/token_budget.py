"""``TokenBudgetBatchSampler``: batches under a padded token budget, balanced across ranks,
planned a window of the perm-v1 order at a time (budget-v1)."""

from __future__ import annotations

import base64
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import Sampler

from . import _core
from ._validation import as_int, as_positive, as_u64
from .certificate import Certificate
from .config import ShardConfig
from .consensus import FIX_RESUME, Agreed, check_consensus, digest
from .mesh import MeshDim, resolve_world

#: The algorithm id of the token-budget plan, recorded in state dicts.
BUDGET_ALGORITHM = "budget-v1"

_MASK64 = 2**64 - 1

#: The keys of a saved resume point, beside the configuration.
_RESUME_KEYS = ("window_index", "steps", "taken")


@dataclass(frozen=True, init=False)
class BudgetConfig(ShardConfig):
    """The configuration of :class:`TokenBudgetBatchSampler`: a :class:`ShardConfig` (the
    perm-v1 order the windows are read from, or the identity without ``shuffle``) and the
    budget's fields. Its ``algorithm`` is ``budget-v1``; state dicts, the consensus and
    certificates read it as they read any configuration.

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
    ) -> None:
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
        self._set(dict(checked, algorithm=BUDGET_ALGORITHM))

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
    """One window's steps: ``steps[s][r]`` is rank ``r``'s batch at step ``s``; ``padding``
    counts repeated samples, ``dropped`` samples left out (``drop_last``)."""

    steps: list[list[list[int]]]
    padding: int
    dropped: int


def _window_seed(seed: int, epoch: int, window: int) -> int:
    """A key per (seed, epoch, window) for the order of a window's steps."""
    return (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + window + 1) & _MASK64


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
        self._lengths_cache: dict[int, int] = {}
        self._order: Optional[tuple[int, _core.Permutation]] = None  # (epoch, its order)

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

    def _samples(self, k: int) -> npt.NDArray[np.int64]:
        """The samples at positions ``[k·window, (k+1)·window)`` of the epoch's order."""
        start, stop = k * self.window, min(self.n, (k + 1) * self.window)
        if not self.shuffle:
            return np.arange(start, stop, dtype=np.int64)
        if self._order is None or self._order[0] != self.epoch:  # built once per epoch
            self._order = (self.epoch, _core.Permutation(self.n, self.seed, self.epoch))
        result: npt.NDArray[np.int64] = self._order[1].take(start, stop)
        return result

    def _plan(self, k: int, taken: Optional[npt.NDArray[np.bool_]], world: int) -> _Plan:
        """The steps of window ``k`` without its ``taken`` samples, for ``world`` ranks."""
        samples = self._samples(k)
        if taken is not None:
            samples = samples[~taken]
        # Gather in index order (a memmap reads forward), then back to the samples' order.
        rank_of = np.argsort(np.argsort(samples))
        lengths = np.asarray(self.lengths[np.sort(samples)], dtype=np.int64)[rank_of]
        too_long = np.nonzero(lengths > self.max_tokens)[0]
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(
                f"sample {int(samples[i])} has length {int(lengths[i])} > max_tokens={self.max_tokens}: "
                "no batch can hold it. Raise max_tokens, or truncate or filter long samples"
            )
        by_length = np.argsort(lengths, kind="stable")
        samples, lengths = samples[by_length], lengths[by_length]
        # Batches are ranges [i, j) of the sorted samples: the last one is the longest.
        batches: list[tuple[int, int]] = []
        i, count, budget = 0, len(samples), self.max_tokens
        while i < count:
            j = i + 1
            while j < count and (j - i + 1) * lengths[j] <= budget:
                j += 1
            batches.append((i, j))
            i = j
        padding = dropped = 0
        while len(batches) % world:
            largest = max(range(len(batches)), key=lambda b: batches[b][1] - batches[b][0])
            i, j = batches[largest]
            if j - i > 1:  # split it: two batches under the same budget
                batches[largest] = (i, (i + j) // 2)
                batches.append(((i + j) // 2, j))
            elif self.drop_last or not batches:
                i, j = batches.pop()
                dropped += j - i
            else:  # too few samples for a step: repeat some, declared as padding
                batches.append(batches[padding % len(batches)])
                padding += 1
        # Steps of similar load: heaviest batches together; ranks rotate within a step.
        batches.sort(key=lambda b: -(b[1] - b[0]) * int(lengths[b[1] - 1]))
        ids = samples.tolist()
        steps = [
            [ids[slice(*batches[s * world + (r + s) % world])] for r in range(world)]
            for s in range(len(batches) // world)
        ]
        if steps and self.shuffle:
            order = _core.Permutation(len(steps), _window_seed(self.seed, self.epoch, k), 0)
            steps = [steps[i] for i in order.take_list(0, len(steps))]
        return _Plan(steps, padding, dropped)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_order"] = None  # native, rebuilt on demand
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

    def _start(self) -> tuple[int, Optional[npt.NDArray[np.bool_]], int]:
        """The resume point as (window, taken, steps) under this sampler's world size."""
        k, taken, steps, world = self._resume
        if world == self.num_replicas or k >= self._num_windows():
            return k, taken, steps
        # Another world size: what the saved plan consumed is taken; the rest is re-planned.
        plan = self._plan(k, taken, world)
        consumed = np.zeros(min(self.n, (k + 1) * self.window) - k * self.window, dtype=bool)
        if taken is not None:
            consumed |= taken
        positions = {int(x): i for i, x in enumerate(self._samples(k).tolist())}
        for step in plan.steps[:steps]:
            for batch in step:
                consumed[[positions[x] for x in batch]] = True
        return k, consumed, 0

    def __iter__(self) -> Iterator[Any]:
        if self.check_consensus and dist.is_available() and dist.is_initialized():
            check_consensus(self.config, self.rank, agreed=self._agreed())
        k, taken, first_step = self._start()
        self._progress.clear()
        self._handed = 0
        while k < self._num_windows():
            plan = self._plan(k, taken, self.num_replicas)
            for s in range(first_step, len(plan.steps)):
                self._handed += 1
                self._progress.append((self._handed, k, taken, s + 1))
                batch = plan.steps[s][self.rank]
                yield np.asarray(batch, dtype=np.int64) if self.as_array else batch
            k, taken, first_step = k + 1, None, 0

    def __len__(self) -> int:
        """Batches per rank in this epoch (from the resume point): plans every window,
        O(n) time once per epoch, O(window) memory."""
        key = hash((self.epoch, self._resume[0], self._resume[2], self.num_replicas))
        if key not in self._lengths_cache:
            k, taken, first = self._start()
            total = 0
            while k < self._num_windows():
                total += len(self._plan(k, taken, self.num_replicas).steps) - first
                k, taken, first = k + 1, None, 0
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
                loop consumed (default: the batches this rank handed out; pass the loop's
                count when a DataLoader prefetches).
        """
        done = self._handed if consumed_steps is None else as_int("consumed_steps", consumed_steps)
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
        return dict(self.config.as_dict(), window_index=k, steps=steps, taken=_encode_taken(taken))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a resume point, possibly saved with another number of ranks: the rest
        of that window is re-planned, every sample still exactly once.

        Args:
            state (Mapping): a dict saved by :meth:`state_dict` (0.2's load too).

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: it was saved by another sampler or configuration, or edited.
        """
        saved = BudgetConfig.read_state(state, _RESUME_KEYS)
        self.config.check_resumable(saved)
        k = as_int("window_index", state["window_index"])
        if not 0 <= k <= self._num_windows():
            raise ValueError(f"state_dict['window_index'] must be in [0, {self._num_windows()}], got {k}")
        size = min(self.n, (k + 1) * self.window) - k * self.window
        taken = _decode_taken(state["taken"], size)
        self.epoch = saved.epoch
        self._resume = (k, taken, as_int("steps", state["steps"]), saved.num_replicas)
        self._progress.clear()
        self._handed = 0

    def verify(self) -> Certificate:
        """Exact proof of the pass being run (from its resume point, if any): plans it for
        every rank and checks each sample of the epoch's rest exactly once, plus declared
        padding, minus declared drops; every batch under the budget; every rank the same
        number of batches. O(n) time, O(n) bytes.

        Returns:
            Certificate: ``lengths`` (samples per rank), ``batches`` (per rank), coverage,
            padding and drops, ``consumed`` (samples consumed before the pass).

        Raises:
            ShardingError: with what is missing, repeated or over the budget.
        """
        began = time.perf_counter()
        seen = np.zeros(self.n, dtype=np.uint8)  # times each sample is consumed or yielded
        first_window, taken, first_step = self._start()
        windows = self._num_windows()
        for j in range(min(first_window, windows)):  # consumed in the windows before the pass
            seen[self._samples(j)] = 1
        if first_window < windows:  # and in its first window, before the resume point
            if taken is not None:
                seen[self._samples(first_window)[taken]] = 1
            first_plan = self._plan(first_window, taken, self.num_replicas)
            for step in first_plan.steps[:first_step]:
                for batch in step:
                    seen[batch] = 1
        consumed = int(np.count_nonzero(seen))
        padding = dropped = batches = 0
        per_rank = [0] * self.num_replicas
        for k in range(first_window, windows):
            plan = first_plan if k == first_window else self._plan(k, None, self.num_replicas)
            padding, dropped = padding + plan.padding, dropped + plan.dropped
            for step in plan.steps[first_step if k == first_window else 0 :]:
                batches += 1
                if len(step) != self.num_replicas:
                    raise _core.ShardingError(
                        f"a step of window {k} has {len(step)} batches, not one per rank"
                    )
                for r, batch in enumerate(step):
                    if len(batch) * int(np.max(self.lengths[batch])) > self.max_tokens:
                        raise _core.ShardingError(
                            f"a batch of window {k} exceeds max_tokens={self.max_tokens}"
                        )
                    per_rank[r] += len(batch)
                    np.add.at(seen, batch, 1)
        missing = int(np.sum(seen == 0))
        repeated = int(np.sum(np.maximum(seen.astype(np.int64) - 1, 0)))
        if missing != dropped or repeated != padding:
            raise _core.ShardingError(
                f"the plan misses {missing} samples (declared dropped: {dropped}) and repeats {repeated} "
                f"(declared padding: {padding})"
            )
        return Certificate(
            config=self.config,
            lengths=tuple(per_rank),
            covered=self.n - consumed - missing,
            padding=padding,
            dropped=dropped,
            seconds=time.perf_counter() - began,
            start=min(first_window * self.window, self.n),
            consumed=consumed,
            batches=batches,
            ranks=tuple(range(self.num_replicas)),
        )


def _encode_taken(taken: Optional[npt.NDArray[np.bool_]]) -> str:
    """The samples of the resume window taken before it, as base64 bits (``""``: none)."""
    return "" if taken is None else base64.b64encode(np.packbits(taken).tobytes()).decode()


def _decode_taken(text: Any, size: int) -> Optional[npt.NDArray[np.bool_]]:
    """:func:`_encode_taken`'s bits back, for a window of ``size`` positions."""
    if not text:
        return None
    if not isinstance(text, str):
        raise TypeError(f"state_dict['taken'] must be a base64 string, got {type(text).__name__}")
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
