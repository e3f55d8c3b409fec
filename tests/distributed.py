"""Starts real torch.distributed process groups (gloo on 127.0.0.1) for the tests.

``launch(worker, world, *args)`` runs ``worker(rank, world, *args)`` in ``world`` fresh
processes joined in one gloo group and returns each rank's return value. A worker that
raises makes ``launch`` raise with that rank's traceback.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import traceback
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, worker: Callable[..., Any], args: tuple, results: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
    )
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results[rank] = ("ok", worker(rank, world, *args))
    except BaseException:
        results[rank] = ("error", traceback.format_exc())
    finally:
        # Bounded wait for every rank (also when this one failed), then leave: a rank that
        # tears gloo down while another still talks makes the process abort.
        with contextlib.suppress(Exception):
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
        dist.destroy_process_group()


def launch(worker: Callable[..., Any], world: int, *args: Any) -> list[Any]:
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_entry, args=(world, free_port(), worker, args, results), nprocs=world, join=True)
        out = [results[r] for r in range(world)]
    errors = [f"rank {r}:\n{body}" for r, (status, body) in enumerate(out) if status == "error"]
    if errors:
        raise RuntimeError("\n".join(errors))
    return [body for _, body in out]


def expect_error(fn: Callable[[], Any], exc: type[BaseException] = Exception) -> str:
    """Runs ``fn`` and returns the message of the exception it must raise."""
    try:
        fn()
    except exc as e:
        return f"{type(e).__name__}: {e}"
    return "NO ERROR"
