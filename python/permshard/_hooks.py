"""What permshard's samplers read of a dataset and what they hand it back.

A dataset is any map-style dataset (or an int, its length: :func:`dataset_length`). What it
may declare to the samplers is optional, each hook found by its name, declared here once as
a :class:`typing.Protocol` and read only through the functions below:

* ``accepts_arrays = True`` (:class:`AcceptsArrays`): its ``__getitems__`` takes an int64
  array, so batch samplers yield arrays by default.
* ``epoch_dependent = True`` (:class:`EpochDependent`): its items depend on the epoch, so
  samplers yield :class:`EpochIndex` values. A DataLoader hands each index from the sampler
  (in the main process) to the dataset (in a worker), and workers hold their own copy of the
  dataset, made when they started: with ``persistent_workers=True`` a
  ``dataset.set_epoch(e)`` never reaches them, but the index does.
* ``prefetch(indices)`` (:class:`Prefetches`): told the samples of each block-order window
  as the iteration enters it (:class:`WindowPrefetch`).
* ``gather_ahead(indices)`` (:class:`GathersAhead`): told batch k + 1 as batch k is handed
  out.
* ``read_by(sampler)`` (:class:`ReadBy`): told which sampler reads it, as a pass starts.
* ``schedule_state()`` and ``load_schedule(state)`` (:class:`HasSchedule`): run-time
  changes that a sampler's state dict carries (``MixedDataset``'s weights).

And a dataset's identity, by which a resume over another dataset is refused: the cheap
fingerprint every rank agrees on (:func:`dataset_fingerprint`), the stable one a state dict
records (:func:`stable_fingerprint`, a dataset's own ``fingerprint()``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from numbers import Integral
from typing import Any, Optional, Protocol, cast

import numpy as np
import numpy.typing as npt

from . import _core


class AcceptsArrays(Protocol):
    """A dataset whose ``__getitems__`` takes an int64 array of indices."""

    accepts_arrays: bool


class EpochDependent(Protocol):
    """A dataset whose items depend on the epoch (it receives :class:`EpochIndex` values)."""

    epoch_dependent: bool


class Prefetches(Protocol):
    """A dataset told ahead which samples a block-order window will read."""

    def prefetch(self, indices: Sequence[int]) -> None: ...


class GathersAhead(Protocol):
    """A dataset told the next batch (an int64 array) as the current one is handed out."""

    def gather_ahead(self, indices: Any) -> None: ...


class ReadBy(Protocol):
    """A dataset told which sampler reads it, as each pass starts."""

    def read_by(self, sampler: Any) -> None: ...


class HasSchedule(Protocol):
    """A dataset with run-time changes that a sampler's state dict carries."""

    def schedule_state(self) -> Optional[dict[str, Any]]: ...

    def load_schedule(self, state: Mapping[str, Any]) -> None: ...


class ExplainsFingerprint(Protocol):
    """A dataset that can say why a state's fingerprint is not its own (the same data under
    another setting: the fix to resume)."""

    def fingerprint_hint(self, saved: str) -> Optional[str]: ...


def _has(dataset: Any, *names: str) -> bool:
    """Whether ``dataset`` has a callable attribute of every one of ``names`` (a plain
    loop: asked at every pass, where a generator costs more than the question)."""
    for name in names:
        if not callable(getattr(dataset, name, None)):
            return False
    return True


def prefetches(dataset: Any) -> Optional[Prefetches]:
    """``dataset`` where it has ``prefetch(indices)``, else ``None``."""
    return cast(Prefetches, dataset) if _has(dataset, "prefetch") else None


def gathers_ahead(dataset: Any) -> Optional[GathersAhead]:
    """``dataset`` where it has ``gather_ahead(indices)``, else ``None``."""
    return cast(GathersAhead, dataset) if _has(dataset, "gather_ahead") else None


def read_by(dataset: Any) -> Optional[ReadBy]:
    """``dataset`` where it has ``read_by(sampler)``, else ``None``."""
    return cast(ReadBy, dataset) if _has(dataset, "read_by") else None


def has_schedule(dataset: Any) -> Optional[HasSchedule]:
    """``dataset`` where it has ``schedule_state()`` and ``load_schedule(state)``, else ``None``."""
    return cast(HasSchedule, dataset) if _has(dataset, "schedule_state", "load_schedule") else None


def explains_fingerprint(dataset: Any) -> Optional[ExplainsFingerprint]:
    """``dataset`` where it has ``fingerprint_hint(saved)``, else ``None``."""
    return cast(ExplainsFingerprint, dataset) if _has(dataset, "fingerprint_hint") else None


def dataset_length(dataset: Any) -> int:
    """Length of ``dataset``: an int N, or anything with ``__len__``.

    Args:
        dataset: a dataset with ``__len__``, or an int.
    """
    if isinstance(dataset, bool):
        raise TypeError("dataset must be a dataset with __len__ or an int, got a bool")
    if isinstance(dataset, Integral):  # an int, or numpy's integers
        n = int(dataset)
        if n < 1:
            raise ValueError(
                f"a dataset length must be at least 1, got {n}: pass the number of samples "
                "(or the dataset itself)"
            )
    elif isinstance(dataset, Sized):
        n = len(dataset)
    else:
        raise TypeError(
            f"dataset must have __len__ or be an int, got {type(dataset).__name__}; for an "
            "IterableDataset use permshard.data.shard_iterable instead of a sampler"
        )
    if n < 1:
        raise ValueError(f"dataset is empty (length {n}); a sampler needs at least one sample")
    if n > 2**63:
        raise ValueError(f"dataset length {n} exceeds 2**63, the largest index torch can hold")
    return n


class EpochIndex(int):
    """An ``int`` dataset index with the sampler's ``epoch`` attached.

    It behaves as the plain index everywhere (arithmetic, numpy, ``range`` checks); a
    dataset that wants the epoch reads ``getattr(index, "epoch", None)``.

    Example::

        >>> i = EpochIndex(7, epoch=2)
        >>> i + 1, i.epoch
        (8, 2)
    """

    epoch: int

    def __new__(cls, value: int, epoch: int) -> EpochIndex:
        self = super().__new__(cls, value)
        self.epoch = epoch
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpochIndex, (int(self), self.epoch))

    def __repr__(self) -> str:
        return f"EpochIndex({int(self)}, epoch={self.epoch})"


class EpochIndices(np.ndarray):
    """An int64 array of dataset indices with the sampler's ``epoch`` attached: the array
    form of :class:`EpochIndex`, for batch samplers that yield arrays. Slices keep the
    epoch, and so does pickling to DataLoader workers.

    Example::

        >>> batch = EpochIndices([4, 9, 2], epoch=3)
        >>> batch[1:].epoch, batch.dtype
        (3, dtype('int64'))
    """

    epoch: Optional[int]

    def __new__(cls, values: npt.ArrayLike, epoch: int) -> EpochIndices:
        array = np.asarray(values, dtype=np.int64).view(cls)
        array.epoch = epoch
        return array

    def __array_finalize__(self, obj: Any) -> None:
        self.epoch = getattr(obj, "epoch", None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpochIndices, (np.asarray(self), self.epoch))


def wants_arrays(dataset: Any) -> bool:
    """Whether ``dataset`` declared that its ``__getitems__`` takes an int64 array of
    indices (``accepts_arrays = True``): batch samplers then yield arrays by default.

    Args:
        dataset: any dataset.
    """
    return bool(getattr(dataset, "accepts_arrays", False))


def tag(indices: Iterable[int], epoch: int) -> list[int]:
    """``indices`` as :class:`EpochIndex` values of ``epoch``.

    Args:
        indices (iterable of int): sample indices.
        epoch (int): the epoch they belong to.
    """
    return [EpochIndex(i, epoch) for i in indices]


def wants_epoch(dataset: Any) -> bool:
    """Whether ``dataset`` declared that its items depend on the epoch.

    Args:
        dataset: any dataset (``epoch_dependent = True`` declares it).
    """
    return bool(getattr(dataset, "epoch_dependent", False))


def epoch_of(indices: Any) -> Optional[int]:
    """The epoch an index (or the first index of a batch) carries; None for plain ints.

    Args:
        indices: one index, or a batch (list or array) of them.
    """
    if isinstance(indices, (EpochIndex, EpochIndices)):
        return indices.epoch
    if isinstance(indices, (list, tuple)) and indices and isinstance(indices[0], EpochIndex):
        epochs = {getattr(i, "epoch", None) for i in indices}
        if len(epochs) != 1:
            raise ValueError(f"a batch mixes indices of epochs {sorted(map(str, epochs))}")
        return indices[0].epoch
    return None


class WindowPrefetch:
    """Tells a dataset with ``prefetch(indices)`` the samples this rank reads in each window
    of a block order, as the iteration enters the window (see ``ShardedSampler``).

    Args:
        dataset: the dataset, with a ``prefetch(indices)`` method.
        part (Partition): the pass's partition.
        rank (int): this rank.
        window_len (int): positions per window of the block order.

    Example::

        >>> prefetch = WindowPrefetch(rows, part, rank=0, window_len=4096)  # rows.prefetch(indices)
        >>> prefetch.upto(prefetch.window_end(0))  # announces the first window
    """

    def __init__(self, dataset: Prefetches, part: _core.Partition, rank: int, window_len: int) -> None:
        self.dataset, self.part, self.rank, self.window_len = dataset, part, rank, window_len
        self.announced = 0  # local items announced so far

    def window_end(self, local: int) -> int:
        """One past the last local item in the window of local item ``local``.

        Args:
            local (int): a local item of this rank in the pass.
        """
        return self.part.window_end(self.rank, local, self.window_len)

    def upto(self, local_end: int) -> None:
        """Announces every window holding a local item below ``local_end``.

        Args:
            local_end (int): one past the last local item about to be read.
        """
        while self.announced < min(local_end, self.part.num_samples):
            end = self.window_end(self.announced)
            self.dataset.prefetch(self.part.take_list(self.rank, self.announced, end))
            self.announced = end


# -- a dataset's identity: what a resume checks it reads the same data by ------------------


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
    from torch.utils.data import Subset  # torch's, imported where a dataset is fingerprinted

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


def check_same_dataset(
    state: Mapping[str, Any], now: Optional[str], hint: Optional[Callable[[str], Optional[str]]] = None
) -> None:
    """Raises ValueError when ``state`` recorded a dataset's fingerprint (its ``"dataset"``
    key; states of earlier releases record none) and the dataset read now has another,
    ``now`` (``None``: it has none to compare).

    Args:
        state (Mapping): a state dict.
        now (str, optional): the fingerprint of the dataset the sampler reads now.
        hint (callable, optional): the dataset's ``fingerprint_hint``: the fix, where the
            saved fingerprint is the same data under another setting.
    """
    if "dataset" not in state:
        return
    saved = state["dataset"]
    if not isinstance(saved, str):
        raise TypeError(f"state_dict['dataset'] must be a str (a dataset's fingerprint), got {saved!r}")
    if now is not None and now != saved:
        fix = hint(saved) if hint is not None else None
        if fix is not None:
            raise ValueError(f"state_dict was saved over this dataset {fix}")
        raise ValueError(
            f"state_dict was saved over another dataset (fingerprint {saved}, this dataset's is "
            f"{now}), though of the same length: its resume point would read other samples. "
            "Build the sampler over the dataset the state was saved with; to resume over a "
            "changed dataset on purpose, remove the state's 'dataset' key"
        )


def digest(value: Any) -> int:
    """A 64-bit digest of ``repr(value)`` (plain data only), or of the bytes of an array,
    for fixed-size collectives.

    Args:
        value: plain data (numbers, strings, tuples of them) or a numpy array.
    """
    data = value.tobytes() if isinstance(value, np.ndarray) else repr(value).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
