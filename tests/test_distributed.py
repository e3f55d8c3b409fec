"""Proofs on real processes: consensus and coverage pass for good configurations and name
the rank, the value and the fix for bad ones; the double split is caught."""

from __future__ import annotations

import pytest

import dist_workers
from distributed import launch

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("world, n", [(2, 1000), (4, 1009)])
def test_proofs_on_real_ranks(world, n):
    results = launch(dist_workers.proofs, world, n)
    per_rank = -(-n // world)
    for epoch_index in range(6):
        epochs = [r["good"][epoch_index] for r in results]
        epoch, drop_last = epochs[0][0], epochs[0][1]
        union = [x for e in epochs for x in e[2]]
        assert len(union) == (n // world if drop_last else per_rank) * world
        if not drop_last:
            assert set(union) == set(range(n))
        for _, _, _, covered, padding, dropped in epochs:
            assert covered + dropped == n
            assert padding == (0 if drop_last else per_rank * world - n)
    for r, out in enumerate(results):
        assert "ranks disagree on seed" in out["seed"] and f"rank {world - 1}" in out["seed"]
        assert "same seed" in out["seed"]
        assert "ranks disagree on epoch" in out["epoch"] and "set_epoch" in out["epoch"]
        assert "ranks disagree on n" in out["n"] and f"n={n + 1}" in out["n"]
        assert "shard once" in out["subset"] and f"1/{world * world}" in out["subset"]
        assert "ShardingError" in out["list_slice"] and "shard once" in out["list_slice"]
        assert "coverage fingerprint mismatch" in out["coverage"]
        assert "ShardingError" in out["check_loader_double"] and "shard once" in out["check_loader_double"]
        assert out["check_loader_good"] == per_rank


@pytest.mark.parametrize("world", [2, 4])
def test_accelerate_prepare_double_split_is_caught(world):
    pytest.importorskip("accelerate")
    n = 1000
    results = launch(dist_workers.accelerate_double_split, world, n)
    for out in results:
        assert out["world"] == world
        drawn, error = out["distributed"]
        assert drawn < n // world  # what accelerate really does: 1/W² of the data
        assert "splits the data twice" in error and "shard once" in error
        assert "splits the data twice" in out["sharded_check"]
        assert "BatchSamplerShard" in out["sharded_iter"] and "prepare_data_loader" in out["sharded_iter"]
