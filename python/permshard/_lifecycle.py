"""``PassLifecycle``: what every permshard sampler does around its passes, in one place —
epochs, ``auto_epoch`` and the repeated-epoch warning, the cross-rank consensus once per
epoch, the accelerate guard and the one walk that finds the DataLoader, and when a pass
uses up the resume point it started from."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Optional

import torch.distributed as dist

from . import _guards as guards
from ._callers import iterating, user_stacklevel
from ._config import HoldsConfig
from ._loader_count import LOADER_ITERATOR, find_loader_iterator

#: A pass dealt as its sampler deals it (no batch sampler's fields).
_NO_DEALING: Mapping[str, Any] = {}


class PassLifecycle(HoldsConfig):
    """The epoch lifecycle of a sampler: a subclass calls :meth:`_begin_pass` where each
    pass starts, and says whether its pass has handed out an item (:meth:`_pass_started`),
    where a pass starts (:meth:`_resuming`, :meth:`_forget_resume_point`) and what every
    rank must agree on (:meth:`_check_consensus`).

    A pass counts as an iteration of its epoch once it has handed out an item (loaders
    that create an iterator and drop it unused, as torchdata's do, neither repeat the
    epoch nor use up a loaded resume point); it is settled when the next pass starts or
    the epoch changes.

    Example::

        >>> sampler = ShardedSampler(100, num_replicas=1, rank=0, auto_epoch=True)
        >>> first, second = list(sampler), list(sampler)  # epochs 0, then 1
        >>> sampler.epoch
        1
    """

    rank: int
    epoch: int  # the configuration's (HoldsConfig)
    num_replicas: int
    auto_epoch: bool
    check_consensus: bool

    def _init_lifecycle(self, *, auto_epoch: bool, check_consensus: bool) -> None:
        self.auto_epoch = bool(auto_epoch)
        self.check_consensus = bool(check_consensus)
        self._iterated_epoch: Optional[int] = None  # the epoch a settled pass iterated
        self._warned_repeat = False
        self._agreed_epoch: Optional[int] = None  # the epoch the consensus was run for
        self._pass_epoch: Optional[int] = None  # the epoch of the last pass begun
        self._settled = True  # the last pass has been accounted for

    # -- what a subclass says ---------------------------------------------------------------

    def _pass_started(self) -> bool:
        """Whether the last pass begun has handed out an item."""
        raise NotImplementedError

    def _resuming(self) -> bool:
        """Whether the next pass starts from a loaded resume point (not the epoch's start)."""
        raise NotImplementedError

    def _forget_resume_point(self) -> None:
        """The pass that started from the loaded resume point has handed out an item: the
        next pass of the epoch starts from the epoch's start."""
        raise NotImplementedError

    def _check_consensus(self, dealing: Mapping[str, Any]) -> None:
        """Every rank of the process group agrees on the configuration (a collective), with
        ``dealing`` (the fields of a batch sampler's dealing) applied."""
        raise NotImplementedError

    # -- the lifecycle ----------------------------------------------------------------------

    def _epoch_set(self) -> None:
        """Call before a ``set_epoch`` takes effect: the last pass is settled, and the
        epoch set is iterated afresh (no repeat warning)."""
        if not self._settled:
            self._settle()
        self._iterated_epoch = None

    def _state_loaded(self) -> None:
        """Call after a state dict was loaded: a new resume point, iterated afresh and
        agreed on again; no pass of it has started."""
        self._iterated_epoch = self._agreed_epoch = None
        self._settled = True

    def _settle(self) -> None:
        """Accounts for the last pass once it has handed out an item: its epoch counts as
        iterated, and a resume point it started from is used up."""
        if self._settled or not self._pass_started():  # callers skip the call when settled
            return
        self._settled = True
        self._iterated_epoch = self._pass_epoch
        if self._resuming():
            self._forget_resume_point()

    def _begin_pass(self, dealing: Mapping[str, Any] = _NO_DEALING) -> Any:
        """Starts a pass: settles the last one, refuses accelerate's second split, warns
        on (or with ``auto_epoch`` advances past) a repeated epoch, runs the consensus once
        per epoch. Returns what the DataLoader iterator pulling the pass hands to the loop
        (a ``LoaderCount``, or ``None``): what state dicts count.

        Args:
            dealing (Mapping): the dealing fields of the batch sampler the pass is for
                (``dealing``, ``batch_size``, ``drop_last_batch``): agreed too.
        """
        if not self._settled:
            self._settle()
        owners = iterating(until=LOADER_ITERATOR)  # the pass's one walk up the call stack
        config = self.config  # its fields read once
        if owners:
            guards.check_not_wrapped_by_accelerate(config.num_replicas, owners)
        epoch = config.epoch
        if self._iterated_epoch == epoch and not self._resuming():
            if self.auto_epoch:
                epoch += 1
                self.set_epoch(epoch)
            elif not self._warned_repeat:
                self._warned_repeat = True
                warnings.warn(
                    f"{type(self).__name__} is iterated again in epoch {epoch} without "
                    "set_epoch(): the order repeats. Call sampler.set_epoch(epoch) before each "
                    "epoch, or pass auto_epoch=True.",
                    UserWarning,
                    stacklevel=user_stacklevel(),
                )
        if self.check_consensus and self._agreed_epoch != epoch:
            if dist.is_available() and dist.is_initialized():
                self._check_consensus(dealing)
            self._agreed_epoch = epoch
        self._pass_epoch, self._settled = epoch, False
        return find_loader_iterator(owners) if owners else None

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (a subclass adopts its configuration of ``epoch``)."""
        raise NotImplementedError
