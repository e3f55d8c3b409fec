"""permshard for torchft: every committed sample exactly once while replica groups fail,
heal and join.

torchft keeps training with the replica groups that are alive: each step a quorum decides
who participates, a failed group is dropped, a restarted one heals from a peer and joins
again, a step that fails is not committed. :class:`CommittedLoader` hands each group, at
each step, its part of one global stream of positions under that step's quorum, from the
Manager's public API (``participating_rank()``, ``num_participants()``,
``is_participating()``, ``current_step()``, ``allreduce()``):

* after the quorum the groups agree, in one small collective through the manager, on
  which of them train this step (a group healing in torchft's asynchronous mode takes
  part, but the manager zeroes its gradients) and on the positions committed before it;
* ``batch_size=B`` (per rank): the ``T`` training groups read ``B`` positions per rank
  each, group ``t`` (its index among them) ``[committed + (t * k + rank) * B, +B)`` for
  its ``k`` ranks;
* ``global_batch_size=G``: a step reads ``G`` positions whatever the membership, split
  over the training groups (sizes differ by at most one) and again over each group's
  ranks.

Position ``p`` is sample ``order(epoch)[p % n]`` of epoch ``p // n`` (the order of
``ShardedSampler(n, num_replicas=1, seed=seed, shuffle=shuffle)`` in that epoch): epochs
follow from the position, with no ``set_epoch``. A step nobody commits is read again by
the next one (the same positions); a group that does not train gets an empty batch; a
group that joins or heals learns the committed count from the collective, so it needs no
loader checkpoint and nothing travels with the heal. Every rank records its committed
reads, and :func:`audit` proves from all of them that every position was committed
exactly once (naming those read twice when a group formed a quorum of its own).

torchft is not a dependency of permshard: nothing here imports it.
"""

from __future__ import annotations

import functools
import os
import select
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data._utils.collate import default_collate

from ._committed import ALGORITHM, Agreed, CommitLog, CommittedAudit, Read, Row, StreamOrder, audit, share
from ._config import as_positive, as_u64

__all__ = ["CommittedAudit", "CommittedLoader", "Read", "audit"]

#: What defines the stream every group reads: fixed once the loader is built.
_FIXED = frozenset({"n", "seed", "shuffle", "batch_size", "global_batch_size", "rank", "world_size"})


def _exit_with(trainer: int, worker_id: int) -> None:
    """Starts, in a DataLoader worker, a thread that ends the worker once the ``trainer``
    process is gone. torch's own watch is on the worker's parent: under a forkserver that
    is the forkserver, which every worker keeps alive, so a crashed group's workers would
    run forever (a group crashes and restarts many times in a run)."""
    try:
        handle: Optional[int] = os.pidfd_open(trainer)  # readable once it exits, reaped or not
    except (AttributeError, OSError):
        handle = None  # not Linux: polled instead (a zombie trainer counts as alive)

    def watch() -> None:
        if handle is not None:
            select.select([handle], [], [])
            os._exit(0)
        while True:
            time.sleep(1.0)
            try:
                os.kill(trainer, 0)
            except OSError:  # gone (or its number taken by another user's process)
                os._exit(0)

    threading.Thread(target=watch, name="permshard-trainer-watch", daemon=True).start()


class _Ahead(Sampler[tuple[Read, list[int]]]):
    """The batches of the steps to come if the membership stays and every step commits:
    a DataLoader over it prefetches them. Each batch goes to the workers with the read it
    is for, and comes back with it (:class:`_Tagged`); ``issued`` holds the reads sent and
    not yet received, so the loader knows whether a read is in flight."""

    def __init__(self, order: StreamOrder) -> None:
        self.order = order
        self.next: Optional[Read] = None
        self.issued: deque[Read] = deque()

    def __iter__(self) -> Iterator[tuple[Read, list[int]]]:
        while True:
            read = self.next
            assert read is not None, "a plan is set before the DataLoader starts"
            indices = self.order.samples(read.start, read.start + read.length)
            self.next = read._replace(start=read.start + read.stride)
            self.issued.append(read)
            yield read, indices


class _Tagged(Dataset[Any]):
    """The user's dataset in the workers: a batch of ``(read, indices)`` is read as
    ``(read, samples)``, and :func:`_collate_tagged` keeps the read beside the batch, so a
    batch is only ever handed for the read it was fetched for."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, tagged: tuple[Read, list[int]]) -> tuple[Read, list[Any]]:
        read, indices = tagged
        return read, _samples_of(self.dataset, indices)


def _collate_tagged(
    collate_fn: Callable[[list[Any]], Any], fetched: tuple[Read, list[Any]]
) -> tuple[Read, Any]:
    read, samples = fetched
    return read, collate_fn(samples)


def _samples_of(dataset: Any, indices: list[int]) -> list[Any]:
    """The dataset's samples at ``indices`` (one ``__getitems__`` call where it has one)."""
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(indices) if getitems is not None else [dataset[i] for i in indices]


class CommittedLoader:
    """Hands this rank, at each torchft step, its batch of one global stream under that
    step's quorum: over the committed steps of all replica groups, every sample of every
    epoch is read exactly once, whatever joins, leaves, heals and uncommitted steps.

    Call :meth:`next_batch` once per step, after ``optimizer.zero_grad()`` (which starts
    the quorum) and before the forward pass. With ``num_workers > 0`` the batches of the
    next steps are prefetched by DataLoader workers for the last quorum's membership; after
    the quorum a batch of another membership is discarded and the right one fetched.

    Args:
        dataset (Dataset): a map-style dataset (``__getitem__``, ``__len__``; a
            ``__getitems__`` is used when it has one).
        manager (torchft.Manager): this rank's manager.
        batch_size (int, optional): samples per rank and step; a step reads
            ``batch_size`` per rank of each participating group.
        global_batch_size (int, optional): samples per committed step across all groups
            (instead of ``batch_size``): the same stream whatever the membership.
        seed (int, optional): key of the order. Default: ``0``.
        shuffle (bool, optional): a keyed order each epoch (``False``: the positions in
            order). Default: ``True``.
        rank (int, optional): this rank inside its replica group (``Manager(rank=)``;
            model-parallel peers pass the same). Default: ``$RANK`` or ``0``.
        world_size (int, optional): data-parallel ranks inside the group
            (``Manager(world_size=)``). Default: ``$WORLD_SIZE`` or ``1``.
        num_workers (int, optional): DataLoader worker processes prefetching the next
            steps' batches. Default: ``0`` (fetched at :meth:`next_batch`).
        collate_fn (callable, optional): merges a list of samples into a batch.
            Default: torch's ``default_collate``.
        prefetch_factor (int, optional): batches each worker prefetches. Default: ``2``.
        multiprocessing_context (optional): the workers' start method, as DataLoader's
            (default: the platform's). Whatever it is, a worker exits within a second of
            this process's crash (a forkserver's workers would otherwise wait on the
            forkserver, which they keep alive).
        pin_memory (bool, optional): as DataLoader's.

    Example::

        >>> loader = CommittedLoader(dataset, manager, batch_size=8)  # doctest: +SKIP
        >>> while manager.current_step() < steps:  # doctest: +SKIP
        ...     optimizer.zero_grad()  # starts the quorum
        ...     batch = loader.next_batch()  # this rank's batch under this quorum
        ...     model(batch).sum().backward()
        ...     optimizer.step()  # commits or not
    """

    def __init__(
        self,
        dataset: Any,
        manager: Any,
        *,
        batch_size: Optional[int] = None,
        global_batch_size: Optional[int] = None,
        seed: int = 0,
        shuffle: bool = True,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable[[list[Any]], Any]] = None,
        prefetch_factor: int = 2,
        multiprocessing_context: Any = None,
        pin_memory: bool = False,
    ) -> None:
        if (batch_size is None) == (global_batch_size is None):
            raise ValueError(
                "pass batch_size= (samples per rank and step) or global_batch_size= (samples "
                "per committed step across all groups), not both and not neither"
            )
        for name in (
            "participating_rank",
            "num_participants",
            "is_participating",
            "current_step",
            "allreduce",
            "errored",
        ):
            if not callable(getattr(manager, name, None)):
                raise TypeError(
                    f"manager must be a torchft.Manager (it has no {name}()), got {type(manager).__name__}"
                )
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle should be a boolean value, but got shuffle={shuffle!r}")
        self.dataset = dataset
        self.manager = manager
        self.batch_size = None if batch_size is None else as_positive("batch_size", batch_size)
        self.global_batch_size = (
            None if global_batch_size is None else as_positive("global_batch_size", global_batch_size)
        )
        self.seed = as_u64("seed", seed)
        self.shuffle = shuffle
        self.world_size = as_positive(
            "world_size", int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
        )
        self.rank = as_u64("rank", int(os.environ.get("RANK", 0)) if rank is None else rank)
        if self.rank >= self.world_size:
            raise ValueError(
                f"rank {self.rank} is not below world_size {self.world_size}: pass Manager(rank=, world_size=)'s"
            )
        self.n = as_positive("len(dataset)", len(dataset))
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self._order = StreamOrder(self.n, self.seed, self.shuffle)
        self._ahead = _Ahead(self._order)
        self._loader: Optional[DataLoader[Any]] = None
        if as_u64("num_workers", num_workers) > 0:
            self._loader = DataLoader(
                _Tagged(dataset),
                # torch types a batch as a list of indices; these are (read, indices) for _Tagged
                batch_sampler=self._ahead,  # type: ignore[arg-type]
                num_workers=num_workers,
                collate_fn=functools.partial(_collate_tagged, self.collate_fn),
                prefetch_factor=prefetch_factor,
                multiprocessing_context=multiprocessing_context,
                pin_memory=pin_memory,
                worker_init_fn=functools.partial(_exit_with, os.getpid()),
            )
        self._batches: Optional[Iterator[Any]] = None
        self._draining: Optional[threading.Thread] = None
        self._drain_failed = False
        self._handed: Optional[tuple[int, Read, Any]] = None  # (step, read, batch) of the last step
        self._empty: Any = None
        self._log = CommitLog()
        self._consumed = 0  # positions committed before the step being run, as this rank knows them
        self._pending: Optional[tuple[Agreed, int, Optional[Read]]] = None
        #: Positions of the last :meth:`next_batch`'s batch (``None``: an empty batch):
        #: samples ``[start, start + length)`` of the stream, what the record holds once
        #: the step is committed.
        self.last_read: Optional[Read] = None
        #: Seconds from the quorum to the batch at the last :meth:`next_batch` (the
        #: groups' one collective included).
        self.last_wait: float = 0.0
        #: Of it, seconds spent getting the batch (read here, or waited for from the workers).
        self.last_fetch: float = 0.0
        self._quorum_at = 0.0

    # -- the step --

    def agree(self) -> Optional[Agreed]:
        """What this step's quorum says, after it (this waits for it): one collective of
        the replica groups tells which of them train (a group healing in torchft's
        asynchronous mode takes part in the step but its gradients are zeroed, so it reads
        nothing) and the positions committed before the step, so a group that joins or
        heals learns them with no state of its own. ``None`` when the manager saw an
        error: the step will not be committed."""
        group = self.manager.participating_rank()
        self._quorum_at = time.perf_counter()
        slots = self.manager.num_participants()
        view = torch.zeros(slots + 1, dtype=torch.float64)
        training = group is not None and self.manager.is_participating()
        view[slots] = float(self._consumed)  # exact below 2**53
        if training:
            view[group] = 1.0
        # The manager zeroes a group that does not participate: the maximum is the count
        # of the groups at torchft's newest step, and the slots of those that train.
        self.manager.allreduce(view, reduce_op=dist.ReduceOp.MAX).wait()
        if self.manager.errored() is not None:
            return None  # this collective's or an earlier one: the view may be corrupt
        trained = view[:slots] > 0
        index = int(trained[:group].sum()) if training else None
        self._consumed = int(view[slots])
        return Agreed(self.manager.current_step(), self._consumed, int(trained.sum()), index)

    def read(self, agreed: Agreed) -> tuple[Optional[Read], int]:
        """This rank's positions under ``agreed`` (``None`` where its group does not
        train), and the positions the step reads across all groups."""
        k, rank, groups, slot = self.world_size, self.rank, agreed.trained, agreed.slot
        if self.batch_size is not None:
            b = self.batch_size
            total = groups * k * b
            return (None if slot is None else Read(agreed.consumed + (slot * k + rank) * b, b, total)), total
        g = self.global_batch_size
        assert g is not None
        if slot is None:
            return None, g if groups else 0
        offset, length = share(g, groups, slot)
        inner, length = share(length, k, rank)
        return Read(agreed.consumed + offset + inner, length, g), g

    def next_batch(self) -> Any:
        """This rank's batch for the current step, under this step's quorum: what
        ``collate_fn`` makes of its samples, an empty batch where the group does not
        train. The same batch again when the last step was not committed."""
        self._settle()
        agreed = self.agree()  # waits for the quorum
        fetching = time.perf_counter()
        self.last_read = None
        if agreed is None:  # the manager saw an error: this step will not be committed
            batch = self._empty_batch()
        else:
            self._settle(agreed)
            read, total = self.read(agreed)
            if read is None or read.length == 0:
                batch = self._empty_batch()
            elif self._handed is not None and self._handed[:2] == (agreed.step, read):
                batch = self._handed[2]  # the step is retried after an uncommitted one
                self.last_read = read
            else:
                batch = self._fetch(read)
                self._handed = (agreed.step, read, batch)
                self.last_read = read
            self._pending = (agreed, total, read)
        done = time.perf_counter()
        self.last_wait, self.last_fetch = done - self._quorum_at, done - fetching
        return batch

    def _settle(self, now: Optional[Agreed] = None) -> None:
        """Records the last step's read once it is known committed: by this group (its
        step count moved past it; in torchft's synchronous mode a heal past it too), or,
        given the next step's agreement ``now``, by the others (the committed count went
        past it: their update held this group's gradients). Else, with ``now``, it was not
        committed, and the next step reads the same positions."""
        if self._pending is None:
            return
        was, total, read = self._pending
        if self.manager.current_step() > was.step:
            committed = True
        elif now is None:
            return  # the step is in progress, or its fate is known at the next agreement
        else:
            committed = total > 0 and now.consumed >= was.consumed + total
        self._pending = None
        if committed:
            self._consumed = max(self._consumed, was.consumed + total)
            if read is not None and read.length:
                self._log.record(was, read)

    def _fetch(self, read: Read) -> Any:
        if self._loader is None:
            return self._samples(read)
        ahead = self._ahead
        self._join_drain()
        if self._batches is None:  # the first step, or after a failure: the workers start here
            ahead.next = read
            self._batches = iter(self._loader)
        elif read not in ahead.issued:
            # Another membership than the last: this batch is read here, and the workers
            # go on from the next step's once the batches in flight (prefetched for the old
            # membership) are taken and discarded, in a thread, while the step computes.
            ahead.next = read._replace(start=read.start + read.stride)
            self._draining = threading.Thread(
                target=self._discard, args=(len(ahead.issued),), name="permshard-discard", daemon=True
            )
            self._draining.start()
            return self._samples(read)
        try:
            while read in ahead.issued:  # earlier ones were prefetched for steps that did not come
                fetched, batch = next(self._batches)
                ahead.issued.remove(fetched)
                if fetched == read:
                    return batch
        except BaseException:
            self._restart()  # the workers start again at the next step, from its read
            raise
        self._restart()  # in flight, but its batch never came (not reached): read it here
        return self._samples(read)

    def _discard(self, count: int) -> None:
        """Takes the first ``count`` batches in flight and drops them. A failure here (a
        worker's, on a batch no one reads now) is not the step's: the workers start again
        at the next step."""
        assert self._batches is not None
        try:
            for _ in range(count):
                fetched, _ = next(self._batches)
                self._ahead.issued.remove(fetched)
        except BaseException:
            self._drain_failed = True

    def _join_drain(self) -> None:
        if self._draining is not None:
            self._draining.join()
            self._draining = None
        if self._drain_failed:
            self._drain_failed = False
            self._restart()

    def _restart(self) -> None:
        """Drops the workers' pipeline: the next fetch starts a new one at its read."""
        self._batches = None
        self._ahead.issued.clear()

    def _samples(self, read: Read) -> Any:
        """The batch of ``read``, read here."""
        return self._collate(self._order.samples(read.start, read.start + read.length))

    def _collate(self, indices: list[int]) -> Any:
        return self.collate_fn(_samples_of(self.dataset, indices))

    def _empty_batch(self) -> Any:
        """A batch of no sample, shaped as the dataset's (tensors and arrays of length 0)."""
        if self._empty is None:
            one = self._collate([0])
            self._empty = torch.utils._pytree.tree_map(
                lambda x: x[:0] if isinstance(x, (torch.Tensor, np.ndarray, list, tuple)) else x, one
            )
        return self._empty

    # -- the record --

    def state_dict(self) -> dict[str, Any]:
        """This rank's committed reads (what :func:`audit` proves), O(#membership changes):
        one row ``[first_step, steps, start, stride, length, participants, group]`` per run
        of steps read under one membership. A restarted group needs none of it to go on."""
        self._settle()
        return {
            "kind": "committed",
            "algorithm": ALGORITHM,
            "n": self.n,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "global_batch_size": self.global_batch_size,
            "world_size": self.world_size,
            "rank": self.rank,
            "consumed": self._consumed,
            "reads": [list(row) for row in self._log.rows],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores the committed reads of :meth:`state_dict` (a job restarted from a
        checkpoint keeps its record; the positions come from the manager's own state).

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict`.
            strict (bool, optional): refuse keys this loader does not save.
        """
        mine = self.state_dict()
        if "kind" not in state_dict:  # saved by 0.6, which named no kind
            state_dict = {"kind": "committed", **state_dict}
        if strict and set(state_dict) != set(mine):
            unknown = sorted(set(state_dict) - set(mine))
            missing = sorted(set(mine) - set(state_dict))
            raise ValueError(f"not a CommittedLoader state: unknown keys {unknown}, missing {missing}")
        for key in ("kind", "algorithm", "n", "seed", "shuffle", "batch_size", "global_batch_size"):
            if state_dict.get(key) != mine[key]:
                raise ValueError(
                    f"the state was saved with {key}={state_dict.get(key)!r}, this loader has "
                    f"{mine[key]!r}: build the loader as the run did"
                )
        self._log.rows = [Row(*map(int, row)) for row in state_dict["reads"]]
        self._consumed = as_u64("consumed", state_dict["consumed"])
        self._pending = None

    def close(self) -> None:
        """Stops the workers."""
        self._join_drain()
        self._restart()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIXED and name in self.__dict__:
            raise AttributeError(
                f"CommittedLoader.{name} is fixed: every group reads the stream it defines; "
                f"build a new CommittedLoader(..., {name}={value!r}) on every rank of every group"
            )
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        size = (
            f"batch_size={self.batch_size}"
            if self.batch_size
            else f"global_batch_size={self.global_batch_size}"
        )
        return (
            f"CommittedLoader(n={self.n}, {size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"rank={self.rank}, world_size={self.world_size})"
        )
