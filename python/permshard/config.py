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
    algorithm: str = field(init=False)

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
    ) -> None:
        checked: dict[str, Any] = {
            "n": as_u64("n", n, minimum=1),
            "num_replicas": as_positive("num_replicas", num_replicas),
            "seed": as_u64("seed", seed),
            "epoch": as_u64("epoch", epoch),
            "shuffle": bool(shuffle),
            "drop_last": bool(drop_last),
            "block_size": as_u64("block_size", block_size),
            "window_blocks": as_u64("window_blocks", window_blocks),
        }
        self._set(checked)
        # The core checks the fields together and names the order they imply.
        self._set({"algorithm": self.sharding().algorithm})

    def _set(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)  # frozen: normalise once, at construction

    def sharding(self) -> _core.Sharding:
        """The core's description of this epoch (order, algorithm id, resume limit,
        dealing layouts)."""
        return _core.Sharding(
            self.n,
            self.num_replicas,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            block_size=self.block_size,
            window_blocks=self.window_blocks,
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
        return dict(self.as_dict(), consumed=consumed)

    def accepts_algorithm(self, algorithm: str) -> bool:
        """Whether a state saved under ``algorithm`` continues under this configuration
        (the core also accepts 0.1 and 0.2's ``perm-v1`` for an unshuffled epoch).

        Args:
            algorithm (str): the algorithm id a state dict recorded.
        """
        return self.sharding().accepts_algorithm(algorithm)

    @classmethod
    def read_state(cls: type[_Config], state: Mapping[str, Any], resume: Sequence[str]) -> _Config:
        """The configuration a state dict records, checked: every field and each of the
        ``resume`` keys present, values in range, the algorithm this one runs.

        Args:
            state (Mapping): a state dict saved by a sampler's ``state_dict()``.
            resume (sequence of str): the keys of the saved resume point.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: a key is missing, a value is out of range, or the algorithm differs.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state_dict must be a mapping, got {type(state).__name__}")
        keys = [f.name for f in dataclasses.fields(cls)] + list(resume)
        missing = [k for k in keys if k not in state and k not in _OPTIONAL_KEYS]
        if missing:
            saved_by = f" (of algorithm {state['algorithm']!r})" if "algorithm" in state else ""
            raise ValueError(
                f"state_dict{saved_by} is missing {missing} of a {cls.__name__}: pass a dict saved "
                "by this sampler's state_dict()"
            )
        arguments = {
            f.name: state.get(f.name, _OPTIONAL_KEYS.get(f.name)) for f in dataclasses.fields(cls) if f.init
        }
        config = cls(**arguments)
        if not config.accepts_algorithm(str(state["algorithm"])):
            raise ValueError(
                f"state_dict is for algorithm {state['algorithm']!r}, but its fields (shuffle="
                f"{config.shuffle}, block_size={config.block_size}) mean {config.algorithm!r} for a "
                f"{cls.__name__}: the saved order cannot be reproduced here (or the state was edited)"
            )
        return config

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> tuple[ShardConfig, int]:
        """``(config, consumed)`` from a state dict saved by :meth:`state_dict`.

        Args:
            state (Mapping): a dict saved by ``ShardedSampler.state_dict()``.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: a key is missing or a value is out of range.
        """
        config = ShardConfig.read_state(state, ("consumed",))
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
