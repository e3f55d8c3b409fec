"""A process that crashes with CommittedLoader's workers running: it prints their process
ids, then exits at once, as a killed replica group does.

    python crash_with_workers.py START_METHOD
"""

import os
import sys

import torch

import permshard.torchft
from helpers.one_group import OneGroup  # the tests' helpers: on PYTHONPATH, as the test runs it


class Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        return i


if __name__ == "__main__":
    loader = permshard.torchft.CommittedLoader(
        Numbers(), OneGroup(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1]
    )
    assert loader.next_batch().tolist() == loader._order.samples(0, 4)
    print(*(worker.pid for worker in loader._batches._workers), flush=True)
    os._exit(1)
