"""permshard.torchtitan on torchtitan 0.3.0's own classes: the loader built as its trainer
builds one (``config.dataloader.build(...)``), a config module read by its
``ConfigManager`` (``--module``/``--config`` and CLI overrides), and the state through
``torch.distributed.checkpoint``, which its checkpointer uses. Windows are compared with
the token file read by numpy; a resume onto another data-parallel degree with an
uninterrupted run. torchtitan is a test dependency (the Makefile installs it): never skipped.

torchtitan 0.3.0's trainer itself does not run here: it takes ``cuda`` as its device when
no accelerator is found (``torchtitan/tools/utils.py``), and this suite runs on CPUs.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.config.manager import ConfigManager

import permshard
from permshard.torchtitan import ShardedDataLoader

SEQ = 8

# torch.distributed.checkpoint warns that it saves in one process where no group is up:
# so it does here, what each rank's checkpointer does with the same loader state.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture
def corpus(tmp_path):
    """Two flat token files: token t of file f is ``f * 10000 + t``, so a window's first
    token names its file and place."""
    paths = []
    for f, tokens in enumerate((4009, 801)):
        path = tmp_path / f"part{f}.bin"
        (np.arange(tokens, dtype=np.uint16) + f * 10000).tofile(path)
        paths.append(str(path))
    return paths


def build(data_path, world, rank, batch=4, **config):
    """As torchtitan's trainer builds its data loader."""
    return ShardedDataLoader.Config(data_path=data_path, **config).build(
        dp_world_size=world,
        dp_rank=rank,
        tokenizer=None,
        seq_len=SEQ,
        local_batch_size=batch,
        snapshot_every_n_steps=10,
    )


def windows_of(paths):
    """Every window of the files, read by numpy: its first token and its tokens."""
    out = {}
    for path in paths:
        tokens = np.fromfile(path, dtype=np.uint16).astype(np.int64)
        for w in range((len(tokens) - 1) // SEQ):
            window = tokens[w * SEQ : w * SEQ + SEQ + 1]
            out[int(window[0])] = window
    return out


def run_steps(loaders, steps=None, reads=None, first_step=0):
    """The global stream the ranks read, step by step, ranks in order (first tokens),
    checking each batch's inputs against its labels. ``loaders`` are loaders or their
    iterators (a training loop iterates its loader once). ``reads``, a dict, gets every
    read: first token -> ``[(step, rank, position in the batch)]``, steps from ``first_step``."""
    iterators = [iter(loader) for loader in loaders]
    stream = []
    step = 0
    while steps is None or step < steps:
        try:
            batches = [next(it) for it in iterators]
        except StopIteration:
            break
        for rank, (inputs, labels) in enumerate(batches):
            assert set(inputs) == {"input"} and inputs["input"].shape == labels.shape
            assert torch.equal(inputs["input"][:, 1:], labels[:, :-1])
            firsts = inputs["input"][:, 0].tolist()
            stream += firsts
            for position, token in enumerate(firsts):
                if reads is not None:
                    reads.setdefault(token, []).append((first_step + step, rank, position))
        step += 1
    return stream


def test_built_as_the_trainer_builds_it(corpus):
    loader = build(" ".join(corpus), 2, 1)
    assert isinstance(loader, BaseDataLoader) and isinstance(loader, Stateful)
    truth = windows_of(corpus)
    inputs, labels = next(iter(loader))
    assert inputs["input"].shape == (4, SEQ) and inputs["input"].dtype == torch.int64
    for x, y in zip(inputs["input"], labels):
        window = truth[int(x[0])]
        assert x.tolist() == window[:-1].tolist() and y.tolist() == window[1:].tolist()


def test_an_epoch_at_dp_3_reads_every_window_once_proven(corpus):
    loaders = [build(" ".join(corpus), 3, r, infinite=False) for r in range(3)]
    stream = run_steps(loaders)
    plan = loaders[0].plan()
    n = len(windows_of(corpus))
    assert plan.n == n and len(stream) == plan.total_size > n  # the last step's padding, declared
    assert sorted(set(stream)) == sorted(windows_of(corpus))
    padding = [stream[p] for p in plan.padding_positions]
    assert sorted(stream) == sorted(list(windows_of(corpus)) + padding)
    for loader in loaders:
        proof = loader.verify()
        assert (proof.covered, proof.padding, proof.dealing) == (n, plan.total_size - n, "step")


def test_two_ranks_for_40_steps_then_three_continue_exactly(corpus, tmp_path):
    data = " ".join(corpus)
    uninterrupted = run_steps([build(data, 2, r, infinite=False) for r in range(2)])
    first = [build(data, 2, r, infinite=False) for r in range(2)]
    reads = {}
    before = run_steps([iter(loader) for loader in first], steps=40, reads=reads)
    assert before == uninterrupted[: len(before)] and len(before) == 2 * 4 * 40
    states = [loader.state_dict() for loader in first]
    assert states[0] == states[1]  # one global state: the checkpointer keeps one copy
    dcp.save({"dataloader": first[0]}, checkpoint_id=tmp_path / "step-40")
    resumed = [build(data, 3, r, infinite=False) for r in range(3)]
    for loader in resumed:
        dcp.load({"dataloader": loader}, checkpoint_id=tmp_path / "step-40")
    after = run_steps(resumed, reads=reads, first_step=40)
    n = len(windows_of(corpus))
    assert (before + after)[:n] == uninterrupted[:n]
    # The run's history attributes every read of every window, across the change of
    # degree, the last step's short batches and its padding: equal to what the ranks read.
    run = permshard.Run(json_state(resumed[0]))
    mixture = resumed[0].dataset.mixture  # the blend's position -> (file, window)
    for position in range(n):
        source, window = mixture[position]
        read = sorted(reads.pop(source * 10000 + window * SEQ))
        assert sorted((r.step, r.rank, r.position) for r in run.where(position)) == read, position
        assert {r.epoch for r in run.where(position)} == {0}
    assert reads == {}


def json_state(loader):
    import json

    return json.loads(loader.state_dict()["permshard"])


def test_epochs_go_on_and_resume_in_the_next(corpus):
    data = " ".join(corpus)
    n = len(windows_of(corpus))
    steps = -(-n // 8) + 5  # into the second epoch
    stream = run_steps([build(data, 2, r) for r in range(2)], steps=steps)
    assert sorted(set(stream[:n])) == sorted(windows_of(corpus))
    assert stream[n + 8 : n + 16] != stream[8:16]  # a fresh order
    first = [build(data, 2, r) for r in range(2)]
    run_steps([iter(loader) for loader in first], steps=steps - 3)
    resumed = [build(data, 1, 0, batch=8)]
    resumed[0].load_state_dict(first[0].state_dict())
    assert run_steps(resumed, steps=3) == stream[-24:]


def test_workers_read_what_the_main_process_reads(corpus):
    data = " ".join(corpus)
    main = run_steps([build(data, 2, r, infinite=False) for r in range(2)])
    workers = run_steps([build(data, 2, r, infinite=False, num_workers=2) for r in range(2)])
    assert workers == main


def test_weights_changed_mid_run_survive_a_resume_onto_another_degree(corpus, tmp_path):
    data = f"0.5 {corpus[0]} 0.5 {corpus[1]}"
    options = dict(shuffle=False, num_samples=400, infinite=False)

    def reference():
        loaders = [build(data, 2, r, **options) for r in range(2)]
        iterators = [iter(loader) for loader in loaders]
        head = run_steps(iterators, steps=10)
        for loader in loaders:
            loader.set_weights([0.1, 0.9])
        return head + run_steps(iterators)

    expected = reference()
    first = [build(data, 2, r, **options) for r in range(2)]
    iterators = [iter(loader) for loader in first]
    head = run_steps(iterators, steps=10)
    for loader in first:
        loader.set_weights([0.1, 0.9])
    head += run_steps(iterators, steps=5)
    dcp.save({"dataloader": first[0]}, checkpoint_id=tmp_path / "ckpt")
    resumed = [build(data, 4, r, batch=2, **options) for r in range(4)]
    for loader in resumed:
        dcp.load({"dataloader": loader}, checkpoint_id=tmp_path / "ckpt")
    assert (head + run_steps(resumed))[:400] == expected[:400]
    late = [x for x in expected[80:400]]
    assert sum(x >= 10000 for x in late) > 0.8 * len(late)  # the new weights hold


def test_bad_input_names_the_fix(corpus):
    with pytest.raises(ValueError, match="data_path"):
        build("", 1, 0)
    loader = build(corpus[0], 2, 0)
    with pytest.raises(ValueError, match="exclude 'dataloader' from loading"):
        loader.load_state_dict({"dp_rank_0": b"...", "world_size": 2})  # torchtitan's own loader's
    with pytest.raises(ValueError, match="shuffle=False"):
        loader.set_weights([1.0])
    loader.load_state_dict({})  # an empty state is a fresh start, as for torchtitan's loaders


def test_the_example_config_module_through_torchtitans_config_manager(corpus, monkeypatch):
    examples = pathlib.Path(__file__).parent.parent / "examples"
    monkeypatch.syspath_prepend(str(examples))
    monkeypatch.setenv("PERMSHARD_DATA_PATH", " ".join(corpus))
    config = ConfigManager().parse_args(
        [
            "--module",
            "torchtitan_permshard",
            "--config",
            "llama3_debugmodel_permshard",
            "--dataloader.seed",
            "5",
        ]
    )
    assert isinstance(config.dataloader, ShardedDataLoader.Config) and config.dataloader.seed == 5
    loader = config.dataloader.build(
        dp_world_size=2,
        dp_rank=0,
        tokenizer=None,
        seq_len=config.training.seq_len // 256,
        local_batch_size=config.training.local_batch_size,
        snapshot_every_n_steps=None,
    )
    inputs, labels = next(iter(loader))
    assert inputs["input"].shape == (config.training.local_batch_size, config.training.seq_len // 256)
    sys.modules.pop("torchtitan_permshard", None)


def test_windows_excluded_at_a_resume_onto_another_degree_are_never_read_again(corpus, tmp_path):
    data = " ".join(corpus)
    taken_down, more = tmp_path / "taken_down.txt", tmp_path / "more.txt"
    taken_down.write_text("3 17 250\n")
    more.write_text("3 17 250 5 400 401\n")
    first = [build(data, 2, r, infinite=False, exclude=str(taken_down)) for r in range(2)]
    before = run_steps([iter(loader) for loader in first], steps=10)
    dcp.save({"dataloader": first[0]}, checkpoint_id=tmp_path / "ckpt")
    resumed = [build(data, 3, r, infinite=False, exclude=str(more)) for r in range(3)]
    for loader in resumed:
        dcp.load({"dataloader": loader}, checkpoint_id=tmp_path / "ckpt")
    after = run_steps(resumed)
    window = {p: int(first[0].dataset[p][0]) for p in range(len(first[0].dataset))}  # position -> first token
    assert not {window[p] for p in (3, 17, 250)} & set(before + after)
    assert not {window[p] for p in (5, 400, 401)} & set(after)  # excluded from the resume on
    read_before = {window[p] for p in (5, 400, 401)} & set(before)
    kept = set(window.values()) - {window[p] for p in (3, 17, 250, 5, 400, 401)} | read_before
    assert set(before + after) == kept
    for loader in resumed:
        proof = loader.verify()  # the rest of the epoch: every kept window once, no excluded one
        assert (proof.start, proof.covered) == (len(before), len(window) - 6 - len(before))
    with pytest.raises(ValueError, match="whole numbers"):
        (tmp_path / "bad.txt").write_text("3 x\n")
        build(data, 1, 0, exclude=str(tmp_path / "bad.txt"))
