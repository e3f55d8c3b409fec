"""The process group as permshard uses it.

The data-parallel size and rank: given, from a torch ``DeviceMesh``, or from the group.
Under model parallelism (tensor, pipeline, context) the data-parallel rank is not the
process rank: the processes that share a data-parallel coordinate must read identical
data. A mesh names its dimensions; the data-parallel ones (one, or several flattened such
as ``("dp_replicate", "dp_shard")`` in HSDP) give ``num_replicas`` and ``rank``.

Small collectives that work on every backend: fixed-size int64 tensors, never pickles.
``all_gather_object`` pickles to a CUDA tensor on NCCL, on ``torch.cuda.current_device()``:
in a script that never called ``torch.cuda.set_device`` every rank of a node would use
GPU 0. These helpers gather unsigned 64-bit integers as int64 tensors on the device the
group's backend needs (:func:`collective_device`).

Consensus: every process of a pass agrees on its configuration, its resume point and its
dataset (one fixed-size all-gather, :func:`check_consensus`), and sampler ranks are laid out
evenly (:func:`check_layout`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional, Union

import torch
import torch.distributed as dist

from . import _core
from ._config import EpochConfig, as_int
from ._core import ShardingError
from ._guards import FIX_DOUBLE_SPLIT, double_split, subset_progression
from ._hooks import dataset_fingerprint, digest

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


#: The fix for a resume point that differs between processes.
FIX_RESUME = "load the same state dict on every rank (saved by any one rank) before iterating"

_FIXES = {
    "n": f"the ranks see datasets of different lengths; if each rank's dataset is a "
    f"per-rank slice, the data is split twice: {FIX_DOUBLE_SPLIT}",
    "epoch": "call sampler.set_epoch(epoch) on every rank before each epoch",
    "num_replicas": "every rank must use the same num_replicas (the world size)",
    "algorithm": "install the same permshard version on every rank, and build the same sampler",
    "permutation": "pass the same algorithm=... (the permutation, 'perm-v2' or 'perm-v1') on every rank",
    "dealing": "build the same sampler class on every rank (a StepBatchSampler everywhere, or nowhere)",
    "exclude": "pass the same exclude= ids on every rank (read from one file)",
    "dataset": f"the ranks hold different datasets of the same length; if each rank's "
    f"dataset is a per-rank slice, the data is split twice: {FIX_DOUBLE_SPLIT}",
}


class Agreed(NamedTuple):
    """A value of the pass, beside the configuration, that every process must share.

    Attributes:
        name: its name in messages (``start``, ``lengths``).
        value: an unsigned 64-bit integer (a digest for values that are not numbers).
        fix: what to do when the processes differ.
        digest: whether ``value`` is a digest (shown as such, not as a number).

    Example::

        >>> resume = Agreed("start", 4096, FIX_RESUME)  # a resume point every rank must share
    """

    name: str
    value: int
    fix: str
    digest: bool = False


#: Sent along after the agreed values, for the messages: the sampler rank and a Subset's
#: progression (first, step).
_SENT_ALONG = ("rank", "subset_first", "subset_step")


def _consensus_record(
    config: EpochConfig, rank: int, dataset: Any, agreed: Sequence[Agreed]
) -> dict[str, Agreed]:
    """This process's consensus record, in the order consensus checks it: the
    configuration (its fields, then the algorithm they imply), the pass's ``agreed``
    values, the dataset, then what is sent along for the messages."""
    fields = config.as_dict()
    # A field without a fix of its own (a new one) gets the generic fix. The fields come
    # first: a rank with another shuffle is named for it, not for the algorithm it implies.
    fix = {k: _FIXES.get(k, f"pass the same {k}=... on every rank") for k in fields}
    record = {k: _agreed_field(k, v, fix[k]) for k, v in fields.items() if k != "algorithm"}
    record["algorithm"] = Agreed("algorithm", digest(config.algorithm), _FIXES["algorithm"], True)
    record.update((a.name, a) for a in agreed)
    fingerprint = dataset_fingerprint(dataset if dataset is not None else config.n)
    record["dataset"] = Agreed("dataset", digest(fingerprint), _FIXES["dataset"], True)
    progression = subset_progression(dataset)
    first, step = progression if progression is not None else (0, 0)
    for name, value in zip(_SENT_ALONG, (rank, first, step)):
        record[name] = Agreed(name, value, "")
    return record


def _agreed_field(name: str, value: Any, fix: str) -> Agreed:
    """A configuration field as sent: a number as is, a string or a set of ids (the core's
    ``Exclusions``, ``None`` for none) as a digest."""
    if isinstance(value, str):
        return Agreed(name, digest(value), fix, True)
    if value is None or hasattr(value, "digest"):
        return Agreed(name, 0 if value is None else int(value.digest), fix, True)
    return Agreed(name, int(value), fix)


def check_consensus(
    config: EpochConfig,
    rank: int,
    dataset: Any = None,
    *,
    agreed: Sequence[Agreed] = (),
    group: Any = None,
) -> None:
    """Gathers every process's configuration (fixed-size int64 tensors, any backend) and
    raises ShardingError naming the first process and value that differ, and the fix.

    Args:
        config (EpochConfig): this process's configuration (any sampler's).
        rank (int): its sampler (data-parallel) rank.
        dataset (optional): its dataset, fingerprinted (default: ``config.n`` only).
        agreed (sequence of Agreed): the pass's other values every process must share:
            its resume point (``Agreed("start", ...)``), a lengths fingerprint.
        group (ProcessGroup, optional): the process group (default: the world).

    Example::

        >>> check_consensus(sampler.config, sampler.rank, dataset,
        ...                 agreed=[Agreed("start", 0, FIX_RESUME)])
    """
    mine = _consensus_record(config, rank, dataset, agreed)
    rows = all_gather_u64([a.value for a in mine.values()], group)
    everyone = [dict(zip(mine, row)) for row in rows]
    double = double_split(everyone)
    if double is not None:
        raise ShardingError(double)
    reference = everyone[0]
    for key, field in mine.items():
        if key in _SENT_ALONG:
            continue
        for proc, other in enumerate(everyone):
            if other[key] != reference[key]:
                first, this = (
                    _shown(key, reference[key], field.digest),
                    _shown(key, other[key], field.digest),
                )
                raise ShardingError(
                    f"ranks disagree on {key}: rank {reference['rank']} has {key}={first}, "
                    f"rank {other['rank']} (process {proc}) has {key}={this}. "
                    f"Fix: {field.fix}"
                )
    check_layout([c["rank"] for c in everyone], reference["num_replicas"])


def check_layout(ranks: list[int], num_replicas: int) -> None:
    """Each sampler rank ``0..num_replicas-1`` must appear equally often among the
    processes: once each in pure data parallelism, ``world / num_replicas`` times when
    model-parallel peers (tensor, pipeline, context) share a data-parallel rank (the
    core's rule; a ShardingError names every process's rank).

    Args:
        ranks (list of int): every process's sampler rank, in process order.
        num_replicas (int): the data-parallel ranks.
    """
    _core.check_rank_layout(ranks, num_replicas)


def _known_words() -> dict[int, str]:
    """The strings a configuration holds that a message can name back from their digest:
    the algorithm ids and the dealings."""
    words = [
        getattr(_core, name) for name in dir(_core) if name.endswith("ALGORITHM") or "ALGORITHM_V" in name
    ]
    for family in ("perm", "block", "mix", "budget"):
        words += [f"{family}-v1", f"{family}-v2"]
    words += ["identity", "round-robin", "step"]
    return {digest(word): word for word in words if isinstance(word, str)}


#: Digests of the strings a message names as themselves.
_KNOWN = _known_words()


def _shown(key: str, value: int, digested: bool) -> str:
    """A gathered value as a message shows it: the string a known digest stands for, a
    digest as such, a number or a flag as Python writes it."""
    if digested:
        return repr(_KNOWN[value]) if value in _KNOWN else f"<digest {value:016x}>"
    return repr(_as_python(key, value))


def _as_python(key: str, value: int) -> Any:
    return bool(value) if key in ("shuffle", "drop_last", "drop_last_batch") else value
