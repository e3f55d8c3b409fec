"""``MixedDataset``: several map-style datasets read in a weighted mixture (mix-v1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from torch.utils.data import Dataset

from ..mixture import Mixture


class MixedDataset(Dataset[Any]):
    r"""A map-style dataset over a weighted mixture of ``datasets``: ``ds[p]`` is
    ``datasets[s][i]`` for ``(s, i) = ds.mixture[p]``.

    Nothing is built or cached whatever the length: position ``p`` is mapped on demand
    (see :class:`permshard.Mixture`). Under a :class:`~permshard.ShardedSampler`,
    ``shuffle=False`` reads the mixture in order (every prefix of every rank's steps keeps
    the proportions), ``shuffle=True`` permutes positions per epoch; resume, elastic
    world sizes, ``verify`` and ``locate`` work as for any dataset.

    Args:
        datasets (sequence of datasets): the sources, each with ``__len__`` and
            ``__getitem__``.
        weights (sequence of float): relative weight of each source.
        num_samples (int, optional): length of the mixture; ``None``: the longest in
            which no source repeats a sample. Default: ``None``.
        seed (int, optional): key of the per-pass orders within each source.
        stages (sequence of (int, weights), optional): weights from given positions on
            (see :class:`permshard.Mixture`).

    Example::

        >>> ds = MixedDataset([web, code, books], [0.6, 0.3, 0.1], num_samples=10**9)
        >>> loader = DataLoader(ds, batch_size=32, sampler=ShardedSampler(ds))
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[float],
        num_samples: Optional[int] = None,
        seed: int = 0,
        *,
        stages: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> None:
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
            raise TypeError(f"datasets must be a sequence of datasets, got {type(datasets).__name__}")
        sizes = []
        for s, dataset in enumerate(datasets):
            if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
                raise TypeError(
                    f"datasets[{s}] ({type(dataset).__name__}) must be map-style, with __len__ and "
                    "__getitem__; for an IterableDataset mix upstream of permshard.data.shard_iterable"
                )
            sizes.append(len(dataset))
        self.datasets = list(datasets)
        self.mixture = Mixture(sizes, weights, num_samples, seed, stages=stages)

    def __len__(self) -> int:
        return len(self.mixture)

    def __getitem__(self, position: int) -> Any:
        source, index = self.mixture[position]
        return self.datasets[source][index]

    def __getitems__(self, positions: list[int]) -> list[Any]:
        """A batch, fetched source by source (a source's own ``__getitems__`` is used)."""
        sources, indices = self.mixture.at_positions(positions)
        slots_of: dict[int, list[int]] = {}
        for k, source in enumerate(sources.tolist()):
            slots_of.setdefault(source, []).append(k)
        out: list[Any] = [None] * len(positions)
        for source, slots in slots_of.items():
            wanted = [int(indices[k]) for k in slots]
            dataset = self.datasets[source]
            getitems = getattr(dataset, "__getitems__", None)
            items = getitems(wanted) if getitems is not None else [dataset[i] for i in wanted]
            for k, item in zip(slots, items):
                out[k] = item
        return out

    def __repr__(self) -> str:
        return f"MixedDataset({len(self.datasets)} datasets, {self.mixture!r})"
