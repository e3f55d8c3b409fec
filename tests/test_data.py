"""permshard.data: TokenWindows over memmapped token files, IterableDataset sharding by
rank x worker, and packing."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers import dataset_workers
from helpers.distributed import launch
from permshard import ShardedBatchSampler, ShardedSampler
from permshard._hooks import EpochIndex
from permshard.data import PackedDataset, TokenWindows, shard_iterable


@pytest.fixture
def token_files(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 50_000, size=m, dtype=np.uint16) for m in (1000, 37, 5003)]
    paths = []
    for i, a in enumerate(arrays):
        p = tmp_path / f"part{i}.bin"
        a.tofile(p)
        paths.append(str(p))
    return paths, arrays


def reference_windows(arrays, seq_len, shift=0, shifting=False):
    """Direct slicing of each file: every window of seq_len + 1 tokens at offsets
    shift + j * seq_len that fits, counted by trying (for every possible shift when the
    dataset shifts, so the count does not depend on it)."""
    out = []
    worst = seq_len - 1 if shifting else 0
    for a in arrays:
        j = 0
        while worst + j * seq_len + seq_len + 1 <= len(a):
            o = shift + j * seq_len
            out.append(a[o : o + seq_len + 1].astype(np.int64))
            j += 1
    return out


def test_windows_equal_direct_slicing(token_files):
    paths, arrays = token_files
    ds = TokenWindows(paths, seq_len=16)
    ref = reference_windows(arrays, 16)
    assert len(ds) == len(ref)
    rng = np.random.default_rng(1)
    for i in rng.integers(0, len(ds), size=200).tolist() + [0, len(ds) - 1, -1]:
        assert ds[i].dtype == torch.int64 and ds[i].shape == (17,)
        assert ds[i].tolist() == ref[i].tolist()
    # Windows never cross files: file boundaries land where the counts say.
    first_of_file2 = (1000 - 1) // 16 + (37 - 1) // 16
    assert ds.locate(first_of_file2) == (paths[2], 0)


def test_getitems_equals_per_item(token_files):
    paths, _ = token_files
    ds = TokenWindows(paths, seq_len=8)
    idx = [5, 0, len(ds) - 1, 130, 7, 130, -2]
    batch = ds.__getitems__(idx)
    assert len(batch) == len(idx)
    assert [b.tolist() for b in batch] == [ds[i].tolist() for i in idx]
    stacked = TokenWindows.collate(batch)
    assert stacked.shape == (len(idx), 9) and stacked.data_ptr() == batch.tensor.data_ptr()
    assert torch.equal(TokenWindows.collate([ds[i] for i in idx]), stacked)
    assert torch.equal(torch.utils.data.default_collate(batch), stacked)
    with pytest.raises(IndexError):
        ds.__getitems__([len(ds)])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_shift_per_epoch_moves_boundaries_keeps_length(token_files):
    paths, arrays = token_files
    ds = TokenWindows(paths, seq_len=16, shift_per_epoch=True, seed=4)
    n = len(ds)
    shifts = set()
    for epoch in range(8):
        ds.set_epoch(epoch)
        shifts.add(ds.shift)
        assert len(ds) == n and 0 <= ds.shift < 16
        ref = reference_windows(arrays, 16, ds.shift, shifting=True)
        assert ds[n - 1].tolist() == ref[n - 1].tolist()
    assert len(shifts) > 1


def test_dataloader_with_workers_and_batch_sampler(token_files):
    paths, _ = token_files
    ds = TokenWindows(paths, seq_len=8)
    sampler = ShardedSampler(ds, num_replicas=2, rank=1, seed=2)
    loader = DataLoader(ds, batch_sampler=ShardedBatchSampler(sampler, 16), num_workers=2)
    got = torch.cat(list(loader))
    expected = torch.stack([ds[i] for i in ShardedSampler(ds, num_replicas=2, rank=1, seed=2)])
    assert torch.equal(got, expected)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._maps is None and torch.equal(clone[3], ds[3])


def test_virtual_file_of_a_billion_windows(tmp_path):
    """A sparse file of 2**31 uint16 tokens (4 GiB on paper, nothing on disk): 2**30 - 1
    windows of 2 tokens, sampled at O(1) memory."""
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(2 * 2**31)
    ds = TokenWindows(str(path), seq_len=2)
    assert len(ds) == (2**31 - 1) // 2 == 2**30 - 1
    sampler = ShardedSampler(ds, num_replicas=8, rank=5, seed=1)
    assert len(sampler) == -(-len(ds) // 8)
    it = iter(sampler)
    batch = [next(it) for _ in range(64)]
    rows = ds.__getitems__(batch)
    assert all(r.tolist() == [0, 0, 0] for r in rows)


@pytest.mark.parametrize(
    "make, text",
    [
        (lambda p: TokenWindows(str(p / "missing.bin"), 8), "no such token file or Megatron prefix"),
        (
            lambda p: TokenWindows(str(p / "missing"), 8, split="90,5,5"),
            r"neither .*missing nor .*missing\.bin",
        ),
        (lambda p: TokenWindows(str(p / "odd.bin"), 8), "not a multiple of 2"),
        (lambda p: TokenWindows(str(p / "short.bin"), 10), r"fewer than one window of seq_len \+ 1 = 11"),
        (lambda p: TokenWindows(str(p / "short.bin"), 0), "seq_len should be a positive integer"),
        (lambda p: TokenWindows([], 8), "paths is empty"),
        (lambda p: TokenWindows(str(p / "short.bin"), 2, dtype=np.float32), "integer type"),
    ],
)
def test_token_file_errors(tmp_path, make, text):
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 101)
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "short.bin")
    with pytest.raises(ValueError, match=text):
        make(tmp_path)


def test_last_full_window_of_every_file_is_kept(tmp_path):
    seq_len = 8
    for sizes in [(9,), (17, 9), (1000, 37, 5003), (16, 24, 25)]:
        paths = []
        for i, m in enumerate(sizes):
            np.arange(m, dtype=np.uint16).tofile(tmp_path / f"f{i}.bin")
            paths.append(str(tmp_path / f"f{i}.bin"))
        ds = TokenWindows(paths, seq_len=seq_len)
        arrays = [np.arange(m, dtype=np.uint16) for m in sizes]
        ref = reference_windows(arrays, seq_len)
        assert len(ds) == len(ref) == sum((m - 1) // seq_len for m in sizes), sizes
        assert all(torch.equal(ds[i], torch.from_numpy(r)) for i, r in enumerate(ref))
        # What is left of each file is shorter than one more window: nothing droppable.
        for m in sizes:
            assert m - ((m - 1) // seq_len) * seq_len - 1 < seq_len
    # A file of exactly seq_len + 1 tokens is one window, not an error.
    np.arange(seq_len + 1, dtype=np.uint16).tofile(tmp_path / "one.bin")
    assert len(TokenWindows(str(tmp_path / "one.bin"), seq_len)) == 1
    # Shifting needs seq_len - 1 tokens of slack and says so.
    with pytest.raises(ValueError, match="plus seq_len - 1 = 7 for shifted epochs"):
        TokenWindows(str(tmp_path / "one.bin"), seq_len, shift_per_epoch=True)


@pytest.mark.parametrize("per_batch", [False, True])
def test_epoch_reaches_persistent_workers(token_files, per_batch):
    """set_epoch in the main process never reaches persistent workers; the epoch carried
    by each index does, so every epoch reads its own window boundaries."""
    paths, arrays = token_files
    ds = TokenWindows(paths, seq_len=16, shift_per_epoch=True, seed=4)
    sampler = ShardedSampler(ds, num_replicas=2, rank=1, seed=2)
    if per_batch:
        loader = DataLoader(
            ds,
            batch_sampler=ShardedBatchSampler(sampler, 8),
            num_workers=2,
            persistent_workers=True,
            collate_fn=TokenWindows.collate,
        )
    else:
        loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, persistent_workers=True)
    shifts = set()
    for epoch in range(4):
        sampler.set_epoch(epoch)
        ds.set_epoch(epoch)  # what users do; the workers never see it
        shift = ds.shift_for(epoch)
        shifts.add(shift)
        ref = reference_windows(arrays, 16, shift, shifting=True)
        got = torch.cat(list(loader))
        # The same indices from a sampler over the bare length: plain ints, no epoch.
        plain = ShardedSampler(len(ds), num_replicas=2, rank=1, seed=2)
        plain.set_epoch(epoch)
        order = list(plain)
        want = torch.stack([torch.from_numpy(ref[i]) for i in order])
        assert torch.equal(got, want), f"epoch {epoch}"
        path, offset = ds.locate(order[0], epoch=epoch)
        assert offset % 16 == shift and (path, offset) == ds.locate(EpochIndex(order[0], epoch))
    assert len(shifts) > 1  # the boundaries really moved


def test_epoch_index_behaves_as_an_int():
    from permshard._hooks import epoch_of

    i = EpochIndex(7, epoch=3)
    assert i == 7 and i + 1 == 8 and [10, 11, 12, 13, 14, 15, 16, 17][i] == 17
    back = pickle.loads(pickle.dumps(i))
    assert type(back) is EpochIndex and back == 7 and back.epoch == 3
    assert epoch_of(i) == 3 and epoch_of([i, EpochIndex(2, 3)]) == 3 and epoch_of(7) is None
    with pytest.raises(ValueError, match="mixes indices of epochs"):
        epoch_of([i, EpochIndex(1, 4)])
    # Plain datasets get plain ints: no cost for them.
    assert type(next(iter(ShardedSampler(10, num_replicas=1, rank=0)))) is int


@pytest.mark.parametrize("method", [pytest.param("spawn", marks=pytest.mark.slow), "forkserver"])
def test_shard_iterable_in_a_spawned_worker_without_a_rank_refuses_to_guess(method, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = DataLoader(
        dataset_workers.Docs(100), batch_size=None, num_workers=1, multiprocessing_context=method
    )
    with pytest.raises(ValueError, match="cannot tell which part of the data is this rank's"):
        list(loader)
    if method == "forkserver":
        return  # its server keeps the environment it started with (torchrun sets it first)
    # RANK / WORLD_SIZE in the environment reach the worker.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert [int(x) for x in loader] == list(range(1, 100, 2))


@pytest.mark.slow
def test_shard_iterable_in_a_forked_worker_of_a_single_process():
    loader = DataLoader(
        dataset_workers.Docs(100), batch_size=None, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(int(x) for x in loader) == list(range(100))


def test_shard_iterable_single_process_covers_once():
    docs = list(range(1000))
    parts = [list(shard_iterable(docs, rank=r, world_size=3)) for r in range(3)]
    assert sorted(x for p in parts for x in p) == docs
    even = [list(shard_iterable(docs, rank=r, world_size=3, even=True)) for r in range(3)]
    assert {len(p) for p in even} == {333}
    assert len(set(x for p in even for x in p)) == 999
    with pytest.raises(ValueError, match="every consumer would get nothing"):
        list(shard_iterable([1, 2], rank=0, world_size=3, even=True))


def test_whole_shards_are_not_read_by_others():
    opened: list[str] = []

    def open_shard(name):
        opened.append(name)
        return [f"{name}:{i}" for i in range(5)]

    shards = [f"s{i}" for i in range(6)]
    got = list(shard_iterable(shards, open_shard=open_shard, rank=1, world_size=3))
    assert opened == ["s1", "s4"] and len(got) == 10
    opened.clear()
    everyone = [
        list(shard_iterable(shards[:4], open_shard=open_shard, rank=r, world_size=3)) for r in range(3)
    ]
    assert sorted(x for p in everyone for x in p) == sorted(f"s{i}:{j}" for i in range(4) for j in range(5))


def test_packing_single_process():
    docs = ["a b c", "d e", "f g h i j"]
    vocab = {w: i for i, w in enumerate("abcdefghij")}
    ds = PackedDataset(docs, seq_len=4, eos_id=99, tokenizer=lambda s: [vocab[w] for w in s.split()])
    seqs = [s.tolist() for s in ds]
    assert seqs == [[0, 1, 2, 99], [3, 4, 99, 5], [6, 7, 8, 9]]
    with pytest.raises(TypeError, match="tokenizer"):
        list(PackedDataset(docs, seq_len=4, eos_id=0))
    with pytest.raises(ValueError, match="seq_len"):
        PackedDataset(docs, seq_len=0, eos_id=0)
    infinite = iter(PackedDataset([[1, 2, 3]], seq_len=3, eos_id=0, infinite=True, shuffle=True))
    assert [next(infinite).tolist() for _ in range(3)] == [[1, 2, 3], [0, 1, 2], [3, 0, 1]]


@pytest.mark.multiprocess
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_shard_iterable_in_workers_of_every_start_method_on_two_ranks(method):
    n_docs = 10_000
    results = launch(dataset_workers.iterable_start_method, 2, n_docs, method)
    docs = [x for r in results for x in r]
    assert len(docs) == n_docs and Counter(docs) == Counter(range(n_docs))


@pytest.mark.multiprocess
def test_iterable_sharding_on_two_ranks_times_three_workers():
    n_docs = 3_000
    results = launch(dataset_workers.iterable_sharding, 2, n_docs)
    plain = [x for r in results for x in r["plain"]]
    assert Counter(plain) == Counter(range(n_docs))
    assert len({len(r["even"]) for r in results}) == 1
    evens = [x for r in results for x in r["even"]]
    assert len(evens) == len(set(evens)) and (n_docs - 5) - len(evens) < 6
    tokens = [t for r in results for t in r["packed_tokens"]]
    expected = [d * 1000 + j for d in range(n_docs) for j in range(1 + d % 17)]
    assert Counter(tokens) == Counter(expected)  # each token exactly once
    assert sum(r["packed_eos"] for r in results) == n_docs
    assert all(r["packed_lengths"] == [64] for r in results)
