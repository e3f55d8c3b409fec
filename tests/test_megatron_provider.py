"""permshard.megatron, the datasets of Megatron-LM's ``pretrain_gpt.py``, against
megatron-core 0.16.1: GPTDataset's keys, dtypes and shapes (a sample of a GPTDataset
built by its BlendedMegatronDatasetBuilder from the same arguments), its mask function's
values on our windows, its split of documents per part, and a resume through the
arithmetic of Megatron's ``--dataloader-type single`` sampler on another data-parallel
size. megatron-core's wheel has no ``megatron.training``: the provider's glue to it is
run with a stand-in module that hands it Megatron's parsed arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import permshard.megatron
from permshard.data import MixedDataset, split_bounds, write_indexed
from permshard.megatron import add_arguments, datasets_from_args

with warnings.catch_warnings():  # megatron-core warns of its own deprecations at import
    warnings.simplefilter("ignore", DeprecationWarning)
    from megatron.core.datasets import gpt_dataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

EOD = 0
SEQ = 32


class _Tokenizer:
    eod = EOD
    pad = -1
    vocab_size = 500
    unique_identifiers = {"class": "test"}


@pytest.fixture
def corpus(tmp_path):
    """Two Megatron prefixes of short documents, each ending in EOD; their documents."""
    rng = np.random.default_rng(3)
    docs = {}
    for name in ("web", "code"):
        docs[str(tmp_path / name)] = [
            np.append(rng.integers(1, 500, rng.integers(3, 70)), EOD) for _ in range(400)
        ]
        write_indexed(tmp_path / name, docs[str(tmp_path / name)])
    return docs


def megatron_args(corpus, **changes):
    """Megatron's parsed arguments (the names ``pretrain_gpt.py`` reads)."""
    web, code = corpus
    args = argparse.Namespace(
        data_path=["0.4", web, "0.6", code],
        train_data_path=None,
        valid_data_path=None,
        test_data_path=None,
        data_args_path=None,
        split="90,8,2",
        seq_length=SEQ,
        seed=1234,
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=True,
        create_attention_mask_in_dataloader=True,
        mock_data=False,
        sft=False,
        fim_data=False,
    )
    for key, value in changes.items():
        setattr(args, key, value)
    return args


def single_sampler(total, consumed, micro, rank, size):
    """Megatron's ``--dataloader-type single`` arithmetic: positions from ``consumed`` on,
    in order, cut in global micro-batches of ``micro * size``; rank ``r`` takes the
    ``r``-th ``micro`` of each (an incomplete last one dropped)."""
    step = micro * size
    for start in range(consumed, total - step + 1, step):
        yield list(range(start + rank * micro, start + (rank + 1) * micro))


def test_samples_have_gpt_datasets_keys_and_its_values_for_the_window(corpus, tmp_path):
    args = megatron_args(corpus)
    train, valid, test = datasets_from_args(args, [600, 40, 8], EOD)
    assert (len(train), len(valid), len(test)) == (600, 40, 8)
    web, code = corpus
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=SEQ,
        blend=([web, code], [0.4, 0.6]),
        split=args.split,
        tokenizer=_Tokenizer(),
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=True,
        create_attention_mask=True,
    )
    theirs = BlendedMegatronDatasetBuilder(gpt_dataset.GPTDataset, [600, 40, 8], lambda: True, config).build()
    for ours, megatron in zip((train, valid, test), theirs):
        sample, reference = ours[5], megatron[5]
        assert list(sample) == list(reference)  # the same keys, in GPTDataset's order
        for key in sample:
            assert (sample[key].dtype, sample[key].shape) == (reference[key].dtype, reference[key].shape), key
    for i in range(0, 600, 7):
        sample = train[i]
        mask, loss, positions = gpt_dataset._get_ltor_masks_and_position_ids(
            sample["tokens"].clone(), EOD, True, True, True, True
        )
        assert torch.equal(sample["attention_mask"], mask)
        assert torch.equal(sample["loss_mask"], loss)
        assert torch.equal(sample["position_ids"], positions)
        assert torch.equal(sample["tokens"][1:], sample["labels"][:-1])


def test_each_part_reads_the_documents_megatrons_split_gives_it(corpus):
    train, valid, test = datasets_from_args(megatron_args(corpus), [300, 60, 20], EOD)
    for part, dataset in enumerate((train, valid, test)):
        joined = []
        for docs in corpus.values():
            lo, hi = split_bounds("90,8,2", len(docs))[part]
            joined.append(np.concatenate(docs[lo:hi]).astype(np.int64).tobytes())
        for i in range(len(dataset)):
            sample = dataset[i]
            window = torch.cat([sample["tokens"], sample["labels"][-1:]]).numpy().tobytes()
            assert window in joined[int(sample["dataset_id"])], (part, i)  # of the source it names


def test_a_consumed_samples_resume_at_another_data_parallel_size_is_exact(corpus):
    args = megatron_args(corpus)
    total, micro = 400, 4

    def read(dataset, consumed, size, steps, workers=0):
        """What ranks ``0..size-1`` read for ``steps`` iterations: tokens, rank-major per step."""
        loaders = [
            iter(
                DataLoader(
                    dataset,
                    batch_sampler=single_sampler(total, consumed, micro, rank, size),
                    num_workers=workers,
                    persistent_workers=workers > 0,
                )
            )
            for rank in range(size)
        ]
        return [row for _ in range(steps) for loader in loaders for row in next(loader)["tokens"]]

    uninterrupted = read(datasets_from_args(args, [total, 0, 0], EOD)[0], 0, 2, 45)
    before = read(datasets_from_args(args, [total, 0, 0], EOD)[0], 0, 2, 10, workers=2)
    # A new job (the datasets built again from the same arguments) on 3 ranks.
    after = read(datasets_from_args(args, [total, 0, 0], EOD)[0], 80, 3, 23)
    assert len(before + after) == 356
    for ours, reference in zip(before + after, uninterrupted):
        assert torch.equal(ours, reference)
    assert len(uninterrupted) == 360


def test_nothing_is_written_and_bad_arguments_name_the_fix(corpus, tmp_path):
    before = sorted(os.listdir(tmp_path))
    train, valid, test = datasets_from_args(megatron_args(corpus), [100, 0, 5], EOD)
    assert valid is None and len(test) == 5  # a part asked for no sample is None, as Megatron's
    assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(ValueError, match="not both"):
        datasets_from_args(megatron_args(corpus, train_data_path=list(corpus)[:1]), [10, 0, 0], EOD)
    with pytest.raises(ValueError, match="--data-path"):
        datasets_from_args(megatron_args(corpus, data_path=None), [10, 0, 0], EOD)
    with pytest.raises(ValueError, match="--mock-data"):
        datasets_from_args(megatron_args(corpus, mock_data=True), [10, 0, 0], EOD)


def test_per_part_paths_and_a_data_args_file(corpus, tmp_path):
    web, code = corpus
    args = megatron_args(
        corpus, data_path=None, split=None, train_data_path=[web, code], valid_data_path=[code]
    )
    train, valid, test = datasets_from_args(args, [50, 10, 10], EOD)
    assert (len(train), len(valid), test) == (50, 10, None)  # no test data: None
    (tmp_path / "data_args.txt").write_text(f"0.4 {web}\n0.6 {code}\n")
    from_file = datasets_from_args(
        megatron_args(corpus, data_path=None, data_args_path=str(tmp_path / "data_args.txt")), [50, 0, 0], EOD
    )[0]
    from_words = datasets_from_args(megatron_args(corpus), [50, 0, 0], EOD)[0]
    assert all(torch.equal(from_file[i]["tokens"], from_words[i]["tokens"]) for i in range(50))


def test_the_provider_reads_megatrons_arguments_and_tokenizer(corpus, monkeypatch):
    args = megatron_args(corpus)
    training = types.ModuleType("megatron.training")
    training.get_args = lambda: args
    training.get_tokenizer = lambda: _Tokenizer()
    monkeypatch.setitem(sys.modules, "megatron.training", training)
    provider = permshard.megatron.train_valid_test_datasets_provider
    assert provider.is_distributed  # Megatron calls it on every rank
    train, valid, test = provider([64, 16, 8])
    reference = datasets_from_args(args, [64, 16, 8], EOD)
    for ours, theirs in zip((train, valid, test), reference):
        assert len(ours) == len(theirs) and torch.equal(ours[3]["tokens"], theirs[3]["tokens"])


def test_data_phases_from_a_stages_file_and_an_online_change_survive_a_restart(corpus, tmp_path):
    # Megatron exits the job to change a data phase; here the stages file is part of the
    # configuration, and a change made while the job runs is written to it: a restart (the
    # datasets built again from the same arguments) reads the same stream.
    stages = tmp_path / "stages.json"
    stages.write_text("[[100, [0.9, 0.1]]]")
    parser = add_arguments(argparse.ArgumentParser())
    flags = parser.parse_args(["--data-weight-stages", str(stages)])
    args = megatron_args(corpus, data_weight_stages=flags.data_weight_stages)
    web, code = corpus
    planned = MixedDataset.from_data_path(
        f"0.4 {web} 0.6 {code}", SEQ, 400, seed=1234, split="90,8,2", part="train",
        stages=[(100, [0.9, 0.1]), (250, [0.0, 1.0])], documents=True, eod_id=EOD,
    )  # fmt: skip
    train = datasets_from_args(args, [400, 0, 0], EOD)[0]
    train.set_weights([0.0, 1.0], start=250)  # decided while the job runs
    assert json.loads(stages.read_text()) == [[100, [0.9, 0.1]], [250, [0.0, 1.0]]]
    restarted = datasets_from_args(args, [400, 0, 0], EOD)[0]
    for dataset in (train, restarted):
        sources = dataset.blend.sources_of(range(400)).tolist()
        assert sources == planned.sources_of(range(400)).tolist()
        assert sources[250:] == [1] * 150 and sources[100:250].count(0) > 120
        for i in (0, 99, 100, 249, 250, 399):
            assert torch.equal(dataset[i]["tokens"], planned[i]["tokens"]), i
    valid = datasets_from_args(args, [0, 40, 0], EOD)[1]
    assert valid.blend.mixture.stages == ()  # the phases are the train blend's
    stages.write_text('{"start": 100}')
    with pytest.raises(ValueError, match=r"list of \[start, \[w1, w2, ...\]\] rows"):
        datasets_from_args(args, [400, 0, 0], EOD)
