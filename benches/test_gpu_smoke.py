"""The GPU smoke run's checks, run on the CPU (``--cpu``): the script a CUDA machine runs
stays runnable, and its checks fail on a wrong batch."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from gpu_smoke import through_loader

from permshard.data import MemmapRows

SCRIPT = pathlib.Path(__file__).parent / "gpu_smoke.py"


@pytest.mark.slow
def test_every_check_passes_on_the_cpu():
    run = subprocess.run([sys.executable, str(SCRIPT), "--cpu"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 6 and all(line.startswith("ok ") for line in lines), run.stdout
    assert "exact distributed proof of the epoch, n = 100,000,000" in lines[-1]


def test_a_batch_unlike_numpys_fails_the_check(tmp_path):
    rows = np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)
    rows.tofile(tmp_path / "rows.f32")
    records = MemmapRows(str(tmp_path / "rows.f32"), np.float32, (4,))
    cpu = torch.device("cpu")
    assert through_loader(records, MemmapRows.collate, lambda i: rows[i], cpu, workers=0) == 4
    with pytest.raises(AssertionError, match="batch 0 differs from numpy's gather"):
        through_loader(records, MemmapRows.collate, lambda i: rows[i] + 1, cpu, workers=0)
