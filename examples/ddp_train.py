"""Plain DDP on a token file with ShardedSampler: `torchrun --nproc_per_node 2 examples/ddp_train.py`.

Builds a small token file, trains a tiny model for two epochs on CPU (gloo), and prints
each rank's share; the sampler checks at each epoch that all ranks agree.
"""

import datetime
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from permshard import ShardedBatchSampler, ShardedSampler
from permshard.data import TokenWindows

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
folder = tempfile.gettempdir()
path = os.path.join(folder, "permshard_example_tokens.bin")
if rank == 0:
    np.random.default_rng(0).integers(0, 256, size=200_000, dtype=np.uint16).tofile(path)
dist.barrier()

ds = TokenWindows(path, seq_len=64)
sampler = ShardedSampler(ds, seed=1)  # rank and world size from the process group
loader = DataLoader(ds, batch_sampler=ShardedBatchSampler(sampler, batch_size=16))
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Embedding(256, 32), torch.nn.Linear(32, 256))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(2):
    sampler.set_epoch(epoch)
    windows = 0
    for batch in loader:
        x, y = batch[:, :-1], batch[:, 1:]
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        windows += len(batch)
    print(f"rank {rank}/{world} epoch {epoch}: {windows} windows of {len(ds)}, loss {loss.item():.3f}")

cert = sampler.verify_distributed()
if rank == 0:
    print(cert)
del model, optimizer  # DDP holds the group: release it before the group goes
dist.barrier()  # nobody tears the group down while another rank still talks
dist.destroy_process_group()
# Leave without interpreter teardown: torch's background threads can abort a finished
# process at exit ("terminate called without an active exception"); see the README.
sys.stdout.flush()
os._exit(0)
