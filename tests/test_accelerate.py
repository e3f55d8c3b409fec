"""permshard.accelerate under real gloo processes: one split, exact per-rank counts,
gather_for_metrics returning exactly N, save_state/load_state resume (also on another
number of processes), and a clear error for a permshard loader given to prepare()."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from helpers import integration_workers
from helpers.distributed import launch

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("world, resume_world, n", [(2, 2, 1000), (4, 2, 997)])
def test_accelerate_train_eval_resume(tmp_path, world, resume_world, n):
    steps = 5
    first = launch(integration_workers.accelerate_train_eval_interrupt, world, n, str(tmp_path), steps)
    per_rank = -(-n // world)
    # Shards once: every rank ceil(N/W), together every sample, padding only as declared.
    assert all(len(r["epoch0"]) == per_rank for r in first)
    union = Counter(x for r in first for x in r["epoch0"])
    assert set(union) == set(range(n)) and sum(union.values()) - n == per_rank * world - n
    # Gradient accumulation sees the end of the dataloader on the last batch only.
    for r in first:
        flags = [end for end, _ in r["sync"]]
        assert flags[-1] and not any(flags[:-1]) and r["sync"][-1][1]
    # gather_for_metrics: exactly N items, each sample once.
    for r in first:
        assert sorted(r["gathered"]) == list(range(n))
    # Handed straight to accelerator.prepare: a clear error at the first iteration.
    for r in first:
        assert "ShardingError" in r["prepare_error"] and "prepare_data_loader" in r["prepare_error"]

    second = launch(integration_workers.accelerate_resume, resume_world, n, str(tmp_path))
    assert all(r["epoch"] == 2 for r in second)
    head = [x for r in first for x in r["epoch2_head"]]
    assert len(head) == steps * 8 * world
    rest = [x for r in second for x in r["rest"]]
    counts = Counter(head + rest)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n == second[0]["padding"]  # repeats only as declared


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="the case of a machine without a GPU: with one, Accelerator() counts every process",
)
def test_accelerate_that_counts_fewer_processes_than_the_group_is_refused(tmp_path):
    # Accelerator() on a machine without a GPU, under real torchrun: accelerate counts one
    # process of two. It read every sample on every rank; now refused naming cpu=True,
    # whether the loader's sampler was built by the user (over the group) or by the
    # integration (over accelerate's world).
    import json
    import pathlib

    from helpers.torchrun import finish, torchrun

    script = pathlib.Path(__file__).parent / "scripts" / "accelerate_without_cpu.py"
    finish(torchrun("--standalone", "--nproc-per-node", "2", str(script), str(tmp_path)))
    for rank in range(2):
        r = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert (r["accelerate_world"], r["group"]) == (1, 2)
        for message in (r["prepared"], r["plain"]):
            assert message.startswith("ShardingError"), message
            assert "has 2" in message and "Accelerator(cpu=True)" in message
            assert "ACCELERATE_USE_CPU=1" in message and "ParallelismConfig" in message


def test_hf_trainer_recipe_shards_once(tmp_path):
    n, world = 203, 2
    results = launch(integration_workers.hf_trainer, world, n, str(tmp_path))
    per_epoch = results[0]["per_epoch"]
    for r in results:
        assert len(r["seen"]) == 2 * per_epoch  # two epochs, ceil(N/W) each, not 1/W²
    for epoch in range(2):
        union = Counter(x for r in results for x in r["seen"][epoch * per_epoch : (epoch + 1) * per_epoch])
        assert set(union) == set(range(n))
        assert sum(union.values()) == per_epoch * world
    first, second = (results[0]["seen"][:per_epoch], results[0]["seen"][per_epoch:])
    assert first != second  # set_epoch reached the sampler: a new order
    # TrainingArguments' loader settings reach the loader: seed, drop_last, workers, pinning.
    for rank, r in enumerate(results):
        assert r["settings"] == {
            "seed": 11,
            "drop_last": True,
            "num_workers": 1,
            "pin_memory": False,
            "world": [world, rank] if isinstance(r["settings"]["world"], list) else (world, rank),
            "batches": n // (4 * world),  # whole steps of 4 per rank only
        }


def test_lightning_uses_the_sampler_as_is():
    n, world = 101, 2
    results = launch(integration_workers.lightning_ddp, world, n)
    for r in results:
        assert r["sampler"] == "ShardedSampler" and r["epoch"] == 1  # not re-wrapped; set_epoch called
    for epoch in range(2):
        union = Counter(x for r in results for x in r["seen"][epoch])
        assert set(union) == set(range(n)) and sum(union.values()) == -(-n // world) * world
    assert results[0]["seen"][0] != results[0]["seen"][1]
