"""Megatron indexed datasets read by TokenWindows: the .idx reader and its validation,
splits by sequences, document-aware samples and blends, against independent references
(plain-Python loops and hand-computed values). tests/test_megatron.py compares the same
against megatron-core itself."""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from permshard import ShardedBatchSampler, ShardedSampler
from permshard.data import (
    DocumentBatch,
    MegatronIndex,
    MixedDataset,
    TokenWindows,
    WindowBatch,
    split_bounds,
    write_indexed,
)

EOD = 0


def corpus(path, n_docs=300, seed=0, max_len=200, dtype=np.uint16, vocab=500):
    """Documents of random lengths, each ending with EOD (as Megatron's preprocessing)."""
    rng = np.random.default_rng(seed)
    docs = [np.append(rng.integers(1, vocab, int(rng.integers(0, max_len))), EOD) for _ in range(n_docs)]
    write_indexed(str(path), docs, dtype=dtype)
    return docs


def reference_sample(text, eod, reset_position_ids, reset_attention_mask, eod_mask_loss, starts=None):
    """Megatron's rules, one position at a time. ``starts``: document starts (token
    offsets in the window) instead of EOD tokens."""
    tokens, labels = text[:-1], text[1:]
    seq = len(tokens)
    if starts is None:
        starts = {i + 1 for i in range(seq - 1) if tokens[i] == eod}
    loss = [0.0 if eod_mask_loss and t == eod else 1.0 for t in tokens]
    positions, cur = [], 0
    for i in range(seq):
        if reset_position_ids and i in starts:
            cur = 0
        positions.append(cur)
        cur += 1
    cuts = sorted(starts) if reset_attention_mask else []
    cu = [0] + [c for c in cuts if 0 < c < seq] + [seq]
    mask = [[not (j <= i and not any(j < c <= i for c in cuts)) for j in range(seq)] for i in range(seq)]
    return tokens, labels, loss, positions, cu, mask


# ---------------------------------------------------------------- the .idx and its checks


def test_reader_reads_what_the_writer_wrote(tmp_path):
    docs = corpus(tmp_path / "c", dtype=np.int32, vocab=70000)
    ix = MegatronIndex(tmp_path / "c")
    lengths, pointers, documents = ix.arrays()
    assert ix.dtype == np.int32 and ix.num_sequences == len(docs)
    assert lengths.tolist() == [len(d) for d in docs]
    assert pointers.tolist() == (4 * np.concatenate([[0], np.cumsum([len(d) for d in docs])[:-1]])).tolist()
    assert documents.tolist() == list(range(len(docs) + 1))
    assert ix.num_tokens == sum(len(d) for d in docs)
    ds = TokenWindows(tmp_path / "c", 16)
    assert ds.dtype == np.int32  # from the .idx
    flat = np.concatenate(docs)
    for i in [0, 1, len(ds) - 1]:
        assert ds[i].tolist() == flat[i * 16 : i * 16 + 17].tolist()
    # The same dataset through name.bin, and pickled.
    again = pickle.loads(pickle.dumps(TokenWindows(str(tmp_path / "c") + ".bin", 16)))
    assert torch.equal(again[5], ds[5])


def _idx(tmp_path, **change):
    corpus(tmp_path / "c", n_docs=20)
    raw = bytearray((tmp_path / "c.idx").read_bytes())
    return tmp_path / "c", raw


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: b"NOTANIDX!" + raw[9:], "bad magic"),
        (lambda raw: raw[:-5], "truncated or corrupt"),
        (lambda raw: raw[:20], "truncated"),
        (lambda raw: raw[:9] + struct.pack("<Q", 2) + raw[17:], "version 2"),
        (lambda raw: raw[:17] + bytes([9]) + raw[18:], "dtype code 9"),
        (lambda raw: raw[:17] + bytes([7]) + raw[18:], "token ids must be integers"),
        (lambda raw: raw + bytes(20), "multimodal"),
    ],
)
def test_bad_indexes_are_refused_with_the_file_named(tmp_path, damage, message):
    prefix, raw = _idx(tmp_path)
    (tmp_path / "c.idx").write_bytes(bytes(damage(raw)))
    with pytest.raises(ValueError, match=message) as e:
        TokenWindows(prefix, 8)
    assert "c.idx" in str(e.value)


def test_inconsistent_pointers_and_bin_sizes_are_refused(tmp_path):
    prefix, raw = _idx(tmp_path)
    pointers = 34 + 4 * 20
    bad = bytearray(raw)
    bad[pointers + 8 * 3 : pointers + 8 * 4] = struct.pack("<q", 12345)
    (tmp_path / "c.idx").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="sequence 3 starts at byte 12345"):
        TokenWindows(prefix, 8)
    (tmp_path / "c.idx").write_bytes(bytes(raw))
    with open(tmp_path / "c.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(ValueError, match="c.bin is .* bytes but .*c.idx describes"):
        TokenWindows(prefix, 8)


def test_missing_halves_and_misnamed_files_are_refused(tmp_path):
    corpus(tmp_path / "c", n_docs=20)
    with pytest.raises(ValueError, match=r"is a Megatron index, not a token file: pass the prefix"):
        TokenWindows(str(tmp_path / "c.idx"), 8)
    os.rename(tmp_path / "c.idx", tmp_path / "moved")
    with pytest.raises(ValueError, match=r"c.idx is missing beside .*c.bin"):
        TokenWindows(tmp_path / "c", 8)
    # An index given as a flat token file under another name is still recognised.
    with pytest.raises(ValueError, match="is a Megatron index"):
        TokenWindows(tmp_path / "moved", 8)
    os.rename(tmp_path / "moved", tmp_path / "c.idx")
    os.remove(tmp_path / "c.bin")
    with pytest.raises(ValueError, match=r"c.bin is missing beside .*c.idx"):
        TokenWindows(tmp_path / "c", 8)


def test_dtype_from_the_index_and_a_disagreeing_one_refused(tmp_path):
    corpus(tmp_path / "c", n_docs=50)
    assert TokenWindows(tmp_path / "c", 8).dtype == np.uint16
    assert TokenWindows(tmp_path / "c", 8, np.uint16).dtype == np.uint16
    with pytest.raises(ValueError, match="dtype=uint8 but .*c.idx stores uint16"):
        TokenWindows(tmp_path / "c", 8, np.uint8)
    # Flat files keep their old default.
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "flat.bin")
    assert TokenWindows(tmp_path / "flat.bin", 8).dtype == np.uint16


def test_writer_refuses_tokens_that_do_not_fit(tmp_path):
    with pytest.raises(ValueError, match="do not fit uint16"):
        write_indexed(tmp_path / "c", [[1, 2, 70000]])
    with pytest.raises(ValueError, match="integer type"):
        write_indexed(tmp_path / "c", [[1, 2]], dtype=np.float32)


# ---------------------------------------------------------------- splits


def test_split_bounds_by_hand():
    # 969/1000 of 1000 sequences, then 30, then 1 (Megatron: round(bound * count)).
    assert split_bounds("969,30,1", 1000) == [(0, 969), (969, 999), (999, 1000)]
    assert split_bounds("99,1", 250) == [(0, 248), (248, 250), (0, 0)]  # 247.5 -> 248
    assert split_bounds([1, 0, 0], 7) == [(0, 7), (0, 0), (0, 0)]
    with pytest.raises(ValueError, match="split must be"):
        split_bounds("0,0,0", 10)
    with pytest.raises(ValueError, match="split must be"):
        split_bounds([1, 2, 3, 4], 10)


def test_parts_partition_the_sequences_and_read_only_their_tokens(tmp_path):
    docs = corpus(tmp_path / "c", n_docs=1000)
    seen = []
    for part in ("train", "valid", "test"):
        ds = TokenWindows(tmp_path / "c", 4, split="969,30,1", part=part)
        lo, hi = ds.sequence_ranges[0]
        seen.append((lo, hi))
        flat = np.concatenate(docs[lo:hi])
        assert ds.sizes == [flat.size]
        assert len(ds) == (flat.size - 1) // 4
        got = TokenWindows.collate(ds.__getitems__(range(len(ds))))
        want = np.stack([flat[i * 4 : i * 4 + 5] for i in range(len(ds))])
        assert np.array_equal(got.numpy(), want)
    assert seen == [(0, 969), (969, 999), (999, 1000)]
    with pytest.raises(ValueError, match="part must be one of"):
        TokenWindows(tmp_path / "c", 4, split="969,30,1", part="validation")
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "flat.bin")
    with pytest.raises(ValueError, match="split= needs Megatron indexed datasets"):
        TokenWindows([tmp_path / "c", tmp_path / "flat.bin"], 4, split="1,1")


# ---------------------------------------------------------------- document-aware samples


# Boundaries from EOD tokens or from the .idx (which cannot mask EOD losses without eod_id).
FLAGS = [
    (b, rp, ra, em)
    for b in ("eod", "idx")
    for rp in (False, True)
    for ra in (False, True)
    for em in (False, True)
    if not (b == "idx" and em)
]


@pytest.mark.parametrize("boundaries, reset_position_ids, reset_attention_mask, eod_mask_loss", FLAGS)
def test_document_samples_match_the_reference(
    tmp_path, boundaries, reset_position_ids, reset_attention_mask, eod_mask_loss
):
    docs = corpus(tmp_path / "c", n_docs=200, max_len=40)
    seq = 32
    ds = TokenWindows(
        tmp_path / "c",
        seq,
        documents=True,
        eod_id=EOD if boundaries == "eod" else None,
        reset_position_ids=reset_position_ids,
        reset_attention_mask=reset_attention_mask,
        eod_mask_loss=eod_mask_loss,
        attention_mask=True,
    )
    flat = np.concatenate(docs)
    doc_starts = np.cumsum([len(d) for d in docs])
    rng = np.random.default_rng(1)
    idx = rng.choice(len(ds), size=40, replace=False).tolist()
    batch = ds.__getitems__(idx)
    assert isinstance(batch, DocumentBatch) and len(batch) == 40
    collated = TokenWindows.collate(batch)
    cu_all = [0]
    for k, i in enumerate(idx):
        text = flat[i * seq : i * seq + seq + 1].tolist()
        starts = None
        if boundaries == "idx":
            starts = {int(s) - i * seq for s in doc_starts if i * seq < s < i * seq + seq}
        tokens, labels, loss, positions, cu, mask = reference_sample(
            text, EOD, reset_position_ids, reset_attention_mask, eod_mask_loss, starts
        )
        item = batch[k]
        assert item["tokens"].tolist() == tokens and item["labels"].tolist() == labels
        assert item["loss_mask"].tolist() == loss
        assert item["position_ids"].tolist() == positions
        assert item["cu_seqlens"].tolist() == cu
        assert item["attention_mask"][0].tolist() == mask
        assert collated["tokens"][k].tolist() == tokens
        assert collated["position_ids"][k].tolist() == positions
        assert collated["attention_mask"][k, 0].tolist() == mask
        cu_all += [c + k * seq for c in cu[1:]]
        # One item alone (__getitem__) is the same sample.
        single = ds[i]
        assert single["position_ids"].tolist() == positions and single["cu_seqlens"].tolist() == cu
    assert collated["cu_seqlens"].dtype == torch.int32
    assert collated["cu_seqlens"].tolist() == cu_all
    assert collated["max_seqlen"] == max(b - a for a, b in zip(cu_all, cu_all[1:]))
    # Items fetched one by one collate to the same batch.
    by_item = TokenWindows.collate([ds[i] for i in idx])
    assert set(by_item) == set(collated)
    for key in collated:
        if key == "max_seqlen":
            assert by_item[key] == collated[key]
        else:
            assert torch.equal(by_item[key], collated[key]), key


def test_idx_and_eod_boundaries_agree_when_documents_end_with_eod(tmp_path):
    corpus(tmp_path / "c", n_docs=300, max_len=100)
    kw = dict(documents=True, reset_position_ids=True, reset_attention_mask=True)
    by_eod = TokenWindows(tmp_path / "c", 64, eod_id=EOD, **kw)
    by_idx = TokenWindows(tmp_path / "c", 64, **kw)
    a = TokenWindows.collate(by_eod.__getitems__(range(len(by_eod))))
    b = TokenWindows.collate(by_idx.__getitems__(range(len(by_idx))))
    assert torch.equal(a["cu_seqlens"], b["cu_seqlens"]) and torch.equal(a["position_ids"], b["position_ids"])
    assert a["cu_seqlens"].numel() > len(by_eod) + 100  # many documents inside windows
    assert "attention_mask" not in a  # no dense mask unless asked


def test_documents_of_a_window(tmp_path):
    docs = corpus(tmp_path / "c", n_docs=100, max_len=30)
    ds = TokenWindows(tmp_path / "c", 20, split="9,1", part="valid")
    lo, _ = ds.sequence_ranges[0]
    flat = np.concatenate(docs[lo:])
    window = ds[3].tolist()
    pieces = ds.documents_of(3)
    rebuilt = sum((docs[s][a:b].tolist() for s, a, b in pieces), [])
    assert rebuilt == window and all(s >= lo for s, _, _ in pieces)
    assert flat[60:81].tolist() == window and len(pieces) > 1


def test_document_options_are_checked(tmp_path):
    corpus(tmp_path / "c", n_docs=50)
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "flat.bin")
    with pytest.raises(ValueError, match="need documents=True"):
        TokenWindows(tmp_path / "c", 8, reset_position_ids=True)
    with pytest.raises(ValueError, match="eod_mask_loss=True needs eod_id"):
        TokenWindows(tmp_path / "c", 8, documents=True, eod_mask_loss=True)
    with pytest.raises(ValueError, match="flat token file with no .idx: pass eod_id"):
        TokenWindows(tmp_path / "flat.bin", 8, documents=True)
    assert len(TokenWindows(tmp_path / "flat.bin", 8, documents=True, eod_id=7)) == 12


def test_document_batches_through_a_dataloader_with_workers(tmp_path):
    corpus(tmp_path / "c", n_docs=400, max_len=60)
    ds = TokenWindows(
        tmp_path / "c",
        32,
        split="9,1",
        documents=True,
        eod_id=EOD,
        reset_position_ids=True,
        reset_attention_mask=True,
    )
    sampler = ShardedSampler(ds, num_replicas=2, rank=1, seed=3)
    loader = DataLoader(
        ds,
        batch_sampler=ShardedBatchSampler(sampler, 8),
        collate_fn=TokenWindows.collate,
        num_workers=2,
        multiprocessing_context="spawn",
    )
    got = [b for b in loader]
    again = ShardedSampler(ds, num_replicas=2, rank=1, seed=3)
    want = [TokenWindows.collate(ds.__getitems__(batch)) for batch in ShardedBatchSampler(again, 8)]
    assert len(got) == len(want) > 3
    for a, b in zip(got, want):
        assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["cu_seqlens"], b["cu_seqlens"])


# ---------------------------------------------------------------- blends


def test_data_path_blend_batches_like_its_sources(tmp_path):
    corpus(tmp_path / "a", n_docs=300, seed=1)
    corpus(tmp_path / "b", n_docs=200, seed=2)
    blend = MixedDataset.from_data_path(f"0.3 {tmp_path / 'a'} 0.7 {tmp_path / 'b'}", 16, 5000, split="98,2")
    a, b = blend.datasets
    assert blend.mixture.weights == (0.3, 0.7) and a.sequence_ranges[0] == (0, 294)
    positions = list(range(100, 164))
    batch = blend.__getitems__(positions)
    assert isinstance(batch, WindowBatch)
    want = torch.stack([blend[p] for p in positions])
    assert torch.equal(TokenWindows.collate(batch), want)
    # Document batches merge too, in position order.
    docs = MixedDataset.from_data_path(
        [str(tmp_path / "a"), str(tmp_path / "b")], 16, documents=True, eod_id=EOD, reset_attention_mask=True
    )
    merged = TokenWindows.collate(docs.__getitems__(positions))
    by_item = TokenWindows.collate([docs[p] for p in positions])
    for key in ("tokens", "position_ids", "loss_mask", "cu_seqlens"):
        assert torch.equal(merged[key], by_item[key])
    # Without weights: each prefix in proportion to its windows, every window once.
    assert docs.mixture.counts(len(docs)) == [len(d) for d in docs.datasets]


def test_the_default_length_reads_every_source(tmp_path):
    corpus(tmp_path / "a", n_docs=400, seed=1)
    corpus(tmp_path / "b", n_docs=100, seed=2)
    a, b = TokenWindows(tmp_path / "a", 16), TokenWindows(tmp_path / "b", 16)
    blend = MixedDataset([a, b], [0.5, 0.5])
    counts = blend.mixture.counts(len(blend))
    assert counts[0] >= len(a) and counts[1] >= len(b)
    short = blend.mixture.counts(len(blend) - 1)
    assert short[0] < len(a) or short[1] < len(b)  # and no shorter one does
    # The smaller source repeats: its passes are whole permutations of it.
    sources, indices = blend.mixture.take(0, len(blend))
    small = indices[sources == 1]
    for k in range(len(small) // len(b)):
        assert sorted(small[k * len(b) : (k + 1) * len(b)].tolist()) == list(range(len(b)))


def test_weights_in_tokens_divides_by_tokens_per_sample(tmp_path):
    corpus(tmp_path / "a", n_docs=400, seed=1)
    short, long = TokenWindows(tmp_path / "a", 16), TokenWindows(tmp_path / "a", 64)
    blend = MixedDataset([short, long], [0.5, 0.5], 10_000, weights_in="tokens")
    c = blend.mixture.counts(10_000)
    assert abs(c[0] * 16 - c[1] * 64) <= 64 * 2  # equal tokens, within the prefix bound
    with pytest.raises(TypeError, match="tokens_per_sample"):
        MixedDataset([short, list(range(10))], [1, 1], 100, weights_in="tokens")
    with pytest.raises(ValueError, match="weights_in must be one of"):
        MixedDataset([short], [1], 100, weights_in="bytes")


# ---------------------------------------------------------------- CLI


def test_cli_inspect_counts_and_validates(tmp_path, capsys):
    from permshard._cli import main

    docs = corpus(tmp_path / "c", n_docs=1000)
    (tmp_path / "bad.idx").write_bytes(b"MMIDIDX\x00\x00" + bytes(10))
    (tmp_path / "bad.bin").write_bytes(b"")
    assert main(["inspect", str(tmp_path / "c"), str(tmp_path / "bad"), "--seq-len", "64"]) == 1
    out = capsys.readouterr().out
    tokens = sum(len(d) for d in docs)
    train = sum(len(d) for d in docs[:969])
    assert f"1,000 documents, {tokens:,} tokens of uint16, {(tokens - 1) // 64:,} windows" in out
    assert f"train (969,30,1): documents [0, 969), {train:,} tokens, {(train - 1) // 64:,} windows" in out
    assert "bad: INVALID:" in out and "truncated" in out
    assert main(["inspect", str(tmp_path / "c")]) == 0


def test_cli_show_names_what_the_sampler_yields(tmp_path, capsys):
    from permshard._cli import main

    corpus(tmp_path / "a", n_docs=300, seed=1)
    corpus(tmp_path / "b", n_docs=300, seed=2)
    data_path = f"0.4 {tmp_path / 'a'} 0.6 {tmp_path / 'b'}"
    args = ["show", "--data-path", data_path, "--seq-len", "32", "--split", "98,2", "-w", "3", "--rank", "1"]
    assert main(args + ["--step", "2", "--batch-size", "5", "--seed", "9"]) == 0
    out = capsys.readouterr().out
    blend = MixedDataset.from_data_path(data_path, 32, split="98,2")
    yielded = list(ShardedSampler(blend, num_replicas=3, rank=1, seed=9))[10:15]
    for k, index in enumerate(yielded):
        source, window = blend.mixture[index]
        ds = blend.datasets[source]
        doc, a, b = ds.documents_of(window)[0]
        line = f"[{k:>3}] position {index:,}: source {source} ({ds.paths[0]}) window {window:,}: "
        assert line + f"doc {doc:,} tokens [{a:,}, {b:,})" in out
    assert main(args + ["--step", "10000", "--batch-size", "5"]) == 2
    assert "is past the epoch" in capsys.readouterr().err


def test_documents_of_in_a_concatenation_of_one_prefixs_parts(tmp_path):
    docs = corpus(tmp_path / "c", n_docs=100, max_len=30)
    valid = TokenWindows(tmp_path / "c", 20, split="9,1", part="valid")
    train = TokenWindows(tmp_path / "c", 20, split="9,1", part="train")
    both = TokenWindows.concatenate([valid, train])  # one file path twice, two parts
    for i in (3, len(valid) + 5):
        window = both[i].tolist()
        rebuilt = sum((docs[s][a:b].tolist() for s, a, b in both.documents_of(i)), [])
        assert rebuilt == window, i
    assert both.documents_of(len(valid) + 5) == train.documents_of(5)


@pytest.mark.skipif(
    not os.path.exists("/proc/self/maps"), reason="reads a process's mappings from Linux's /proc"
)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_maps_only_the_token_files_its_batches_read(tmp_path, method):
    # A shared file system pays per file opened: of 200 prefixes, a DataLoader worker's
    # first batch of 16 maps the files of its windows, not the whole blend's.
    from helpers.dataset_workers import collate_with_mapped_files

    prefixes = [str(tmp_path / f"part{k}") for k in range(200)]
    for k, prefix in enumerate(prefixes):
        corpus(prefix, n_docs=20, seed=k)
    blend = MixedDataset.from_data_path(" ".join(prefixes), seq_len=16, num_samples=50_000)

    def batches():
        return ShardedBatchSampler(ShardedSampler(blend, 2, 1, seed=3), 16)

    loader = DataLoader(
        blend,
        batch_sampler=batches(),
        collate_fn=collate_with_mapped_files,
        num_workers=1,
        prefetch_factor=1,
        multiprocessing_context=method,
    )
    tokens, mapped = next(iter(loader))
    first = next(iter(batches()))
    read = sorted({prefixes[s] + ".bin" for s in blend.sources_of(first).tolist()})
    assert mapped == read and 1 < len(read) <= 16
    expected = torch.stack([blend[p] for p in first])
    assert torch.equal(tokens, expected)


def test_a_batch_of_a_blend_imports_nothing_more(tmp_path):
    # numpy's unique imports numpy.ma at its first call in a process (35 ms): that was most
    # of each forked DataLoader worker's first batch over a blend of 10,000 prefixes.
    import subprocess
    import sys

    prefixes = [str(tmp_path / f"part{k}") for k in range(3)]
    for k, prefix in enumerate(prefixes):
        corpus(prefix, n_docs=40, seed=k)
    script = f"""
import sys
from permshard.data import MixedDataset, TokenWindows
before = set(sys.modules)
for options in ({{}}, {{"documents": True, "reset_position_ids": True, "eod_id": {EOD}}}):
    blend = MixedDataset.from_data_path({" ".join(prefixes)!r}, 16, 500, **options)
    TokenWindows.collate(blend.__getitems__(list(range(0, 500, 7))))
    blend.datasets[0].byte_ranges([0, 1, 5])
print(sorted(m for m in set(sys.modules) - before if not m.startswith("permshard")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("megatron", [True, False])
def test_a_file_that_changed_size_after_the_build_is_refused_at_its_first_read(tmp_path, megatron):
    prefix = str(tmp_path / "c")
    if megatron:
        corpus(prefix, n_docs=50)
    else:
        np.arange(1000, dtype=np.uint16).tofile(prefix + ".bin")
    ds = TokenWindows(prefix if megatron else prefix + ".bin", seq_len=8)
    with open(prefix + ".bin", "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(
        ValueError, match=r"c\.bin changed size since the dataset was built .* build the dataset again"
    ):
        ds[0]
    os.remove(prefix + ".bin")
    with pytest.raises(ValueError, match=r"cannot open .*c\.bin: No such file"):
        ds[0]
