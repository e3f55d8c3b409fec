"""Model-parallel workers of the multi-process tests (real gloo groups): data-parallel
ranks shared by tensor-parallel peers.

Each worker runs on every rank (see ``distributed.launch``) and returns plain data
(counts, certificates, error messages) for the test to check.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import DataLoader

from permshard import ShardedSampler, ShardingError

from .distributed import expect_error


def model_parallel(rank: int, world: int, n: int) -> dict:
    """4 processes laid out as dp = 2 x tp = 2 (manual ranks and a DeviceMesh), tp only,
    a (2, 2, 1) mesh, and a tensor-parallel peer with another seed."""
    from torch.distributed.device_mesh import init_device_mesh

    out: dict = {}
    dp_rank, tp_rank = divmod(rank, 2)

    def run(sampler) -> dict:
        items = list(sampler)
        cert = sampler.verify_distributed()
        return {"items": items, "covered": cert.covered, "lengths": cert.lengths}

    out["manual"] = run(ShardedSampler(n, num_replicas=2, rank=dp_rank, seed=3))
    out["tp_only"] = run(ShardedSampler(n, num_replicas=1, rank=0, seed=3))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    s = ShardedSampler(n, device_mesh=mesh, mesh_dim="dp", seed=3)
    out["mesh"] = dict(run(s), dp=(s.num_replicas, s.rank))
    mesh3 = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
    s = ShardedSampler(n, device_mesh=mesh3, mesh_dim=("dp_replicate", "dp_shard"), seed=3)
    out["mesh3"] = dict(run(s), dp=(s.num_replicas, s.rank))
    bad = ShardedSampler(n, num_replicas=2, rank=dp_rank, seed=4 if rank == 3 else 3)
    out["bad_peer"] = expect_error(lambda: list(bad), ShardingError)
    uneven = ShardedSampler(n, num_replicas=2, rank=0 if rank < 3 else 1)
    out["uneven"] = expect_error(lambda: list(uneven), ShardingError)
    dist.barrier()
    return out


def model_parallel_loaders(rank: int, world: int, n: int) -> dict:
    """dp = 2 x tp = 2: shard_iterable / ShardedIterable from a mesh (with DataLoader
    workers), and the accelerate helper under accelerate's own ParallelismConfig."""
    from accelerate import Accelerator
    from accelerate.parallelism_config import ParallelismConfig
    from torch.distributed.device_mesh import init_device_mesh

    import permshard.accelerate
    from permshard.data import ShardedIterable

    out: dict = {}
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    docs = ShardedIterable(range(n), device_mesh=mesh, mesh_dim="dp")
    loader = DataLoader(docs, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    out["iterable"] = sorted(int(x) for x in loader)
    out["iterable_rank"] = (docs.rank, docs.world_size)
    out["iterable_error"] = expect_error(
        lambda: ShardedIterable(range(n), device_mesh=mesh, mesh_dim="dp", rank=0), ValueError
    )

    # accelerate 1.15 accepts a ParallelismConfig only on GPUs (FSDP2 / multi-GPU): on CPU
    # it is attached to the state as Accelerator.__init__ does there, with accelerate's own
    # mesh (built by the config, flattened dims included).
    accelerator = Accelerator(cpu=True)
    config = ParallelismConfig(dp_shard_size=2, tp_size=2)
    accelerator.state.parallelism_config = config
    accelerator.state.device_mesh = config.get_device_mesh("cpu")
    out["accelerate_world"] = permshard.accelerate.data_parallel_world(accelerator)
    data = list(range(n))
    prepared = permshard.accelerate.prepare_data_loader(
        accelerator, DataLoader(data, batch_size=4, shuffle=True)
    )
    out["accelerate"] = [x for batch in prepared for x in batch.tolist()]
    wrong = DataLoader(data, batch_size=4, sampler=ShardedSampler(data))  # 4 ranks: not the dp world
    out["accelerate_error"] = expect_error(
        lambda: permshard.accelerate.prepare_data_loader(accelerator, wrong), ShardingError
    )
    dist.barrier()
    return out
