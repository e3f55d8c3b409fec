"""What a run of :class:`~permshard.data.ShardedIterable` read, as *layers*, and the rest of
the stream after them.

A layer records how a run dealt (``"stride"`` or ``"shards"``), its ranks and DataLoader
workers, its batch size and the batches every rank's loop took: the elements it took are a
pure function of them, with no need to know any length. The core (``_core.Layer``) owns
that arithmetic and the layer's schema; a resumed run filters the source through every
layer in order (each numbers the elements the previous ones left) and deals what is left,
by stride, to its own consumers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, TypeVar

from .. import _core
from .._validation import as_int

T = TypeVar("T")


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
