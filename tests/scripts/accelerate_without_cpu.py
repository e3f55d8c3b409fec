"""The accelerate guide's code as a new user ran it on a machine without a GPU, under
``torchrun --nproc_per_node 2``: ``Accelerator()`` without ``cpu=True`` counts one process
while torchrun started two. Each rank writes what preparing a loader said.

    torchrun --nproc_per_node 2 accelerate_without_cpu.py FOLDER
"""

import json
import os
import pathlib
import sys

import torch.distributed as dist
from accelerate import Accelerator
from torch.utils.data import DataLoader

import permshard.accelerate
from permshard import ShardedSampler

folder = pathlib.Path(sys.argv[1])
os.environ.pop("ACCELERATE_USE_CPU", None)
accelerator = Accelerator()
out: dict = {"accelerate_world": accelerator.num_processes, "group": dist.get_world_size()}
data = list(range(1000))
for name, loader in (
    ("prepared", DataLoader(data, batch_size=8, sampler=ShardedSampler(data, seed=5))),
    ("plain", DataLoader(data, batch_size=8, shuffle=True)),
):
    try:
        permshard.accelerate.prepare_data_loader(accelerator, loader)
        out[name] = "NO ERROR"
    except Exception as e:  # noqa: BLE001 (reported to the test)
        out[name] = f"{type(e).__name__}: {e}"
(folder / f"rank-{dist.get_rank()}.json").write_text(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
