"""Fixtures the test modules share: the files the documentation's examples open, a process
group of one, generated documents for corpora, and every rank's stream of a sampler."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

# Test helpers (the plain-Python references, the battery, process launchers, workers):
# on the path by pytest's `pythonpath`.
from helpers import examples


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (marked ``multiprocess`` or ``slow``; each group in its order):
    pytest-xdist hands tests out in this order, so the long ones are shared out while the
    short ones fill the end, and no worker is left with a long test after the others are
    done."""

    def short(item: pytest.Item) -> bool:
        return not any(item.get_closest_marker(mark) for mark in ("multiprocess", "slow"))

    items.sort(key=short)


@pytest.fixture(scope="session")
def example_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A folder with the files the docstrings' and guides' examples open, by their names."""
    return examples.example_files(tmp_path_factory.mktemp("examples"))


@pytest.fixture
def group_of_one() -> Iterator[None]:
    """torch.distributed's default group, of one gloo rank, for the test's duration."""
    with examples.group_of_one():
        yield


@pytest.fixture
def documents() -> Callable[..., list[np.ndarray]]:
    """``documents(count, seed=0, *, max_len=600, vocab=50_000, min_len=1)``: ``count``
    documents of ``min_len`` to ``max_len - 1`` tokens in ``[1, vocab)``, each followed by
    EOD (0)."""
    return examples.documents


Streams = list[list[Any]]


@pytest.fixture
def rank_streams() -> Callable[[Callable[[int], Iterable[Any]], int], Streams]:
    """``rank_streams(make, world)``: what each rank's sampler ``make(rank)`` yields in one
    pass, as lists, rank by rank."""

    def read(make: Callable[[int], Iterable[Any]], world: int) -> Streams:
        return [list(make(rank)) for rank in range(world)]

    return read


@pytest.fixture
def where() -> Callable[[Sequence[Sequence[Any]]], dict[int, list[tuple[int, int]]]]:
    """``where(streams)``: every ``(rank, k)`` at which each sample appears in ``streams``
    (the items of each rank, or its batches), in increasing order: what ``locate`` says."""

    def positions(streams: Sequence[Sequence[Any]]) -> dict[int, list[tuple[int, int]]]:
        out: dict[int, list[tuple[int, int]]] = {}
        for rank, stream in enumerate(streams):
            for k, item in enumerate(stream):
                for sample in item if isinstance(item, (list, tuple, np.ndarray)) else [item]:
                    out.setdefault(int(sample), []).append((rank, k))
        return out

    return positions
