"""Workers for tests/test_backends.py: a process group built by ``init_process_group()``
without a backend (torch's default, what ``Accelerator()`` builds), on a CPU machine."""

from __future__ import annotations

import multiprocessing

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from permshard import ShardedBatchSampler, ShardedSampler
from permshard._distributed import collective_device


def default_backend(rank: int, world: int, n: int) -> dict:
    """What a first-time user's script does where DistributedSampler works: iterate with
    consensus, through a DataLoader with workers, then prove the epoch across ranks."""
    sampler = ShardedSampler(n, shuffle=False)
    loader = DataLoader(range(n), sampler=sampler, batch_size=4, num_workers=2)
    ours = [int(x) for batch in loader for x in batch]
    batches = ShardedBatchSampler(ShardedSampler(n, seed=3), 5)
    cert = batches.verify_distributed(exact=True)
    return {
        "backend": str(dist.get_backend()),
        "start_method": multiprocessing.get_start_method(),  # what the loader's workers used
        "device": str(collective_device()),
        "ours": ours,
        "theirs": list(DistributedSampler(range(n), shuffle=False)),
        "certificate": (cert.covered, cert.padding, cert.ranks, cert.dealing),
    }
