"""Small collectives that work on every backend: fixed-size int64 tensors, never pickles.

``all_gather_object`` pickles to a CUDA tensor on NCCL, on ``torch.cuda.current_device()``:
in a script that never called ``torch.cuda.set_device`` every rank of a node would use
GPU 0. These helpers gather unsigned 64-bit integers as int64 tensors on the device the
group's backend needs (:func:`collective_device`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ._core import ShardingError

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def _backends(group: Any) -> dict[str, str]:
    """Device type -> backend of ``group``: ``{"cpu": "gloo", "cuda": "nccl"}`` for a group
    built by ``init_process_group()`` without a backend on a CUDA machine, ``{"cpu":
    "gloo"}`` on a CPU one (where ``get_backend()`` answers ``"undefined"``)."""
    config = getattr(dist, "get_backend_config", None)
    text = str(config(group) if config is not None else dist.get_backend(group)).lower()
    pairs = [part.split(":", 1) for part in text.split(",") if part]
    if len(pairs) == 1 and len(pairs[0]) == 1:  # one backend for every device type
        name = pairs[0][0]
        return {"cpu": name} if name in ("gloo", "mpi") else {"cuda": name}
    return {device.strip(): backend.strip() for device, backend in (p for p in pairs if len(p) == 2)}


def collective_device(group: Any = None) -> torch.device:
    """The device for tensors of a collective on ``group``.

    CPU when one of the group's backends takes CPU tensors (gloo, ``cpu:gloo,cuda:nccl``,
    and ``init_process_group()`` without a backend, as ``Accelerator()`` builds it).
    Otherwise a CUDA device: the one the group is bound to (``init_process_group(device_id=
    ...)``), else ``cuda:LOCAL_RANK`` (set by torchrun and accelerate), else the current
    device.

    Args:
        group (ProcessGroup, optional): the group (default: the world).

    Raises:
        ShardingError: the group takes CUDA tensors only and this process has no CUDA.
    """
    backends = _backends(group)
    if "cpu" in backends:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ShardingError(
            f"the process group's backends ({backends}) take CUDA tensors only, but this "
            "process sees no CUDA device: init_process_group(backend='gloo') on CPU machines"
        )
    bound = getattr(group if group is not None else dist.group.WORLD, "bound_device_id", None)
    if bound is not None:
        return torch.device(bound)
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None and local_rank.isdigit():
        return torch.device("cuda", int(local_rank) % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def all_gather_u64(values: Sequence[int], group: Any = None) -> list[list[int]]:
    """Every process's ``values`` (the same count on each, unsigned 64-bit), in process
    order of ``group``.

    Args:
        values (sequence of int): this process's values, each in ``[0, 2**64 - 1]``.
        group (ProcessGroup, optional): the group (default: the world).
    """
    signed = [v - _U64 if v > _I64_MAX else v for v in values]
    if any(not -(1 << 63) <= v <= _I64_MAX for v in signed):
        raise ValueError(f"values must be unsigned 64-bit integers, got {list(values)}")
    device = collective_device(group)
    mine = torch.tensor(signed, dtype=torch.int64, device=device)
    world = dist.get_world_size(group)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine, group=group)
    rows: list[list[int]] = torch.stack(out).cpu().tolist()
    return [[v + _U64 if v < 0 else v for v in row] for row in rows]


def gather_by_rank(
    rank: int, values: Sequence[int], group: Any = None, what: str = "rows"
) -> dict[int, list[int]]:
    """Every sampler rank's ``values`` (:func:`all_gather_u64`), once per rank: processes
    sharing a rank (model-parallel peers) must send the same values.

    Args:
        rank (int): this process's sampler (data-parallel) rank.
        values (sequence of int): its values, as many on every process.
        group (ProcessGroup, optional): the group (default: the world).
        what (str, optional): what the values are, for the error message.

    Raises:
        ShardingError: two processes share a rank but sent different values.
    """
    by_rank: dict[int, tuple[int, list[int]]] = {}
    for proc, row in enumerate(all_gather_u64([rank, *values], group)):
        if row[0] in by_rank:
            peer, peer_row = by_rank[row[0]]
            if row[1:] != peer_row[1:]:
                raise ShardingError(
                    f"processes {peer} and {proc} share sampler rank {row[0]} but their {what} "
                    "differ: model-parallel peers must read identical data. Check that both run "
                    "the same sampler class and dataset"
                )
            continue
        by_rank[row[0]] = (proc, row)
    return {r: row[1:] for r, (_, row) in by_rank.items()}
