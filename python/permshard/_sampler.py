"""``ShardedSampler``: DistributedSampler without the O(N)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from numbers import Integral
from typing import Any, Callable, ClassVar, Optional, Union, cast

import torch.distributed as dist
from torch.utils.data import DistributedSampler

from . import _core
from . import _guards as guards
from ._config import ShardConfig, ShardFields, as_int, as_positive, as_u64
from ._core import ALGORITHM as permutation_default
from ._distributed import FIX_RESUME, Agreed, MeshDim, check_consensus, resolve_world
from ._hooks import HasSchedule, WindowPrefetch, dataset_length, prefetches, read_by, wants_epoch
from ._pass import PassLifecycle, SamplerPass
from ._proof import ProofTarget, ProvenStream
from ._report import ShardPlan, build_plan
from ._run import check_schedule, read_beside, written_beside


class ShardedSampler(PassLifecycle, ShardFields, DistributedSampler[int], ProvenStream):
    r"""Sampler that restricts data loading to a subset of the dataset, in O(1) memory.

    A drop-in for :class:`torch.utils.data.DistributedSampler` (and a subclass of it): the
    same arguments, lengths, padding, ``drop_last`` and ``set_epoch``; with
    ``shuffle=False`` the same indices. With ``shuffle=True`` the order is perm-v2, computed
    in Rust per chunk, never ``randperm(N)``: memory does not grow with the dataset.

    Global positions are dealt round-robin (rank ``r`` takes ``r, r + W, ...``), so resuming
    with another number of replicas is exact; see :meth:`state_dict`.

    Args:
        dataset: dataset used for sampling (anything with ``__len__``), or its length.
        num_replicas (int, optional): number of processes participating in distributed
            training. By default, ``world_size`` is retrieved from the current
            distributed group.
        rank (int, optional): rank of the current process within ``num_replicas``. By
            default, ``rank`` is retrieved from the current distributed group.
        shuffle (bool, optional): if ``True`` (default), sampler will shuffle the indices.
        seed (int, optional): random seed used to shuffle the sampler if
            :attr:`shuffle=True`, in ``[0, 2**64 - 1]``. This number should be identical
            across all processes in the distributed group. Default: ``0``.
        drop_last (bool, optional): if ``True``, then the sampler will drop the tail of the
            data to make it evenly divisible across the number of replicas. If ``False``,
            the sampler will add extra indices to make the data evenly divisible across the
            replicas. Default: ``False``.
        auto_epoch (bool, optional): advance the epoch by one each time the sampler is
            iterated again without :meth:`set_epoch`. Default: ``False`` (warn instead).
        check_consensus (bool, optional): when torch.distributed is initialized, check at
            the first iteration of each epoch (one small all-gather) that every rank uses
            the same configuration. It is a collective: every rank of the group must
            iterate the sampler; pass ``False`` for a loader iterated on some ranks only.
            Default: ``True``.
        device_mesh (DeviceMesh, optional): under model parallelism, the mesh whose
            ``mesh_dim`` gives ``num_replicas`` and ``rank`` (instead of passing them).
        mesh_dim (str or tuple of str, optional): the data-parallel dimension name(s) of
            ``device_mesh``; several are flattened (e.g. ``("dp_replicate", "dp_shard")``).
        block_size (int, optional): for datasets bigger than RAM, a locality-aware order
            (block-v2, :class:`~permshard.BlockPermutation`): blocks of this many
            consecutive samples are permuted, and the samples of ``window_blocks`` blocks
            at a time shuffled together. The locality protocol: a dataset with a
            ``prefetch(indices)`` method is told each window's samples of this rank, from
            the main process, as the iteration enters the window (``TokenWindows`` also
            takes ``read_ahead=True`` to keep the kernel's read-ahead). The sampler never
            writes into the dataset.
            Default: ``None`` (no blocks).
        window_blocks (int, optional): blocks shuffled together, with ``block_size``.
        algorithm (str, optional): the keyed permutation of the shuffle (and of the
            blocks): ``"perm-v2"`` (default: an exact shuffled table up to ``2**16``
            samples, 32-bit multiply rounds above, no fixed cost at small n; see
            ``docs/perm-v2.md``) or ``"perm-v1"`` (the order of 0.3 and before). A loaded
            state dict continues with the order it names.
        exclude (sequence of int, optional): sample ids never to read (a takedown, a
            corrupt shard), any order, repeats allowed. The epoch deals the other samples
            in the order they have without exclusions, with DistributedSampler's padding
            over them; :meth:`verify` proves each kept sample once and no excluded one;
            ``locate(excluded)`` is ``[]``. O(|exclude|) memory. A state dict carries the
            ids; :meth:`load_state_dict` into a sampler that excludes more continues
            exactly (the newly excluded are skipped) and refuses one that excludes less.
            Default: ``None``.

    Model parallelism: processes that share a data-parallel rank (tensor, pipeline or
    context parallel peers) pass the same ``rank`` (or the same mesh coordinate) and read
    identical data; the consensus accepts any layout where each rank appears equally often.

    .. warning::
        As with DistributedSampler, call :meth:`set_epoch` at the beginning of each epoch
        **before** creating the DataLoader iterator. Iterating twice in the same epoch
        repeats the order; this sampler warns when that happens (or set ``auto_epoch``).

    Example::

        >>> sampler = ShardedSampler(dataset, shuffle=True) if is_distributed else None
        >>> loader = DataLoader(dataset, shuffle=(sampler is None), sampler=sampler)
        >>> for epoch in range(start_epoch, n_epochs):
        ...     if is_distributed:
        ...         sampler.set_epoch(epoch)
        ...     train(loader)
    """

    config: ShardConfig  # the configuration of the current epoch, as every rank must agree on it

    #: Whether the partition's samples are the indices yielded (a batch sampler can then
    #: take whole batches from it); ``False`` where :meth:`_take` maps them.
    yields_partition_samples: ClassVar[bool] = True

    def __init__(
        self,
        dataset: Union[Sized, int],
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        auto_epoch: bool = False,
        check_consensus: bool = True,
        device_mesh: Any = None,
        mesh_dim: Optional[MeshDim] = None,
        block_size: Optional[int] = None,
        window_blocks: Optional[int] = None,
        algorithm: str = permutation_default,
        exclude: Any = None,
    ) -> None:
        # DistributedSampler.__init__ is not called: it would compute nothing we use.
        # A length given as a numpy integer is kept as the int it is.
        if isinstance(dataset, Integral) and not isinstance(dataset, (bool, int)):
            dataset = int(dataset)
        self.dataset = dataset  # type: ignore[assignment]
        num_replicas, self.rank = resolve_world(num_replicas, rank, device_mesh, mesh_dim)
        self._init_lifecycle(auto_epoch=auto_epoch, check_consensus=check_consensus)
        # The only epoch state: checked here (block_size needs shuffle and window_blocks).
        self.config = ShardConfig(
            dataset_length(dataset),
            num_replicas,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            block_size=0 if block_size is None else as_positive("block_size", block_size),
            window_blocks=0 if window_blocks is None else as_positive("window_blocks", window_blocks),
            permutation=algorithm,
            exclude=exclude,
        )
        self._pass: Optional[SamplerPass] = None
        # The run: its history (a segment per change) and where the next pass starts.
        self._run = _core.Run(self.config.sharding())
        cross_rank = self.check_consensus and dist.is_available() and dist.is_initialized()
        guards.check_not_presharded(dataset, self.num_replicas, cross_rank=cross_rank)

    # -- DistributedSampler's attributes -------------------------------------------------

    def _adopt(self, config: ShardConfig) -> None:
        """Adopts ``config`` (a checked copy with another epoch): another epoch drops a loaded
        resume point, and is iterated afresh."""
        self._epoch_set()
        if config.epoch != self.config.epoch:
            self._run.resume_at(0)
        self.__dict__["config"] = config

    @property
    def num_samples(self) -> int:
        """Items this rank yields in the pass being run, or the next one (the rest of the
        epoch after a resume)."""
        return self._partition(self.epoch, self._pass_start()).num_samples

    @num_samples.setter
    def num_samples(self, value: int) -> None:
        raise AttributeError("num_samples is computed from the dataset length and num_replicas")

    @property
    def total_size(self) -> int:
        """``num_samples * num_replicas``: positions dealt out in the pass being run (or
        the next one)."""
        return self._partition(self.epoch, self._pass_start()).total_size

    @total_size.setter
    def total_size(self, value: int) -> None:
        raise AttributeError("total_size is computed from the dataset length and num_replicas")

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        r"""Sets the epoch for this sampler.

        When :attr:`shuffle=True`, this ensures all replicas use a different random
        ordering for each epoch. Setting the epoch of a loaded state dict keeps its
        resume point.

        Args:
            epoch (int): epoch number, in ``[0, 2**64 - 1]``.
        """
        self._adopt(self.config.replace(epoch=epoch))  # checked there; another epoch drops the resume point

    # -- iteration -------------------------------------------------------------------------

    def _partition(self, epoch: int, start: int) -> _core.Partition:
        # The current epoch's order is built once, by the core's epoch the configuration keeps.
        config = self.config if epoch == self.config.epoch else self.config.replace(epoch=epoch)
        return config.partition(start)

    def _check_dataset_unchanged(self) -> None:
        if isinstance(self.dataset, int):
            return
        n = len(self.dataset)  # type: ignore[arg-type]
        if n != self.n:
            raise ValueError(
                f"the dataset's length changed from {self.n} to {n} since the sampler was "
                "built; build a new ShardedSampler for the new dataset"
            )

    def open_pass(self, **dealing: Any) -> SamplerPass:
        """Starts a pass over this epoch (from a loaded resume point, if any): checks the
        dataset, warns on a repeated epoch, runs the consensus once per epoch. Iterating
        the sampler calls it; a batch sampler built on this sampler calls it to deal the
        items its own way (see :class:`~permshard._pass.SamplerPass`).

        Args:
            **dealing: the batch sampler's dealing fields (``dealing``, ``batch_size``,
                ``drop_last_batch``), which every rank must agree on too.

        Returns:
            SamplerPass: the pass's partition, rank and item counter.
        """
        self._check_dataset_unchanged()
        loader = self._begin_pass(dealing)
        config = self.config  # read once: its fields are the sampler's
        reader = read_by(self.dataset)
        if reader is not None:  # a dataset that checks how it is read, and changes against it
            reader.read_by(self)
        start = self._run.resume_point
        sharding = config.sharding()  # the epoch's order, built once
        part = sharding.partition(start)
        dealt = config.replace(**dealing).sharding() if dealing else sharding
        previous = self._pass.consumed() if self._pass is not None and self._run.is_open else None
        self._run.begin(dealt, start, previous)
        prefetch = None
        told = prefetches(self.dataset) if config.block_size else None
        if told is not None:
            prefetch = WindowPrefetch(told, part, self.rank, sharding.window_len)
        self._pass = SamplerPass(
            config.epoch,
            part,
            self.rank,
            epoch_dependent=wants_epoch(self.dataset),
            prefetch=prefetch,
            loader=loader,
        )
        return self._pass

    # -- the lifecycle's questions (PassLifecycle) ------------------------------------------

    def _pass_started(self) -> bool:
        return self._pass is not None and self._pass.started

    def _resuming(self) -> bool:
        return self._run.resume_point != 0

    def _forget_resume_point(self) -> None:
        self._run.resume_at(0)

    def _check_consensus(self, dealing: Mapping[str, Any]) -> None:
        agreed = [Agreed("start", self._run.resume_point, FIX_RESUME), *self._agreed()]
        config = self.config.replace(**dealing) if dealing else self.config
        check_consensus(config, self.rank, self.dataset, agreed=agreed)

    def _agreed(self) -> list[Agreed]:
        """Values beside the configuration every rank must share (a subclass's own)."""
        return []

    def _take(self, current: SamplerPass) -> Optional[Callable[[int, int], list[int]]]:
        """How this rank's items ``[start, stop)`` of ``current`` are taken, where they are
        not the partition's samples (``None``: they are)."""
        return None

    def __iter__(self) -> Iterator[int]:
        current = self.open_pass()
        return current.items(self._take(current))

    def iter_with_padding(self) -> Iterator[tuple[int, bool]]:
        """Like ``iter(sampler)``, yielding ``(index, is_padding)``.

        ``is_padding`` marks the items that repeat a sample only to make ranks even: drop
        them from metrics for an exact evaluation.
        """
        current = self.open_pass()
        first_padding = current.partition.first_padding(self.rank)
        for k, index in enumerate(current.items(self._take(current))):
            yield index, k >= first_padding

    # -- proofs and plans ------------------------------------------------------------------

    def plan(self) -> ShardPlan:
        """The exact split of the current epoch: lengths, padding and dropped samples."""
        return build_plan(self._current_partition(), self.config, self.rank)

    def locate(self, sample: int, epoch: Optional[int] = None) -> list[tuple[int, int]]:
        """Every ``(rank, local_position)`` that yields ``sample`` in ``epoch``; O(1).

        Empty when the sample is dropped (``drop_last``) or was consumed before a resume;
        several entries when padding repeats it.

        Args:
            sample (int): a dataset index in ``range(len(dataset))``.
            epoch (int, optional): the epoch to look in. Default: the current epoch.
        """
        sample = as_int("sample", sample)
        if not 0 <= sample < self.n:
            raise ValueError(f"sample {sample} is not in range({self.n})")
        if epoch is None:
            start = self._pass_start()
            epoch = self.epoch
        else:
            epoch = as_u64("epoch", epoch)
            start = self._pass_start() if epoch == self.epoch else 0
        return [tuple(hit) for hit in self._partition(epoch, start).locate(sample)]  # type: ignore[misc]

    def _pass_start(self) -> int:
        """First global position of the pass being run (or last run) in this epoch; the
        loaded resume point when no pass has started since."""
        current = self._pass
        if current is not None and current.epoch == self.epoch:
            return current.start
        return self._run.resume_point

    def _current_partition(self) -> _core.Partition:
        """The partition of the pass being run (or the next one)."""
        return self._partition(self.epoch, self._pass_start())

    def next_unhanded_position(self) -> int:
        """The first global position of the epoch that no rank has handed out yet, ranks in
        lockstep: the pass's resume point plus a round of ranks per item this rank yielded
        (prefetched items included). A change of what a position reads
        (``MixedDataset.set_weights``) may start there or later.

        With ``exclude=`` and ``shuffle=False`` the answer is the dataset index (mixture
        position) of that first position: the excluded ones before it are skipped."""
        current = self._pass
        yielded = current.yielded() if current is not None and current.epoch == self.epoch else 0
        part = self._current_partition()
        p = int(part.consumed_after(yielded))
        if self.exclude is None or self.shuffle:
            return p
        return int(part.sample_at(p)) if p < part.n else self.n

    def consumed_after(self, items: int) -> int:
        """Global samples of the epoch consumed once every rank has taken ``items`` items
        of the pass being run (or the next one): the pass's resume point plus ``items``
        rounds of ``num_replicas``. For :meth:`state_dict` from a count of local items.

        Args:
            items (int): items each rank took in this pass, in ``[0, len(self)]``.
        """
        items = as_int("items", items)
        if items < 0:
            raise ValueError(f"items must be in [0, {self.num_samples}] (this pass's length), got {items}")
        return self._current_partition().consumed_after(items)

    def _proof_target(self) -> ProofTarget:
        """The pass being run (from its resume point, if any), dealt round-robin; see
        :class:`~permshard._proof.ProvenStream` for :meth:`verify`,
        :meth:`verify_distributed` and :meth:`verify_in_background`."""
        return ProofTarget(self._current_partition(), self.config, self.rank, self.dataset)

    def dealt(self, **dealing: Any) -> tuple[_core.Partition, ShardConfig]:
        """The pass being run (or the next one) dealt as a batch sampler deals it, and its
        configuration: what the batch sampler yields and proves.

        Args:
            **dealing: the dealing fields of :class:`ShardConfig` (``dealing``,
                ``batch_size``, ``drop_last_batch``).
        """
        config = self.config.replace(**dealing)
        # The same order (built once), dealt another way.
        dealt = self.config.sharding().with_dealing(config.dealing, config.batch_size, config.drop_last_batch)
        return dealt.partition(self._pass_start()), config

    def describe(self) -> dict[str, Any]:
        """The configuration every rank must agree on (without ``rank``)."""
        return self.config.as_dict()

    # -- state -----------------------------------------------------------------------------

    def state_dict(self, consumed_samples: Optional[int] = None) -> dict[str, Any]:
        r"""The resume point, O(1).

        ``consumed`` counts the global positions of the epoch consumed so far, from the
        epoch start. Without an argument every rank is assumed to have consumed what this
        rank's training loop has received (lockstep data parallelism): when a DataLoader
        iterates the sampler, the batches it handed out (its workers prefetch further,
        and those samples are not counted); else what the iterator yielded. torchdata's
        ``StatefulDataLoader`` saves the state itself and stays exact. A wrapper that
        draws batches ahead of the loop (one batch ahead, say) must pass
        ``consumed_samples``: the counter a training loop already keeps.

        Args:
            consumed_samples (int, optional): global samples of the current epoch consumed
                so far, counted from the epoch start across every resume and world size:
                ``step_in_epoch * batch_size * world_size`` in a lockstep loop (Megatron's
                ``consumed_samples`` within the epoch). At least the resume point this
                pass started from and at most the end of the pass.

        Example::

            >>> state = sampler.state_dict(consumed_samples=step * batch_size * world_size)
        """
        start = self._pass_start()
        current = self._pass
        if consumed_samples is None:
            yielded = current.delivered() if current is not None and current.epoch == self.epoch else 0
            consumed = self._partition(self.epoch, start).consumed_after(yielded)
        else:
            consumed = as_int("consumed_samples", consumed_samples)
            end = self._partition(self.epoch, start).end
            if not start <= consumed <= end:
                raise ValueError(
                    f"consumed_samples must be in [{start}, {end}]: at least the resume point "
                    f"this pass started from ({start}) and at most the end of the pass "
                    f"({end}), counted in global samples from the start of epoch "
                    f"{self.epoch}; got {consumed}"
                )
        weight_changes, beside = written_beside(self.dataset)
        # The history closes the last pass at what it consumed (another epoch's, after set_epoch).
        last = current.consumed() if current is not None and current.epoch != self.epoch else None
        state: dict[str, Any] = self._run.state_dict(self.config.sharding(), consumed, last, weight_changes)
        state.update(beside)
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Restores a resume point saved by :meth:`state_dict`, possibly with another
        number of replicas: the remaining positions are re-split so every sample of the
        epoch is yielded exactly once across both runs (plus declared padding).

        Args:
            state_dict (Mapping): a dict saved by :meth:`state_dict` (of this release, 0.1
                or 0.2). Every field is type- and range-checked.
            strict (bool, optional): refuse keys this sampler does not save (``False``
                ignores them). Default: ``True``.
        """
        state_dict, schedule = read_beside(state_dict, self.dataset)
        saved, consumed = ShardConfig.from_state_dict(state_dict, strict=strict)
        run = _core.Run.from_state(state_dict, strict)
        check_schedule(run, schedule)
        # The state's epoch, continued with the order it names; nothing else changes.
        config = self.config.replace(permutation=saved.permutation, epoch=saved.epoch)
        config.check_resumable(saved)
        start = config.resume_point(saved, consumed)  # more exclusions: the first sample not reached
        if schedule is not None:
            cast(HasSchedule, self.dataset).load_schedule(schedule)
        self.__dict__["config"] = config
        run.resume_at(start)
        self._pass = None
        self._run = run
        self._state_loaded()  # every rank must agree on the new resume point

    def __getstate__(self) -> dict[str, Any]:
        # A pass in progress is rebuilt on demand, not pickled; a started pass is accounted
        # for first (a copy does not resume it again).
        if not self._settled:
            self._settle()
        state = dict(self.__dict__)
        state["_pass"] = None
        stop = self._pass.consumed() if self._pass is not None else None
        if stop is not None and self._run.is_open:  # the copy's history ends where this pass is
            state["_run"] = self._run.closed(stop)
        return state

    def __repr__(self) -> str:
        return (
            f"ShardedSampler(n={self.n}, num_replicas={self.num_replicas}, rank={self.rank}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
            f"epoch={self.epoch}, num_samples={self.num_samples})"
        )
