"""What a run of :class:`~permshard.data.ShardedIterable` read, as *layers*, and the rest of
the stream after them.

A run deals its input sequence to ``W x K`` consumers (rank ``r``, DataLoader worker ``w``:
consumer ``c = r * K + w``): element ``i`` to consumer ``i mod C`` (``"stride"``), or, on a
fresh run whose shards divide the consumers, shard ``s`` to consumer ``s mod C``
(``"shards"``). A DataLoader hands the loop the workers' batches in turn (worker 0's first,
worker 1's first, ..., then each one's second), so after ``b`` batches of ``B`` on every
rank (ranks in lockstep, as under DDP) worker ``w`` of every rank has delivered
``ceil((b - w) / K)`` batches: its consumer took the first ``B`` times as many elements of
its part. (Consumers that run out do so at the end of the last round, so the count stays
exact; a count past a consumer's end names elements that do not exist, which is harmless.)

A layer records ``(dealt, W, K, B, b)``, a few numbers; the elements it took are a pure
function of them, with no need to know any length. A resumed run filters the source
through every layer in order (each numbers the elements the previous ones left) and deals
what is left, by stride, to its own consumers; its state is the layers plus its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, TypeVar

from .._validation import as_int

T = TypeVar("T")

#: The dealing of a layer.
DEALT = ("stride", "shards")

#: The keys of one layer, in order.
LAYER_KEYS = ("dealt", "ranks", "workers", "batch_size", "batches")


def taken(layer: Mapping[str, Any]) -> list[int]:
    """Elements each worker index's consumers took in ``layer`` (the same on every rank).

    Args:
        layer (Mapping): a layer record.
    """
    workers, batch_size, batches = layer["workers"], layer["batch_size"], layer["batches"]
    return [batch_size * max(0, -(-(batches - w) // workers)) for w in range(workers)]


def check_layer(layer: Any) -> dict[str, Any]:
    """A layer record from a state dict, type- and range-checked.

    Args:
        layer: one entry of ``state_dict["layers"]``.
    """
    if not isinstance(layer, Mapping) or sorted(layer) != sorted(LAYER_KEYS):
        raise ValueError(
            f"a layer of an iterable's state_dict has the keys {list(LAYER_KEYS)}, got {layer!r}: pass "
            "a dict saved by ShardedIterable.state_dict()"
        )
    if layer["dealt"] not in DEALT:
        raise ValueError(f"a layer's dealt must be one of {DEALT}, got {layer['dealt']!r}")
    checked = {"dealt": layer["dealt"]}
    for key in LAYER_KEYS[1:]:
        value = as_int(f"layer[{key!r}]", layer[key])
        if value < (0 if key == "batches" else 1):
            raise ValueError(f"layer[{key!r}] must be >= {0 if key == 'batches' else 1}, got {value}")
        checked[key] = value
    return checked


def _left_by_stride(elements: Iterator[T], layer: Mapping[str, Any]) -> Iterator[T]:
    """The elements a stride layer did not take, in order."""
    consumers = layer["ranks"] * layer["workers"]
    counts = taken(layer)
    low, high = min(counts), max(counts)
    # Every consumer took its first `low` elements: the first low * C are gone at C speed.
    rest = itertools.islice(elements, low * consumers, None)
    for i, element in enumerate(rest, start=low * consumers):
        if i >= high * consumers:
            yield element
            yield from rest
            return
        if i // consumers >= counts[i % layer["workers"]]:
            yield element


def _left_by_shards(shards: Iterable[Iterable[T]], layer: Mapping[str, Any]) -> Iterator[T]:
    """The elements a shards layer did not take: shard ``s`` went to rank ``s mod W``,
    whose stream (its shards in order) its workers took by stride."""
    ranks, workers = layer["ranks"], layer["workers"]
    counts = taken(layer)
    seen = [0] * ranks  # elements of each rank's stream so far
    for s, shard in enumerate(shards):
        r = s % ranks
        for element in shard:
            j = seen[r]
            if j // workers >= counts[j % workers]:
                yield element
            seen[r] += 1


def left_over(shards: Iterable[Iterable[T]], layers: Sequence[Mapping[str, Any]]) -> Iterator[T]:
    """The elements of ``shards`` (each an iterable of elements, in order) that no layer
    took, in order.

    Args:
        shards (iterable of iterables): the source's shards (one, without ``open_shard``).
        layers (sequence of Mapping): the runs before, oldest first.
    """
    if layers and layers[0]["dealt"] == "shards":
        elements: Iterator[T] = _left_by_shards(shards, layers[0])
        layers = layers[1:]
    else:
        elements = (element for shard in shards for element in shard)
    for layer in layers:
        if layer["dealt"] != "stride":
            raise ValueError("only the first run of an iterable deals whole shards; the state was edited")
        elements = _left_by_stride(elements, layer)
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
    return {
        "dealt": dealt,
        "ranks": ranks,
        "workers": max(1, int(workers)),
        "batch_size": 1 if batch_size is None else int(batch_size),
        "batches": consumed_batches,
    }
