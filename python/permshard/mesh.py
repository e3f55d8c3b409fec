"""Data-parallel size and rank from a torch ``DeviceMesh``.

Under model parallelism (tensor, pipeline, context) the data-parallel rank is not the
process rank: the processes that share a data-parallel coordinate must read identical
data. A mesh names its dimensions; the data-parallel ones (one, or several flattened such
as ``("dp_replicate", "dp_shard")`` in HSDP) give ``num_replicas`` and ``rank``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

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
