"""A token-budget run that changes world size while it runs, recording what every rank
read, under torchrun:

    torchrun --nproc_per_node 2 budget_history.py first FOLDER    # epoch 0: break after 7 steps
    torchrun --nproc_per_node 3 budget_history.py resume FOLDER   # the rest of epoch 0, 4 steps of epoch 1

Each rank writes the reads it saw (epoch, step, rank, position in the batch, sample); rank
0 writes the sampler's state dict after each phase, and the lengths.
"""

import json
import pathlib
import sys

import numpy as np
import torch.distributed as dist
from run_history import keep  # beside this script: the batch as the dataset returned it
from torch.utils.data import DataLoader

import permshard

FIRST_STEPS, LAST_STEPS = 7, 4


def lengths() -> np.ndarray:
    return np.random.default_rng(0).integers(1, 300, size=3000)


class Index:
    """Each sample is its own index: what the loop records."""

    def __len__(self) -> int:
        return 3000

    def __getitem__(self, i: int) -> int:
        return i


def main() -> None:
    mode, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    sampler = permshard.TokenBudgetBatchSampler(lengths(), 1024, seed=1, window=500)
    loader = DataLoader(Index(), batch_sampler=sampler, num_workers=2, collate_fn=keep)
    reads = []
    if mode == "first":
        for step, batch in enumerate(loader):
            reads += [[0, step, rank, k, sample] for k, sample in enumerate(batch)]
            if step == FIRST_STEPS - 1:
                break
        step = FIRST_STEPS
    else:
        sampler.load_state_dict(json.loads((folder / "state-first.json").read_text()))
        step = FIRST_STEPS
        for batch in loader:
            reads += [[0, step, rank, k, sample] for k, sample in enumerate(batch)]
            step += 1
        sampler.set_epoch(1)
        for i, batch in enumerate(loader):
            reads += [[1, step, rank, k, sample] for k, sample in enumerate(batch)]
            step += 1
            if i == LAST_STEPS - 1:
                break
    state = sampler.state_dict()
    if rank == 0:
        (folder / f"state-{mode}.json").write_text(json.dumps(state))
        np.save(folder / "lengths.npy", lengths())
    (folder / f"reads-{mode}-{rank}.json").write_text(json.dumps(reads))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
