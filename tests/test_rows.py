"""MemmapRows: flat files and .npy, the vectorised gather against numpy's, bad files, the
prefetch protocol, pickling, and array batches through DataLoader workers."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from permshard import ShardedBatchSampler, ShardedSampler
from permshard._epoch_index import EpochIndex, EpochIndices
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
    assert np.array_equal(scalar.__getitems__([5, 0]).tensor.numpy(), data.reshape(-1)[[5, 0]])


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


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_array_batches_through_workers(records, method):
    data, flat, _ = records
    rows = MemmapRows(flat, np.float32, (16,))
    sampler = ShardedSampler(rows, 2, 1, seed=4)
    loader = DataLoader(
        rows,
        batch_sampler=ShardedBatchSampler(sampler, 256),
        collate_fn=MemmapRows.collate,
        num_workers=2,
        multiprocessing_context=method,
    )
    got = torch.cat(list(loader)).numpy()
    assert np.array_equal(got, data[list(ShardedSampler(5000, 2, 1, seed=4))])
