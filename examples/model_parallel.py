"""Data parallel x tensor parallel on a 2-D DeviceMesh: tensor-parallel peers read the same
batches, data-parallel ranks split the data once, a resume may change the data-parallel size.

One machine, 4 processes (dp 2 x tp 2, CPU and gloo):

    torchrun --standalone --nproc-per-node 4 examples/model_parallel.py --tp 2 --out /tmp/mp

Two machines, 2 processes each (run on both; HOST is the first machine):

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        --rdzv-id mp-demo examples/model_parallel.py --tp 2 --out /shared/mp

``--stop-after K`` leaves epoch 1 after K steps with a checkpoint (``sampler.state_dict``
with the loop's count of consumed samples); ``--resume`` continues from it, on any number
of processes: ``--nproc-per-node 2 ... --tp 2`` finishes the epoch with dp 1.

Every batch is compared across the tensor-parallel group (an all-gather), the data-parallel
split of each epoch is proven with ``verify_distributed``, and each process writes what it
read to ``OUT/rank-R.json`` (``OUT/resumed-rank-R.json`` with ``--resume``).
"""

import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.utils.data import DataLoader

from permshard import ShardedSampler
from permshard.data import ShardedIterable

N, BATCH, EPOCHS, SEED = 1001, 8, 2, 11


def write_atomically(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def same_on_tensor_parallel_peers(batch: torch.Tensor, group: dist.ProcessGroup) -> bool:
    copies = [torch.empty_like(batch) for _ in range(dist.get_world_size(group))]
    dist.all_gather(copies, batch, group=group)
    return all(torch.equal(c, batch) for c in copies)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size")
    parser.add_argument("--out", required=True, help="folder for checkpoints and results")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--start-method", default="spawn", choices=["fork", "spawn", "forkserver"])
    parser.add_argument("--stop-after", type=int, default=0, help="leave epoch 1 after K steps")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    args = parser.parse_args()

    # A bounded wait: a stuck collective fails in a minute, not torch's default 30.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    tp_group = mesh.get_group("tp")

    data = list(range(N))
    sampler = ShardedSampler(data, device_mesh=mesh, mesh_dim="dp", seed=SEED)
    checkpoint = os.path.join(args.out, "checkpoint.json")
    first_epoch = 0
    if args.resume:
        with open(checkpoint) as f:
            saved = json.load(f)
        sampler.load_state_dict(saved)  # saved with another data-parallel size, maybe
        first_epoch = saved["epoch"]
    loader = DataLoader(
        data,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=args.workers,
        multiprocessing_context=args.start_method if args.workers else None,
        persistent_workers=args.workers > 0,
    )

    result: dict = {
        "rank": rank,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "node": int(os.environ.get("GROUP_RANK", "0")),
        "dp": [sampler.num_replicas, sampler.rank],
        "tp": mesh.get_local_rank("tp"),
        "epochs": {},
        "certificates": {},
        "tp_agree": True,
    }
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)  # keeps a loaded resume point of this epoch
        cert = sampler.verify_distributed()  # the pass about to run, on every dp rank
        result["certificates"][epoch] = {"covered": cert.covered, "lengths": list(cert.lengths)}
        consumed = sampler.state_dict()["consumed"]
        seen = result["epochs"].setdefault(epoch, [])
        for step, batch in enumerate(loader, 1):
            result["tp_agree"] &= same_on_tensor_parallel_peers(batch, tp_group)
            seen += batch.tolist()  # "train" on it
            consumed += len(batch) * sampler.num_replicas  # lockstep across dp ranks
            if epoch == 1 and step == args.stop_after:
                break
        else:
            continue
        if rank == 0:
            write_atomically(checkpoint, sampler.state_dict(consumed_samples=consumed))
        break

    # An IterableDataset split the same way: tp peers get the same documents (the first
    # run's; a resumed run has nothing of it to finish).
    if not args.resume:
        docs = ShardedIterable(range(N), device_mesh=mesh, mesh_dim="dp")
        result["documents"] = [
            int(d)
            for d in DataLoader(
                docs,
                batch_size=None,
                num_workers=args.workers,
                multiprocessing_context=args.start_method if args.workers else None,
            )
        ]

    name = f"{'resumed-' if args.resume else ''}rank-{rank}.json"
    write_atomically(os.path.join(args.out, name), result)
    del loader  # persistent workers shut down here, before the process leaves
    dist.barrier()
    dist.destroy_process_group()
    # Leave without interpreter teardown: torch's background threads can abort a finished
    # process at exit ("terminate called without an active exception").
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
