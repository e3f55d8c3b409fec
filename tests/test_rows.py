"""MemmapRows: flat files and .npy, the vectorised gather against numpy's, bad files, the
prefetch protocol, pickling, and array batches through DataLoader workers."""

from __future__ import annotations

import os
import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers import dataset_workers
from helpers.distributed import launch
from permshard import ShardedBatchSampler, ShardedSampler, _core
from permshard._hooks import EpochIndex, EpochIndices
from permshard.data import MemmapRows, RowBatch


@pytest.fixture
def records(tmp_path):
    data = np.random.default_rng(0).standard_normal((5000, 16)).astype(np.float32)
    flat = tmp_path / "rows.f32"
    data.tofile(flat)
    npy = tmp_path / "rows.npy"
    np.save(npy, data)
    return data, flat, npy


def test_flat_and_npy_files_gather_what_numpy_gathers(records):
    data, flat, npy = records
    picked = np.array([4999, 0, 17, 17, -1, 2500])
    for rows in (MemmapRows(flat, np.float32, (16,)), MemmapRows(npy)):
        assert len(rows) == 5000 and rows.shape == (16,) and rows.dtype == np.float32
        batch = rows.__getitems__(picked)
        assert isinstance(batch, RowBatch) and len(batch) == 6
        assert np.array_equal(MemmapRows.collate(batch).numpy(), data[picked])
        assert torch.equal(rows[EpochIndex(17, epoch=3)], torch.from_numpy(data[17]))
        assert np.array_equal(rows.__getitems__(EpochIndices([3, 1], epoch=2)).tensor.numpy(), data[[3, 1]])
        clone = pickle.loads(pickle.dumps(rows))
        assert clone._map is None and torch.equal(clone[5], rows[5])


@pytest.mark.parametrize("workers", [0, 1])
def test_torch_s_default_collation_stacks_the_rows_of_torch_s_samplers(records, workers):
    # A DataLoader as anyone writes it first: torch's BatchSampler hands lists of
    # indices, and the default collation stacks what __getitems__ returns.
    data, flat, _ = records
    rows = MemmapRows(flat, np.float32, (16,))
    shuffled = torch.cat(list(DataLoader(rows, batch_size=64, shuffle=True, num_workers=workers)))
    assert shuffled.shape == data.shape  # every row once, in some order
    assert np.array_equal(np.unique(shuffled.numpy(), axis=0), np.unique(data, axis=0))
    sampler = ShardedSampler(rows, 4, 1, seed=2)
    sharded = torch.cat(list(DataLoader(rows, batch_size=64, sampler=sampler, num_workers=workers)))
    assert np.array_equal(sharded.numpy(), data[list(ShardedSampler(rows, 4, 1, seed=2))])
    # Its own collation takes either form; lists are stacked (a copy).
    as_list = rows.__getitems__([3, 1, 3])
    assert isinstance(as_list, list) and np.array_equal(MemmapRows.collate(as_list).numpy(), data[[3, 1, 3]])


def test_the_gather_fills_one_writable_batch_pinned_only_when_it_can_be(records, monkeypatch):
    data, flat, _ = records
    rows = MemmapRows(flat, np.float32, (16,), pin_memory=True)
    picked = np.array([3, -2, 3])
    batch = rows.__getitems__(picked).tensor
    assert (
        batch.dtype == torch.float32
        and batch.shape == (3, 16)
        and np.array_equal(batch.numpy(), data[picked])
    )
    batch[0, 0] = 7.0  # its own memory, not a view of the read-only map
    assert rows[3][0] != 7.0
    assert batch.is_pinned() == torch.cuda.is_available()
    assert rows.__getitems__(np.array([], dtype=np.int64)).tensor.shape == (0, 16)
    scalar = MemmapRows(flat, np.float32)  # one element per record
    assert np.array_equal(MemmapRows.collate(scalar.__getitems__([5, 0])).numpy(), data.reshape(-1)[[5, 0]])


def test_bad_files_and_indices_name_the_fix(records, tmp_path):
    _, flat, npy = records
    with pytest.raises(ValueError, match="not a whole number of 12-byte records"):
        MemmapRows(flat, np.float32, (3,))
    with pytest.raises(TypeError, match="pass dtype="):
        MemmapRows(flat)
    with pytest.raises(ValueError, match="holds float32, not int16"):
        MemmapRows(npy, np.int16)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="holds no records"):
        MemmapRows(empty, np.uint8)
    rows = MemmapRows(flat, np.float32, (16,))
    with pytest.raises(IndexError, match="out of range for 5000 rows"):
        rows.__getitems__(np.array([5000]))
    with pytest.raises(IndexError, match="row 5000 out of range"):
        rows[5000]


def test_prefetch_advises_each_run_of_rows(records, monkeypatch):
    _, flat, _ = records
    calls = []
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, offset, length, advice: calls.append((offset, length))
    )
    MemmapRows(flat, np.float32, (16,)).prefetch(np.array([9, 3, 4, 5, 100]))
    assert calls == [(3 * 64, 3 * 64), (9 * 64, 64), (100 * 64, 64)]


RecordsAhead = _core.RecordsAhead


class Counted:
    """``_core.RecordsAhead`` counting the batches it started and those fetched from it."""

    def __init__(self, *args):
        self.ahead, self.started, self.found = RecordsAhead(*args), 0, 0

    def start(self, indices, threads=0):
        started = self.ahead.start(indices, threads)
        self.started += started
        return started

    def take(self, indices):
        batch = self.ahead.take(indices)
        self.found += batch is not None
        return batch


def rows_loader(rows, epoch_batches=64, **loader_args):
    sampler = ShardedSampler(rows, 2, 1, seed=4, auto_epoch=True)
    batches = ShardedBatchSampler(sampler, epoch_batches)
    return DataLoader(rows, batch_sampler=batches, collate_fn=MemmapRows.collate, **loader_args)


def expected_epoch(data, epoch):
    """The rows of the rank's epoch, by numpy's indexing in the sampler's order."""
    sampler = ShardedSampler(5000, 2, 1, seed=4)
    sampler.set_epoch(epoch)
    return data[list(sampler)]


def test_batches_gathered_ahead_are_what_numpy_gathers(records, monkeypatch):
    data, flat, _ = records
    monkeypatch.setattr(_core, "RecordsAhead", Counted)
    rows = MemmapRows(flat, np.float32, (16,))
    loader = rows_loader(rows)
    for epoch in range(2):
        got = torch.cat(list(loader)).numpy()
        assert np.array_equal(got, expected_epoch(data, epoch))
    # 40 batches an epoch, each announced as the one before it is handed out. Gathering
    # ahead starts after the first fetch, which comes after batch 1 was announced; from
    # then on, only each epoch's first batch (announced by nobody) is gathered where
    # fetched, and nothing gathered ahead goes unfetched.
    assert len(loader) == 40 and rows._ahead.found == 38 + 39 == rows._ahead.started
    # A fetch of other rows between two batches gets its own rows.
    stream, got = iter(loader), []
    for k, batch in enumerate(stream):
        if k % 3 == 1:
            assert np.array_equal(MemmapRows.collate(rows.__getitems__([k, -k])).numpy(), data[[k, -k]])
        got.append(batch.numpy())
    assert np.array_equal(np.concatenate(got), expected_epoch(data, 2))
    assert clone_has_no_thread(rows)


def clone_has_no_thread(rows):
    clone = pickle.loads(pickle.dumps(rows))
    return clone._ahead is None and clone._map is None


def test_a_row_gathered_ahead_out_of_range_fails_when_fetched(records):
    data, flat, _ = records
    rows = MemmapRows(flat, np.float32, (16,))
    rows.gather_ahead(np.array([1]))  # nothing fetched yet: nothing gathered
    assert rows._ahead is None
    rows.__getitems__([0])
    rows.gather_ahead(np.array([1, 5000]))
    with pytest.raises(IndexError, match="out of range for 5000 rows"):
        rows.__getitems__(np.array([1, 5000]))
    rows.gather_ahead([7, 8])
    assert np.array_equal(rows.__getitems__(np.array([8, 7])).tensor.numpy(), data[[8, 7]])
    with pytest.raises(ValueError, match="must be read-only"):
        RecordsAhead(np.zeros(64, np.uint8), 64)


@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_array_batches_through_workers(records, method, monkeypatch):
    data, flat, _ = records
    monkeypatch.setattr(_core, "RecordsAhead", Counted)
    rows = MemmapRows(flat, np.float32, (16,))
    # An epoch in this process first: its gathering thread is running when workers
    # fork, and they must neither use nor wait for it.
    assert np.array_equal(torch.cat(list(rows_loader(rows))).numpy(), expected_epoch(data, 0))
    started = rows._ahead.started
    loader = rows_loader(rows, num_workers=2, multiprocessing_context=method)
    # A sampler of its own: its epoch 0.
    assert np.array_equal(torch.cat(list(loader)).numpy(), expected_epoch(data, 0))
    # The workers fetch with their own copies: this process gathered one batch ahead at
    # most (announced after its last fetch), then nothing.
    assert rows._ahead.started - started <= 1


@pytest.mark.multiprocess
def test_rows_gathered_ahead_on_real_ranks_resume_onto_another_world_size(tmp_path):
    n = 1000
    path = tmp_path / "index.i64"
    np.arange(n, dtype=np.int64).tofile(path)
    first = launch(dataset_workers.rows_run, 2, str(path), 10, None)
    second = launch(dataset_workers.rows_run, 3, str(path), None, first[0]["state"])
    # The rows themselves (each holds its index), not the indices asked for: every row of
    # the epoch exactly once across both runs, and the declared padding of the last.
    assert all(len(r["read"]) == 10 * 16 for r in first)
    read = Counter(x for r in first + second for x in r["read"])
    assert set(read) == set(range(n)) and sum(read.values()) == n + second[0]["padding"]
    assert second[0]["padding"] == (-(n - 2 * 10 * 16)) % 3
