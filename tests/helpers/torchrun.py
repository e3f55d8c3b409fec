"""Real ``torchrun`` launches for the tests that must run as a user runs them: the
processes, the rendezvous and the environment torchrun gives (one node, or several agents
standing for several nodes)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from permshard.launch import free_port

__all__ = ["finish", "nodes", "torchrun"]


def torchrun(*args: str, cwd: str | pathlib.Path | None = None) -> subprocess.Popen[str]:
    """``torchrun ARGS`` started (``python -m torch.distributed.run``); :func:`finish` waits."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env,
    )


def finish(*runs: subprocess.Popen[str], timeout: float = 300) -> list[str]:
    """Waits for each run; any that fails fails the test with its output. Returns the outputs."""
    outputs = []
    for run in runs:
        out, _ = run.communicate(timeout=timeout)
        assert run.returncode == 0, out
        outputs.append(out)
    return outputs


def nodes(
    count: int, per_node: int, script: str | pathlib.Path, *args: str, name: str = "permshard"
) -> list[str]:
    """``script ARGS`` on ``count`` torchrun agents of ``per_node`` processes each, meeting
    at one rendezvous: ``count`` nodes, as far as every rank can tell (``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE`` are per node, ``RANK`` and ``WORLD_SIZE`` global)."""
    agent = [
        "--nnodes", str(count), "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", name, str(script), *args,
    ]  # fmt: skip
    return finish(*[torchrun(*agent) for _ in range(count)])
