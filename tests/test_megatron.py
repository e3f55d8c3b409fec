"""TokenWindows against megatron-core itself: files written by its IndexedDatasetBuilder
and read by its IndexedDataset, its split arithmetic, its GPTDataset samples and masks.
megatron-core 0.16.1 is a test dependency (the Makefile installs it); it is never skipped."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from permshard.data import MegatronIndex, TokenWindows, split_bounds, write_indexed

with warnings.catch_warnings():  # megatron-core warns of its own deprecations at import
    warnings.simplefilter("ignore", DeprecationWarning)
    import megatron.core.datasets.indexed_dataset as indexed_dataset
    from megatron.core.datasets import blended_megatron_dataset_config as mconfig
    from megatron.core.datasets import gpt_dataset
    from megatron.core.datasets.utils import Split

EOD = 0


#: The documents of these tests: short, a small vocabulary, some empty (EOD alone).
SMALL = dict(max_len=200, vocab=500, min_len=0)


def megatron_write(prefix, docs, dtype, multimodal=False):
    builder = indexed_dataset.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype, multimodal=multimodal)
    for doc in docs:
        if multimodal:
            builder.add_item(torch.from_numpy(doc.astype(np.int64)), mode=0)
            builder.end_document()
        else:
            builder.add_document(doc.astype(np.int64), [len(doc)])
    builder.finalize(prefix + ".idx")


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_files_written_by_megatron_read_the_same(tmp_path, dtype, documents):
    docs = documents(500, **{**SMALL, "vocab": 30000})
    megatron_write(str(tmp_path / "m"), docs, dtype)
    write_indexed(tmp_path / "p", docs, dtype=dtype)
    # Our writer's files are byte for byte Megatron's.
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"m{ext}").read_bytes() == (tmp_path / f"p{ext}").read_bytes()
    theirs = indexed_dataset.IndexedDataset(str(tmp_path / "m"))
    ours = MegatronIndex(tmp_path / "m")
    lengths, pointers, docs_ix = ours.arrays()
    assert np.array_equal(lengths, theirs.sequence_lengths)
    assert np.array_equal(pointers, theirs.index.sequence_pointers)
    assert np.array_equal(docs_ix, theirs.document_indices)
    assert ours.dtype == theirs.index.dtype
    ds = TokenWindows(tmp_path / "m", 64)
    flat = np.concatenate([theirs[s] for s in range(len(theirs))])  # Megatron's reader
    whole = TokenWindows.collate(ds.__getitems__(range(len(ds)))).numpy()
    assert np.array_equal(whole, np.stack([flat[i * 64 : i * 64 + 65] for i in range(len(ds))]))


def test_a_multimodal_index_from_megatron_is_refused(tmp_path, documents):
    megatron_write(str(tmp_path / "mm"), documents(20, **SMALL), np.uint16, multimodal=True)
    indexed_dataset.IndexedDataset(str(tmp_path / "mm"), multimodal=True)  # Megatron reads it
    with pytest.raises(ValueError, match="multimodal index"):
        TokenWindows(tmp_path / "mm", 8)


def megatron_split(split, num):
    matrix = mconfig.convert_split_vector_to_split_matrix(mconfig.parse_and_normalize_split(split))
    out = []
    for bookends in matrix:
        if bookends is None:
            out.append((0, 0))
        else:
            out.append((int(round(bookends[0] * float(num))), int(round(bookends[1] * float(num)))))
    return out


def test_split_arithmetic_is_megatrons():
    rng = np.random.default_rng(0)
    splits = ["969,30,1", "99,1,0", "98,2", "1", "90,5,5", "0.7,0.2,0.1", "1,1,1", "33,33,34", "0,1,0"]
    splits += [",".join(str(int(v)) for v in rng.integers(0, 1000, 3)) for _ in range(200)]
    for split in splits:
        if sum(float(v) for v in split.split(",")) == 0:
            continue
        for num in [1, 2, 3, 7, 10, 999, 1000, 62_844, 2_031_250, *rng.integers(1, 10**7, 5).tolist()]:
            assert split_bounds(split, num) == megatron_split(split, num), (split, num)


class _Tokenizer:
    eod = EOD
    pad = -1
    vocab_size = 500
    unique_identifiers = {"class": "test"}


@pytest.mark.parametrize("flags", [(True, True, True), (False, False, False), (True, False, True)])
def test_gpt_dataset_samples_and_masks_are_ours(tmp_path, flags, documents):
    reset_position_ids, reset_attention_mask, eod_mask_loss = flags
    docs = documents(300, 4, **{**SMALL, "max_len": 120})
    prefix = str(tmp_path / "c")
    megatron_write(prefix, docs, np.uint16)
    seq = 64
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=1,
        sequence_length=seq,
        blend=([prefix], None),
        split="969,30,1",
        tokenizer=_Tokenizer(),
        reset_position_ids=reset_position_ids,
        reset_attention_mask=reset_attention_mask,
        eod_mask_loss=eod_mask_loss,
        create_attention_mask=True,
        path_to_cache=str(tmp_path / "cache"),
    )
    low = indexed_dataset.IndexedDataset(prefix)
    lo, hi = split_bounds("969,30,1", len(low))[0]
    theirs = gpt_dataset.GPTDataset(low, prefix, np.arange(lo, hi, dtype=np.int32), 200, Split.train, config)
    # Megatron's samples are windows over its documents laid end to end in its order:
    # the same layout as TokenWindows over those documents in that order.
    write_indexed(tmp_path / "laid", [docs[d] for d in theirs.document_index])
    ours = TokenWindows(
        tmp_path / "laid",
        seq,
        documents=True,
        eod_id=EOD,
        reset_position_ids=reset_position_ids,
        reset_attention_mask=reset_attention_mask,
        eod_mask_loss=eod_mask_loss,
        attention_mask=True,
    )
    batch = TokenWindows.collate(ours.__getitems__(theirs.shuffle_index[:100].tolist()))
    for i in range(100):
        sample = theirs[i]
        assert torch.equal(batch["tokens"][i], sample["tokens"])
        assert torch.equal(batch["labels"][i], sample["labels"])
        assert torch.equal(batch["loss_mask"][i], sample["loss_mask"])
        assert torch.equal(batch["position_ids"][i], sample["position_ids"])
        assert torch.equal(batch["attention_mask"][i], sample["attention_mask"])


def test_masks_match_get_ltor_masks_and_position_ids(tmp_path, documents):
    write_indexed(tmp_path / "c", documents(400, 7, **{**SMALL, "max_len": 50}))
    seq = 128
    for flags in [(a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)]:
        ds = TokenWindows(
            tmp_path / "c",
            seq,
            documents=True,
            eod_id=EOD,
            reset_position_ids=flags[0],
            reset_attention_mask=flags[1],
            eod_mask_loss=flags[2],
            attention_mask=True,
        )
        batch = TokenWindows.collate(ds.__getitems__(range(0, len(ds), 7)))
        for k in range(batch["tokens"].shape[0]):
            mask, loss, pos = gpt_dataset._get_ltor_masks_and_position_ids(
                batch["tokens"][k].clone(), EOD, *flags, True
            )
            assert torch.equal(batch["attention_mask"][k], mask), flags
            assert torch.equal(batch["loss_mask"][k], loss), flags
            assert torch.equal(batch["position_ids"][k], pos), flags


def test_a_blend_of_more_prefixes_than_open_files_reads(tmp_path):
    # 600 prefixes (1,200 files) under an open-file limit of 256, in a process of its own:
    # every prefix's .idx and .bin mapped, none holding a descriptor (0.5 kept 2 a prefix).
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import os, resource
        import numpy as np
        from permshard.data import MixedDataset, write_indexed
        words = []
        for i in range(600):
            prefix = os.path.join({str(tmp_path)!r}, f"p{{i}}")
            write_indexed(prefix, [np.full(40, i + 1), np.full(30, i + 1)], dtype=np.uint16)
            words += ["1", prefix]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        blend = MixedDataset.from_data_path(words, 16)
        seen = set()
        for i in range(len(blend)):
            source, _ = blend.mixture[i]
            tokens = blend[i]["tokens"] if isinstance(blend[i], dict) else blend[i]
            values = set(np.asarray(tokens).ravel().tolist()) - {{0}}
            assert values <= {{source + 1}}, (i, source, values)  # the prefix's own tokens
            seen.add(source)
        assert seen == set(range(600))
        print("open files", len(os.listdir("/proc/self/fd")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) < 20
