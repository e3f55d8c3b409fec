"""block-v2 and block-v1: BlockPermutation, the locality bound, sharding, resume and the prefetch
protocol of ShardedSampler(block_size=...)."""

from __future__ import annotations

import os
import pickle
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from permshard import BlockPermutation, ShardedBatchSampler, ShardedSampler, verify
from permshard._config import ShardConfig


def blocks_of_windows(p: BlockPermutation) -> list[set[int]]:
    order = p.take(0, p.n).tolist()
    size = p.block_size * p.window_blocks
    return [{x // p.block_size for x in order[i : i + size]} for i in range(0, p.n, size)]


@pytest.mark.parametrize("block_size, window_blocks", [(1, 3), (7, 1), (16, 4), (100, 8)])
def test_bijection_and_locality_bound_at_boundary_sizes(block_size, window_blocks):
    full = block_size * window_blocks
    for n in sorted(
        {1, 2, block_size - 1, block_size, block_size + 1, full - 1, full + 1, 5 * full + 3} - {0}
    ):
        p = BlockPermutation(n, block_size, window_blocks, seed=2, epoch=1)
        order = p.take(0, n).tolist()
        assert sorted(order) == list(range(n))  # brute force: every sample once
        assert all(p.index_of(x) == i for i, x in enumerate(order))
        assert [p[i] for i in range(0, n, max(1, n // 20))] == order[:: max(1, n // 20)]
        partial = n % block_size != 0
        assert all(len(b) <= window_blocks + partial for b in blocks_of_windows(p)), (n, block_size)


def test_windows_are_shuffled_and_epochs_differ():
    p = BlockPermutation(100_000, 1000, 4, seed=0, epoch=0)
    first = p.take(0, 4000).tolist()
    assert len({x // 1000 for x in first}) == 4
    assert sum(b == a + 1 for a, b in zip(first, first[1:])) < 40  # not read in runs
    assert BlockPermutation(100_000, 1000, 4, seed=0, epoch=1).take(0, 4000).tolist() != first


def test_pickle_repr_and_bad_arguments():
    p = BlockPermutation(1000, 10, 4, seed=3, epoch=2)
    assert pickle.loads(pickle.dumps(p)) == p and hash(pickle.loads(pickle.dumps(p))) == hash(p)
    assert repr(p).startswith("BlockPermutation(n=1000, block_size=10, window_blocks=4, seed=3, epoch=2) [")
    assert p.window_range(24) == (960, 1000)
    with pytest.raises(ValueError, match="block_size must be in"):
        BlockPermutation(10, 0, 4)
    with pytest.raises(ValueError, match="window_blocks must be in"):
        BlockPermutation(10, 4, 0)
    with pytest.raises(TypeError, match="block_size must be an integer"):
        BlockPermutation(10, 2.5, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "n, world, drop_last", [(1000, 4, False), (1001, 3, False), (1001, 3, True), (5, 8, False)]
)
def test_block_sampler_shards_exactly(n, world, drop_last):
    def ranks() -> list[ShardedSampler]:
        samplers = [
            ShardedSampler(n, world, r, seed=1, drop_last=drop_last, block_size=16, window_blocks=4)
            for r in range(world)
        ]
        for s in samplers:
            s.set_epoch(3)
        return samplers

    samplers = ranks()
    items = [list(s) for s in samplers]
    assert len({len(i) for i in items}) == 1
    real = [x for s in ranks() for x, pad in s.iter_with_padding() if not pad]
    assert sorted(real) == sorted(set(real)) and len(real) == (n - n % world if drop_last else n)
    cert = samplers[0].verify()
    assert cert.algorithm == "block-v2" and cert.covered == len(real)
    assert samplers[0].config.partition().algorithm == "block-v2"  # the core's order says so too
    # The sampler deals the BlockPermutation: position p of the epoch is order[p].
    order = BlockPermutation(n, 16, 4, seed=1, epoch=3).take(0, n).tolist()
    assert items[0][: len(order[::world])] == order[::world][: len(items[0])]
    sample = order[0]
    assert (0, 0) in samplers[0].locate(sample)
    assert samplers[0].state_dict()["algorithm"] == "block-v2"


def test_block_resume_onto_another_world_size_is_exactly_once():
    n, seed = 1009, 4
    consumed: Counter = Counter()
    state = None
    for world, steps in [(4, 37), (3, None)]:
        for rank in range(world):
            s = ShardedSampler(n, world, rank, seed=seed, block_size=8, window_blocks=5)
            if state is not None:
                s.load_state_dict(state)
            s.set_epoch(2)
            items = list(s.iter_with_padding())[:steps]
            consumed.update(x for x, pad in items if not pad)
            if rank == 0 and steps is not None:
                saved = s.state_dict(consumed_samples=steps * world)
        state = saved
    assert consumed == Counter(range(n))


def test_state_dicts_name_the_order():
    block = ShardedSampler(100, 2, 0, block_size=10, window_blocks=2)
    plain = ShardedSampler(100, 2, 0)
    with pytest.raises(ValueError, match="algorithm 'block-v2', this one runs 'perm-v2'"):
        plain.load_state_dict(block.state_dict())
    with pytest.raises(ValueError, match="block_size"):
        ShardedSampler(100, 2, 0, block_size=20, window_blocks=2).load_state_dict(block.state_dict())
    # A state dict written before block orders existed (no block keys) still loads.
    old = {k: v for k, v in plain.state_dict().items() if k not in ("block_size", "window_blocks")}
    plain.load_state_dict(old)
    with pytest.raises(ValueError, match="needs shuffle=True"):
        ShardedSampler(100, 2, 0, shuffle=False, block_size=10, window_blocks=2)
    with pytest.raises(ValueError, match="needs window_blocks"):
        ShardedSampler(100, 2, 0, block_size=10)
    with pytest.raises(ValueError, match="needs block_size"):
        ShardConfig(100, 2, window_blocks=3)
    assert verify(100, 2).algorithm == "perm-v2"


class Recording:
    """A map-style dataset that records prefetch calls and reads, in order."""

    def __init__(self, n: int) -> None:
        self.n, self.events, self.pids = n, [], set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    def prefetch(self, indices: list[int]) -> None:
        self.pids.add(os.getpid())
        self.events.append(("prefetch", list(indices)))


@pytest.mark.parametrize("batched", [False, True])
def test_prefetch_announces_each_window_before_it_is_read(batched):
    n, world, rank, bs, wb = 2000, 3, 1, 10, 4
    ds = Recording(n)
    sampler = ShardedSampler(ds, world, rank, seed=5, block_size=bs, window_blocks=wb)
    if batched:
        read = [x for batch in ShardedBatchSampler(sampler, 7) for x in batch]
    else:
        read = list(sampler)
    announced = [idx for kind, idx in ds.events if kind == "prefetch"]
    assert [x for call in announced for x in call] == read  # every item once, in order
    # Each call is one window of this rank: its samples lie in at most wb (+1) blocks, and
    # consecutive calls follow the windows of positions start + rank + k·W.
    order = BlockPermutation(n, bs, wb, seed=5).take(0, n).tolist()
    windows = [{x // bs for x in order[i : i + bs * wb]} for i in range(0, n, bs * wb)]
    for call, blocks in zip(announced, windows):
        assert {x // bs for x in call} <= blocks


def test_prefetch_runs_in_the_main_process_with_workers():
    ds = Recording(500)
    sampler = ShardedSampler(ds, 2, 0, seed=1, block_size=10, window_blocks=3)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
    got = sorted(int(x) for batch in loader for x in batch)
    assert ds.pids == {os.getpid()}
    assert sorted(x for _, call in ds.events for x in call) == got


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")
def test_token_windows_prefetch_covers_exactly_the_windows(tmp_path, monkeypatch):
    import numpy as np

    from permshard.data import TokenWindows

    paths = []
    for k, tokens in enumerate([5000, 3001]):
        path = tmp_path / f"t{k}.bin"
        np.arange(tokens, dtype=np.uint16).tofile(path)
        paths.append(str(path))
    ds = TokenWindows(paths, seq_len=16, read_ahead=True)
    before = dict(vars(ds))
    sampler = ShardedSampler(ds, 2, 1, seed=3, block_size=32, window_blocks=4)
    assert vars(ds).keys() == before.keys() and ds.read_ahead is True  # nothing written into it
    picked = list(sampler)[:100]
    ranges = ds.byte_ranges(picked)
    # Brute force: the bytes of every picked window, per file, against the merged ranges.
    want: dict[str, set[int]] = {}
    for i in picked:
        path, offset = ds.locate(i)
        want.setdefault(path, set()).update(range(offset * 2, (offset + 17) * 2))
    for path, spans in ranges.items():
        got = {b for offset, length in spans for b in range(offset, offset + length)}
        assert got == want[path]
        assert all(a[0] + a[1] < b[0] for a, b in zip(spans, spans[1:]))  # merged, disjoint
    assert set(ranges) == set(want)
    advised = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    ds.prefetch(picked)
    # One WILLNEED per merged range, on the right file.
    expected = [
        (os.path.realpath(p), o, n, os.POSIX_FADV_WILLNEED) for p, spans in ranges.items() for o, n in spans
    ]
    assert sorted(advised) == sorted(expected)
    assert ds[picked[0]].tolist() == list(range(ds.locate(picked[0])[1], ds.locate(picked[0])[1] + 17))
