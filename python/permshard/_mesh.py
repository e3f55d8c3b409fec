"""Data-parallel size and rank: given, from a torch ``DeviceMesh``, or from the group.

Under model parallelism (tensor, pipeline, context) the data-parallel rank is not the
process rank: the processes that share a data-parallel coordinate must read identical
data. A mesh names its dimensions; the data-parallel ones (one, or several flattened such
as ``("dp_replicate", "dp_shard")`` in HSDP) give ``num_replicas`` and ``rank``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch.distributed as dist

from ._validation import as_int

MeshDim = Union[str, tuple[str, ...], list[str]]


def mesh_world(device_mesh: Any, mesh_dim: Optional[MeshDim]) -> tuple[int, int]:
    """``(num_replicas, rank)`` of this process along the data-parallel dims of
    ``device_mesh``: the product of their sizes, and the flattened coordinate (row-major,
    in the order given).

    Args:
        device_mesh: a ``torch.distributed.device_mesh.DeviceMesh``.
        mesh_dim: a dimension name, or a tuple of names flattened together.
    """
    if not hasattr(device_mesh, "get_local_rank"):
        raise TypeError(f"device_mesh must be a torch DeviceMesh, got {type(device_mesh).__name__}")
    names: tuple[str, ...] = tuple(getattr(device_mesh, "mesh_dim_names", None) or ())
    if mesh_dim is None:
        raise ValueError(
            "device_mesh=... needs mesh_dim=...: the name of the data-parallel dimension "
            f"(or a tuple of names), one of {list(names)}"
        )
    dims = (mesh_dim,) if isinstance(mesh_dim, str) else tuple(mesh_dim)
    if not dims or not all(isinstance(d, str) for d in dims):
        raise TypeError(f"mesh_dim must be a dimension name or a tuple of names, got {mesh_dim!r}")
    unknown = [d for d in dims if d not in names]
    if unknown:
        raise ValueError(
            f"mesh_dim {unknown} not in the mesh's dimensions {list(names)}; name the "
            "data-parallel dimension(s) when building the mesh (init_device_mesh(..., "
            "mesh_dim_names=(...)))"
        )
    if len(set(dims)) != len(dims):
        raise ValueError(f"mesh_dim names a dimension twice: {dims}")
    size, rank = 1, 0
    for d in dims:
        width = device_mesh.size(names.index(d))
        rank = rank * width + device_mesh.get_local_rank(d)
        size *= width
    return size, rank


def from_mesh(
    size: Optional[int],
    rank: Optional[int],
    device_mesh: Any,
    mesh_dim: Optional[MeshDim],
    names: tuple[str, str] = ("num_replicas", "rank"),
) -> tuple[Optional[int], Optional[int]]:
    """``(size, rank)`` from ``device_mesh`` when one is given, else as passed; refuses
    both at once, and ``mesh_dim`` without a mesh. ``names`` are the caller's argument
    names, for the messages.

    Args:
        size (int, optional): the size passed by the caller.
        rank (int, optional): the rank passed by the caller.
        device_mesh (DeviceMesh, optional): the mesh.
        mesh_dim (str or tuple of str, optional): its data-parallel dimension(s).
        names (tuple of str): the caller's names for size and rank.
    """
    if device_mesh is None:
        if mesh_dim is not None:
            raise ValueError("mesh_dim=... needs device_mesh=...")
        return size, rank
    if size is not None or rank is not None:
        raise ValueError(
            f"pass either device_mesh=... ({names[0]} and {names[1]} come from its mesh_dim) "
            f"or {names[0]}=... and {names[1]}=..., not both"
        )
    return mesh_world(device_mesh, mesh_dim)


def resolve_world(
    num_replicas: Optional[int],
    rank: Optional[int],
    device_mesh: Any = None,
    mesh_dim: Optional[MeshDim] = None,
) -> tuple[int, int]:
    """``(num_replicas, rank)`` of a sampler: as passed, else from ``device_mesh``, else
    torch.distributed's world size and rank, like DistributedSampler.

    Args:
        num_replicas (int, optional): data-parallel ranks.
        rank (int, optional): this rank.
        device_mesh (DeviceMesh, optional): a mesh to read both from.
        mesh_dim (str or tuple of str, optional): its data-parallel dimension(s).
    """
    num_replicas, rank = from_mesh(num_replicas, rank, device_mesh, mesh_dim)
    if num_replicas is None or rank is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "num_replicas and rank default to torch.distributed's world size and rank, but "
                "torch.distributed is not initialized: call torch.distributed.init_process_group "
                "first, or pass num_replicas=... and rank=..."
            )
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
    num_replicas = as_int("num_replicas", num_replicas)
    rank = as_int("rank", rank)
    if num_replicas < 1:
        raise ValueError(f"Invalid num_replicas {num_replicas}, num_replicas should be at least 1")
    if not 0 <= rank < num_replicas:
        raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
    return num_replicas, rank
