"""Training that survives crashes: a checkpoint every few steps, torchrun restarts, nothing
lost or repeated.

    torchrun --standalone --nproc_per_node 2 --max-restarts 3 examples/fault_tolerant.py \
        --folder /tmp/ft --kill-at 0:1:17,1:0:40,2:1:5

The loop counts ``consumed``: global samples of the epoch consumed since the epoch start
(step x batch size x world size, accumulated across restarts). Every ``--every`` steps all
ranks commit what they trained on since the last checkpoint, then rank 0 writes the
checkpoint atomically (temporary file + ``os.replace``) with
``sampler.state_dict(consumed_samples=consumed)``. A DataLoader with workers prefetches
ahead of the loop; the loop's counter is what was trained on. (``--default-state`` saves
``sampler.state_dict()`` instead, which counts what the DataLoader handed to the loop:
exact too. ``--one-batch-ahead`` saves one batch more than the loop trained on, as a
wrapper that draws a batch ahead would without the loop's counter: it loses data.)

``--kill-at ROUND:RANK:STEP,...`` makes RANK SIGKILL itself at its STEP-th step of restart
round ROUND (torchrun's ``TORCHELASTIC_RESTART_COUNT``), as a crashed GPU would.
Each committed segment is written as ``commit-E-FROM-TO-rankR.json`` (epoch E, positions
FROM..TO of the epoch); a segment redone after a crash overwrites the same file.
"""

import argparse
import datetime
import json
import os
import signal

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from permshard import ShardedSampler

N, BATCH, EPOCHS, SEED = 1000, 8, 2, 7


def write_atomically(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # readers see the old checkpoint or the new one, never half


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", required=True)
    parser.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--kill-at", default="", help="ROUND:RANK:STEP,... (SIGKILL)")
    parser.add_argument(
        "--default-state",
        action="store_true",
        help="save sampler.state_dict() (the DataLoader's count) instead of the loop's counter",
    )
    parser.add_argument(
        "--one-batch-ahead",
        action="store_true",
        help="save one batch more than the loop trained on (loses data: the control)",
    )
    args = parser.parse_args()
    kills = {tuple(map(int, k.split(":"))) for k in args.kill_at.split(",") if k}

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # A fresh rendezvous file per restart round: gloo's rendezvous through torchrun's store
    # can hang on a restarted round on some machines.
    dist.init_process_group(
        "gloo",
        init_method=f"file://{args.folder}/rendezvous-{restart}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )

    checkpoint = os.path.join(args.folder, "checkpoint.json")
    state = {"epoch": 0, "sampler": None}
    if os.path.exists(checkpoint):
        with open(checkpoint) as f:
            state = json.load(f)

    data = list(range(N))
    sampler = ShardedSampler(data, seed=SEED)
    if state["sampler"] is not None:
        sampler.load_state_dict(state["sampler"])  # possibly saved with another world size
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=2)

    step = 0
    for epoch in range(state["epoch"], EPOCHS):
        sampler.set_epoch(epoch)  # keeps a loaded resume point of this epoch
        consumed = state["sampler"]["consumed"] if state["sampler"] is not None else 0
        committed_at, pending = consumed, []
        for batch in loader:
            step += 1
            if (restart, rank, step) in kills:
                os.kill(os.getpid(), signal.SIGKILL)
            pending += batch.tolist()  # "train" on it
            consumed += len(batch) * world  # lockstep: every rank took a batch this size
            if step % args.every == 0:
                name = f"commit-{epoch}-{committed_at}-{consumed}-rank{rank}.json"
                write_atomically(os.path.join(args.folder, name), {"samples": pending})
                dist.barrier()  # every rank's part is on disk before the checkpoint moves
                if rank == 0:
                    if args.default_state:
                        saved = sampler.state_dict()
                    elif args.one_batch_ahead:
                        end = sampler.consumed_after(len(sampler))
                        saved = sampler.state_dict(consumed_samples=min(end, consumed + len(batch) * world))
                    else:
                        saved = sampler.state_dict(consumed_samples=consumed)
                    write_atomically(checkpoint, {"epoch": epoch, "sampler": saved})
                dist.barrier()
                committed_at, pending = consumed, []
        name = f"commit-{epoch}-{committed_at}-{consumed}-rank{rank}.json"
        write_atomically(os.path.join(args.folder, name), {"samples": pending})
        dist.barrier()
        if rank == 0:
            write_atomically(checkpoint, {"epoch": epoch + 1, "sampler": None})
        dist.barrier()
        state["sampler"] = None
        if rank == 0:
            print(f"epoch {epoch} done (restart round {restart})", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    # Leave without running interpreter teardown: torch's background threads can abort a
    # process at exit ("terminate called without an active exception") after all its work
    # is done, which torchrun would report as a failure.
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
