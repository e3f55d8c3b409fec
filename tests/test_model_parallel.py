"""``examples/model_parallel.py`` under torchrun: dp x tp on a DeviceMesh with DataLoader
workers, a resume onto another data-parallel size, and two torchrun agents (multi-node)."""

from __future__ import annotations

import json
import pathlib
from collections import Counter

import pytest

from helpers.torchrun import finish, torchrun
from permshard.launch import free_port

pytestmark = pytest.mark.multiprocess

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "model_parallel.py"
N = 1001


def results(folder: pathlib.Path, prefix: str, world: int) -> list[dict]:
    return [json.loads((folder / f"{prefix}rank-{r}.json").read_text()) for r in range(world)]


def by_dp_rank(ranks: list[dict], epoch: str) -> dict[int, list[int]]:
    """One stream per data-parallel rank; its tensor-parallel peers must hold the same."""
    streams: dict[int, list[int]] = {}
    for r in ranks:
        assert streams.setdefault(r["dp"][1], r["epochs"][epoch]) == r["epochs"][epoch]
    return streams


def test_mesh_with_workers_and_a_resume_onto_another_data_parallel_size(tmp_path):
    # forkserver workers: each rank's server imports torch once, not once per worker
    # (spawned workers on real ranks: tests/test_data.py, every start method).
    common = ["--out", str(tmp_path), "--tp", "2", "--workers", "2", "--start-method", "forkserver"]
    finish(torchrun("--standalone", "--nproc-per-node", "4", str(EXAMPLE), *common, "--stop-after", "20"))
    first = results(tmp_path, "", 4)
    assert [r["dp"] for r in first] == [[2, 0], [2, 0], [2, 1], [2, 1]]
    assert [r["tp"] for r in first] == [0, 1, 0, 1] and all(r["tp_agree"] for r in first)
    epoch0 = by_dp_rank(first, "0")
    assert Counter(epoch0[0] + epoch0[1]) == Counter(range(N)) + Counter([epoch0[0][0]])  # 1 padding
    assert all(r["certificates"]["0"]["covered"] == N for r in first)
    # Epoch 1 stops after 20 steps of 8 on 2 dp ranks; tp only (dp 1) finishes it.
    finish(torchrun("--standalone", "--nproc-per-node", "2", str(EXAMPLE), *common, "--resume"))
    second = results(tmp_path, "resumed-", 2)
    assert [r["dp"] for r in second] == [[1, 0], [1, 0]] and all(r["tp_agree"] for r in second)
    before, after = by_dp_rank(first, "1"), by_dp_rank(second, "1")
    assert len(before[0]) == len(before[1]) == 20 * 8
    assert Counter(before[0] + before[1] + after[0]) == Counter(range(N))  # exactly once
    assert second[0]["certificates"]["1"] == {"covered": N - 320, "lengths": [N - 320]}
    # The iterable part: tp peers read the same documents, dp ranks split them.
    docs = {tuple(r["dp"]): r["documents"] for r in first}
    assert sorted(docs[(2, 0)] + docs[(2, 1)]) == list(range(N))


def test_two_torchrun_agents_as_two_nodes(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    agent = [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        "permshard-two-nodes",
        str(EXAMPLE),
        "--out",
        str(tmp_path),
        "--tp",
        "2",
        "--workers",
        "1",
        "--start-method",
        "fork",  # the rendezvous is what this test is about
    ]
    finish(torchrun(*agent), torchrun(*agent))
    ranks = results(tmp_path, "", 4)
    # Global ranks 2 and 3 live on the second node: LOCAL_RANK 0 and 1, not 2 and 3.
    assert sorted((r["node"], r["local_rank"], r["rank"]) for r in ranks) == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert all(r["tp_agree"] for r in ranks)
    for epoch in ("0", "1"):
        streams = by_dp_rank(ranks, epoch)
        assert sorted(set(streams[0] + streams[1])) == list(range(N))
        assert len(streams[0]) == len(streams[1]) == (N + 1) // 2
