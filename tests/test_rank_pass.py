"""RankPass: a rank's items of a pass in the core's chunks (a small first chunk, doubling
to MAX_CHUNK), as the partition deals them, counted exactly mid-chunk, readable while a
chunk is computed."""

from __future__ import annotations

import itertools

import pytest

from permshard import _core
from permshard._config import ShardConfig


def chunk_ends(total: int) -> list[int]:
    """Where each chunk ends, from the rule written out: 64 items, doubling, at most 8192."""
    ends, end, size = [], 0, 64
    while end < total:
        end = min(end + size, total)
        ends.append(end)
        size = min(2 * size, 8192)
    return ends


@pytest.mark.parametrize("n, world, rank", [(10, 4, 3), (100_000, 3, 1), (70_001, 1, 0)])
def test_items_are_the_ranks_share_in_the_cores_chunks(n, world, rank):
    part = ShardConfig(n, world, seed=2).partition()
    ends = []

    def take(start: int, stop: int) -> list[int]:
        ends.append(stop)
        assert start == (ends[-2] if len(ends) > 1 else 0)
        return part.take_list(rank, start, stop)

    assert _core.MAX_CHUNK == 8192
    own = list(itertools.chain.from_iterable(_core.RankPass(part, rank)))
    mapped = list(itertools.chain.from_iterable(_core.RankPass(part, rank, take=take)))
    assert own == mapped == part.take_list(rank, 0, part.num_samples)
    assert ends == chunk_ends(part.num_samples)


def test_the_count_is_exact_mid_chunk_and_readable_while_a_chunk_is_computed():
    part = ShardConfig(40_000, 2, seed=1).partition()
    seen = []

    def take(start: int, stop: int) -> list[int]:
        seen.append(rank_pass.yielded)  # as a state saved from another thread would read it
        return part.take_list(0, start, stop)

    rank_pass = _core.RankPass(part, 0, take=take)
    items = itertools.chain.from_iterable(rank_pass)
    assert not rank_pass.started and rank_pass.yielded == 0
    assert len(list(itertools.islice(items, 100))) == 100
    assert rank_pass.started and rank_pass.yielded == 100  # inside the second chunk
    rest = list(items)
    assert len(rest) == part.num_samples - 100 and rank_pass.yielded == part.num_samples
    assert seen == [0, *chunk_ends(part.num_samples)[:-1]]  # each chunk computed after the last ran out


def test_a_rank_outside_the_partition_is_refused():
    part = ShardConfig(10, 2).partition()
    with pytest.raises(ValueError, match="rank"):
        _core.RankPass(part, 2)
