"""Consensus: every process of a pass agrees on its configuration, its resume point and
its dataset (one fixed-size all-gather), and sampler ranks are laid out evenly."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
from torch.utils.data import Subset

from . import _core
from ._config import EpochConfig
from ._core import ShardingError
from ._distributed import all_gather_u64
from ._guards import FIX_DOUBLE_SPLIT, double_split, subset_progression


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``repr(value)`` depends on the value only: numbers, strings, bytes, and
    shallow lists, tuples and dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if depth < 2 and isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if depth < 2 and isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """A cheap identity of ``dataset``: its type, length and, when cheap, a content hash
    (Subset indices, range bounds, a sequence's first and last items, an HF fingerprint).

    Args:
        dataset: a dataset, or an int (a length).
    """
    if isinstance(dataset, int):
        return {"type": "int", "len": dataset, "content": None}
    kind = f"{type(dataset).__module__}.{type(dataset).__qualname__}"
    content: Optional[str] = None
    h = hashlib.blake2b(digest_size=8)
    with contextlib.suppress(Exception):
        if isinstance(dataset, Subset):
            indices = dataset.indices
            if isinstance(indices, range):
                h.update(repr(indices).encode())
            elif len(indices) <= 10_000_000:
                h.update(repr(list(map(int, indices))).encode())
            content = h.hexdigest()
        elif isinstance(dataset, range):
            content = repr(dataset)
        elif isinstance(dataset, (list, tuple)):
            probe = list(dataset[:4]) + list(dataset[-4:])
            # Only plain values: a repr with an address or random synthetic tensors would
            # make identical (or harmlessly different) datasets look like a split.
            if all(_plain(item) for item in probe):
                h.update(repr(probe).encode())
                content = h.hexdigest()
        elif isinstance(getattr(dataset, "_fingerprint", None), str):
            content = dataset._fingerprint
    return {"type": kind, "len": len(dataset), "content": content}


def stable_fingerprint(dataset: Any) -> Optional[str]:
    """An identity of ``dataset``'s content that is the same in every process and every
    run over the same data, or ``None`` where it has none: a Hugging Face dataset's own
    fingerprint, or ``fingerprint()`` of permshard's datasets (token files and Megatron
    prefixes by their names and sizes, memmapped rows, mixtures of them). A state dict
    records it, and a resume over another dataset of the same length is refused.

    Args:
        dataset: a dataset, or an int (a length).
    """
    own = getattr(dataset, "fingerprint", None)
    if callable(own):
        value = own()
        return value if isinstance(value, str) else None
    hf = getattr(dataset, "_fingerprint", None)
    return hf if isinstance(hf, str) else None


def content_id(*parts: Any) -> str:
    """A dataset's ``fingerprint()`` from plain values that identify its content (file
    names, sizes, options): 16 hex digits.

    Args:
        *parts: plain data (numbers, strings, tuples and lists of them).
    """
    return f"{digest(parts):016x}"


def check_same_dataset(state: Mapping[str, Any], now: Optional[str]) -> None:
    """Raises ValueError when ``state`` recorded a dataset's fingerprint (its ``"dataset"``
    key; states of earlier releases record none) and the dataset read now has another,
    ``now`` (``None``: it has none to compare).

    Args:
        state (Mapping): a state dict.
        now (str, optional): the fingerprint of the dataset the sampler reads now.
    """
    if "dataset" not in state:
        return
    saved = state["dataset"]
    if not isinstance(saved, str):
        raise TypeError(f"state_dict['dataset'] must be a str (a dataset's fingerprint), got {saved!r}")
    if now is not None and now != saved:
        raise ValueError(
            f"state_dict was saved over another dataset (fingerprint {saved}, this dataset's is "
            f"{now}), though of the same length: its resume point would read other samples. "
            "Build the sampler over the dataset the state was saved with; to resume over a "
            "changed dataset on purpose, remove the state's 'dataset' key"
        )


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


def digest(value: Any) -> int:
    """A 64-bit digest of ``repr(value)`` (plain data only), or of the bytes of an array,
    for fixed-size collectives.

    Args:
        value: plain data (numbers, strings, tuples of them) or a numpy array.
    """
    data = value.tobytes() if isinstance(value, np.ndarray) else repr(value).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


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
