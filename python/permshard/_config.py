"""The configurations of an epoch: everything that decides which samples each rank reads.

:class:`ShardConfig` (the round-robin and step samplers) and :class:`BudgetConfig`
(token-budget batches) are both an :class:`EpochConfig`: one frozen object behind the
cross-rank consensus, ``Certificate``, ``ShardPlan``, ``describe()`` and the CLI's flags.
Each is a view of the core's epoch (``_core.Sharding``, ``_core.BudgetEpoch``), which
checks the fields together, names the algorithm, and writes, reads and checks the state
dicts of every release: Python keeps no list of state keys.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Optional, TypeVar

import numpy as np

from . import _core

_Config = TypeVar("_Config", bound="EpochConfig")


# -- argument checks shared by the public API: clear messages before anything reaches Rust --

U64_MAX = 2**64 - 1


def as_int(name: str, value: Any) -> int:
    """Returns ``value`` as an int; bools, floats and other non-integers are refused."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def as_str(name: str, value: Any, choices: str = "") -> str:
    """``value`` if it is a str; ``choices`` (`` ('perm-v2' or 'perm-v1')``) goes in the error."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{choices}, got {value!r}")
    return value


def as_u64(name: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an int in ``[minimum, 2**64 - 1]``."""
    number = as_int(name, value)
    if not minimum <= number <= U64_MAX:
        raise ValueError(f"{name} must be in [{minimum}, 2**64 - 1], got {number}")
    return number


def as_positive(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (sizes, batch sizes, world sizes)."""
    number = as_int(name, value)
    if not 1 <= number <= U64_MAX:
        raise ValueError(f"{name} should be a positive integer below 2**64, got {number}")
    return number


def as_lengths(lengths: Any) -> tuple[Any, Any]:
    """``(lengths, native)``: one length per sample as a 1-D integer numpy array (a memmap
    stays one), and the same in the layout the core reads in place (contiguous, native
    byte order; usually the array itself, not a copy)."""
    import numpy as np

    array = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths)
    if array.size == 0:
        raise ValueError("lengths is empty: a sampler needs at least one sample (one length per sample)")
    if array.ndim != 1 or array.dtype.kind not in "ui":
        raise TypeError(
            f"lengths must be a 1-D integer array (one length per sample), got {array.ndim}-D {array.dtype}"
        )
    if array.flags.c_contiguous and array.dtype.isnative:
        return array, array
    return array, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))


@dataclass(frozen=True, init=False)
class EpochConfig:
    """What every epoch's configuration holds and every rank agrees on: a subclass adds
    its fields, and the core names the order they imply (``algorithm``) and how a pass is
    dealt (``dealing``). The rank itself is not part of it.

    Args:
        n (int): dataset length, ``>= 1``.
        num_replicas (int): number of data-parallel ranks.
        seed (int, keyword-only): key of the order, in ``[0, 2**64 - 1]``.
        epoch (int): epoch in ``[0, 2**64 - 1]``.
        shuffle (bool): a keyed order (``True``) or the identity.
        drop_last (bool): drop the tail that does not fill a round of ranks, instead of
            padding it.
        permutation (str): the keyed permutation a shuffled order is built on:
            ``"perm-v2"`` (default) or ``"perm-v1"`` (the default up to 0.3). A state dict
            does not write it: its ``algorithm`` names it.
    """

    # The fields, as the core's table lists them (``_core.fields("shard")``: their kinds,
    # defaults, help and flags); a test holds these declarations to it.
    n: int
    num_replicas: int
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    drop_last: bool = False
    permutation: str = _core.ALGORITHM
    dealing: str = field(init=False)  # how the pass is dealt, named by certificates
    algorithm: str = field(init=False)  # the order the fields imply, recorded in state dicts

    #: The fields of how a pass is dealt: agreed and certified, not saved.
    dealing_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        n: int,
        num_replicas: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        permutation: str = _core.ALGORITHM,
    ) -> None:
        self._set(
            {
                "n": as_u64("n", n, minimum=1),
                "num_replicas": as_positive("num_replicas", num_replicas),
                "seed": as_u64("seed", seed),
                "epoch": as_u64("epoch", epoch),
                "shuffle": bool(shuffle),
                "drop_last": bool(drop_last),
                "permutation": as_str("algorithm", permutation),
            }
        )

    def _set(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)  # frozen: normalise once, at construction

    def labelled(self: _Config, *, algorithm: str, dealing: str) -> _Config:
        """A copy naming another order and dealing: the configuration a proof's certificate
        reports for what no sampler's configuration describes (a mixture's positions).

        Args:
            algorithm (str): the order's id.
            dealing (str): how its positions were dealt.
        """
        return self._copy_with(algorithm=algorithm, dealing=dealing)

    def replace(self: _Config, **changes: Any) -> _Config:
        """A copy with ``changes`` applied (and validated).

        Args:
            **changes: new values of fields, by name (``epoch=3``).
        """
        if len(changes) == 1 and "epoch" in changes:  # every epoch's path: no other field depends on it
            return self._copy_with(epoch=as_u64("epoch", changes["epoch"]))
        return dataclasses.replace(self, **changes)

    def _copy_with(self: _Config, **values: Any) -> _Config:
        """A copy with ``values`` set as they are: checked by the caller, no field derived
        from them (dataclasses.replace would run the whole construction again)."""
        again = object.__new__(type(self))
        object.__setattr__(again, "__dict__", dict(self.__dict__, **values))
        return again

    def as_dict(self) -> dict[str, Any]:
        """The fields, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


#: The fields of a round-robin or step epoch, in the core's order.
_SHARD_TABLE: list[dict[str, Any]] = _core.fields("shard")
_SHARD_FIELDS: tuple[str, ...] = tuple(f["name"] for f in _SHARD_TABLE)


@dataclass(frozen=True, init=False)
class ShardConfig(EpochConfig):
    """The configuration of :class:`~permshard.ShardedSampler` and the batch samplers on
    it: an :class:`EpochConfig`, the order's blocks, and how the pass is dealt.

    Args:
        n, num_replicas, seed, epoch, shuffle, drop_last, permutation: as in
            :class:`EpochConfig` (``shuffle``: the ``permutation``'s order).
        block_size (int): ``0`` for the permutation's order; else the block order built on
            it (block-v2, block-v1: see :class:`permshard.BlockPermutation`) with blocks of
            this many samples.
        window_blocks (int): blocks shuffled together in the block order (``0`` without
            blocks).
        dealing (str): how a pass's positions go to (rank, local index):
            ``"round-robin"`` (DistributedSampler's, :class:`ShardedSampler`) or ``"step"``
            (accelerate's whole batches, :class:`~permshard.StepBatchSampler`).
        batch_size (int): items per batch of a batch sampler (``0``: an item sampler).
        drop_last_batch (bool): the batch sampler drops its last partial batch.

    The dealing fields are agreed by every rank and named by certificates, but not saved
    in state dicts: a resume point is a prefix of the epoch's positions whatever the
    dealing, so a state saved under one dealing resumes under another.

    The order and its algorithm id, ``algorithm``, follow from them, decided by the core
    (``identity`` without ``shuffle``, ``block-v2`` or ``block-v1`` with ``block_size``, else
    the ``permutation``); a state dict of another order cannot be resumed. State dicts of
    0.1 and 0.2, which recorded an unshuffled epoch as ``perm-v1``, still load. Every field
    after ``num_replicas`` is keyword-only.

    Example::

        >>> config = ShardConfig(n=1000, num_replicas=8, seed=1)
        >>> config.partition().num_samples
        125
    """

    block_size: int = 0
    window_blocks: int = 0
    dealing: str = "round-robin"
    batch_size: int = 0
    drop_last_batch: bool = False
    exclude: Optional[_core.Exclusions] = None

    dealing_keys: ClassVar[tuple[str, ...]] = tuple(f["name"] for f in _SHARD_TABLE if f["dealing"])

    def __init__(
        self,
        n: int,
        num_replicas: int,
        *,
        block_size: int = 0,
        window_blocks: int = 0,
        dealing: str = "round-robin",
        batch_size: int = 0,
        drop_last_batch: bool = False,
        exclude: Any = None,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        permutation: str = _core.ALGORITHM,
    ) -> None:
        # The core converts and checks every field (once, by its table of them) and names
        # the order they imply; this configuration holds what it read.
        sharding = _core.Sharding(
            n=n,
            num_replicas=num_replicas,
            seed=seed,
            epoch=epoch,
            shuffle=shuffle,
            drop_last=drop_last,
            permutation=permutation,
            block_size=block_size,
            window_blocks=window_blocks,
            dealing=dealing,
            batch_size=batch_size,
            drop_last_batch=drop_last_batch,
            exclude=None if exclude is None else as_exclusions(exclude, as_positive("n", n)),
        )
        self._set(sharding.fields(dealing=True))
        self._set({"algorithm": sharding.algorithm, "_sharding": sharding})

    def sharding(self) -> _core.Sharding:
        """The core's description of this epoch (order, algorithm id, dealing, resume
        limit), built from this configuration's fields once (a copy with another epoch
        derives its own from it)."""
        cached: Optional[_core.Sharding] = self.__dict__.get("_sharding")
        if cached is None or cached.epoch != self.epoch:
            if cached is None:  # unpickled: rebuilt from the fields
                cached = _core.Sharding(**{name: getattr(self, name) for name in _SHARD_FIELDS})
            else:
                cached = cached.with_epoch(self.epoch)
            object.__setattr__(self, "_sharding", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        # The core's object is derived from the fields: not pickled, rebuilt on demand.
        return {k: v for k, v in self.__dict__.items() if k != "_sharding"}

    def partition(self, start: int = 0) -> _core.Partition:
        """The split of this epoch's positions ``[start, ...)`` across the ranks.

        Args:
            start (int, optional): global positions consumed before (a resume point).
        """
        return self.sharding().partition(start)

    def state_dict(self, consumed: int) -> dict[str, Any]:
        """A resume point: this configuration and ``consumed`` global positions of the epoch
        (with exclusions, positions of the kept samples; the excluded ids as a sorted list),
        as the core writes it.

        Args:
            consumed (int): global positions of the epoch consumed so far.
        """
        return self.sharding().state_dict(consumed)

    def resume_point(self, saved: ShardConfig, consumed: int) -> int:
        """Where this epoch resumes a state saved under ``saved`` after ``consumed`` of its
        positions: the same point, or with more exclusions the first kept sample ``saved``
        had not reached (the core's reading; a set that lost an id is refused).

        Args:
            saved (ShardConfig): the configuration the state recorded.
            consumed (int): its consumed positions.
        """
        return int(self.sharding().resume_from(saved.sharding(), consumed))

    def check_resumable(self, saved: ShardConfig) -> None:
        """Raises ValueError unless a state saved under ``saved`` continues under this one
        (the same order; the epoch, the number of ranks and the exclusions may differ).

        Args:
            saved (ShardConfig): the configuration a state dict recorded.
        """
        self.sharding().check_resumable(saved.sharding())

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], *, strict: bool = True) -> tuple[ShardConfig, int]:
        """``(config, consumed)`` from a state dict saved by :meth:`state_dict`, checked by
        the core: its keys (``strict`` refuses others), types and ranges, an algorithm that
        follows from its fields, a consumed count the epoch reaches; every release's states.

        Args:
            state (Mapping): a dict saved by ``ShardedSampler.state_dict()``.
            strict (bool, optional): refuse keys this release does not write (torch's
                ``load_state_dict(strict=True)`` convention). Default: ``True``.

        Raises:
            TypeError: ``state`` is not a mapping, or a value has the wrong type.
            ValueError: a key is missing or unknown, or a value is out of range.
        """
        sharding, consumed = _core.Sharding.from_state(state, strict)
        return cls(**sharding.fields()), consumed


def as_exclusions(exclude: Any, n: int) -> Optional[_core.Exclusions]:
    """``exclude`` as the core's set of ids below ``n`` (``None`` when empty).

    Args:
        exclude: ``None``, an ``Exclusions``, or ids (a sequence, numpy array or tensor).
        n (int): the dataset length.
    """
    if exclude is None or isinstance(exclude, _core.Exclusions):
        return exclude if exclude is None or len(exclude) else None
    if isinstance(exclude, (str, bytes)) or not hasattr(exclude, "__len__"):
        raise TypeError(
            f"exclude must be sample ids (a sequence, numpy array or tensor of ints), got {type(exclude).__name__}"
        )
    ids = np.asarray(exclude.cpu() if hasattr(exclude, "cpu") else exclude)
    if ids.size == 0:
        return None
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(
            f"exclude must be a 1-D sequence of int sample ids, got {ids.dtype} of shape {ids.shape}"
        )
    if ids.dtype == np.uint64 and int(ids.max()) >= 2**63:
        raise ValueError(f"excluded sample {int(ids.max())} is out of range: the dataset has {n} samples")
    return _core.Exclusions(np.ascontiguousarray(ids, dtype=np.int64), n)


def refuse_assignment(holder: Any, name: str, value: Any) -> NoReturn:
    """Raises AttributeError for an assignment to ``holder``'s configuration field
    ``name``, naming what changes it: ``set_epoch``, or a new sampler (every rank must
    agree on the configuration; nothing is rebuilt behind the caller's back).

    Args:
        holder: the sampler whose field it is.
        name (str): the field.
        value: what was assigned.
    """
    cls = type(holder).__name__
    fix = (
        f"call sampler.set_epoch({value!r})"
        if name == "epoch"
        else f"build a new {cls}(..., {name}={value!r}) (every rank must agree on it)"
    )
    raise AttributeError(f"{cls}.{name} is read-only, part of the epoch's configuration: {fix}")


class EpochFields:
    """The fields every epoch's configuration has, read from ``config`` as attributes:
    a sampler's (DistributedSampler's ``num_replicas``, ``epoch``, ``seed``, ``shuffle``,
    ``drop_last``) and a result's (``plan.n``, ``cert.seed``). On a sampler they are
    read-only: assigning one raises, naming what changes it.

    Example::

        >>> sampler = ShardedSampler(1000, num_replicas=4, rank=0)
        >>> sampler.set_epoch(3)
        >>> sampler.epoch, sampler.config.epoch
        (3, 3)
    """

    config: EpochConfig

    @property
    def n(self) -> int:
        """Dataset length: the samples of an epoch."""
        return self.config.n

    @n.setter
    def n(self, value: int) -> None:
        refuse_assignment(self, "n", value)

    @property
    def num_replicas(self) -> int:
        """Data-parallel ranks the epoch is dealt to."""
        return self.config.num_replicas

    @num_replicas.setter
    def num_replicas(self, value: int) -> None:
        refuse_assignment(self, "num_replicas", value)

    @property
    def seed(self) -> int:
        """Key of the order."""
        return self.config.seed

    @seed.setter
    def seed(self, value: int) -> None:
        refuse_assignment(self, "seed", value)

    @property
    def epoch(self) -> int:
        """The epoch (``set_epoch`` changes it)."""
        return self.config.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        refuse_assignment(self, "epoch", value)

    @property
    def shuffle(self) -> bool:
        """A keyed order (``True``) or the identity."""
        return self.config.shuffle

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        refuse_assignment(self, "shuffle", value)

    @property
    def drop_last(self) -> bool:
        """The tail that does not fill a round of ranks is dropped (else padded)."""
        return self.config.drop_last

    @drop_last.setter
    def drop_last(self, value: bool) -> None:
        refuse_assignment(self, "drop_last", value)

    @property
    def permutation(self) -> str:
        """The keyed permutation a shuffled order is built on (``perm-v2``, ``perm-v1``)."""
        return self.config.permutation

    @property
    def algorithm(self) -> str:
        """The order's id, decided by the core (what state dicts record)."""
        return self.config.algorithm

    @property
    def dealing(self) -> str:
        """How the pass is dealt: ``round-robin``, ``step`` or a token-budget plan's id."""
        return self.config.dealing


class ShardFields(EpochFields):
    """A round-robin or step sampler's own fields, read from its ``config`` as
    read-only attributes (beside :class:`EpochFields`)."""

    config: ShardConfig

    @property
    def block_size(self) -> int:
        """Samples per block of the block order (``0``: none)."""
        return self.config.block_size

    @block_size.setter
    def block_size(self, value: int) -> None:
        refuse_assignment(self, "block_size", value)

    @property
    def window_blocks(self) -> int:
        """Blocks shuffled together in the block order (``0`` without blocks)."""
        return self.config.window_blocks

    @window_blocks.setter
    def window_blocks(self, value: int) -> None:
        refuse_assignment(self, "window_blocks", value)

    @property
    def exclude(self) -> Optional[_core.Exclusions]:
        """The sample ids never read (``None``: none)."""
        return self.config.exclude

    @exclude.setter
    def exclude(self, value: Optional[_core.Exclusions]) -> None:
        refuse_assignment(self, "exclude", value)
