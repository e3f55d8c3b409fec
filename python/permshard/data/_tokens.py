"""``TokenWindows``: fixed-length training windows over token files (flat, or Megatron
indexed datasets with their splits and documents), memory-mapped: the windows, their
per-epoch shift and their batches. The files, and where a window comes from, are
:mod:`~permshard.data._token_files`'s, the document masks :mod:`~permshard.data._documents`'."""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from .. import _core
from .._config import as_int, as_positive, as_u64
from .._hooks import content_id, epoch_of
from ._documents import DocumentBatch, collate_items
from ._indexed import distinct
from ._rows import page_locked
from ._token_files import PathLike, WindowProvenance

#: A file no batch of this process has read yet, as the gather is handed it: no bytes.
_UNREAD: npt.NDArray[np.uint8] = np.empty(0, dtype=np.uint8)


class WindowBatch(list[torch.Tensor]):
    """The windows of one batch: views of one ``(batch, seq_len + 1)`` int64 tensor,
    kept as ``.tensor`` so :meth:`TokenWindows.collate` needs no copy. A plain list to
    everything else (the default collation stacks it).

    Args:
        tensor (torch.Tensor): the ``(batch, seq_len + 1)`` int64 windows.

    Example::

        >>> batch = windows.__getitems__([4, 9, 2])
        >>> batch.tensor.shape, len(batch), TokenWindows.collate(batch) is batch.tensor
        (torch.Size([3, 1025]), 3, True)
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__(tensor.unbind(0))
        self.tensor = tensor


class TokenWindows(WindowProvenance, Dataset[Any]):
    r"""Windows of ``seq_len + 1`` tokens over token files: flat ones, or Megatron
    indexed datasets (``prefix.bin`` + ``prefix.idx``) with their splits and documents.

    A flat file is a headerless array of token ids (nanoGPT ``.bin``, a numpy ``tofile``).
    A Megatron prefix (``path/name``, or ``path/name.bin`` with ``name.idx`` beside it) is
    read through its validated ``.idx`` (see :class:`~permshard.data.MegatronIndex`): the
    dtype comes from it, ``split``/``part`` keep the sequences Megatron assigns to that
    part, and the document boundaries are known. Everything is a read-only memmap.

    Item ``i`` is an int64 tensor of ``seq_len + 1`` consecutive tokens: ``item[:-1]`` the
    inputs, ``item[1:]`` the targets. Windows never cross a file (or a part's) boundary;
    consecutive windows share one token, as Megatron's GPT samples do. A file of ``m``
    tokens holds ``(m - 1) // seq_len`` windows. With ``shift_per_epoch=True`` every
    window boundary moves by a per-epoch offset in ``[0, seq_len)``
    (``(m - seq_len) // seq_len`` windows per file); the epoch comes with each index from
    permshard's samplers, so DataLoader workers, persistent ones included, follow it.

    With ``documents=True`` an item is a dict, with Megatron's semantics (its
    ``GPTDataset`` and ``_get_ltor_masks_and_position_ids``): ``tokens`` and ``labels``
    (``seq_len`` each), ``loss_mask`` (0 on EOD inputs with ``eod_mask_loss``),
    ``position_ids`` (restarting at each document with ``reset_position_ids``) and
    ``cu_seqlens``: the boundaries of the attention segments, the documents with
    ``reset_attention_mask``, else the whole window. Document boundaries come from EOD
    tokens when ``eod_id`` is given (exactly Megatron's rule), else from the ``.idx``. A
    dense ``seq_len x seq_len`` mask only with ``attention_mask=True``. :meth:`collate`
    batches them with flattened ``cu_seqlens`` (varlen attention's input).

    Args:
        paths (str or list of str): token files or Megatron prefixes, in order.
        seq_len (int): tokens per training sequence (the window holds ``seq_len + 1``).
        dtype (numpy dtype, optional): token type. ``None``: the ``.idx``'s, and
            ``numpy.uint16`` for flat files; a dtype that disagrees with an ``.idx`` is an
            error. Default: ``None``.
        split (str, optional): Megatron's train/valid/test split by sequences, e.g.
            ``"969,30,1"`` (Megatron prefixes only). Default: ``None`` (every sequence).
        part (str, optional): ``"train"``, ``"valid"`` or ``"test"``. Default: ``"train"``.
        documents (bool, optional): yield dicts with masks and positions (see above).
            Default: ``False``.
        eod_id (int, optional): the end-of-document token id. Default: ``None``.
        reset_position_ids (bool, optional): positions restart at every document.
        reset_attention_mask (bool, optional): no attention across documents.
        eod_mask_loss (bool, optional): no loss on EOD input positions (needs ``eod_id``).
        attention_mask (bool, optional): also return the dense mask (True = masked).
        shift_per_epoch (bool, optional): new window boundaries each epoch.
            Default: ``False``.
        seed (int, optional): key of the per-epoch shifts. Default: ``0``.
        pin_memory (bool, optional): gather each batch of ``__getitems__`` straight into
            a page-locked tensor when fetched in the main process (``num_workers=0``) and
            CUDA is available, so ``.to("cuda", non_blocking=True)`` needs no staging copy
            (and a DataLoader's ``pin_memory=True`` keeps it as is). Default: ``False``.
        read_ahead (bool, optional): keep the kernel's read-ahead on the memmaps, for
            reads that come in blocks (``ShardedSampler(..., block_size=...)``); without
            it they ask for random access (``MADV_RANDOM``: globally shuffled windows
            would waste read-ahead I/O and page cache). Default: ``False``.

    Example::

        >>> ds = TokenWindows(["train_000.bin", "train_001.bin"], seq_len=1024)
        >>> sampler = ShardedSampler(ds)
        >>> loader = DataLoader(ds, batch_sampler=ShardedBatchSampler(sampler, 64),
        ...                     collate_fn=TokenWindows.collate)
        >>> for batch in loader:  # (64, 1025) int64
        ...     x, y = batch[:, :-1], batch[:, 1:]
        >>> docs = TokenWindows("corpus/web_text_document", 2048, split="969,30,1",
        ...                     documents=True, eod_id=0, reset_position_ids=True,
        ...                     reset_attention_mask=True, eod_mask_loss=True)
        >>> batch = TokenWindows.collate(docs.__getitems__([0, 1]))  # tokens (2, 2048), cu_seqlens
    """

    #: ``__getitems__`` takes an int64 array of indices: batch samplers hand it arrays.
    accepts_arrays = True

    def __init__(
        self,
        paths: Union[PathLike, Sequence[PathLike]],
        seq_len: int,
        dtype: Optional[npt.DTypeLike] = None,
        *,
        split: Optional[Union[str, Sequence[float]]] = None,
        part: str = "train",
        documents: bool = False,
        eod_id: Optional[int] = None,
        reset_position_ids: bool = False,
        reset_attention_mask: bool = False,
        eod_mask_loss: bool = False,
        attention_mask: bool = False,
        shift_per_epoch: bool = False,
        seed: int = 0,
        pin_memory: bool = False,
        read_ahead: bool = False,
    ) -> None:
        self.pin_memory = bool(pin_memory)
        self.read_ahead = bool(read_ahead)
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.seq_len = as_positive("seq_len", seq_len)
        self.split, self.part = split, part
        self._read_files(paths, dtype, split, part)
        self.documents = bool(documents)
        self.eod_id = None if eod_id is None else as_int("eod_id", eod_id)
        self.reset_position_ids = bool(reset_position_ids)
        self.reset_attention_mask = bool(reset_attention_mask)
        self.eod_mask_loss = bool(eod_mask_loss)
        self.attention_mask = bool(attention_mask)
        self._check_document_options()
        self.shift_per_epoch = bool(shift_per_epoch)
        self.seed = as_u64("seed", seed)
        self.shift = 0
        self._shifts: dict[int, int] = {}
        # Window i of a file is tokens [s + i·L, s + i·L + L + 1): it fits while
        # s + i·L + L + 1 <= m. Unshifted (s = 0) that is (m - 1) // L windows; shifted,
        # counted for the largest shift s = L - 1 so the count never depends on it.
        slack = self.seq_len - 1 if self.shift_per_epoch else 0
        counts = [max(0, (m - 1 - slack) // self.seq_len) for m in self.sizes]
        for path, m, c, ix in zip(self.paths, self.sizes, counts, self.indexes):
            if c == 0:
                extra = f" plus seq_len - 1 = {slack} for shifted epochs" if slack else ""
                what = path if ix is None or split is None else f"the {part!r} part of {ix.prefix}"
                raise ValueError(
                    f"{what} holds {m} tokens, fewer than one window of seq_len + 1 = "
                    f"{self.seq_len + 1} tokens{extra}; use a smaller seq_len or leave the "
                    "file out"
                )
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.bases = np.asarray(self.first_tokens, dtype=np.int64)
        self._views: Optional[list[npt.NDArray[Any]]] = None

    def _check_document_options(self) -> None:
        flags = {
            "reset_position_ids": self.reset_position_ids,
            "reset_attention_mask": self.reset_attention_mask,
            "eod_mask_loss": self.eod_mask_loss,
            "attention_mask": self.attention_mask,
        }
        if not self.documents:
            on = [name for name, value in flags.items() if value]
            if on:
                raise ValueError(f"{', '.join(on)} need documents=True (the samples become dicts)")
            return
        if self.eod_mask_loss and self.eod_id is None:
            raise ValueError("eod_mask_loss=True needs eod_id= (the end-of-document token id)")
        flat = next((p for p, ix in zip(self.paths, self.indexes) if ix is None), None)
        if self.eod_id is None and flat is not None:
            raise ValueError(
                f"documents=True needs document boundaries, but {flat} is a flat token file with no "
                ".idx: pass eod_id= to find them from EOD tokens"
            )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_maps"] = state["_views"] = None  # re-opened in the worker
        state["_coarse"] = {}
        return state

    @property
    def epoch_dependent(self) -> bool:
        """True with ``shift_per_epoch``: permshard's samplers then yield
        :class:`~permshard.EpochIndex` values, so every DataLoader worker
        (persistent ones included) cuts the windows of the epoch being sampled."""
        return self.shift_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Moves window boundaries for ``epoch`` when ``shift_per_epoch=True``.

        This process only: DataLoader workers keep the copy they started with. Indices
        from permshard's samplers carry their epoch, which wins over this setting.

        Args:
            epoch (int): the epoch, in ``[0, 2**64 - 1]``.
        """
        self.shift = self.shift_for(as_u64("epoch", epoch))

    def shift_for(self, epoch: int) -> int:
        """The token offset of every window boundary in ``epoch`` (0 without shifting).

        Args:
            epoch (int): the epoch.
        """
        if not self.shift_per_epoch:
            return 0
        shift = self._shifts.get(epoch)
        if shift is None:
            from .._permutation import Permutation

            # perm-v1, as in 0.3: the shift is in no state dict to name another order.
            shift = Permutation(self.seq_len, seed=self.seed, epoch=epoch, algorithm="perm-v1")[0]
            if len(self._shifts) >= 64:
                self._shifts.clear()
            self._shifts[epoch] = shift
        return shift

    def _shift_of(self, indices: Any) -> int:
        """The shift for ``indices``: their epoch's when they carry one (EpochIndex)."""
        epoch = epoch_of(indices)
        return self.shift if epoch is None else self.shift_for(epoch)

    def fingerprint(self) -> str:
        """An identity of these windows, the same in every process and run over the same
        files: the files' names (not their folders) and sizes, and the windowing options.
        A sampler's state dict records it; a resume over other files is refused."""
        return content_id(
            "TokenWindows",
            [os.path.basename(p) for p in self.paths],
            [int(m) for m in self.sizes],
            self.seq_len,
            self.split,
            self.part,
            self.documents,
            self.shift_per_epoch,
            self.seed,
        )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _offsets(
        self, idx: npt.NDArray[np.int64], indices: Any
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
        """``(files, token offsets in the file)`` of windows ``idx`` (checked, >= 0)."""
        files = np.searchsorted(self.starts, idx, side="right") - 1
        offsets = self.bases[files] + self._shift_of(indices) + (idx - self.starts[files]) * self.seq_len
        return files, offsets

    def _check(self, index: int) -> int:
        i = as_int("index", index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"window index {as_int('index', index)} out of range for {n} windows")
        return i

    def __getitem__(self, index: int) -> Any:
        if self.documents:
            i = self._check(index)
            keep = index if epoch_of(index) is not None else i
            return self.__getitems__([keep])[0]
        f, offset = self._located(index, None)
        window = self._mapped(f)[offset : offset + self.seq_len + 1]
        return torch.from_numpy(window.astype(np.int64))

    def __getitems__(self, indices: Sequence[int]) -> Union[WindowBatch, DocumentBatch]:
        """A whole batch with one vectorised gather per file touched.

        Returns a :class:`WindowBatch`: a sequence of the windows (default collation
        stacks them) that also holds the stacked ``(len(indices), seq_len + 1)`` tensor,
        which :meth:`collate` hands over without a copy. With ``documents=True``, a
        :class:`~permshard.data.DocumentBatch` computed for the whole batch at once."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        # The windows, cast to int64 in Rust straight into the batch tensor (page-locked
        # when asked); an index out of range is an IndexError.
        batch = torch.empty(
            (idx.size, self.seq_len + 1),
            dtype=torch.int64,
            pin_memory=page_locked(self.pin_memory and not self.documents),
        )
        _core.gather_windows(
            self._token_bytes(idx),
            *self._token_type(),
            *self._layout(),
            self._shift_of(indices),
            self.seq_len,
            idx,
            batch.numpy().reshape(-1),
            torch.get_num_threads(),
        )
        if not self.documents:
            return WindowBatch(batch)
        text = batch.numpy()
        if self.eod_id is not None:
            # Megatron's rule: a document starts after every EOD input token.
            starts = np.zeros((idx.size, self.seq_len), dtype=np.bool_)
            starts[:, 1:] = text[:, : self.seq_len - 1] == self.eod_id
        else:
            n = len(self)
            starts = self._idx_starts(*self._offsets(np.where(idx < 0, idx + n, idx), indices))
        return DocumentBatch(
            text,
            starts,
            eod_id=self.eod_id,
            reset_position_ids=self.reset_position_ids,
            reset_attention_mask=self.reset_attention_mask,
            eod_mask_loss=self.eod_mask_loss,
            attention_mask=self.attention_mask,
        )

    @classmethod
    def concatenate(cls, parts: Sequence[TokenWindows]) -> TokenWindows:
        """One dataset over the files of ``parts``, in order: window ``i`` of ``parts[k]``
        is window ``sum(len(p) for p in parts[:k]) + i``. Nothing is read or copied; the
        parts must share :attr:`batch_layout`.

        A blend of such parts reads each batch with one call (see
        :class:`~permshard.data.MixedDataset`).

        Args:
            parts (sequence of TokenWindows): datasets of one ``batch_layout``.
        """
        first = parts[0]
        layout = first.batch_layout
        for k, part in enumerate(parts):
            if part.batch_layout != layout:
                raise ValueError(
                    f"parts[{k}] cuts windows differently from parts[0] (seq_len, dtype, document or "
                    "shift settings): only parts of one batch_layout concatenate"
                )
        out = copy.copy(first)
        out.paths = [path for part in parts for path in part.paths]
        out.indexes = [ix for part in parts for ix in part.indexes]
        out.sequence_ranges = [r for part in parts for r in part.sequence_ranges]
        out.first_tokens = [t for part in parts for t in part.first_tokens]
        out.sizes = [m for part in parts for m in part.sizes]
        # Every part's window counts per file, in one pass over all the parts' starts (a
        # blend of 10,000 prefixes): the differences, less those across two parts.
        lengths = np.fromiter((len(part.starts) for part in parts), dtype=np.int64, count=len(parts))
        counts = np.delete(
            np.diff(np.concatenate([part.starts for part in parts])), np.cumsum(lengths)[:-1] - 1
        )
        out.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        out.bases = np.asarray(out.first_tokens, dtype=np.int64)
        out._maps = out._views = None
        out._coarse, out._shifts = {}, {}
        return out

    @property
    def batch_layout(self) -> tuple[Any, ...]:
        """How this dataset cuts and shapes its samples; datasets with one layout
        :meth:`concatenate`."""
        return (
            type(self),
            self.seq_len,
            self.dtype,
            self.shift_per_epoch,
            self.seed,
            self.documents,
            self.eod_id,
            self.reset_position_ids,
            self.reset_attention_mask,
            self.eod_mask_loss,
            self.attention_mask,
        )

    def _token_bytes(self, idx: npt.NDArray[np.int64]) -> list[npt.NDArray[np.uint8]]:
        """Per file, its tokens' bytes as the gather reads them (a flat uint8 view of its
        map), the files of windows ``idx`` mapped first; a file no batch has read yet is
        an empty array (the gather reads only the windows asked for)."""
        if self._views is None:
            self._views = [_UNREAD] * len(self.paths)
        files = np.searchsorted(self.starts, idx[(idx >= 0) & (idx < len(self))], side="right") - 1
        for f in distinct(files).tolist():
            if self._views[f] is _UNREAD:
                self._views[f] = self._mapped(f).view(np.ndarray).view(np.uint8)
        return self._views

    def _token_type(self) -> tuple[int, bool, bool]:
        """``(bytes, signed, big-endian)`` of a token, as the gather reads them."""
        dtype = self.dtype
        big = dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
        return dtype.itemsize, dtype.kind == "i", big

    def _layout(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """``(starts, bases)`` as the gather reads them: file ``f`` holds windows
        ``[starts[f], starts[f + 1])`` from token ``bases[f]`` on."""
        return self.starts.astype(np.uint64), self.bases.astype(np.uint64)

    @property
    def tokens_per_sample(self) -> int:
        """Tokens trained on per sample (``seq_len``): what ``weights_in="tokens"`` of
        :class:`~permshard.data.MixedDataset` divides by."""
        return self.seq_len

    @staticmethod
    def collate(batch: Sequence[Any]) -> Any:
        """``collate_fn`` for a DataLoader: the batch tensor of :meth:`__getitems__` as is
        (no copy), or the stacked windows of per-item fetches; with ``documents=True`` one
        dict of batch tensors (see :meth:`DocumentBatch.collate
        <permshard.data.DocumentBatch.collate>`).

        Args:
            batch: what the DataLoader fetched (one ``WindowBatch`` or ``DocumentBatch``
                from ``__getitems__``, else a list of per-item windows or dicts).
        """
        if isinstance(batch, WindowBatch):
            return batch.tensor
        if isinstance(batch, DocumentBatch):
            return batch.collate()
        items = list(batch)
        if items and isinstance(items[0], dict):
            return collate_items(items)
        return torch.stack(items)

    def __repr__(self) -> str:
        kind = "Megatron prefixes" if all(ix is not None for ix in self.indexes) else "files"
        part = f", split={self.split!r}, part={self.part!r}" if self.split is not None else ""
        docs = ", documents=True" if self.documents else ""
        return (
            f"TokenWindows({len(self.paths)} {kind}, {sum(self.sizes):,} tokens, seq_len="
            f"{self.seq_len}, {len(self):,} windows, dtype={self.dtype}{part}{docs})"
        )
