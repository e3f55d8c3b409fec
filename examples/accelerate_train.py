"""accelerate without the double split: `torchrun --nproc_per_node 2 examples/accelerate_train.py`.

(On a machine without a GPU, `accelerate launch --num_processes 2 --cpu` starts one
process, not two: torchrun starts the processes, and `Accelerator(cpu=True)` joins them.)

Trains, evaluates with gather_for_metrics (exactly N predictions), saves and restores the
loader position with save_state / load_state.
"""

import os
import sys
import tempfile

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

import permshard.accelerate
from permshard import ShardedSampler

accelerator = Accelerator(cpu=True)
n = 1003
data = TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)), torch.arange(n))
train = permshard.accelerate.prepare_data_loader(
    accelerator, DataLoader(data, batch_size=16, sampler=ShardedSampler(data, seed=0))
)
evaluation = permshard.accelerate.prepare_data_loader(
    accelerator, DataLoader(data, batch_size=16, shuffle=False)
)
model = torch.nn.Linear(8, 2)
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))

for x, y, _ in train:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()

seen = []
for _x, _, index in evaluation:
    seen.append(accelerator.gather_for_metrics(index))
seen = torch.cat(seen)
assert sorted(seen.tolist()) == list(range(n)), "gather_for_metrics must return every sample once"

folder = os.path.join(tempfile.gettempdir(), "permshard_example_checkpoint")
accelerator.save_state(folder)  # the loaders' positions are saved with it, O(1)
accelerator.wait_for_everyone()  # the main process writes; let it finish before anyone reads
accelerator.load_state(folder)
accelerator.print(
    f"{accelerator.num_processes} processes: trained on {n} samples once each; evaluation gathered {len(seen)} = N"
)
accelerator.wait_for_everyone()
accelerator.end_training()  # destroys the process group
# Leave without interpreter teardown: torch's background threads can abort a finished
# process at exit ("terminate called without an active exception"); see the README.
sys.stdout.flush()
os._exit(0)
