"""A run that changes while it runs, recording what every rank read, under torchrun:

    torchrun --nproc_per_node 2 run_history.py first FOLDER    # epoch 0: batch 4, a weight change, break
    torchrun --nproc_per_node 3 run_history.py resume FOLDER   # batch 3, more exclusions, epochs 0 and 1

Each rank writes the reads it saw (epoch, step, rank, position in the batch, mixture
position, source, document); rank 0 writes the sampler's state dict after each phase.
"""

import json
import pathlib
import sys

import torch.distributed as dist
from torch.utils.data import DataLoader

import permshard
from permshard.data import MixedDataset

SIZES, NUM_SAMPLES, FIRST_STEPS = (70, 50), 240, 9
EXCLUDED_FIRST, EXCLUDED_LATER = [3, 200], [3, 200, 17, 150, 151]


def blend() -> MixedDataset:
    sources = [[(s, i) for i in range(size)] for s, size in enumerate(SIZES)]
    return MixedDataset(sources, [0.6, 0.4], num_samples=NUM_SAMPLES, seed=5)


class Tagged:
    """The blend's items with their mixture position: what the loop records."""

    def __init__(self, ds: MixedDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, position: int) -> tuple:
        return (position, *self.ds[position])


def keep(batch):  # noqa: ANN001, ANN201 - the batch as the dataset returned it
    return batch


def main() -> None:
    mode, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = blend()
    reads = []
    if mode == "first":
        sampler = permshard.ShardedSampler(ds, shuffle=False, seed=1, exclude=EXCLUDED_FIRST)
        batches = permshard.ShardedBatchSampler(sampler, 4)
        loader = DataLoader(Tagged(ds), batch_sampler=batches, num_workers=2, collate_fn=keep)
        for step, batch in enumerate(loader):
            if step == 3:  # the weights change at the first position no rank has been handed
                ds.set_weights([0.2, 0.8], start=sampler.next_unhanded_position())
            reads += [[0, step, rank, k, *item] for k, item in enumerate(batch)]
            if step == FIRST_STEPS - 1:
                break
        state = batches.state_dict()
        first_steps = FIRST_STEPS
    else:
        state = json.loads((folder / "state-first.json").read_text())
        sampler = permshard.ShardedSampler(ds, shuffle=False, seed=1, exclude=EXCLUDED_LATER)
        batches = permshard.StepBatchSampler(sampler, 3)
        batches.load_state_dict(state)
        # Persistent workers: the iterator of epoch 0's rest is reset for epoch 1, not
        # dropped; the history still holds the resumed segment whole.
        loader = DataLoader(
            Tagged(ds), batch_sampler=batches, num_workers=2, persistent_workers=True, collate_fn=keep
        )
        step = json.loads((folder / "steps-first.json").read_text())
        for epoch in (0, 1):
            if epoch == 1:
                sampler.set_epoch(1)
            for batch in loader:
                reads += [[epoch, step, rank, k, *item] for k, item in enumerate(batch)]
                step += 1
        state = batches.state_dict()
        first_steps = step
    if rank == 0:
        (folder / f"state-{mode}.json").write_text(json.dumps(state))
        (folder / f"steps-{mode}.json").write_text(json.dumps(first_steps))
    (folder / f"reads-{mode}-{rank}.json").write_text(json.dumps(reads))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
