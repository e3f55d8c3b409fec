"""torchft's ``train_ddp.py`` with permshard's loader: replica groups that fail, heal and
rejoin, every committed sample read exactly once.

Start a lighthouse, then each replica group under torchrun (as torchft's own example)::

    torchft_lighthouse --min_replicas 2 --quorum_tick_ms 100 --join_timeout_ms 10000
    REPLICA_GROUP_ID=0 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://localhost:29510 \
        torchrun --standalone --nproc_per_node 1 examples/torchft_ddp.py --out /tmp/ft
    REPLICA_GROUP_ID=1 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://localhost:29510 \
        torchrun --standalone --nproc_per_node 1 --max-restarts 1 examples/torchft_ddp.py \
        --out /tmp/ft --kill-at 7

Where torchft's example builds ``torchft.DistributedSampler`` over the most replica
groups there may be (lossy while a group is down) and a ``StatefulDataLoader``
checkpointed with the model, this one builds a ``CommittedLoader`` over the dataset and
nothing else: each step's quorum says what each group reads, and a restarted group needs
no loader state. Each rank writes its loader's record (its committed reads) after every
committed step to ``--out``; ``permshard audit --state FILE --state FILE ...`` proves
from all of them that every position was committed exactly once. (The lighthouse's
``--min_replicas`` is more than half the groups: with fewer, a restarted group that finds
no peer forms a quorum of its own and reads from the start again, and the audit names the
positions read twice.)
"""

import argparse
import json
import logging
import os
from datetime import timedelta

import torch
import torch.nn.functional as F
from torch import nn, optim
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

import permshard.torchft

logging.basicConfig(level=logging.WARNING)


class Pictures(torch.utils.data.Dataset):
    """CIFAR-shaped samples, made up (nothing to download): ``(image, label, index)``."""

    def __len__(self) -> int:
        return 500

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10, i


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 5)
        self.fc = nn.Linear(6 * 14 * 14, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="committed steps to train")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers prefetching")
    parser.add_argument("--out", required=True, help="folder of the loaders' records")
    parser.add_argument("--kill-at", type=int, help="exit at this step in the first attempt (a crash)")
    args = parser.parse_args()
    group = int(os.environ.get("REPLICA_GROUP_ID", 0))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    rank = int(os.environ.get("RANK", 0))

    model = Net()
    optimizer = None

    def load_state_dict(state_dict):
        model.load_state_dict(state_dict["model"])
        optimizer.load_state_dict(state_dict["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    manager = Manager(
        pg=ProcessGroupGloo(),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_ddp_{group}",
        timeout=timedelta(seconds=30),
    )
    loader = permshard.torchft.CommittedLoader(
        Pictures(), manager, batch_size=args.batch_size, seed=0, shuffle=True, num_workers=args.workers
    )
    model = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, optim.AdamW(model.parameters()))
    record = os.path.join(args.out, f"group{group}-attempt{attempt}-rank{rank}.json")

    while manager.current_step() < args.steps:
        optimizer.zero_grad()  # starts the quorum
        images, labels, _ = loader.next_batch()  # this group's batch under this quorum
        step = manager.current_step()
        loss = F.cross_entropy(model(images), labels) if len(images) else model(images).sum()
        loss.backward()
        optimizer.step()  # commits or not
        if manager.current_step() > step:  # committed: the record goes with the checkpoint
            with open(record + ".tmp", "w") as f:
                json.dump(loader.state_dict(), f)
            os.replace(record + ".tmp", record)
        if args.kill_at is not None and attempt == 0 and step == args.kill_at:
            os._exit(1)  # a crash: torchrun restarts the group, which heals and rejoins
    loader.close()
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
