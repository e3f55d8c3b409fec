"""ConstantLengthDataset done right: `torchrun --nproc_per_node 2 examples/iterable_packing.py`.

Documents are sharded across ranks x DataLoader workers before they are packed: every
document is read by exactly one worker of one rank.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from permshard.data import PackedDataset

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
texts = [f"document {i} " + "word " * (i % 50) for i in range(2000)]
vocab: dict[str, int] = {}


def tokenize(text: str) -> list[int]:
    return [vocab.setdefault(w, len(vocab) + 1) for w in text.split()]


ds = PackedDataset(texts, seq_len=128, eos_id=0, tokenizer=tokenize, shuffle=True, seed=1)
loader = DataLoader(ds, batch_size=8, num_workers=2)
sequences = sum(len(batch) for batch in loader)
total = torch.tensor([sequences])
dist.all_reduce(total)
print(f"rank {rank}/{world}: {sequences} packed sequences of 128 tokens ({total.item()} on all ranks)")
dist.barrier()  # nobody tears the group down while another rank still talks
dist.destroy_process_group()
# Leave without interpreter teardown: torch's background threads can abort a finished
# process at exit ("terminate called without an active exception"); see the README.
sys.stdout.flush()
os._exit(0)
