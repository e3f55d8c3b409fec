"""Two nodes, as torchrun makes them (two agents of two processes at one rendezvous):
every integration that reads a rank splits over the global ranks, not a node's local
ones; and Ray Train's world rank, not its local rank, by Ray's own context."""

from __future__ import annotations

import json
import pathlib
from collections import Counter

import pytest

from helpers.torchrun import nodes

N = 203


@pytest.mark.multiprocess
def test_every_integration_splits_over_the_global_ranks_of_two_nodes(tmp_path):
    script = pathlib.Path(__file__).parent / "scripts" / "two_nodes.py"
    nodes(2, 2, script, str(tmp_path), name="permshard-integrations")
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    assert sorted((r["rank"], r["local_rank"]) for r in ranks) == [(0, 0), (1, 1), (2, 0), (3, 1)]
    for r in ranks:
        for integration in ("sampler", "accelerate", "trainer"):
            assert r[integration][:2] == [4, r["rank"]], (integration, r[integration][:2])
    per_rank = -(-N // 4)
    for integration in ("sampler", "accelerate"):
        read = Counter(x for r in ranks for x in r[integration][2])
        assert set(read) == set(range(N)) and sum(read.values()) == per_rank * 4, integration
    assert sorted(x for r in ranks for x in r["iterable"]) == list(range(N))  # each element once


def test_ray_splits_by_the_world_rank_not_the_local_one(monkeypatch):
    # Worker 3 of 4 on the second of two nodes: local rank 1 of 2 there.
    import ray.train as train
    from torch.utils.data import DataLoader

    import permshard.ray

    class Context:
        def get_world_size(self):
            return 4

        def get_world_rank(self):
            return 3

        def get_local_rank(self):
            return 1

        def get_local_world_size(self):
            return 2

        def get_node_rank(self):
            return 1

    monkeypatch.setattr(train, "get_context", lambda: Context())
    loader = permshard.ray.prepare_data_loader(
        DataLoader(list(range(N)), batch_size=4, shuffle=True), move_to_device=False
    )
    assert (loader.sampler.num_replicas, loader.sampler.rank) == (4, 3)
    assert len(list(loader.sampler)) == -(-N // 4)
