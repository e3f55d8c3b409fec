"""Sharding IterableDatasets by rank x DataLoader worker: every element read by exactly one
consumer (rank, worker); and what a run read, as *layers*, and the rest of the stream after
them.

A layer records how a run dealt (``"stride"`` or ``"shards"``), its ranks and DataLoader
workers, its batch size and the batches every rank's loop took: the elements it took are a
pure function of them, with no need to know any length. The core (``_core.Layer``) owns
that arithmetic and the layer's schema; a resumed run filters the source through every
layer in order (each numbers the elements the previous ones left) and deals what is left,
by stride, to its own consumers."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, Callable, Generic, Optional, TypeVar

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from .. import _core
from .._config import as_int
from .._distributed import MeshDim, from_mesh
from .._hooks import content_id

T = TypeVar("T")
S = TypeVar("S")


def read_layers(layers: Sequence[Any]) -> list[_core.Layer]:
    """The layers of a state dict, checked by the core: each one's keys, types and ranges,
    and whole shards dealt by the first run only.

    Args:
        layers (sequence): ``state_dict["layers"]``, oldest first.
    """
    runs = [_core.Layer.from_state(layer) for layer in layers]
    _core.check_layers(runs)
    return runs


def _left_by_stride(elements: Iterator[T], layer: _core.Layer) -> Iterator[T]:
    """The elements a stride layer did not take, in order."""
    taken_below, kept_from = layer.taken_below, layer.kept_from
    # Every element before taken_below was taken: skipped at C speed.
    rest = itertools.islice(elements, taken_below, None)
    for i, element in enumerate(rest, start=taken_below):
        if i >= kept_from:
            yield element
            yield from rest
            return
        if layer.keeps(i):
            yield element


def _left_by_shards(shards: Iterable[Iterable[T]], layer: _core.Layer) -> Iterator[T]:
    """The elements a shards layer did not take: each shard belonged to one rank's stream
    (its shards in order), which that rank's workers took by stride."""
    seen: dict[int, int] = {}  # elements of each rank's stream so far
    taken_below, kept_from = layer.taken_below, layer.kept_from
    for s, shard in enumerate(shards):
        rank = layer.rank_of_shard(s)
        i = seen.get(rank, 0)
        for element in shard:
            if i >= kept_from or (i >= taken_below and layer.keeps(i)):
                yield element
            i += 1
        seen[rank] = i


def left_over(shards: Iterable[Iterable[T]], layers: Sequence[Mapping[str, Any]]) -> Iterator[T]:
    """The elements of ``shards`` (each an iterable of elements, in order) that no layer
    took, in order.

    Args:
        shards (iterable of iterables): the source's shards (one, without ``open_shard``).
        layers (sequence of Mapping): the runs before, oldest first.
    """
    runs = read_layers(layers)
    if runs and runs[0].dealt == "shards":
        elements: Iterator[T] = _left_by_shards(shards, runs[0])
        runs = runs[1:]
    else:
        elements = (element for shard in shards for element in shard)
    for run in runs:
        elements = _left_by_stride(elements, run)
    return elements


def loader_layer(loader: Any, dealt: str, ranks: int, consumed_batches: Optional[int]) -> dict[str, Any]:
    """The layer of this run: ``loader``'s workers and batch size, and the batches the loop
    took (``consumed_batches``, else what ``loader`` delivered: a DataLoader iterator's
    count, or a persistent-workers DataLoader's).

    Args:
        loader: the DataLoader over the iterable (or its iterator).
        dealt (str): how this run dealt (``"stride"`` or ``"shards"``).
        ranks (int): the data-parallel ranks.
        consumed_batches (int, optional): batches each rank's loop took.
    """
    source = getattr(loader, "_dataset_kind", None) is not None and hasattr(loader, "_num_yielded")
    iterator = loader if source else getattr(loader, "_iterator", None)
    settings = getattr(iterator, "_index_sampler", None) if iterator is not None else None
    workers = getattr(loader, "num_workers", getattr(iterator, "_num_workers", None))
    if workers is None:
        raise TypeError(
            f"loader must be the DataLoader over this iterable (or its iterator), got {type(loader).__name__}"
        )
    batch_size = getattr(loader, "batch_size", getattr(settings, "batch_size", None))
    if consumed_batches is None:
        if iterator is None:
            raise ValueError(
                "cannot read what this DataLoader delivered (no live iterator: it is not "
                "persistent_workers=True): pass state_dict(loader, consumed_batches=step_in_epoch), "
                "or the iterator itself (it = iter(loader))"
            )
        consumed_batches = int(iterator._num_yielded)
    consumed_batches = as_int("consumed_batches", consumed_batches)
    if consumed_batches < 0:
        raise ValueError(f"consumed_batches must be >= 0, got {consumed_batches}")
    layer = _core.Layer(
        dealt, ranks, max(1, int(workers)), 1 if batch_size is None else int(batch_size), consumed_batches
    )
    return layer.state()


#: The process that imported permshard. A DataLoader worker started by fork inherits it
#: (and with it torch.distributed's state); spawn and forkserver workers import afresh.
_IMPORTED_IN = os.getpid()


def _inherits_parent_state() -> bool:
    """Whether this worker is a fork of the process that built the DataLoader, so that
    torch.distributed's state seen here is that process's."""
    parent = multiprocessing.parent_process()
    return parent is not None and parent.pid == _IMPORTED_IN


def _from_environment() -> Optional[tuple[int, int]]:
    """``(rank, world_size)`` from ``RANK`` / ``WORLD_SIZE`` (torchrun, accelerate)."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        return int(rank), int(world)
    except ValueError:
        raise ValueError(
            f"RANK={rank!r} and WORLD_SIZE={world!r} in the environment are not integers; "
            "fix them or pass rank=... and world_size=..."
        ) from None


def rank_and_world(rank: Optional[int] = None, world_size: Optional[int] = None) -> tuple[int, int]:
    """``rank`` / ``world_size`` of this process among the data-parallel ranks.

    Missing values come from torch.distributed's group when one is visible, else from
    ``RANK`` / ``WORLD_SIZE`` in the environment (set by torchrun and accelerate, and
    inherited by DataLoader workers whatever their start method). Outside a DataLoader
    worker, neither means a single process: ``(0, 1)``. Inside a worker started by spawn
    or forkserver, the rank's process group is invisible and nothing tells a single
    process from one rank of many: that is an error, never a guess of world size 1.

    Args:
        rank (int, optional): this process's data-parallel rank.
        world_size (int, optional): the data-parallel ranks.
    """
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            known = (dist.get_rank(), dist.get_world_size())
        else:
            from_env = _from_environment()
            if from_env is not None:
                known = from_env
            elif get_worker_info() is None or _inherits_parent_state():
                known = (0, 1)
            else:
                raise ValueError(
                    "shard_iterable is running in a DataLoader worker started by spawn or "
                    "forkserver, where the rank's process group is not visible and RANK / "
                    "WORLD_SIZE are not set: it cannot tell which part of the data is this "
                    "rank's. Pass rank=... and world_size=... (resolved in the main process, "
                    "as ShardedIterable does), launch with torchrun, or set RANK=0 "
                    "WORLD_SIZE=1 for a single process"
                )
        rank = known[0] if rank is None else rank
        world_size = known[1] if world_size is None else world_size
    world_size, rank = as_int("world_size", world_size), as_int("rank", rank)
    if world_size < 1:
        raise ValueError(f"world_size should be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {world_size - 1}]")
    return rank, world_size


def consumer(rank: Optional[int] = None, world_size: Optional[int] = None) -> _core.Consumer:
    """This (rank, DataLoader worker) among all of them (``index`` of ``count``); the
    worker comes from ``torch.utils.data.get_worker_info()``.

    Args:
        rank (int, optional): this process's data-parallel rank.
        world_size (int, optional): the data-parallel ranks.
    """
    rank, world_size = rank_and_world(rank, world_size)
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return _core.Consumer(rank, world_size, worker, workers)


def _stride(elements: Iterable[T], me: int, count: int, even: bool) -> Iterator[T]:
    """Element k goes to consumer k mod count. With ``even``, only complete rounds of
    ``count`` elements are dealt, so every consumer yields the same number (an incomplete
    last round is dropped)."""
    if not even:
        yield from itertools.islice(elements, me, None, count)
        return
    dealt = False
    for whole in zip(*[iter(elements)] * count):  # complete rounds only
        dealt = True
        yield whole[me]
    if not dealt:
        raise ValueError(
            f"even=True, but the source has fewer elements than its {count} consumers "
            "(ranks x DataLoader workers): every consumer would get nothing. Use fewer "
            "workers or ranks, or even=False"
        )


def shard_iterable(
    source: Iterable[Any],
    *,
    open_shard: Optional[Callable[[Any], Iterable[T]]] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    even: bool = False,
    device_mesh: Any = None,
    mesh_dim: Optional[MeshDim] = None,
    resumed: Sequence[Mapping[str, Any]] = (),
) -> Iterator[Any]:
    r"""The part of ``source`` that belongs to this (rank, DataLoader worker).

    Call it inside an IterableDataset's ``__iter__``. Every element goes to exactly one
    consumer among ``world_size x num_workers``.

    * With ``open_shard``, ``source`` is a list of shards (e.g. file names) and
      ``open_shard(shard)`` yields a shard's elements. When the number of shards is a
      multiple of the ranks, each rank opens only its own shards (no rank reads what it
      discards), and its DataLoader workers take every ``num_workers``-th element of
      them (so the workers' parts differ by one element at most, whatever the shards'
      sizes, and a resume knows what each delivered); otherwise every consumer reads all
      shards and keeps every ``count``-th element.
    * Without it, ``source`` yields the elements, and each consumer keeps every
      ``count``-th one.
    * A Hugging Face ``datasets.IterableDataset`` splits itself across DataLoader
      workers (by shards); it is split here by rank only, with ``split_dataset_by_node``
      (whole shards when they divide the ranks), so no row is dropped or repeated.

    Args:
        source: elements, or shards with ``open_shard``.
        open_shard (callable, optional): shard -> iterable of elements.
        rank, world_size (int, optional): default to torch.distributed's group, else to
            ``RANK`` / ``WORLD_SIZE`` in the environment (torchrun and accelerate set them;
            workers inherit them under any start method). In a spawn or forkserver worker
            with neither, it raises rather than guess; :class:`ShardedIterable` resolves
            them in the main process for you.
        even (bool, optional): every consumer yields the same number of elements (an
            incomplete last round is dropped, declared), so DDP never waits on a rank
            with one batch fewer. With whole shards of unknown sizes this falls back to
            striding over elements. Default: ``False``.
        device_mesh (DeviceMesh, optional): under model parallelism, the mesh whose
            ``mesh_dim`` gives ``rank`` and ``world_size``, so that processes sharing a
            data-parallel coordinate (tensor or pipeline peers) read the same elements;
            the process group's rank would give each of them a different part.
        mesh_dim (str or tuple of str, optional): the data-parallel dimension name(s).
        resumed (sequence of Mapping, optional): what earlier runs read (the ``layers`` of
            :meth:`ShardedIterable.state_dict`): only the elements none of them took are
            dealt, by stride over what is left.

    Example::

        >>> class Docs(IterableDataset):
        ...     def __iter__(self):
        ...         return shard_iterable(files, open_shard=read_jsonl)
    """
    world_size, rank = from_mesh(world_size, rank, device_mesh, mesh_dim, ("world_size", "rank"))
    if open_shard is None and _is_hf_iterable(source):
        yield from _hf_part(source, rank, world_size, even)
        return
    me = consumer(rank, world_size)
    if resumed:
        shards = [source] if open_shard is None else [open_shard(shard) for shard in _shard_list(source)]
        yield from _stride(left_over(shards, resumed), me.index, me.count, even)
        return
    if open_shard is None:
        yield from _stride(source, me.index, me.count, even)
        return
    shards = _shard_list(source)
    if _core.fresh_spread(len(shards), me.ranks, even) == "shards":
        # This rank opens only its own shards; its workers stride over their elements.
        mine = (element for shard in shards[me.rank :: me.ranks] for element in open_shard(shard))
        yield from _stride(mine, me.worker, me.workers, even=False)
        return
    elements = (element for shard in shards for element in open_shard(shard))
    yield from _stride(elements, me.index, me.count, even)


def _shard_list(source: Iterable[Any]) -> list[Any]:
    shards = list(source)
    if not shards:
        raise ValueError("source is an empty list of shards")
    return shards


def _is_hf_iterable(source: Any) -> bool:
    """A Hugging Face ``datasets.IterableDataset`` (checked without importing datasets)."""
    module = sys.modules.get("datasets")
    return module is not None and isinstance(source, getattr(module, "IterableDataset", ()))


def _hf_part(source: Any, rank: Optional[int], world_size: Optional[int], even: bool) -> Iterator[Any]:
    """This rank's part of a Hugging Face IterableDataset. Iterated in a DataLoader
    worker, such a dataset already keeps only that worker's shards: striding its elements
    again would drop rows. So split by rank only (``split_dataset_by_node``: whole shards
    when they divide, else every ``world_size``-th row) and let it split by worker."""
    if even:
        raise ValueError(
            "even=True is not available for a datasets.IterableDataset, which splits itself across "
            "DataLoader workers by shards of unknown sizes; use even=False, or a map-style "
            "datasets.Dataset with ShardedSampler"
        )
    from datasets.distributed import split_dataset_by_node

    rank, world_size = rank_and_world(rank, world_size)
    yield from split_dataset_by_node(source, rank=rank, world_size=world_size)


class ShardedIterable(IterableDataset[T], Generic[T]):
    """An IterableDataset over ``source`` that yields each element on exactly one
    (rank, worker); see :func:`shard_iterable` for the arguments.

    The rank and world size are resolved here, in the process that builds the dataset
    (from ``device_mesh`` when given), so DataLoader workers of any start method use them.

    Example::

        >>> ds = ShardedIterable(["a.jsonl", "b.jsonl"], open_shard=read_jsonl)
        >>> loader = DataLoader(ds, batch_size=32, num_workers=2)
    """

    def __init__(
        self,
        source: Sequence[Any] | Iterable[Any],
        *,
        open_shard: Optional[Callable[[Any], Iterable[T]]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        even: bool = False,
        device_mesh: Any = None,
        mesh_dim: Optional[MeshDim] = None,
    ) -> None:
        self.source = source
        self.open_shard = open_shard
        # Only (rank, world_size) is kept: a DeviceMesh need not pickle into workers.
        world_size, rank = from_mesh(world_size, rank, device_mesh, mesh_dim, ("world_size", "rank"))
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.even = even
        self._resumed: tuple[dict[str, Any], ...] = ()  # what earlier runs read (load_state_dict)

    def __iter__(self) -> Iterator[T]:
        return shard_iterable(
            self.source,
            open_shard=self.open_shard,
            rank=self.rank,
            world_size=self.world_size,
            even=self.even,
            resumed=self._resumed,
        )

    def state_dict(self, loader: Any, consumed_batches: Optional[int] = None) -> dict[str, Any]:
        """What the run has read, so that a run on any number of ranks, workers and batch
        size reads every other element exactly once (:meth:`load_state_dict`): the runs
        before this one and this one, each as a few numbers (no element is stored).

        Ranks are assumed in lockstep (every rank's loop took as many batches, as under
        DDP), and every DataLoader worker's batches full but at the end of its part.

        Args:
            loader: the DataLoader iterating this dataset (or its iterator), for its
                workers and batch size.
            consumed_batches (int, optional): batches this rank's loop took from
                ``loader`` in this run. Default: what ``loader`` delivered (its
                iterator's count, when it has one: pass the iterator, or use
                ``persistent_workers=True``).

        Example::

            >>> docs = ShardedIterable(files, open_shard=read_jsonl)
            >>> batches = iter(DataLoader(docs, batch_size=2))
            >>> first = next(batches)
            >>> state = docs.state_dict(batches)  # one batch read
            >>> resumed = ShardedIterable(files, open_shard=read_jsonl)
            >>> resumed.load_state_dict(state)  # on any world size and worker count
        """
        if self.open_shard is None and _is_hf_iterable(self.source):
            raise TypeError(
                "a datasets.IterableDataset keeps its own state: use its state_dict() "
                "(datasets >= 2.18) instead of ShardedIterable.state_dict()"
            )
        shards = self._num_shards() if self.open_shard is not None else None
        dealt = "stride" if self._resumed else _core.fresh_spread(shards, self.world_size, self.even)
        layer = loader_layer(loader, dealt, self.world_size, consumed_batches)
        state: dict[str, Any] = {
            "dealt_by": "ShardedIterable",
            "shards": shards,
            "layers": [*self._resumed, layer],
        }
        names = self._shard_names() if shards is not None else None
        if names is not None:
            state["shard_names"] = names  # a resume over other shards is refused
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Continues after the runs a :meth:`state_dict` recorded: iterating reads only the
        elements none of them took, dealt by stride to this run's ranks and workers (every
        consumer reads the whole source and keeps its part of what is left).

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict`, on any world size.
            strict (bool, optional): refuse keys :meth:`state_dict` does not write
                (``False`` ignores them). Default: ``True``.
        """
        state = state_dict
        if not isinstance(state, Mapping) or state.get("dealt_by") != "ShardedIterable":
            raise ValueError("state_dict was not saved by ShardedIterable.state_dict(): pass that dict")
        unknown = sorted(set(state) - {"dealt_by", "shards", "shard_names", "layers"})
        if strict and unknown:
            raise ValueError(
                f"state_dict has keys ShardedIterable.state_dict() does not write: {unknown}; "
                "pass the dict it saved, or strict=False to ignore them"
            )
        shards = self._num_shards() if self.open_shard is not None else None
        if state.get("shards") != shards:
            raise ValueError(
                f"state_dict was saved over {state.get('shards')} shards, this dataset has {shards}: "
                "build it over the same source to resume"
            )
        saved, names = state.get("shard_names"), self._shard_names() if shards is not None else None
        if saved is not None and names is not None and saved != names:
            raise ValueError(
                f"state_dict was saved over other shards ({shards} of them, as here, but named "
                "otherwise): its layers would skip other elements. Build it over the same list "
                "of shards, in the same order, to resume"
            )
        layers = state.get("layers")
        if not isinstance(layers, (list, tuple)):
            raise ValueError("state_dict['layers'] must be a list: pass a dict saved by state_dict()")
        self._resumed = tuple(layer.state() for layer in read_layers(layers))

    def _shard_names(self) -> Optional[str]:
        """An identity of the list of shards when they are named (paths, strings, numbers):
        the same in every process and run over the same list; ``None`` for other shards."""
        names = []
        for shard in self.source:
            if isinstance(shard, (str, os.PathLike)):
                names.append(os.path.basename(os.fspath(shard)))
            elif isinstance(shard, int) and not isinstance(shard, bool):
                names.append(str(shard))
            else:
                return None
        return content_id("shards", names)

    def _num_shards(self) -> int:
        if not isinstance(self.source, Sized):
            raise TypeError(
                "a resumable ShardedIterable over shards needs a list of shards (len() of it), "
                f"got {type(self.source).__name__}"
            )
        return len(self.source)
