"""permshard for torchtitan: a data loader its trainer builds from the config, that
resumes onto another data-parallel degree exactly.

torchtitan's own loaders split the data statically per data-parallel rank and refuse a
resume after the degree changed ("dataloader resharding is not supported yet"). Here the
ranks read one global stream dealt by steps (:class:`~permshard.StepBatchSampler`): after
``k`` steps the positions ``[0, k·B·W)`` are consumed whatever ``W``, so a checkpoint of
2 ranks continues on 3 exactly, and every rank saves the same few numbers (torchtitan's
checkpointer keeps one copy).

Set it as the trainer's ``dataloader`` in a config function::

    from permshard.torchtitan import ShardedDataLoader

    def llama3_debugmodel_permshard():
        config = llama3_debugmodel()
        config.dataloader = ShardedDataLoader.Config(data_path="0.3 web 0.7 code", seed=0)
        return config

and run ``torchtitan.train --module my_configs --config llama3_debugmodel_permshard``.

torchtitan is not a dependency of permshard: this module needs it (``pip install
torchtitan``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils.data import DataLoader

from ._adapter import optional_import
from ._batch_sampler import StepBatchSampler
from ._sampler import ShardedSampler
from .data import MixedDataset

BaseDataLoader = optional_import("torchtitan.components.dataloader", "torchtitan").BaseDataLoader

__all__ = ["ShardedDataLoader"]

#: The key of the loader's state in torchtitan's checkpoint: the same on every rank.
STATE_KEY = "permshard"


class ShardedDataLoader(BaseDataLoader):  # type: ignore[misc, valid-type]
    """torchtitan's ``BaseDataLoader`` over token files or Megatron prefixes (a weighted
    blend too), yielding what its train step expects: ``({"input": tokens}, labels)``,
    ``(local_batch_size, seq_len)`` each.

    Built by the trainer as ``config.dataloader.build(dp_world_size=, dp_rank=,
    tokenizer=, seq_len=, local_batch_size=, snapshot_every_n_steps=)`` (the tokenizer
    is not needed: the files hold token ids). Each step every data-parallel rank reads
    its part of the step's global batch; ``state_dict()`` is the run's (the same on
    every rank, history included: :class:`permshard.Run` attributes it), and loads on
    any number of ranks.

    Args:
        config (ShardedDataLoader.Config): the data and its order.
        dp_world_size (int): data-parallel ranks.
        dp_rank (int): this rank among them.
        seq_len (int): tokens per sequence.
        local_batch_size (int): sequences per rank and step.
        tokenizer (optional): unused.
        snapshot_every_n_steps (optional): unused (the state is a few numbers, taken
            whenever torchtitan asks).

    Example::

        >>> config = ShardedDataLoader.Config(data_path="web code")  # doctest: +SKIP
        >>> loader = config.build(dp_world_size=2, dp_rank=0, tokenizer=None, seq_len=2048,
        ...                       local_batch_size=8)  # doctest: +SKIP
        >>> inputs, labels = next(iter(loader))  # doctest: +SKIP
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):  # type: ignore[misc, name-defined]
        data_path: str = ""
        """Megatron's --data-path words: token files or prefixes ('web code'), or a
        weighted blend ('0.3 web 0.7 code')."""

        num_samples: Optional[int] = None
        """Sequences of the blend (Megatron's train samples); None: each source read in full."""

        seed: int = 0
        """Key of the orders: the blend's within each source, and the epoch's."""

        shuffle: bool = True
        """A keyed order of the blend's positions each epoch; False reads the blend as
        mixed (each source still in a keyed order): needed for set_weights."""

        infinite: bool = True
        """Epoch after epoch; False ends after one (the last step padded, declared by plan())."""

        num_workers: int = 0
        """DataLoader worker processes."""

        prefetch_factor: Optional[int] = None
        """Batches each worker prefetches (num_workers > 0)."""

        pin_memory: bool = False
        """Page-locked batches."""

        exclude: str = ""
        """A file of blend positions never to read, integers separated by white space (a
        takedown: loader.dataset.mixture.locate(source, index) lists a window's positions).
        A resume may name more: the newly excluded are skipped, nothing else moves."""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        seq_len: int,
        local_batch_size: int,
        tokenizer: Any = None,
        snapshot_every_n_steps: Optional[int] = None,
    ) -> None:
        if not config.data_path.strip():
            raise ValueError(
                "ShardedDataLoader.Config(data_path=...) is empty: give token files or Megatron "
                "prefixes ('web code'), or a blend ('0.3 web 0.7 code')"
            )
        self.config = config
        self.dataset = MixedDataset.from_data_path(
            config.data_path, seq_len, config.num_samples, seed=config.seed
        )
        self.sampler = ShardedSampler(
            self.dataset,
            num_replicas=dp_world_size,
            rank=dp_rank,
            seed=config.seed,
            shuffle=config.shuffle,
            exclude=_positions_in(config.exclude) if config.exclude else None,
        )
        self.batch_sampler = StepBatchSampler(self.sampler, local_batch_size)
        self._loader = DataLoader(
            self.dataset,
            batch_sampler=self.batch_sampler,
            num_workers=config.num_workers,
            pin_memory=config.pin_memory,
            prefetch_factor=config.prefetch_factor if config.num_workers else None,
        )

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        while True:
            for windows in self._loader:
                yield {"input": windows[:, :-1]}, windows[:, 1:]
            if not self.config.infinite:
                return
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def set_weights(self, weights: Any) -> None:
        """Changes the blend's weights from the next position no rank has read: a stage
        of the run, carried by its state (see :meth:`MixedDataset.set_weights`). Call it
        on every rank, between steps; needs ``shuffle=False`` (the blend read in order)."""
        if self.config.shuffle:
            raise ValueError(
                "set_weights changes the blend from a position on: build the loader with "
                "ShardedDataLoader.Config(shuffle=False, num_samples=...), which reads the blend in order"
            )
        self.dataset.set_weights(weights, start=self.sampler.next_unhanded_position())

    def plan(self) -> Any:
        """The epoch's :class:`~permshard.ShardPlan`: every rank's steps and the padding."""
        return self.sampler.plan()

    def verify(self) -> Any:
        """The proof that the ranks' streams of this epoch are disjoint and cover it."""
        return self.batch_sampler.verify()

    def state_dict(self) -> dict[str, Any]:
        """The run's state, as one JSON string under ``"permshard"``: the same on every
        rank (what the training loop received, not what workers prefetched)."""
        return {STATE_KEY: json.dumps(self.batch_sampler.state_dict())}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continues the run of ``state_dict`` (saved on any number of ranks). An empty
        one is a fresh start, as for torchtitan's loaders."""
        if not state_dict:
            return
        if STATE_KEY not in state_dict:
            raise ValueError(
                f"not a ShardedDataLoader state (keys {sorted(state_dict)}): a checkpoint of "
                "torchtitan's own loader cannot continue here; exclude 'dataloader' from loading"
            )
        self.batch_sampler.load_state_dict(json.loads(state_dict[STATE_KEY]))


def _positions_in(path: str) -> list[int]:
    """The blend positions listed in the file ``path`` (``Config.exclude``)."""
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError as e:
        raise ValueError(
            f"ShardedDataLoader.Config(exclude={path!r}): cannot read it ({e.strerror})"
        ) from None
    try:
        return [int(w) for w in words]
    except ValueError:
        bad = next(w for w in words if not w.lstrip("-").isdigit())
        raise ValueError(
            f"ShardedDataLoader.Config(exclude={path!r}) lists {bad!r}: the file holds blend positions, "
            "whole numbers separated by white space"
        ) from None
