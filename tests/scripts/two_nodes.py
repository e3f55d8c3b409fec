"""Every integration that reads a rank, on two torchrun agents of two processes each (two
nodes, as every rank can tell: LOCAL_RANK 0-1 on each, RANK 0-3): each must split over the
4 global ranks, never over a node's 2 local ones. Each rank writes what it read.

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d ... two_nodes.py FOLDER
"""

import json
import os
import pathlib
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import permshard.accelerate
from permshard import ShardedSampler
from permshard.data import ShardedIterable

folder = pathlib.Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
out: dict = {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world": dist.get_world_size()}
data = list(range(203))

sampler = ShardedSampler(data, seed=1)
out["sampler"] = [sampler.num_replicas, sampler.rank, list(sampler)]

iterable = ShardedIterable(data)
out["iterable"] = [int(x) for x in DataLoader(iterable, batch_size=None, num_workers=2)]

from accelerate import Accelerator  # noqa: E402

accelerator = Accelerator(cpu=True)
loader = permshard.accelerate.prepare_data_loader(accelerator, DataLoader(data, batch_size=4, shuffle=True))
inner = loader.batch_sampler.sampler
out["accelerate"] = [inner.num_replicas, inner.rank, [x for batch in loader for x in batch.tolist()]]

from transformers import TrainingArguments  # noqa: E402

from permshard.transformers import ShardedTrainer  # noqa: E402

args = TrainingArguments(
    output_dir=str(folder / "trainer"), per_device_train_batch_size=4, use_cpu=True, report_to=[]
)
model = torch.nn.Linear(1, 1)
trainer_loader = ShardedTrainer(model=model, args=args, train_dataset=data).get_train_dataloader()
inner = trainer_loader.batch_sampler.sampler
out["trainer"] = [inner.num_replicas, inner.rank]

(folder / f"rank-{rank}.json").write_text(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
