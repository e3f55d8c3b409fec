"""WeightedShardedSampler: the golden stream, ranks and resumes reading it exactly once,
frequencies (chi-square) against the weights, errors, state dicts, loaders, processes."""

from __future__ import annotations

import collections
import itertools
import json
import pickle
import random
import struct

import numpy as np
import pytest
import torch
from scipy import stats
from torch.utils.data import BatchSampler, DataLoader

from helpers import reference_weighted, stream_workers
from helpers.distributed import launch
from permshard import ShardedBatchSampler, ShardedSampler, WeightedShardedSampler, _core

WEIGHTS = [0.1, 0.9, 0.4, 0.7, 3.0, 0.6]


def sampler(weights=WEIGHTS, num_samples=20, world=1, rank=0, **kwargs) -> WeightedShardedSampler:
    return WeightedShardedSampler(weights, num_samples, num_replicas=world, rank=rank, **kwargs)


def stream(weights, num_samples, **kwargs) -> list[int]:
    """The global stream: what one rank reads alone."""
    return list(sampler(weights, num_samples, **kwargs))


def test_golden_stream_from_python():
    golden = json.loads(reference_weighted.GOLDEN.read_text())
    assert golden == reference_weighted.generate()  # the file is the reference's output
    for case in golden["cases"]:
        weights = [struct.unpack("<d", struct.pack("<Q", int(b)))[0] for b in case["weight_bits"]]
        seed, epoch, k = int(case["seed"]), int(case["epoch"]), int(case["num_samples"])
        positions = [int(p) for p in case["positions"]]
        expected = [int(v) for v in case["with_replacement"]]
        draws = _core.Weights(np.array(weights), True).epoch(seed, epoch, 2**64 - 1)
        assert [draws.at(p) for p in positions] == expected
        s = sampler(weights, 40, seed=seed)
        s.set_epoch(epoch)
        assert list(s) == expected[:40]
        without = sampler(weights, k, seed=seed, replacement=False)
        without.set_epoch(epoch)
        assert list(without) == [int(v) for v in case["without_replacement"]]


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_deal_the_global_stream_round_robin(replacement, drop_last):
    weights = [float(i % 5) for i in range(40)]
    num_samples = 23
    whole = stream(weights, num_samples, seed=9, replacement=replacement)
    for world in (1, 2, 3, 4, 7):
        ranks = [
            list(
                sampler(weights, num_samples, world, r, seed=9, replacement=replacement, drop_last=drop_last)
            )
            for r in range(world)
        ]
        per_rank = num_samples // world if drop_last else -(-num_samples // world)
        assert [len(x) for x in ranks] == [per_rank] * world
        # Position p goes to rank p % world, as DistributedSampler deals (padding wraps around).
        positions = [(whole + whole)[r + world * k] for k in range(per_rank) for r in range(world)]
        assert [ranks[r][k] for k in range(per_rank) for r in range(world)] == positions


def test_with_replacement_frequencies_follow_the_weights():
    weights = np.array([1.0, 2.0, 0.0, 4.0, 8.0, 0.5, 3.0, 0.0, 1.5, 6.0])
    draws = np.array(stream(weights, 200_000, seed=1))
    counts = np.bincount(draws, minlength=len(weights))
    assert counts[weights == 0].sum() == 0
    expected = weights / weights.sum() * len(draws)
    chi2 = stats.chisquare(counts[weights > 0], expected[weights > 0])
    assert chi2.pvalue > 1e-3, chi2
    # torch's WeightedRandomSampler draws from the same law: a two-sample test.
    g = torch.Generator().manual_seed(0)
    theirs = np.bincount(
        list(torch.utils.data.WeightedRandomSampler(weights, 200_000, generator=g)), minlength=10
    )
    table = np.array([counts[weights > 0], theirs[weights > 0]])
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_without_replacement_draws_in_proportion_to_the_weights_left():
    weights = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 10.0])
    s = sampler(weights, 5, replacement=False, auto_epoch=True)
    first, second = np.zeros(6), np.zeros(6)
    epochs = 4000
    for _ in range(epochs):
        draws = list(s)
        assert sorted(draws) == [0, 1, 2, 3, 5]  # every positive weight once, the zero never
        first[draws[0]] += 1
        if draws[0] == 5:
            second[draws[1]] += 1
    p = weights / weights.sum()
    assert stats.chisquare(first[p > 0], p[p > 0] * epochs).pvalue > 1e-3
    # After the heaviest is drawn, the next follows the weights left.
    left = np.where(np.arange(6) == 5, 0.0, weights)
    q = left / left.sum()
    assert stats.chisquare(second[q > 0], q[q > 0] * second.sum()).pvalue > 1e-3


@pytest.mark.parametrize("replacement", [True, False])
def test_resume_onto_other_world_sizes_reads_the_stream_once(replacement):
    weights = [float(1 + i % 7) for i in range(100)]
    num_samples = 60 if not replacement else 97
    whole = stream(weights, num_samples, seed=4, replacement=replacement)
    rng = random.Random(0)
    for _ in range(20):
        first_world, second_world = rng.randint(1, 4), rng.randint(1, 4)
        steps = rng.randint(0, num_samples // first_world)
        before = [
            sampler(weights, num_samples, first_world, r, seed=4, replacement=replacement)
            for r in range(first_world)
        ]
        taken = [list(s)[:steps] for s in before]
        state = before[0].state_dict(consumed_samples=steps * first_world)
        after = []
        for r in range(second_world):
            s = sampler(weights, num_samples, second_world, r, seed=4, replacement=replacement)
            s.load_state_dict(state)
            after.append(list(s))
        read = [taken[r][k] for k in range(steps) for r in range(first_world)]
        rest = max(map(len, after))
        read += [after[r][k] for k in range(rest) for r in range(second_world) if k < len(after[r])]
        assert read[:num_samples] == whole  # then only declared padding
        assert len(read) - num_samples < second_world


def test_state_dict_records_the_draws_and_refuses_other_weights():
    s = sampler(num_samples=20, world=2)
    it = iter(s)
    [next(it) for _ in range(3)]
    state = s.state_dict()
    assert state["consumed"] == 6 and state["draws"] == "weighted-v1" and state["replacement"] is True
    assert state["weights"] == s.weights_digest and state["num_weights"] == 6
    assert len(json.dumps(state)) < 400
    other = sampler([1.0] * 6, 20, world=3)
    with pytest.raises(ValueError, match="weights="):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="replacement="):
        sampler(num_samples=6, replacement=False).load_state_dict(state)
    with pytest.raises(ValueError, match="not saved by a WeightedShardedSampler"):
        sampler().load_state_dict(ShardedSampler(20, num_replicas=1, rank=0).state_dict())
    with pytest.raises(ValueError, match="n="):
        sampler(num_samples=21).load_state_dict(state)
    s3 = sampler(num_samples=20, world=3)
    s3.load_state_dict(state)
    assert s3.state_dict()["consumed"] == 6
    # The draws' fields are checked by type like every state key, and a key this sampler
    # does not save is refused unless strict=False.
    with pytest.raises(TypeError, match=r"state_dict\['replacement'\] must be a bool, got int 1"):
        s3.load_state_dict(dict(state, replacement=1))
    with pytest.raises(TypeError, match="must be a mapping"):
        s3.load_state_dict([("consumed", 6)])
    with pytest.raises(ValueError, match="does not save: \\['typo'\\]"):
        s3.load_state_dict(dict(state, typo=1))
    s3.load_state_dict(dict(state, typo=1), strict=False)
    resumed = s3.state_dict()
    # The history ends with the state's own segment: an empty one of the 3 ranks, where
    # the resume starts (change 2: a resume).
    assert resumed.pop("history") == [*state["history"], [2, 0, 6, 6, 0, 3, 0, 0, 0, 0]]
    assert resumed == dict({k: v for k, v in state.items() if k != "history"}, num_replicas=3)


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match=r"weights\[1\] is NaN"):
        sampler([1.0, float("nan")])
    with pytest.raises(ValueError, match=r"weights\[0\] is -1"):
        sampler([-1.0, 1.0])
    with pytest.raises(ValueError, match="all 3 weights are 0"):
        sampler([0, 0, 0])
    with pytest.raises(ValueError, match="empty"):
        sampler([])
    with pytest.raises(ValueError, match="1-D"):
        sampler([[1.0, 2.0]])
    with pytest.raises(TypeError, match="numbers"):
        sampler(["a", "b"])
    with pytest.raises(TypeError, match="1-D sequence"):
        sampler("abc")
    with pytest.raises(ValueError, match="num_draws should be a positive integer"):
        sampler(num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean"):
        sampler(replacement=1)
    with pytest.raises(ValueError, match="num_draws <= 2 or replacement=True"):
        sampler([0.0, 1.0, 2.0], 3, replacement=False)
    with pytest.raises(TypeError, match="BatchSampler"):
        ShardedBatchSampler(sampler(), 4)
    with pytest.raises(TypeError, match="draws"):
        sampler().locate(0)


def test_total_draws_and_this_ranks_count_have_their_own_names():
    s = sampler(num_samples=21, world=4, rank=3)  # 21 draws dealt over 4 ranks: 6 each, padded
    assert (s.num_draws, s.num_samples, len(s), s.total_size) == (21, 6, 6, 24)
    assert len(list(s)) == s.num_samples
    assert "num_draws=21" in repr(s) and "num_samples=6" in repr(s)


def test_weights_of_any_kind_are_copied():
    weights = np.array(WEIGHTS)
    as_numpy, as_tensor = sampler(weights), sampler(torch.tensor(WEIGHTS, dtype=torch.float32))
    weights[:] = 1.0  # the caller's array changes afterwards
    assert list(as_numpy) == stream(WEIGHTS, 20)
    assert as_tensor.weights.dtype == torch.float64 and as_tensor.weights.shape == (6,)


def test_loaders_batches_pickles_epochs_and_proofs():
    s = sampler(num_samples=50, world=2, rank=1)
    expected = list(s)
    s.set_epoch(0)
    for workers in (0, 2):
        loader = DataLoader(range(6), sampler=s, batch_size=4, num_workers=workers)
        assert [int(i) for batch in loader for i in batch] == expected
        s.set_epoch(0)
    assert [i for b in BatchSampler(s, 4, False) for i in b] == expected
    copy = pickle.loads(pickle.dumps(s))
    copy.set_epoch(0)
    assert list(copy) == expected
    s.set_epoch(1)
    assert list(s) != expected
    cert = s.verify()
    assert cert.covered == cert.n == 50 and cert.lengths == (25, 25)
    plan = s.plan()
    assert plan.padding_samples == () and plan.num_samples == 25
    padded = sampler(num_samples=5, world=2, rank=1)  # position 5 (padding) is rank 1's
    assert padded.plan().padding_samples == (padded.draws().at(0),)
    assert [(i, pad) for i, pad in padded.iter_with_padding()][-1][1] is True


@pytest.mark.multiprocess
def test_processes_read_one_stream_and_agree_on_the_weights():
    weights = [float(1 + i % 3) for i in range(30)]
    results = launch(stream_workers.weighted_ranks, 2, weights, 41, False)
    whole = stream(weights, 41, seed=3)
    assert all(r["proof"] == 41 for r in results)
    dealt = [results[p % 2]["draws"][p // 2] for p in range(42)]
    assert dealt == (whole + whole)[:42]
    errors = launch(stream_workers.weighted_ranks, 2, weights, 41, True)
    assert all("ShardingError" in r["error"] and "weights" in r["error"] for r in errors)


def test_a_weighted_run_answers_in_the_samples_its_ranks_drew(tmp_path, capsys):
    """Two ranks draw 5 batches of 4, three ranks resume to the end of the epoch and into
    the next: ``where`` of every drawn sample and ``show`` of every step, given the run's
    weights, equal what the ranks read (samples, not positions of the stream)."""
    from permshard import Run

    weights = np.linspace(0.1, 3.0, 50) ** 2
    make = lambda world, rank: WeightedShardedSampler(weights, 101, num_replicas=world, rank=rank, seed=5)  # noqa: E731
    reads, step = collections.defaultdict(list), 0

    def read(samplers, epoch, steps):  # lockstep batches of 4 from every rank's stream
        nonlocal step
        streams = [iter(s) for s in samplers]
        for _ in range(steps):
            for rank, stream in enumerate(streams):
                for k, sample in enumerate(itertools.islice(stream, 4)):
                    reads[sample].append((epoch, step, rank, k))
            step += 1

    first = [make(2, r) for r in range(2)]
    read(first, 0, 5)
    state = first[0].state_dict(consumed_samples=5 * 4 * 2)
    resumed = [make(3, r) for r in range(3)]
    for s in resumed:
        s.load_state_dict(state)
    read(resumed, 0, -(-len(resumed[0]) // 4))
    for s in resumed:
        s.set_epoch(1)
    read(resumed, 1, 3)
    final = resumed[0].state_dict(consumed_samples=3 * 4 * 3)
    run = Run(final, weights=weights)
    for sample in range(50):
        got = sorted((r.epoch, r.step, r.rank, r.position) for r in run.where(sample, batch_size=4))
        assert got == sorted(reads[sample]), sample
    by_step = collections.defaultdict(list)
    for sample, hits in reads.items():
        for _epoch, at, rank, k in hits:
            by_step[at].append((rank, k, sample))
    for at, want in by_step.items():
        assert sorted((r.rank, r.position, r.sample) for r in run.show(at, batch_size=4)) == sorted(want)
    with pytest.raises(ValueError, match=r"pass Run\(state_dict, weights=weights\)"):
        Run(final).show(0, batch_size=4)
    # The CLI, from files, the same.
    from permshard import _cli

    (tmp_path / "state.json").write_text(json.dumps(final))
    np.save(tmp_path / "weights.npy", weights)
    files = ["--state", str(tmp_path / "state.json"), "--weights", str(tmp_path / "weights.npy")]
    assert _cli.main(["show", "7", *files, "--batch-size", "4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert sorted((d["rank"], d["position"], d["sample"]) for d in shown) == sorted(by_step[7])
    with pytest.raises(ValueError, match="weights="):
        Run(final, weights=weights[::-1])
    with pytest.raises(
        ValueError, match="weights= is for a WeightedShardedSampler's state; this state is a sharded"
    ):
        Run(ShardedSampler(10, num_replicas=1, rank=0).state_dict(), weights=weights)
