"""The usual training loop under torchrun: a DataLoader with workers (not persistent), a
``break`` after STEPS steps, the default ``state_dict()`` saved after the loop; then, run
with ``resume``, the rest of the epoch on however many ranks torchrun starts.

    torchrun --nproc_per_node 2 break_and_resume.py first FOLDER
    torchrun --nproc_per_node 3 break_and_resume.py resume FOLDER
"""

import json
import pathlib
import sys

import torch.distributed as dist
from torch.utils.data import DataLoader

import permshard

N, BATCH, STEPS = 1000, 16, 10

mode, folder = sys.argv[1], pathlib.Path(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
data = list(range(N))
sampler = permshard.ShardedSampler(data, seed=7)
loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=2)
read: list[int] = []
if mode == "first":
    for step, batch in enumerate(loader, 1):
        read += batch.tolist()
        if step == STEPS:
            break
    state = sampler.state_dict()
    (folder / f"state-{rank}.json").write_text(json.dumps(state))
else:
    sampler.load_state_dict(json.loads((folder / "state-0.json").read_text()))
    sampler.verify()  # the resumed pass proven: it must also be the truth
    for batch in loader:
        read += batch.tolist()
    if rank == 0:
        (folder / "padding.json").write_text(json.dumps(len(sampler.plan().padding_positions)))
(folder / f"{mode}-{rank}.json").write_text(json.dumps(read))
dist.destroy_process_group()
