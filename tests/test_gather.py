"""The Rust gathers behind MemmapRows and TokenWindows against plain numpy: every record
dtype and shape, every integer token dtype in both byte orders, several files, shifted
epochs, document masks, empty and one-item batches, negative and out-of-range indices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from permshard import _core
from permshard._hooks import EpochIndices
from permshard.data import MemmapRows, TokenWindows
from permshard.data._documents import DocumentBatch

TOKEN_TYPES = [np.dtype(f"{order}{kind}{size}") for order in "<>" for kind in "ui" for size in (1, 2, 4, 8)]


@pytest.mark.parametrize(
    "dtype, shape",
    [(np.uint8, ()), (np.float32, (16,)), (np.int64, (3, 5)), (np.float16, (7,)), (np.complex64, (2,))],
)
def test_records_of_every_dtype_and_shape_are_numpys(tmp_path, dtype, shape):
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((301, *shape)) * 100).astype(dtype)
    path = tmp_path / "rows.bin"
    data.tofile(path)
    rows = MemmapRows(path, dtype, shape)
    for picked in ([], [7], [300, -301, 0, 0, -1], rng.integers(-301, 301, 1000)):
        idx = np.asarray(picked, dtype=np.int64)
        batch = rows.__getitems__(idx).tensor
        assert batch.shape == (len(idx), *shape)
        assert np.array_equal(batch.numpy(), data[idx])


def test_npy_records_start_after_the_header(tmp_path):
    data = np.arange(40 * 6, dtype=np.int32).reshape(40, 6)
    np.save(tmp_path / "rows.npy", data)
    rows = MemmapRows(tmp_path / "rows.npy")
    assert np.array_equal(rows.__getitems__(np.array([39, 0, 5])).tensor.numpy(), data[[39, 0, 5]])


def test_rows_out_of_range_are_index_errors_naming_the_row(tmp_path):
    np.zeros((10, 4), np.float32).tofile(tmp_path / "rows.bin")
    rows = MemmapRows(tmp_path / "rows.bin", np.float32, (4,))
    for bad in (10, -11, 2**62):
        with pytest.raises(IndexError, match=f"row index {bad} out of range for 10 rows"):
            rows.__getitems__([0, bad])


def write_tokens(tmp_path, dtype, sizes, seed=0):
    """Token files of ``dtype`` over its whole range (extremes included)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    arrays, paths = [], []
    for k, m in enumerate(sizes):
        a = rng.integers(info.min, info.max, size=m, dtype=dtype.newbyteorder("="), endpoint=True)
        a[:2] = info.min, info.max
        a = a.astype(dtype)
        path = tmp_path / f"tokens{k}.bin"
        a.tofile(path)
        arrays.append(a)
        paths.append(str(path))
    return paths, arrays


def windows_by_hand(arrays, seq_len, shift, slack):
    """Every window of each file, sliced and cast by numpy."""
    out = []
    for a in arrays:
        j = 0
        while slack + j * seq_len + seq_len + 1 <= len(a):
            o = shift + j * seq_len
            out.append(a[o : o + seq_len + 1].astype(np.int64))
            j += 1
    return np.stack(out)


@pytest.mark.parametrize("dtype", TOKEN_TYPES, ids=str)
def test_windows_of_every_token_dtype_and_byte_order_are_numpys(tmp_path, dtype):
    paths, arrays = write_tokens(tmp_path, dtype, (200, 23, 97))
    ds = TokenWindows(paths, 10, dtype=dtype)
    want = windows_by_hand(arrays, 10, 0, 0)
    assert len(ds) == len(want)
    rng = np.random.default_rng(2)
    for picked in ([], [4], [len(ds) - 1, -len(ds), 0, 0, -1], rng.integers(-len(ds), len(ds), 500)):
        idx = np.asarray(picked, dtype=np.int64)
        batch = TokenWindows.collate(ds.__getitems__(idx))
        assert batch.dtype == torch.int64 and batch.shape == (len(idx), 11)
        assert np.array_equal(batch.numpy(), want[idx])
    assert np.array_equal(ds[3].numpy(), want[3])


def test_shifted_epochs_gather_the_epochs_windows(tmp_path):
    paths, arrays = write_tokens(tmp_path, np.dtype(np.uint16), (300, 150))
    ds = TokenWindows(paths, 16, shift_per_epoch=True, seed=3)
    idx = np.arange(len(ds))
    for epoch in range(4):
        shift = ds.shift_for(epoch)
        got = ds.__getitems__(EpochIndices(idx, epoch=epoch)).tensor.numpy()
        assert np.array_equal(got, windows_by_hand(arrays, 16, shift, 15))


def test_windows_out_of_range_are_index_errors(tmp_path):
    paths, _ = write_tokens(tmp_path, np.dtype(np.uint16), (100,))
    ds = TokenWindows(paths, 9)
    assert len(ds) == 11
    for bad in (11, -12):
        with pytest.raises(IndexError, match=f"window index {bad} out of range for 11 windows"):
            ds.__getitems__([1, bad])


def test_document_batches_equal_the_ones_numpy_casts(tmp_path):
    paths, arrays = write_tokens(tmp_path, np.dtype(np.int32), (400, 90))
    for a in arrays:  # plenty of documents: token 5 ends one
        a[::7] = 5
    for p, a in zip(paths, arrays):
        a.tofile(p)
    ds = TokenWindows(
        paths,
        12,
        dtype=np.int32,
        documents=True,
        eod_id=5,
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=True,
    )
    idx = np.array([0, len(ds) - 1, 3, -2, 17])
    text = windows_by_hand(arrays, 12, 0, 0)[idx]
    starts = np.zeros((len(idx), 12), dtype=np.bool_)
    starts[:, 1:] = text[:, :11] == 5
    want = DocumentBatch(
        text,
        starts,
        eod_id=5,
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=True,
        attention_mask=False,
    ).collate()
    got = ds.__getitems__(idx).collate()
    assert want.keys() == got.keys()
    for key, value in want.items():
        assert torch.equal(value, got[key]) if isinstance(value, torch.Tensor) else value == got[key], key


def test_the_core_gathers_refuse_layouts_that_do_not_fit():
    tokens = np.zeros(20, np.uint8)

    def windows(token_bytes, starts, shift):
        u64 = np.array(starts, np.uint64), np.array([0], np.uint64)
        _core.gather_windows(
            [tokens], token_bytes, False, False, *u64, shift, 5, np.array([0]), np.empty(11, np.int64)
        )

    with pytest.raises(ValueError, match="does not fit the file"):
        windows(1, [0, 3], 10)
    with pytest.raises(ValueError, match="1 files need 2 window starts"):
        windows(1, [0], 0)
    with pytest.raises(ValueError, match="token ids of 3 bytes"):
        windows(3, [0, 1], 0)
    with pytest.raises(ValueError, match="not a whole number of 3-byte records"):
        _core.gather_records(tokens, 3, np.array([0]), np.empty(3, np.uint8))
    with pytest.raises(ValueError, match="not 2 records"):
        _core.gather_records(tokens, 4, np.array([0, 1]), np.empty(4, np.uint8))
