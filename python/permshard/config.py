"""``ShardConfig``: everything that decides which samples each rank reads in an epoch.

One frozen object behind the state dicts, the cross-rank consensus, ``Certificate``,
``ShardPlan`` and ``describe()``: adding a field here adds it to all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from . import _core
from ._validation import as_int, as_positive, as_u64

#: Fields added after the first release: a state dict without them has their default.
_OPTIONAL_KEYS = {"block_size": 0, "window_blocks": 0}

_Config = TypeVar("_Config", bound="ShardConfig")


@dataclass(frozen=True, init=False)
class ShardConfig:
    """The configuration every rank must agree on (the rank itself is not part of it).

    Args:
        n (int): dataset length, ``>= 1``.
        num_replicas (int): number of data-parallel ranks.
        seed (int, keyword-only): shuffle seed in ``[0, 2**64 - 1]``.
        epoch (int): epoch in ``[0, 2**64 - 1]``.
        shuffle (bool): perm-v1 order (``True``) or the identity.
        drop_last (bool): drop the tail that does not fill a round of ranks, instead of
            padding it.
        block_size (int): ``0`` for perm-v1; else the block-v1 order (see
            :class:`permshard.BlockPermutation`) with blocks of this many samples.
        window_blocks (int): blocks shuffled together in block-v1 (``0`` without blocks).
        dealing (str): how a pass's positions go to (rank, local index):
            ``"round-robin"`` (DistributedSampler's, :class:`ShardedSampler`) or ``"step"``
            (accelerate's whole batches, :class:`~permshard.StepBatchSampler`).
        batch_size (int): items per batch of a batch sampler (``0``: an item sampler).
        drop_last_batch (bool): the batch sampler drops its last partial batch.

    The dealing fields are agreed by every rank and named by certificates, but not saved
    in state dicts: a resume point is a prefix of the epoch's positions whatever the
    dealing, so a state saved under one dealing resumes under another.

    The order and its algorithm id, ``algorithm``, follow from them, decided by the core
    (``identity`` without ``shuffle``, ``block-v1`` with ``block_size``, else
    ``perm-v1``); a state dict of another order cannot be resumed. State dicts of 0.1 and
    0.2, which recorded an unshuffled epoch as ``perm-v1``, still load. Every field after
    ``num_replicas`` is keyword-only.

    Example::

        >>> config = ShardConfig(n=1000, num_replicas=8, seed=1)
        >>> config.partition().num_samples
        125
    """

    n: int
    num_replicas: int
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    drop_last: bool = False
    block_size: int = 0
    window_blocks: int = 0
    dealing: str = "round-robin"
    batch_size: int = 0
    drop_last_batch: bool = False
    algorithm: str = field(init=False)

    #: The fields of how a pass is dealt: agreed and certified, not saved (see above).
    dealing_keys: ClassVar[tuple[str, ...]] = ("dealing", "batch_size", "drop_last_batch")

    #: Fields a resume must share with the run that saved it (epoch and num_replicas may change).
    resume_keys: ClassVar[tuple[str, ...]] = (
        "algorithm",
        "n",
        "seed",
        "shuffle",
        "drop_last",
        "block_size",
        "window_blocks",
    )

    def __init__(
        self,
        n: int,
        num_replicas: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        block_size: int = 0,
        window_blocks: int = 0,
        dealing: str = "round-robin",
        batch_size: int = 0,
        drop_last_batch: bool = False,
    ) -> None:
        if not isinstance(dealing, str):
            raise TypeError(f"dealing must be a str ('round-robin' or 'step'), got {dealing!r}")
        checked: dict[str, Any] = {
            "n": as_u64("n", n, minimum=1),
            "num_replicas": as_positive("num_replicas", num_replicas),
            "seed": as_u64("seed", seed),
            "epoch": as_u64("epoch", epoch),
            "shuffle": bool(shuffle),
            "drop_last": bool(drop_last),
            "block_size": as_u64("block_size", block_size),
            "window_blocks": as_u64("window_blocks", window_blocks),
            "dealing": dealing,
            "batch_size": as_u64("batch_size", batch_size),
            "drop_last_batch": bool(drop_last_batch),
        }
        self._set(checked)
        # The core checks the fields together and names the order they imply.
        self._set({"algorithm": self.sharding().algorithm})

    def _set(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)  # frozen: normalise once, at construction

    def sharding(self) -> _core.Sharding:
        """The core's description of this epoch (order, algorithm id, dealing, resume
        limit)."""
        return _core.Sharding(
            self.n,
            self.num_replicas,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            block_size=self.block_size,
            window_blocks=self.window_blocks,
            dealing=self.dealing,
            batch_size=self.batch_size,
            drop_last_batch=self.drop_last_batch,
        )

    def partition(self, start: int = 0) -> _core.Partition:
        """The split of this epoch's positions ``[start, ...)`` across the ranks.

        Args:
            start (int, optional): global positions consumed before (a resume point).
        """
        return self.sharding().partition(start)

    def replace(self: _Config, **changes: Any) -> _Config:
        """A copy with ``changes`` applied (and validated).

        Args:
            **changes: new values of fields, by name (``epoch=3``).
        """
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The fields, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def state_dict(self, consumed: int) -> dict[str, Any]:
        """A resume point: this configuration and ``consumed`` global positions of the epoch.

        Args:
            consumed (int): global positions of the epoch consumed so far.
        """
        return dict(self.saved_fields(), consumed=consumed)

    def saved_fields(self) -> dict[str, Any]:
        """The fields a state dict records: all but the dealing's."""
        return {k: v for k, v in self.as_dict().items() if k not in self.dealing_keys}

    def accepts_algorithm(self, algorithm: str) -> bool:
        """Whether a state saved under ``algorithm`` continues under this configuration
        (the core also accepts 0.1 and 0.2's ``perm-v1`` for an unshuffled epoch).

        Args:
            algorithm (str): the algorithm id a state dict recorded.
        """
        return self.sharding().accepts_algorithm(algorithm)

    @classmethod
    def read_state(
        cls: type[_Config], state: Mapping[str, Any], resume: Sequence[str], *, strict: bool = True
    ) -> _Config:
        """The configuration a state dict records, checked: every field and each of the
        ``resume`` keys present and of its type (bools are bools, ints are ints), values
        in range, the algorithm this one runs, and (``strict``) no other key.

        Args:
            state (Mapping): a state dict saved by a sampler's ``state_dict()``.
            resume (sequence of str): the keys of the saved resume point.
            strict (bool, optional): refuse keys this release does not write (torch's
                ``load_state_dict(strict=True)`` convention). Default: ``True``.

        Raises:
            TypeError: ``state`` is not a mapping, or a value has the wrong type.
            ValueError: a key is missing or unknown, a value is out of range, or the
                algorithm differs.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state_dict must be a mapping, got {type(state).__name__}")
        saved = [f for f in dataclasses.fields(cls) if f.name not in cls.dealing_keys]
        keys = [f.name for f in saved] + list(resume)
        missing = [k for k in keys if k not in state and k not in _OPTIONAL_KEYS]
        if missing:
            saved_by = f" (of algorithm {state['algorithm']!r})" if "algorithm" in state else ""
            raise ValueError(
                f"state_dict{saved_by} is missing {missing} of a {cls.__name__}: pass a dict saved "
                "by this sampler's state_dict()"
            )
        unknown = [k for k in state if k not in keys]
        if strict and unknown:
            raise ValueError(
                f"state_dict has keys a {cls.__name__} does not save: {unknown}. Pass a dict saved by "
                "this sampler's state_dict(), or load_state_dict(state, strict=False) to ignore them"
            )
        for f in saved:
            _check_type(f"state_dict[{f.name!r}]", state.get(f.name, _OPTIONAL_KEYS.get(f.name)), f)
        arguments = {f.name: state.get(f.name, _OPTIONAL_KEYS.get(f.name)) for f in saved if f.init}
        config = cls(**arguments)
        if not config.accepts_algorithm(state["algorithm"]):
            raise ValueError(
                f"state_dict is for algorithm {state['algorithm']!r}, but its fields (shuffle="
                f"{config.shuffle}, block_size={config.block_size}) mean {config.algorithm!r} for a "
                f"{cls.__name__}: the saved order cannot be reproduced here (or the state was edited)"
            )
        return config

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], *, strict: bool = True) -> tuple[ShardConfig, int]:
        """``(config, consumed)`` from a state dict saved by :meth:`state_dict`.

        Args:
            state (Mapping): a dict saved by ``ShardedSampler.state_dict()``.
            strict (bool, optional): refuse unknown keys (see :meth:`read_state`).

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: a key is missing or a value is out of range.
        """
        config = ShardConfig.read_state(state, ("consumed",), strict=strict)
        consumed = as_int("state_dict['consumed']", state["consumed"])
        limit = config.sharding().max_consumed
        if not 0 <= consumed <= limit:
            raise ValueError(
                f"state_dict['consumed'] must be in [0, {limit}] (global positions of an epoch "
                f"of n={config.n} over num_replicas={config.num_replicas}), got {consumed}: the "
                "state was not saved by this sampler's state_dict()"
            )
        return config, consumed

    def check_resumable(self, saved: ShardConfig) -> None:
        """Raises ValueError unless a state saved under ``saved`` continues under this one.

        Args:
            saved (ShardConfig): the configuration a state dict recorded.
        """
        differ = [k for k in self.resume_keys if k != "algorithm" and getattr(saved, k) != getattr(self, k)]
        because = "".join(
            f"; state_dict has {k}={getattr(saved, k)!r}, this sampler {getattr(self, k)!r}" for k in differ
        )
        if saved.algorithm != self.algorithm:
            raise ValueError(
                f"state_dict is for algorithm {saved.algorithm!r}, this sampler runs "
                f"{self.algorithm!r}; the saved order cannot be reproduced{because}"
            )
        if differ:
            k = differ[0]
            raise ValueError(
                f"state_dict has {k}={getattr(saved, k)!r} but this sampler has {k}={getattr(self, k)!r}; "
                f"build the sampler with the same {k} to resume"
            )


def _check_type(name: str, value: Any, spec: dataclasses.Field[Any]) -> None:
    """Refuses a saved ``value`` whose type is not the field's: bools are bools, strings
    strings, ints ints (not bools); the ranges are checked by the constructor."""
    kind = {"int": int, "bool": bool, "str": str}[str(spec.type)]  # annotations are strings here
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = not isinstance(value, bool) and hasattr(value, "__index__")
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise TypeError(
            f"{name} must be a {kind.__name__}, got {type(value).__name__} {value!r}: pass a dict "
            "saved by this sampler's state_dict()"
        )


class Configured:
    """Reads a result's configuration fields by name (``plan.n``, ``cert.seed``) from its
    ``config``: a field added to :class:`ShardConfig` is readable here without more code.

    Example::

        >>> cert = permshard.verify(100, 4, seed=3)
        >>> cert.seed == cert.config.seed == 3
        True
    """

    config: ShardConfig

    def __getattr__(self, name: str) -> Any:
        # Called only for names not found normally; "config" itself must not recurse
        # (e.g. while unpickling, before the instance has its fields).
        config = self.__dict__.get("config") if name != "config" else None
        if config is not None and name in _field_names(config):
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        config = self.__dict__.get("config")
        return sorted(set(super().__dir__()) | (_field_names(config) if config is not None else set()))


def _field_names(config: ShardConfig) -> set[str]:
    """The fields of ``config``'s class (a sampler's extension adds its own)."""
    return {f.name for f in dataclasses.fields(config)}
