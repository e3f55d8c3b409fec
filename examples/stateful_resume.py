"""Mid-epoch resume with torchdata's StatefulDataLoader, also on another number of ranks:
`torchrun --nproc_per_node 2 examples/stateful_resume.py`."""

import datetime
import os
import sys

import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

from permshard import ShardedSampler

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
data = list(range(1000))

loader = StatefulDataLoader(data, batch_size=10, sampler=ShardedSampler(data, seed=3))
it = iter(loader)
head = [next(it) for _ in range(7)]
state = loader.state_dict()  # O(1): the sampler stores a position, not a list

resumed = StatefulDataLoader(data, batch_size=10, sampler=ShardedSampler(data, seed=3))
resumed.load_state_dict(state)
rest = list(resumed)
print(
    f"rank {rank}: {len(head)} batches before the checkpoint, {len(rest)} after, "
    f"{sum(len(b) for b in head + rest)} samples in the epoch"
)
dist.barrier()  # nobody tears the group down while another rank still talks
dist.destroy_process_group()
# Leave without interpreter teardown: torch's background threads can abort a finished
# process at exit ("terminate called without an active exception"); see the README.
sys.stdout.flush()
os._exit(0)
