"""Proofs on real processes: consensus and coverage pass for good configurations and name
the rank, the value and the fix for bad ones; the double split is caught."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from helpers import dataset_workers, integration_workers, mesh_workers, proof_workers
from helpers.distributed import launch
from permshard import ShardedSampler

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("world, n", [(2, 1000), (4, 1009)])
def test_proofs_on_real_ranks(world, n):
    results = launch(proof_workers.proofs, world, n)
    per_rank = -(-n // world)
    for epoch_index in range(6):
        epochs = [r["good"][epoch_index] for r in results]
        epoch, drop_last = epochs[0][0], epochs[0][1]
        assert all(e[:2] == (epoch_index % 3, epoch_index >= 3) for e in epochs)
        assert epoch == epoch_index % 3
        union = [x for e in epochs for x in e[2]]
        assert len(union) == (n // world if drop_last else per_rank) * world
        if not drop_last:
            assert set(union) == set(range(n))
        for _, _, _, covered, padding, dropped, ranks in epochs:
            assert covered + dropped == n
            assert padding == (0 if drop_last else per_rank * world - n)
            assert ranks == tuple(range(world))  # the fingerprint covered every rank
    for out in results:
        assert "ranks disagree on seed" in out["seed"] and f"rank {world - 1}" in out["seed"]
        assert "same seed" in out["seed"]
        assert "ranks disagree on epoch" in out["epoch"] and "set_epoch" in out["epoch"]
        assert "ranks disagree on n" in out["n"] and f"n={n + 1}" in out["n"]
        assert "shard once" in out["subset"] and f"1/{world * world}" in out["subset"]
        assert "ShardingError" in out["list_slice"] and "shard once" in out["list_slice"]
        assert "coverage fingerprint mismatch" in out["coverage"]
        assert "ShardingError" in out["check_loader_double"] and "shard once" in out["check_loader_double"]
        assert out["check_loader_good"] == per_rank


@pytest.mark.multiprocess
@pytest.mark.parametrize("world, model_parallel", [(2, False), (4, False), (4, True)])
def test_exact_distributed_proofs_on_real_ranks(world, model_parallel):
    n = 10_007
    results = launch(proof_workers.exact_proofs, world, n, model_parallel)
    sampler_ranks = world // 2 if model_parallel else world
    for r in results:
        for name in ("perm", "perm_drop", "block", "resumed"):
            exact, bitmap = r[name]
            assert exact == bitmap, name  # the same counts as the local bitmap proof
            assert exact[1] == tuple(range(sampler_ranks))
        assert r["perm"][0][2:5] == (n, -n % sampler_ranks, 0)
        assert r["perm_drop"][0][2:5] == (n - n % sampler_ranks, 0, n % sampler_ranks)
        assert r["resumed"][0][5] == 99 and r["resumed"][0][2] == n - 99
        # The lying rank's stream, inverted by the agreed order, fails from its first item.
        liar = sampler_ranks - 1
        assert f"rank {liar} at local position 0 (global position {liar}) holds sample" in r["lying"]
        assert "failures in all" in r["lying"]
        assert "ranks disagree on seed" in r["seed"]
        # Token-budget plans, each rank proving its share of the windows for every rank.
        for name in ("budget", "budget_resumed"):
            exact, local, batches = r[name]
            assert exact[0] == "inverse" and exact[1] == tuple(range(sampler_ranks)), name
            assert exact == local and exact[3] == batches, name
            assert exact[4] + exact[7] == n, name  # covered + consumed: every sample once
        assert r["budget_resumed"][0][7] > 0
        # Background proofs: the same counts as the synchronous ones, read or not meanwhile.
        now, later, read = r["background"]
        assert later == now and read == len(ShardedSampler(n, num_replicas=sampler_ranks, rank=0))
        exact = r["budget"][0]
        assert r["budget_background"] == (1, exact[3], exact[4], exact[2])
    # A window failing its proof on the last process fails the proof on every process,
    # naming the window (a model-parallel peer's share differs first).
    broken = [r["budget_broken"] for r in results]
    if model_parallel:
        assert all(f"share sampler rank {sampler_ranks - 1} but their proofs differ" in b for b in broken)
    else:
        first = world - 1  # the first window the last process proves
        assert all(f"the proof of window {first} failed on another rank" in b for b in broken), broken


@pytest.mark.parametrize("world", [2, 4])
def test_accelerate_prepare_double_split_is_caught(world):
    n = 1000
    results = launch(integration_workers.accelerate_double_split, world, n)
    for out in results:
        assert out["world"] == world
        drawn, error = out["distributed"]
        assert drawn < n // world  # what accelerate really does: 1/W² of the data
        assert "splits the data twice" in error and "shard once" in error
        assert "splits the data twice" in out["sharded_check"]
        assert "BatchSamplerShard" in out["sharded_iter"] and "prepare_data_loader" in out["sharded_iter"]


@pytest.mark.parametrize("world", [2, 4])
def test_resumed_pass_is_proven_on_real_ranks_without_pickling_collectives(world):
    n = 1000
    results = launch(proof_workers.resumed_proofs, world, n)
    # The 105 positions consumed by the 3-rank run and this run's items: each sample once.
    donor = ShardedSampler(n, num_replicas=1, rank=0, seed=9)
    donor.set_epoch(2)
    consumed = list(itertools.islice(iter(donor), 105))
    real = [x for r in results for x, pad in r["items"] if not pad]
    assert Counter(consumed + real) == Counter(range(n))
    per_rank = -(-(n - 105) // world)
    padding = per_rank * world - (n - 105)
    assert sum(pad for r in results for _, pad in r["items"]) == padding
    for r in results:
        assert r["len"] == per_rank == len(r["items"])
        # verify() and verify_distributed() prove the same pass: the resumed one.
        assert r["local"] == (105, 105, n - 105, padding, 0)
        assert r["distributed"][:5] == r["local"]
        assert "resumed at position 105" in r["distributed"][5]
        assert "ranks disagree on start" in r["start"] and "same state dict" in r["start"]
        assert r["subset_warnings"] == []
    subset_items = [x for r in results for x in r["subset_items"]]
    assert sorted(set(subset_items)) == list(range(0, n, 2))


def test_model_parallel_layouts_on_four_processes():
    n = 1001
    results = launch(mesh_workers.model_parallel, 4, n)
    for case, dp in [("manual", 2), ("tp_only", 1), ("mesh", 2), ("mesh3", 4)]:
        streams = [r[case]["items"] for r in results]
        # Processes that share a data-parallel rank read identical data ...
        groups: dict = {}
        for proc, items in enumerate(streams):
            groups.setdefault(proc * dp // 4, []).append(items)
        assert all(len({tuple(s) for s in g}) == 1 for g in groups.values()), case
        # ... and the data-parallel ranks split the data exactly once (plus padding).
        union = [x for g in groups.values() for x in g[0]]
        assert sorted(set(union)) == list(range(n)) and len(union) == -(-n // dp) * dp, case
        assert all(r[case]["covered"] == n and r[case]["lengths"] == (-(-n // dp),) * dp for r in results)
    assert [r["mesh"]["dp"] for r in results] == [(2, 0), (2, 0), (2, 1), (2, 1)]
    assert [r["mesh3"]["dp"] for r in results] == [(4, 0), (4, 1), (4, 2), (4, 3)]
    for r in results:
        assert "ranks disagree on seed" in r["bad_peer"] and "process 3" in r["bad_peer"]
        assert "must appear equally often" in r["uneven"]


def test_iterables_and_accelerate_split_by_data_parallel_rank_only():
    n = 203
    results = launch(mesh_workers.model_parallel_loaders, 4, n)
    assert [r["iterable_rank"] for r in results] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert [r["accelerate_world"] for r in results] == [(2, 0), (2, 0), (2, 1), (2, 1)]
    for key in ("iterable", "accelerate"):
        # tensor-parallel peers (processes 0/1 and 2/3) read the same; the dp ranks split once.
        assert results[0][key] == results[1][key] and results[2][key] == results[3][key], key
    # The iterable is split without padding: 102 + 101 elements, disjoint.
    assert sorted(results[0]["iterable"] + results[2]["iterable"]) == list(range(n))
    # The map-style loader pads like DistributedSampler: 2 x 102 = n + 1, one sample twice.
    union = Counter(results[0]["accelerate"] + results[2]["accelerate"])
    assert set(union) == set(range(n)) and sum(union.values()) == n + 1
    assert sorted(union.values()) == [1] * (n - 1) + [2]
    for r in results:
        assert "not both" in r["iterable_error"]
        assert "data-parallel ranks" in r["accelerate_error"]


def test_mixed_dataset_on_real_ranks_with_a_resume_onto_another_world_size():
    n = 1001
    first = launch(dataset_workers.mixed_dataset_run, 2, n, 20, None)
    second = launch(dataset_workers.mixed_dataset_run, 3, n, None, first[0]["state"])
    read = Counter(x for r in first + second for x in r["read"])
    expected = Counter(dataset_workers._mixed(n)[p] for p in range(n))
    # Every position of the mixture exactly once, plus the declared padding of the last run.
    assert sum(read.values()) == n + second[0]["padding"]
    assert not expected - read  # nothing missing
    # The second run deals the n - 160 positions left over 3 ranks: ceil pads to a multiple of 3.
    assert second[0]["padding"] == (-(n - 20 * 4 * 2)) % 3 == 2
    assert sum((read - expected).values()) == second[0]["padding"]  # repeats: the padding only
    assert first[0]["covered"] == n and second[0]["covered"] == n - 20 * 4 * 2


@pytest.mark.parametrize("world", [2, 3])
def test_every_agreed_field_refuses_a_rank_that_differs(world):
    # One rank with another value of one field: every rank refuses at its first iteration
    # (a rank that read on with drop_last=True would read fewer items: a stalled DDP run).
    results = launch(proof_workers.disagreements, world, 1001)
    fields = [
        *proof_workers.DISAGREEMENTS,
        "batch_size",
        "drop_last_batch",
        "dealing",
        "max_tokens",
        "window",
    ]
    for out in results:
        assert sorted(out) == sorted(fields)
        for field in fields:
            named = (
                "permutation" if field == "algorithm" else field
            )  # the sampler's algorithm= is its permutation
            assert out[field].startswith(f"ShardingError: ranks disagree on {named}:"), (field, out[field])
            assert f"rank {world - 1}" in out[field], (field, out[field])
        assert "same algorithm=" in out["algorithm"] and "shuffle=False" in out["shuffle"]


def test_check_loader_counts_a_one_replica_sampler_over_its_own_world():
    # Pure tensor parallelism: one data-parallel rank, two processes reading it whole.
    results = launch(proof_workers.one_replica_loader, 2, 101)
    assert [r["drawn"] for r in results] == [101, 101]
