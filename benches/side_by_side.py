"""Measuring two pipelines side by side on a shared machine: their steps take turns, so a
slow or fast moment of the machine falls on both alike, and a blend is read against the
same windows read straight from its sources."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def interleaved(steps: list[Callable[[], int]], seconds: float, slice_s: float = 0.1) -> list[float]:
    """Items per second of each ``step()`` (which returns the items it did), the steps
    taking turns of ``slice_s`` seconds each, in both orders alternately, for about
    ``seconds`` in all: a shared machine's slow and fast moments fall on every step alike.
    (A turn of one step at a time, ``slice_s=0``, also lets each meet the caches and pages
    the others warmed as often.)"""
    spent, done = [0.0] * len(steps), [0] * len(steps)
    order, turn, began = list(enumerate(steps)), 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        for k, step in order if turn % 2 else order[::-1]:
            start = time.perf_counter()
            while True:
                done[k] += step()
                if time.perf_counter() - start >= slice_s:
                    break
            spent[k] += time.perf_counter() - start
        turn += 1
    return [d / t for d, t in zip(done, spent)]


def alternated(reads: list[tuple[Callable[[Any], Any], Sequence[Any]]], seconds: float) -> list[float]:
    """Items per second of each ``read(batch)`` over its batches (the k-th call of each
    reads its k-th batch), the reads taking turns a batch at a time."""
    turns = [0] * len(reads)

    def step(k: int) -> Callable[[], int]:
        read, batches = reads[k]

        def one() -> int:
            batch = batches[turns[k] % len(batches)]
            turns[k] += 1
            read(batch)
            return len(batch)

        return one

    return interleaved([step(k) for k in range(len(reads))], seconds, slice_s=0.0)


def blend_and_sources(blend: Any, positions: Sequence[Any], seconds: float) -> tuple[float, float]:
    """Items per second of a ``MixedDataset``'s ``__getitems__`` at each batch of
    ``positions``, and of the same windows read straight from its ``TokenWindows``
    sources (concatenated: one call), alternated a batch at a time. (A single source read
    at random windows of its own spans a fraction of the blend's pages and faults less:
    the same windows are the fair reference.)"""
    from permshard.data import TokenWindows

    sources = TokenWindows.concatenate(blend.datasets)
    first = np.cumsum([0] + [len(d) for d in blend.datasets[:-1]])
    same = []  # the windows the blend reads at each batch of positions
    for batch in positions:
        which, index = blend.mixture.at_positions(batch)
        same.append(first[which] + index)
    mixed, direct = alternated([(blend.__getitems__, positions), (sources.__getitems__, same)], seconds)
    return mixed, direct
