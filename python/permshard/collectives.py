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


def collective_device(group: Any = None) -> torch.device:
    """The device for tensors of a collective on ``group``.

    CPU when the group's backend takes CPU tensors (gloo, or ``cpu:gloo,cuda:nccl``).
    Otherwise a CUDA device: the one the group is bound to (``init_process_group(device_id=
    ...)``), else ``cuda:LOCAL_RANK`` (set by torchrun and accelerate), else the current
    device.

    Args:
        group (ProcessGroup, optional): the group (default: the world).
    """
    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    bound = getattr(group if group is not None else dist.group.WORLD, "bound_device_id", None)
    if bound is not None:
        return torch.device(bound)
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None and local_rank.isdigit() and torch.cuda.is_available():
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
