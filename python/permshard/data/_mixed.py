"""``MixedDataset``: several map-style datasets read in a weighted mixture (mix-v3, mix-v2, mix-v1)."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from .._config import as_positive, as_u64
from .._hooks import content_id, stable_fingerprint
from .._mixture import MIX_ALGORITHM, Mixture, MixtureSummary, as_floats
from .._pass import user_stacklevel
from ._schedule import ScheduleChanges

_WEIGHTS_IN = ("samples", "tokens")


def _is_number(word: str) -> bool:
    """Whether a ``--data-path`` word is a weight."""
    try:
        float(word)
    except ValueError:
        return False
    return True


class MixedDataset(Dataset[Any]):
    r"""A map-style dataset over a weighted mixture of ``datasets``: ``ds[p]`` is
    ``datasets[s][i]`` for ``(s, i) = ds.mixture[p]``.

    Nothing is built or cached whatever the length: position ``p`` is mapped on demand
    (see :class:`permshard.Mixture`). Under a :class:`~permshard.ShardedSampler`,
    ``shuffle=False`` reads the mixture in order (every prefix of every rank's steps keeps
    the proportions), ``shuffle=True`` permutes positions per epoch; resume, elastic
    world sizes, ``verify`` and ``locate`` work as for any dataset.

    A batch (``__getitems__``) is fetched source by source through each source's own
    batched path; sources of one kind (e.g. ``TokenWindows`` of one ``seq_len`` and
    document settings) fill one batch together, in position order, so
    ``TokenWindows.collate`` takes it as is.

    Args:
        datasets (sequence of datasets): the sources, each with ``__len__`` and
            ``__getitem__``.
        weights (sequence of float): relative weight of each source.
        num_samples (int, optional): length of the mixture (Megatron's train samples).
            ``None``: the shortest mixture that reads every weighted source in full at
            least once (:meth:`Mixture.covering_length`); sources whose share is larger
            than their size then repeat. Default: ``None``.
        seed (int, optional): key of the per-pass orders within each source.
        stages (sequence of (int, weights), optional): weights from given positions on
            (see :class:`permshard.Mixture`).
        weights_in (str, optional): ``"samples"`` (Megatron's rule: the share of
            samples) or ``"tokens"`` (the share of tokens: each weight is divided by its
            source's ``tokens_per_sample``). Default: ``"samples"``.
        algorithm (str, optional): the mixture map, ``"mix-v3"``, or ``"mix-v2"`` (0.4
            and 0.5's, also named ``"perm-v2"``) or ``"mix-v1"`` (``"perm-v1"``, 0.3's) to
            continue a run started with them (see :class:`~permshard.Mixture`). Default:
            ``"mix-v3"``.
        max_changes (int, optional): how many times :meth:`set_weights` may change the
            weights while the run goes (a table of that many rows, shared with the
            DataLoader workers). Default: ``64``.

    Example::

        >>> ds = MixedDataset([web, code, books], [0.6, 0.3, 0.1], num_samples=10**9)
        >>> loader = DataLoader(ds, batch_size=32, sampler=ShardedSampler(ds))
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[float],
        num_samples: Optional[int] = None,
        seed: int = 0,
        *,
        stages: Sequence[tuple[int, Sequence[float]]] = (),
        weights_in: str = "samples",
        algorithm: str = MIX_ALGORITHM,
        max_changes: int = 64,
    ) -> None:
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
            raise TypeError(f"datasets must be a sequence of datasets, got {type(datasets).__name__}")
        sizes = []
        for s, dataset in enumerate(datasets):
            if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
                raise TypeError(
                    f"datasets[{s}] ({type(dataset).__name__}) must be map-style, with __len__ and "
                    "__getitem__; for an IterableDataset mix upstream of permshard.data.shard_iterable"
                )
            sizes.append(len(dataset))
        self.datasets = list(datasets)
        if weights_in not in _WEIGHTS_IN:
            raise ValueError(f"weights_in must be one of {_WEIGHTS_IN}, got {weights_in!r}")
        self.weights_in = weights_in
        if weights_in == "tokens":
            weights = self._per_sample(weights)
            stages = [(start, self._per_sample(w)) for start, w in stages]
        mixture = Mixture(
            sizes,
            weights,
            1 if num_samples is None else num_samples,
            seed,
            stages=stages,
            algorithm=algorithm,
        )
        if num_samples is None:
            covering = mixture.covering_length()
            if covering >= 2**64 - 1:
                raise ValueError(
                    "no mixture shorter than 2**64 reads every weighted source in full: pass num_samples"
                )
            mixture = Mixture(sizes, weights, covering, seed, stages=stages, algorithm=algorithm)
        self.mixture = mixture
        # The sources as one dataset (see __getitems__), or False: built here, so that
        # DataLoader workers forked from this process start with it (a spawned one, or an
        # unpickled copy, builds it again at its first batch).
        self._joined: Any = self._join()
        self._changes = ScheduleChanges(mixture, as_positive("max_changes", max_changes))
        self._reader: Any = None  # the sampler reading this dataset, told by read_by()

    def _per_sample(self, weights: Sequence[float]) -> list[float]:
        """Token shares as sample shares: each weight divided by its source's tokens."""
        out = []
        floats = as_floats(weights)
        if len(floats) != len(self.datasets):  # zip below would drop the extra ones
            raise ValueError(
                f"{len(self.datasets)} datasets but {len(floats)} weights: give one weight per source"
            )
        for s, (w, dataset) in enumerate(zip(floats, self.datasets)):
            tokens = getattr(dataset, "tokens_per_sample", None)
            if not isinstance(tokens, (int, float)) or isinstance(tokens, bool) or tokens <= 0:
                raise TypeError(
                    f'weights_in="tokens" needs each source\'s tokens_per_sample (a positive number); '
                    f"datasets[{s}] ({type(dataset).__name__}) has none: set the attribute, or use "
                    'weights_in="samples"'
                )
            out.append(w / float(tokens))
        return out

    @classmethod
    def from_data_path(
        cls,
        data_path: Union[str, Sequence[Union[str, float]]],
        seq_len: int,
        num_samples: Optional[int] = None,
        seed: int = 0,
        *,
        weights_in: str = "samples",
        algorithm: str = MIX_ALGORITHM,
        stages: Sequence[tuple[int, Sequence[float]]] = (),
        **windows: Any,
    ) -> MixedDataset:
        """Megatron's ``--data-path w1 p1 w2 p2 ...`` (or ``p1 p2 ...``: weights in
        proportion to each prefix's samples, every sample once) as a blend of
        :class:`~permshard.data.TokenWindows`.

        Args:
            data_path (str or sequence): the ``--data-path`` words, as one string or a list.
            seq_len (int): Megatron's ``--seq-length``.
            num_samples (int, optional): Megatron's train samples (``None``: see above).
            seed (int, optional): key of the per-pass orders.
            weights_in (str, optional): ``"samples"`` or ``"tokens"``.
            algorithm (str, optional): ``"mix-v3"``, ``"mix-v2"`` or ``"mix-v1"``, as in
                :class:`MixedDataset`.
            stages (sequence of (int, sequence of float), optional): the weights from
                given positions on, as in :class:`MixedDataset`. Default: none.
            **windows: passed to every ``TokenWindows`` (``split``, ``part``,
                ``documents``, ``eod_id``, ``reset_position_ids``, ...).

        Example::

            >>> train = MixedDataset.from_data_path("0.3 web 0.7 code", 2048, 10**8,
            ...                                     split="969,30,1", part="train")
        """
        from ._tokens import TokenWindows

        words = data_path.split() if isinstance(data_path, str) else [str(w) for w in data_path]
        if not words:
            raise ValueError("data_path is empty: give 'w1 prefix1 w2 prefix2 ...' or 'prefix1 prefix2 ...'")
        weights: Optional[list[float]] = None
        prefixes = words
        if _is_number(words[0]):  # weighted, as Megatron reads it: "w1 prefix1 w2 prefix2 ..."
            if len(words) % 2 or not all(_is_number(w) for w in words[0::2]):
                raise ValueError(
                    f"data_path {' '.join(words)!r} starts with a weight, so it must be pairs "
                    f"'weight prefix' ({len(words)} words given): give a weight before every "
                    "prefix ('0.3 web 0.7 code'), or no weights at all ('web code')"
                )
            weights = [float(w) for w in words[0::2]]
            prefixes = words[1::2]
        # Each prefix's .idx is validated in Rust with the GIL released: in parallel.
        with ThreadPoolExecutor(max_workers=min(len(prefixes), os.cpu_count() or 1)) as pool:
            sources = list(pool.map(lambda p: TokenWindows(p, seq_len, **windows), prefixes))
        if weights is None:
            weights = [float(len(s)) for s in sources]
            weights_in = "samples"
        return cls(
            sources, weights, num_samples, seed, stages=stages, weights_in=weights_in, algorithm=algorithm
        )

    def fingerprint(self) -> str:
        """An identity of this blend, the same in every process and run over the same
        sources: each source's own fingerprint (its length where it has none), the seed and
        the algorithm (the weights may change at run time: the state's schedule holds
        them). A sampler's state dict records it; a resume over another blend is refused."""
        return self._fingerprint_as(self.mixture.algorithm)

    def _fingerprint_as(self, algorithm: str) -> str:
        """:meth:`fingerprint` of this blend read by the mixture map ``algorithm``."""
        sources = [stable_fingerprint(d) or len(d) for d in self.datasets]
        return content_id("MixedDataset", sources, self.mixture.sizes, self.mixture.seed, algorithm)

    def fingerprint_hint(self, saved: str) -> Optional[str]:
        """Why a state's fingerprint ``saved`` is not this blend's, where it is this blend
        under another mixture map (a run of 0.4 or 0.5 read mix-v2): the fix, else ``None``.

        Args:
            saved (str): the fingerprint a state dict recorded.
        """
        for algorithm in ("mix-v3", "mix-v2", "mix-v1"):
            if algorithm != self.mixture.algorithm and self._fingerprint_as(algorithm) == saved:
                return (
                    f"read by the mixture map {algorithm!r}, and this one reads {self.mixture.algorithm!r}: build it "
                    f"with algorithm={algorithm!r} to resume the run (a run started before 0.6 reads "
                    "'mix-v2', the default then)"
                )
        return None

    def __len__(self) -> int:
        return len(self.mixture)

    def summary(self) -> MixtureSummary:
        """What the mixture reads of each source per stage and over the run (run-time
        changes included), tokens from each source's ``tokens_per_sample``; see
        :meth:`permshard.Mixture.summary`."""
        tokens = [getattr(d, "tokens_per_sample", None) for d in self.datasets]
        return self._current().summary([t if isinstance(t, int) else None for t in tokens])

    # -- weights changed while the run goes ------------------------------------------------

    def set_weights(self, weights: Sequence[float], *, start: int) -> None:
        """From mixture position ``start`` on, read the sources in proportion to ``weights``:
        the stream then equals that of a ``MixedDataset`` built with
        ``stages=[..., (start, weights)]``, item for item, in the main process and in every
        DataLoader worker (any start method, persistent workers included: the changes
        live in a table shared with them). A source's passes continue across the change.

        Call it on every rank with the same arguments, like ``set_epoch``: under
        ``torch.distributed`` the ranks compare them (a ``ShardingError`` on every rank
        if one differs). ``start`` must be a position the sampler reading this dataset
        (``ShardedSampler(ds, shuffle=False)``) has not handed out on any rank yet. The
        sampler's ``state_dict()`` carries the changes; its ``load_state_dict`` restores
        them into a dataset built with the run's first arguments.

        Args:
            weights (sequence of float): one weight per source (in ``weights_in``'s unit).
            start (int): the first mixture position read with them.

        Raises:
            ValueError: bad weights, a ``start`` already handed out or not after the last
                change, a shuffled sampler (the stages would follow permuted positions,
                not training time: use ``shuffle=False``), or ``max_changes`` used up.

        Example::

            >>> ds = MixedDataset([web, code], [0.7, 0.3], num_samples=10_000)
            >>> ds.set_weights([0.5, 0.5], start=4_000)
            >>> ds.mixture.stages
            ((4000, (0.5, 0.5)),)
        """
        start = as_u64("start", start)
        if self.weights_in == "tokens":
            weights = self._per_sample(weights)
        floats = as_floats(weights)
        self._check_reader(start)
        self._changes.check_agreed(start, floats)
        self.mixture = self._changes.append(start, floats)

    def read_by(self, sampler: Any) -> None:
        """Told by a ``ShardedSampler`` as it starts a pass over this dataset (the protocol
        :meth:`set_weights` checks ``start`` against; nothing is kept in workers). A
        shuffled sampler over a changed schedule is refused; one that reads positions at
        random (not in blocks) is warned when the mixture's tables outgrow its store
        (:attr:`Mixture.table_bytes`).

        Args:
            sampler (ShardedSampler): the sampler reading this dataset.
        """
        if sampler.shuffle and self._changes.count:
            raise ValueError(
                "this MixedDataset's weights were changed at run time (set_weights), which follows "
                "mixture positions; a shuffled sampler reads them out of order. Use "
                "ShardedSampler(ds, shuffle=False)"
            )
        self._reader = weakref.ref(sampler)
        if sampler.shuffle and not sampler.block_size:
            self._check_tables_fit()

    def _check_tables_fit(self) -> None:
        """Warns when random positions would rebuild mix-v2's tables (they outgrow the
        store), with the three ways out. mix-v3 rebuilds only tables of at most 512 samples,
        which cost what mix-v1's walk costs."""
        need, store = self.mixture.table_bytes, self.mixture.table_store_bytes
        if need <= store or self.mixture.algorithm != "mix-v2":
            return
        mib = -(-need // 2**20)
        warnings.warn(
            f"a shuffled sampler reads this MixedDataset at random positions, and the shuffle "
            f"tables of its small sources' passes take {mib:,} MiB, more than the "
            f"{store // 2**20:,} MiB its mixture keeps: most positions would rebuild a table "
            "(O(source size) each, many times slower than reading in order). Set "
            f"PERMSHARD_MIX_TABLE_MIB={mib} before building the dataset (each DataLoader worker "
            "keeps its own tables), shuffle in blocks (ShardedSampler(..., block_size=...)), "
            "or start a new run with mix-v3 (the default of new mixtures: no cliff), "
            "MixedDataset(...) or MixedDataset.from_data_path(...) without algorithm= "
            "(the sampler's own algorithm= does not change the mixture's)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )

    def _check_reader(self, start: int) -> None:
        sampler = self._reader() if self._reader is not None else None
        if sampler is None:
            return
        if sampler.shuffle:
            raise ValueError(
                "set_weights changes the weights at a mixture position, and this dataset is read by a "
                "shuffled sampler (positions permuted: the change would not follow training time). "
                "Use ShardedSampler(ds, shuffle=False)"
            )
        earliest = sampler.next_unhanded_position()
        if start < earliest:
            raise ValueError(
                f"start={start} is a mixture position the sampler has already handed out (or its "
                f"round of ranks has); the earliest allowed now is {earliest}"
            )

    def schedule_state(self) -> Optional[dict[str, Any]]:
        """The run-time changes, for a sampler's state dict (``None`` without any)."""
        return self._changes.state()

    def load_schedule(self, state: Mapping[str, Any]) -> None:
        """Restores the changes of :meth:`schedule_state` (a state of this dataset's first
        arguments only).

        Args:
            state (Mapping): ``state_dict["schedule"]`` of a sampler over this dataset.
        """
        self.mixture = self._changes.load(state)

    def mixture_of(self, schedule: Optional[Mapping[str, Any]]) -> Mixture:
        """The mixture a run over this dataset read: its first arguments with the weight
        changes of ``schedule`` (a sampler state's ``"schedule"``; ``None``: none). This
        dataset is left as it is.

        Args:
            schedule (Mapping, optional): ``state_dict.get("schedule")``.
        """
        return self._changes.restored(schedule)

    def _current(self) -> Mixture:
        """The mixture with every change made so far (a worker sees them here)."""
        if self._changes.changed_since(self.mixture):
            self.mixture = self._changes.mixture()
        return self.mixture

    def __getitem__(self, position: int) -> Any:
        source, index = self._current()[position]
        return self.datasets[source][index]

    def sources_of(self, positions: Sequence[int]) -> npt.NDArray[np.int64]:
        """The source each of ``positions`` reads, weight changes included (Megatron's
        ``dataset_id``)."""
        return self._current().at_positions(list(positions))[0]

    def __getitems__(self, positions: list[int]) -> Any:
        """A batch, through the sources' batched paths.

        Sources of one :attr:`~permshard.data.TokenWindows.batch_layout` are read as one
        concatenation (:meth:`~permshard.data.TokenWindows.concatenate`): one call, and the
        batch its ``__getitems__`` returns. Other sources are fetched source by source
        (their ``__getitems__`` where they have one) into a list."""
        sources, indices = self._current().at_positions(positions)
        if self._joined is None:
            self._joined = self._join()
        if self._joined is not False:
            joined, first_window = self._joined
            return joined.__getitems__(first_window[sources] + indices)
        order = np.argsort(sources, kind="stable")
        cuts = np.flatnonzero(np.diff(sources[order])) + 1
        out: list[Any] = [None] * len(positions)
        for rows in np.split(order, cuts) if order.size else []:
            dataset, wanted = self.datasets[int(sources[rows[0]])], indices[rows].tolist()
            getitems = getattr(dataset, "__getitems__", None)
            items = getitems(wanted) if getitems is not None else [dataset[i] for i in wanted]
            for k, item in zip(rows.tolist(), items):
                out[k] = item
        return out

    def _join(self) -> Any:
        """``(concatenation, first window of each source)`` when the sources share one
        batch layout, else False."""
        layouts = {getattr(d, "batch_layout", None) for d in self.datasets}
        if None in layouts or len(layouts) > 1:
            return False
        first_window = np.cumsum((0, *self.mixture.sizes[:-1]), dtype=np.int64)  # the sources' lengths
        return type(self.datasets[0]).concatenate(self.datasets), first_window

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_joined"] = None  # rebuilt where it is used
        state["_reader"] = None  # the main process's sampler
        return state

    def __repr__(self) -> str:
        return f"MixedDataset({len(self.datasets)} datasets, {self.mixture!r})"
