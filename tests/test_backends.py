"""Collectives on every backend: the device follows the group's backends (CPU wherever
one takes CPU tensors), so a group built without a backend works on a CPU machine as
DistributedSampler does."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
import torch.distributed as dist

from helpers import backend_workers
from helpers.distributed import launch
from permshard import ShardingError
from permshard._distributed import collective_device


@pytest.mark.parametrize(
    "config", ["gloo", "cpu:gloo", "cpu:gloo,cuda:nccl", "mpi", "undefined-but-cpu:gloo"]
)
def test_a_group_with_a_cpu_backend_gathers_on_cpu(monkeypatch, config):
    config = config.replace("undefined-but-", "")  # init_process_group() on a CPU machine
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: config)
    assert collective_device() == torch.device("cpu")


def test_nccl_alone_gathers_on_the_ranks_gpu(monkeypatch):
    # NCCL in a script that never called torch.cuda.set_device: LOCAL_RANK's GPU, not GPU 0.
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: "cuda:nccl")
    monkeypatch.setattr(dist, "group", type("G", (), {"WORLD": None}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: "nccl")
    assert collective_device() == torch.device("cuda", 3)
    # A group bound to a device (init_process_group(device_id=...)) wins.
    bound = type("Bound", (), {"bound_device_id": torch.device("cuda", 5)})()
    assert collective_device(bound) == torch.device("cuda", 5)


def test_nccl_without_cuda_names_the_fix(monkeypatch):
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: "cuda:nccl")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ShardingError, match="backend='gloo'"):
        collective_device()


@pytest.mark.multiprocess
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_init_process_group_without_a_backend_works_on_cpu(start_method):
    n, world = 1001, 2
    results = launch(backend_workers.default_backend, world, n, backend=None, start_method=start_method)
    for rank, r in enumerate(results):
        # The ranks' DataLoader workers start as under torchrun: the platform's default.
        assert r["start_method"] == multiprocessing.get_all_start_methods()[0]
        assert r["device"] == "cpu", r["backend"]
        assert r["ours"] == r["theirs"], rank  # DistributedSampler's indices, same script
        assert r["certificate"] == (n, -n % world, (0, 1), "round-robin")


def test_launch_names_its_start_methods():
    with pytest.raises(ValueError, match="'forkserver' or 'spawn'"):
        launch(backend_workers.default_backend, 2, 10, start_method="fork")
