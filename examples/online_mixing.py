"""Online data mixing: every few steps a controller reads each source's loss and re-weights
the sources (more data where the loss is high), exactly and resumably, on every rank and in
every DataLoader worker: `torchrun --nproc_per_node 2 examples/online_mixing.py`."""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from permshard import ShardedSampler
from permshard.data import MixedDataset


class Task(Dataset):
    """A regression task: y = x . slope + noise; items carry their source."""

    def __init__(self, source: int, noise: float, size: int = 2000) -> None:
        g = torch.Generator().manual_seed(source)
        self.x = torch.randn(size, 8, generator=g)
        self.y = self.x @ torch.full((8,), float(source + 1)) + noise * torch.randn(size, generator=g)
        self.source = source

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], self.source


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
sources = [Task(0, 0.1), Task(1, 1.0), Task(2, 3.0)]
dataset = MixedDataset(sources, [1 / 3, 1 / 3, 1 / 3], num_samples=12_000, seed=5)
sampler = ShardedSampler(dataset, shuffle=False)  # the schedule follows training time
loader = DataLoader(dataset, sampler=sampler, batch_size=32, num_workers=2, persistent_workers=True)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
losses = torch.zeros(3)  # per-source mean loss of the last few steps (all ranks)
counts = torch.zeros(3)

for step, (x, y, source) in enumerate(loader):
    loss = (model(x).squeeze(1) - y) ** 2
    optimizer.zero_grad()
    loss.mean().backward()
    optimizer.step()
    losses.index_add_(0, source, loss.detach())
    counts.index_add_(0, source, torch.ones_like(loss))
    if step % 25 == 24 and step < 150:  # the controller
        dist.all_reduce(losses)
        dist.all_reduce(counts)
        weights = (losses / counts.clamp(min=1)).tolist()  # the same on every rank
        dataset.set_weights(weights, start=sampler.next_unhanded_position())
        losses.zero_()
        counts.zero_()
    if step == 160 and rank == 0:
        state = sampler.state_dict()  # the schedule rides along: a resume replays it

changes = dataset.mixture.stages
print(f"rank {rank}/{world}: {step + 1} steps, {len(changes)} weight changes, first at {changes[0][0]}")
resumed = MixedDataset(sources, [1 / 3, 1 / 3, 1 / 3], num_samples=12_000, seed=5)
if rank == 0:
    again = ShardedSampler(resumed, num_replicas=1, rank=0, shuffle=False, check_consensus=False)
    again.load_state_dict(state)
    print(f"resumed schedule equals the run's: {resumed.mixture == dataset.mixture}")
dist.barrier()  # nobody tears the group down while another rank still talks
dist.destroy_process_group()
# Leave without interpreter teardown: torch's background threads can abort a finished
# process at exit ("terminate called without an active exception"); see the README.
sys.stdout.flush()
os._exit(0)
