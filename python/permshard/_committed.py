"""The committed reads of torchft's replica groups (:mod:`permshard.torchft`): the one
global stream of positions (position ``p`` is sample ``order(p // n)[p % n]``), what the
groups agree at a step and what each rank then reads, a rank's record of its reads at
committed steps, and the audit of every rank's record. Nothing here needs torch: the
``permshard audit`` command reads records without it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ._core import COMMITTED_ALGORITHM, COMMITTED_PERMUTATION, ShardingError
from ._permutation import Permutation

#: The id of this arithmetic, recorded in every state; the core pins the permutation it reads.
ALGORITHM = COMMITTED_ALGORITHM


class Agreed(NamedTuple):
    """What the replica groups agreed at one step: its number, the positions committed
    before it, how many groups train, and this group's slot among them (``None``: it
    does not train)."""

    step: int
    consumed: int
    trained: int
    slot: Optional[int]


class Read(NamedTuple):
    """The positions one rank reads at one step: ``[start, start + length)``, and where the
    next step's begin if the membership stays and the step commits (``start + stride``)."""

    start: int
    length: int
    stride: int


def share(total: int, parts: int, index: int) -> tuple[int, int]:
    """``(offset, length)`` of part ``index`` of ``total`` items split in ``parts`` parts
    whose sizes differ by at most one (the larger first)."""
    base, extra = divmod(total, parts)
    return index * base + min(index, extra), base + (index < extra)


class StreamOrder:
    """The global stream: position ``p`` is sample ``order(p // n)[p % n]``.

    Args:
        n (int): dataset length.
        seed (int): key of the orders.
        shuffle (bool): a keyed order per epoch, or the identity.
    """

    def __init__(self, n: int, seed: int, shuffle: bool) -> None:
        self.n, self.seed, self.shuffle = n, seed, shuffle
        # The last epoch's order, as one tuple: the loader's drain thread reads beside the
        # step, and a single assignment is never seen half done.
        self._last: Optional[tuple[int, Permutation]] = None

    def samples(self, start: int, stop: int) -> list[int]:
        """The samples at positions ``[start, stop)``, across epochs."""
        out: list[int] = []
        while start < stop:
            epoch, offset = divmod(start, self.n)
            end = min(stop - start, self.n - offset) + offset
            if self.shuffle:
                last = self._last
                if last is None or last[0] != epoch:
                    order = Permutation(self.n, seed=self.seed, epoch=epoch, algorithm=COMMITTED_PERMUTATION)
                    last = self._last = (epoch, order)
                out.extend(last[1].take(offset, end).tolist())
            else:
                out.extend(range(offset, end))
            start += end - offset
        return out


class Row(NamedTuple):
    """Steps ``first_step .. first_step + steps - 1``, committed, read ``length`` positions
    from ``start``, ``start + stride``, ... under ``participants`` groups as ``group``."""

    first_step: int
    steps: int
    start: int
    stride: int
    length: int
    participants: int
    group: int


class CommitLog:
    """A rank's committed reads, one :class:`Row` per run of steps under one membership."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def record(self, agreed: Agreed, read: Read) -> None:
        """Adds a committed step's read: to the last row when it goes on from it."""
        assert agreed.slot is not None
        step, last = agreed.step, self.rows[-1] if self.rows else None
        if (
            last is not None
            and (last.stride, last.length, last.participants, last.group)
            == (read.stride, read.length, agreed.trained, agreed.slot)
            and last.first_step + last.steps == step
            and last.start + last.steps * last.stride == read.start
        ):
            self.rows[-1] = last._replace(steps=last.steps + 1)
        else:
            self.rows.append(Row(step, 1, read.start, read.stride, read.length, agreed.trained, agreed.slot))


@dataclass(frozen=True)
class CommittedAudit:
    """What :func:`audit` proved: positions ``[0, positions)`` committed exactly once.

    Attributes:
        positions: positions committed, all groups and ranks together.
        epochs: complete epochs among them (each sample of each read exactly once).
        steps: committed steps seen.
        seconds: time the audit took.
    """

    positions: int
    epochs: int
    steps: int
    seconds: float


def audit(states: Sequence[Mapping[str, Any]]) -> CommittedAudit:
    """Proves from the :meth:`CommittedLoader.state_dict` of every data-parallel rank of
    every replica group (model-parallel peers read the same: pass one of them, and one
    per attempt of a restarted group) that every position up to the last committed was
    read exactly once over the committed steps: so every sample of every complete epoch.

    Args:
        states (sequence of Mapping): the loaders' state dicts.

    Raises:
        ValueError: no state, a state of something else, or states of other streams.
        ShardingError: naming the positions read twice (a group that formed a quorum of its
            own) or never, with their samples and steps.
    """
    began = time.perf_counter()
    if not states:
        raise ValueError("audit needs the state of every rank of every group; got none")
    first = states[0]
    for i, s in enumerate(states):
        if not isinstance(s, Mapping) or s.get("algorithm") != ALGORITHM or "reads" not in s:
            raise ValueError(
                f"state {i} is not a CommittedLoader's (algorithm {ALGORITHM!r} and its 'reads'): "
                "pass loader.state_dict() of every rank of every group"
            )
        for key in ("algorithm", "n", "seed", "shuffle"):
            if s.get(key) != first.get(key):
                raise ValueError(f"the states disagree on {key}: {s.get(key)!r} and {first.get(key)!r}")
    reads: list[tuple[int, int, int, int]] = []  # (start, stop, step, state) per committed read
    steps: set[int] = set()
    for index, s in enumerate(states):
        for row in map(lambda r: Row(*map(int, r)), s["reads"]):
            for i in range(row.steps):
                start = row.start + i * row.stride
                reads.append((start, start + row.length, row.first_step + i, index))
                steps.add(row.first_step + i)
    reads.sort()
    order = StreamOrder(int(first["n"]), int(first["seed"]), bool(first["shuffle"]))
    reached = twice = 0
    problems: list[str] = []
    for start, stop, step, index in reads:
        if start < reached:
            twice += min(stop, reached) - start
            sample = order.samples(start, start + 1)[0]
            problems.append(f"position {start} (sample {sample}) read again at step {step} (state {index})")
        elif start > reached:
            problems.append(f"positions [{reached}, {start}) never read (before step {step}, state {index})")
        reached = max(reached, stop)
    if problems:
        raise ShardingError(
            f"the committed reads are not exactly once: {twice} positions read twice; "
            + "; ".join(problems[:5])
            + ". Two groups committed the same step (a group formed a quorum of its own: torchft's "
            "lighthouse needs min_replicas above half the groups) or a rank's state is missing"
        )
    n = int(first["n"])
    return CommittedAudit(reached, reached // n, len(steps), time.perf_counter() - began)
