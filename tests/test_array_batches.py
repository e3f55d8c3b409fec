"""Batches as int64 arrays: the same indices as list batches, chosen by the dataset's
declaration or ``as_array``, epochs carried through DataLoader workers of every start
method (persistent ones too), resume onto another world size, block orders with prefetch,
token windows, the step layout and token-budget batches."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers.array_datasets import GatheringAhead, Recording, keep
from permshard import ShardedBatchSampler, ShardedSampler
from permshard._hooks import EpochIndices
from permshard._token_budget import TokenBudgetBatchSampler
from permshard.accelerate import StepBatchSampler
from permshard.data import TokenWindows


def batches(n, w, r, bs, *, cls=ShardedBatchSampler, drop_last=False, **kwargs):
    lists = list(cls(ShardedSampler(n, w, r, seed=3, **kwargs), bs, drop_last, as_array=False))
    arrays = list(cls(ShardedSampler(n, w, r, seed=3, **kwargs), bs, drop_last, as_array=True))
    return lists, arrays


@pytest.mark.parametrize("cls", [ShardedBatchSampler, StepBatchSampler])
@pytest.mark.parametrize(
    "n, w, bs, drop_last", [(10_007, 3, 64, False), (10_007, 4, 1000, True), (5, 8, 2, False)]
)
def test_arrays_hold_the_same_batches_as_lists(cls, n, w, bs, drop_last):
    for r in range(w):
        lists, arrays = batches(n, w, r, bs, cls=cls, drop_last=drop_last)
        assert all(type(a) is np.ndarray and a.dtype == np.int64 for a in arrays)
        assert [a.tolist() for a in arrays] == lists
    blocks_lists, blocks_arrays = batches(4096, 2, 1, 100, block_size=64, window_blocks=4)
    assert [a.tolist() for a in blocks_arrays] == blocks_lists


def test_the_dataset_declares_what_it_takes():
    plain, declared = Recording(100), Recording(100, accepts_arrays=True)
    assert type(next(iter(ShardedBatchSampler(ShardedSampler(plain, 1, 0), 8)))) is list
    assert type(next(iter(ShardedBatchSampler(ShardedSampler(declared, 1, 0), 8)))) is np.ndarray
    assert type(next(iter(ShardedBatchSampler(ShardedSampler(declared, 1, 0), 8, as_array=False)))) is list
    with pytest.raises(TypeError, match="as_array must be a bool or None"):
        ShardedBatchSampler(ShardedSampler(plain, 1, 0), 8, as_array="yes")


@pytest.mark.parametrize("cls", [ShardedBatchSampler, StepBatchSampler])
def test_each_batch_is_announced_as_the_one_before_it_is_handed_out(cls):
    ds, plain = GatheringAhead(1000), Recording(1000, accepts_arrays=True)
    sampler = cls(ShardedSampler(ds, 3, 1, seed=2), 32)
    reference = cls(ShardedSampler(plain, 3, 1, seed=2), 32)
    stream, expected, batches = iter(sampler), iter(reference), []
    for _ in range(5):  # what is yielded, and what the state counts, as without it
        batches.append(next(expected).tolist())
        assert next(stream).tolist() == batches[-1]
        assert sampler.state_dict() == reference.state_dict()
    batches += [b.tolist() for b in expected]
    assert [b.tolist() for b in stream] == batches[5:]
    # Batch k + 1 announced as batch k is handed out: every batch but the first, in order.
    assert len(batches) == 11 and ds.announced == batches[1:]
    ds.announced.clear()
    list(cls(ShardedSampler(ds, 3, 1, seed=2), 32, as_array=False))
    assert ds.announced == []  # lists: the dataset takes arrays only where it said so


def test_epoch_indices_keep_their_epoch_when_sliced_and_pickled():
    batch = EpochIndices([5, 1, 9], epoch=4)
    back = pickle.loads(pickle.dumps(batch[1:]))
    assert type(back) is EpochIndices and back.epoch == 4 and back.tolist() == [1, 9]
    assert back.dtype == np.int64


@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow), "forkserver"])
def test_epochs_reach_persistent_workers_of_every_start_method(method):
    ds = Recording(300, accepts_arrays=True, epoch_dependent=True)
    sampler = ShardedSampler(ds, 2, 1, seed=1)
    loader = DataLoader(
        ds,
        batch_sampler=ShardedBatchSampler(sampler, 16),
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=method,
        collate_fn=keep,
    )
    for epoch in (0, 5):
        sampler.set_epoch(epoch)
        got = [item for batch in loader for item in batch]
        assert {(kind, e) for _, kind, e in got} == {("EpochIndices", epoch)}
        expected = ShardedSampler(300, 2, 1, seed=1)
        expected.set_epoch(epoch)
        assert [i for i, _, _ in got] == list(expected)


def test_resume_onto_another_world_size_with_arrays():
    n, seen, state = 5003, Counter(), None
    for w, steps in [(4, 9), (3, None)]:
        saved = None
        for r in range(w):
            s = ShardedSampler(n, w, r, seed=7)
            if state is not None:
                s.load_state_dict(state)
            it = iter(ShardedBatchSampler(s, 32, as_array=True))
            taken = list(it) if steps is None else [next(it) for _ in range(steps)]
            seen.update(x for b in taken for x in b.tolist())
            if r == 0:
                saved = s.state_dict()
        state = saved
    padding = sum(seen.values()) - n
    assert set(seen) == set(range(n)) and padding == -(n - 4 * 9 * 32) % 3


def test_block_orders_announce_their_windows_before_the_arrays():
    ds = Recording(4096, accepts_arrays=True)
    sampler = ShardedSampler(ds, 2, 0, seed=2, block_size=64, window_blocks=4)
    got = [b.tolist() for b in ShardedBatchSampler(sampler, 50)]
    announced = [x for window in ds.prefetched for x in window]
    assert announced == [x for b in got for x in b]  # every index announced, in order
    assert all(len(w) <= 64 * 4 // 2 for w in ds.prefetched)  # one window of this rank at a time


def test_token_windows_take_arrays_through_workers(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(50_000, dtype=np.uint16).tofile(path)
    ds = TokenWindows(path, 64)
    sampler = ShardedSampler(ds, 2, 0, seed=5)
    arrays = DataLoader(
        ds, batch_sampler=ShardedBatchSampler(sampler, 8), collate_fn=TokenWindows.collate, num_workers=2
    )
    lists = DataLoader(
        ds,
        batch_sampler=ShardedBatchSampler(ShardedSampler(ds, 2, 0, seed=5), 8, as_array=False),
        collate_fn=TokenWindows.collate,
    )
    a, b = list(arrays), list(lists)
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_token_windows_gather_into_a_pinned_batch_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "tokens.bin"
    tokens = np.random.default_rng(0).integers(0, 60_000, size=50_000, dtype=np.uint16)
    tokens.tofile(path)
    plain, pinned = TokenWindows(path, 64), TokenWindows(path, 64, pin_memory=True)
    idx = np.array([5, 700, 3, 5], dtype=np.int64)
    batch = pinned.__getitems__(idx).tensor
    assert batch.dtype == torch.int64 and batch.is_contiguous()
    assert torch.equal(batch, plain.__getitems__(idx).tensor)
    assert torch.equal(batch[1], torch.from_numpy(tokens[700 * 64 : 701 * 64 + 1].astype(np.int64)))
    assert batch.is_pinned() == torch.cuda.is_available()
    # Asked to pin, the gather page-locks where it can: in the main process only.
    asked: list[bool] = []
    empty = torch.empty

    def recording_empty(*args, pin_memory=False, **kwargs):
        asked.append(pin_memory)
        return empty(*args, **kwargs)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "empty", recording_empty)
    pinned.__getitems__(idx)
    monkeypatch.setattr("permshard.data._rows.get_worker_info", lambda: object())  # page_locked()
    pinned.__getitems__(idx)
    plain.__getitems__(idx)
    assert asked == [True, False, False]


def test_token_budget_batches_as_arrays():
    lengths = np.random.default_rng(0).integers(1, 3000, 4000)
    lists = list(TokenBudgetBatchSampler(lengths, 16384, 2, 1, seed=1))
    arrays = list(TokenBudgetBatchSampler(lengths, 16384, 2, 1, seed=1, as_array=True))
    assert all(a.dtype == np.int64 for a in arrays) and [a.tolist() for a in arrays] == lists
