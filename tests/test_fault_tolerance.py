"""Crash and resume under torchrun: ranks SIGKILLed at random steps, restarted by torchrun
from atomic checkpoints; every epoch's committed samples are each exactly once."""

from __future__ import annotations

import json
import pathlib
import random
import re
import subprocess
import sys
from collections import Counter

import pytest

pytestmark = pytest.mark.multiprocess

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "fault_tolerant.py"
N, EPOCHS, WORLD = 1000, 2, 2


def committed(folder: pathlib.Path, epoch: int) -> Counter:
    """The samples of ``epoch`` committed along the chain of segments 0 -> ... -> end:
    a segment redone after a crash overwrote its own file, stale ones are off the chain."""
    segments: dict[int, set[int]] = {}
    for path in folder.glob(f"commit-{epoch}-*-rank*.json"):
        start, stop = map(int, re.match(r"commit-\d+-(\d+)-(\d+)-rank\d+\.json", path.name).groups())
        segments.setdefault(start, set()).add(stop)
    samples: Counter = Counter()
    at = 0
    while at in segments:
        stop = min(segments[at])  # one continuation when the run is deterministic
        for rank in range(WORLD):
            path = folder / f"commit-{epoch}-{at}-{stop}-rank{rank}.json"
            if path.exists():  # a rank that never committed this segment adds nothing
                samples.update(json.loads(path.read_text())["samples"])
        at = stop
    return samples


def run(folder: pathlib.Path, kills: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(WORLD),
            "--max-restarts",
            "3",
            str(EXAMPLE),
            "--folder",
            str(folder),
            "--kill-at",
            ",".join(kills),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )


def random_kills(seed: int) -> list[str]:
    rng = random.Random(seed)
    # A step below 30 is always reached: a round redoes at least 60 of the 126 steps.
    return [f"{round_}:{rng.randrange(WORLD)}:{rng.randint(1, 30)}" for round_ in range(3)]


@pytest.mark.parametrize("seed", [0, 1])
def test_three_crashes_lose_and_repeat_nothing(tmp_path, seed):
    done = run(tmp_path, random_kills(seed))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("exitcode: -9") == 3  # three real crashes, three restarts
    assert "epoch 1 done (restart round 3)" in done.stdout
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == {"epoch": EPOCHS, "sampler": None}
    for epoch in range(EPOCHS):
        assert committed(tmp_path, epoch) == Counter(range(N)), f"epoch {epoch}"


def test_the_default_state_under_prefetching_is_exact_too(tmp_path):
    """sampler.state_dict() without the loop's counter: it counts what the DataLoader
    handed to the loop, not what its workers prefetched, so nothing is lost either."""
    done = run(tmp_path, random_kills(0), "--default-state")
    assert done.returncode == 0, done.stdout + done.stderr
    for epoch in range(EPOCHS):
        assert committed(tmp_path, epoch) == Counter(range(N)), f"epoch {epoch}"


def test_a_state_one_batch_ahead_loses_samples(tmp_path):
    """The control: checkpointing one batch more than the loop trained on (a wrapper that
    draws ahead, without the loop's counter) skips samples after a crash, and the check
    above sees it."""
    done = run(tmp_path, random_kills(0), "--one-batch-ahead")
    assert done.returncode == 0, done.stdout + done.stderr
    lost = [committed(tmp_path, epoch) != Counter(range(N)) for epoch in range(EPOCHS)]
    assert any(lost)
