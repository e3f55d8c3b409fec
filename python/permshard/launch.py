"""Real torch.distributed process groups on this machine (gloo by default, on 127.0.0.1).

``launch(worker, world, *args)`` runs ``worker(rank, world, *args)`` in ``world`` fresh
processes joined in one gloo group and returns each rank's return value. A worker that
raises makes ``launch`` raise with that rank's traceback. The demo and the multi-process
tests use it.
"""

from __future__ import annotations

import contextlib
import datetime
import multiprocessing
import os
import socket
import traceback
from typing import Any, Callable, Optional

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int,
    world: int,
    port: int,
    backend: Optional[str],
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    results: Any,
) -> None:
    # mp.spawn leaves its start method as this process's default; a rank torchrun starts
    # has the platform's (fork on Linux), and so must its DataLoader workers here.
    multiprocessing.set_start_method(None, force=True)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
    )
    # Bounded: a rank that never joins fails the run in two minutes, not torch's 30.
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        results[rank] = ("ok", worker(rank, world, *args))
    except BaseException:
        results[rank] = ("error", traceback.format_exc())
    finally:
        # Bounded wait for every rank (also when this one failed), then leave: a rank that
        # tears gloo down while another still talks makes gloo abort the process.
        with contextlib.suppress(Exception):
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
        dist.destroy_process_group()


#: What a rank process needs before it runs a worker: imported once, in the forkserver
#: every rank is forked from, not once per rank (torch's import costs seconds of CPU).
PRELOAD = ("torch", "torch.distributed", "permshard")


def launch(
    worker: Callable[..., Any],
    world: int,
    *args: Any,
    backend: Optional[str] = "gloo",
    start_method: str = "forkserver",
) -> list[Any]:
    """Runs ``worker(rank, world, *args)`` on ``world`` ranks of one group; their return
    values.

    ``worker`` and ``args`` must pickle (a module-level function).

    Args:
        worker (callable): ``worker(rank, world, *args)``, a module-level function.
        world (int): number of processes.
        *args: passed to every worker.
        backend (str, optional): the group's backend; ``None`` is torch's default (what
            ``init_process_group()`` and ``Accelerator()`` choose). Default: ``"gloo"``.
        start_method (str, optional): how the rank processes start: ``"forkserver"``
            (default: forked from a server that has imported torch and permshard, see
            :data:`PRELOAD`, and nothing of the caller) or ``"spawn"`` (each a fresh
            interpreter). A rank's DataLoader workers start with the platform's default
            either way, as under torchrun.
    """
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
    if start_method == "forkserver":
        # Takes effect when this process first starts its forkserver (one per process:
        # forkserver DataLoader workers started later from it find these imported too).
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
            _entry,
            args=(world, free_port(), backend, worker, args, results),
            nprocs=world,
            join=True,
            start_method=start_method,
        )
        out = [results[r] for r in range(world)]
    errors = [f"rank {r}:\n{body}" for r, (status, body) in enumerate(out) if status == "error"]
    if errors:
        raise RuntimeError("\n".join(errors))
    return [body for _, body in out]
