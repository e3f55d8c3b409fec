"""Documents into training samples: ``DocumentBatch`` (Megatron's masks and position ids,
and varlen ``cu_seqlens``, computed for a whole batch at once, no Python loop per item) and
``PackedDataset`` (ConstantLengthDataset done right: shard documents, then pack)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable, Optional, Union, overload

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import IterableDataset

from .._config import as_int, as_positive, as_u64
from ._iterable import consumer, rank_and_world


class DocumentBatch(Sequence[dict[str, torch.Tensor]]):
    """The samples of one batch, held as batch arrays.

    Built by :meth:`TokenWindows.__getitems__ <permshard.data.TokenWindows.__getitems__>`
    with ``documents=True``. :meth:`collate` (what ``TokenWindows.collate`` calls) hands
    the batch over as one dict of tensors without a copy per item; indexing gives one
    sample's dict (its own ``cu_seqlens``).

    Args:
        text (numpy int64 array): ``(batch, seq_len + 1)`` token windows.
        doc_starts (numpy bool array): ``(batch, seq_len)``, True where a document starts
            at that input position (column 0 is ignored: every row starts a segment).
        eod_id (int or None): the end-of-document token, for ``eod_mask_loss``.
        reset_position_ids, reset_attention_mask, eod_mask_loss, attention_mask (bool):
            as :class:`~permshard.data.TokenWindows`.

    Example::

        >>> docs = TokenWindows("corpus/web_text_document", 2048, documents=True, eod_id=0,
        ...                     reset_attention_mask=True)
        >>> batch = docs.__getitems__([3, 17])
        >>> batch.collate()["cu_seqlens"]  # the documents of both windows, end to end
        tensor([   0,  395,  553,  930, 1477, 1757, 2048, 2181, 2241, 2510, 2728, 2965,
                3438, 3819, 3879, 4096], dtype=torch.int32)
    """

    def __init__(
        self,
        text: npt.NDArray[np.int64],
        doc_starts: npt.NDArray[np.bool_],
        *,
        eod_id: Union[int, None],
        reset_position_ids: bool,
        reset_attention_mask: bool,
        eod_mask_loss: bool,
        attention_mask: bool,
    ) -> None:
        rows, seq = doc_starts.shape
        self.tokens = torch.from_numpy(text[:, :-1])
        self.labels = torch.from_numpy(text[:, 1:])
        loss_mask = np.ones((rows, seq), dtype=np.float32)
        if eod_mask_loss:
            loss_mask[text[:, :-1] == eod_id] = 0.0
        self.loss_mask = torch.from_numpy(loss_mask)
        columns = np.arange(seq, dtype=np.int64)
        if reset_position_ids:
            # Each position minus the start of its document: the last start at or before it.
            last = np.maximum.accumulate(np.where(doc_starts, columns, 0), axis=1)
            self.position_ids = torch.from_numpy(columns - last)
        else:
            self.position_ids = torch.from_numpy(np.broadcast_to(columns, (rows, seq)).copy())
        segments = doc_starts.copy() if reset_attention_mask else np.zeros_like(doc_starts)
        segments[:, 0] = True
        #: ``(batch, seq_len)`` bool: where an attention segment starts.
        self.segments = segments
        self.attention_mask = attention_mask

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @overload
    def __getitem__(self, i: int) -> dict[str, torch.Tensor]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, torch.Tensor]]: ...
    def __getitem__(self, i: Union[int, slice]) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        starts = np.flatnonzero(self.segments[i])
        item = {
            "tokens": self.tokens[i],
            "labels": self.labels[i],
            "loss_mask": self.loss_mask[i],
            "position_ids": self.position_ids[i],
            "cu_seqlens": torch.from_numpy(np.append(starts, self.segments.shape[1]).astype(np.int32)),
        }
        if self.attention_mask:
            item["attention_mask"] = dense_mask(self.segments[i : i + 1])[0]
        return item

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return (self[k] for k in range(len(self)))

    def collate(self) -> dict[str, Any]:
        """The batch as one dict: ``tokens``, ``labels``, ``position_ids`` (int64),
        ``loss_mask`` (float32), all ``(batch, seq_len)``; ``cu_seqlens`` (int32, the
        segment boundaries of the whole batch flattened, as varlen attention kernels take
        them) and ``max_seqlen`` (int); ``attention_mask`` ``(batch, 1, seq_len, seq_len)``
        (True = masked, Megatron's convention) only when asked."""
        rows, seq = self.segments.shape
        starts = np.flatnonzero(self.segments.ravel())
        cu = np.append(starts, rows * seq).astype(np.int32)
        out: dict[str, Any] = {
            "tokens": self.tokens,
            "labels": self.labels,
            "loss_mask": self.loss_mask,
            "position_ids": self.position_ids,
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(np.diff(cu).max()) if cu.size > 1 else 0,
        }
        if self.attention_mask:
            out["attention_mask"] = dense_mask(self.segments)
        return out


def dense_mask(segments: npt.NDArray[np.bool_]) -> torch.Tensor:
    """``(batch, 1, seq, seq)`` bool, True where query ``i`` may NOT attend key ``j``:
    ``j > i`` or ``j`` in an earlier segment (Megatron's ``attention_mask < 0.5``).

    Args:
        segments (numpy.ndarray): ``(batch, seq, seq)`` bool, True where positions
            ``i`` and ``j`` lie in the same segment.
    """
    seq = segments.shape[1]
    segment_of = np.cumsum(segments, axis=1)  # (batch, seq): segment id of each position
    causal = np.tril(np.ones((seq, seq), dtype=np.bool_))
    allowed = causal[None] & (segment_of[:, :, None] == segment_of[:, None, :])
    return torch.from_numpy(~allowed[:, None])


def collate_items(items: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, Any]:
    """:meth:`DocumentBatch.collate` for samples fetched one by one (their dicts).

    Args:
        items (sequence of dict): the per-item dicts of ``TokenWindows(documents=True)``.
    """
    out: dict[str, Any] = {
        k: torch.stack([item[k] for item in items]) for k in ("tokens", "labels", "loss_mask", "position_ids")
    }
    seq = int(out["tokens"].shape[1])
    parts = [item["cu_seqlens"][:-1].to(torch.int64) + k * seq for k, item in enumerate(items)]
    cu = torch.cat(parts + [torch.tensor([len(items) * seq])]).to(torch.int32)
    out["cu_seqlens"] = cu
    out["max_seqlen"] = int(torch.diff(cu).max()) if cu.numel() > 1 else 0
    if "attention_mask" in items[0]:
        out["attention_mask"] = torch.stack([item["attention_mask"] for item in items])
    return out


class PackedDataset(IterableDataset[torch.Tensor]):
    r"""Packs documents into sequences of exactly ``seq_len`` tokens, sharded first.

    The widely copied ``ConstantLengthDataset`` reads every document on every rank and
    every DataLoader worker, so "shuffled" batches are duplicates. Here each document goes
    to exactly one (rank, worker) — document position ``k`` of the epoch's order to
    consumer ``k mod (world_size x num_workers)`` — and only then is it tokenized,
    followed by ``eos_id``, and packed.

    Args:
        documents (sequence): texts (with ``tokenizer``) or lists of token ids.
        seq_len (int): tokens per yielded sequence.
        eos_id (int): token appended after every document.
        tokenizer (callable, optional): ``str -> list[int]``. Default: documents are
            already token lists.
        shuffle (bool, optional): order documents by perm-v1 (as in 0.3) for each epoch.
            Default: ``False``.
        seed (int, optional): key of the shuffle. Default: ``0``.
        infinite (bool, optional): start a new, reshuffled pass whenever one ends,
            carrying the unfinished sequence over. Default: ``False``.
        drop_last (bool, optional): drop each consumer's final incomplete sequence; if
            ``False`` it is padded with ``pad_id`` up to ``seq_len``. Default: ``True``.
        pad_id (int, optional): padding token for ``drop_last=False``. Default: ``eos_id``.
        rank, world_size (int, optional): default to torch.distributed's.

    Example::

        >>> ds = PackedDataset(texts, seq_len=2048, eos_id=tok.eos_token_id, tokenizer=tok.encode,
        ...                    shuffle=True)
        >>> loader = DataLoader(ds, batch_size=8, num_workers=2)
    """

    def __init__(
        self,
        documents: Sequence[Any],
        seq_len: int,
        eos_id: int,
        tokenizer: Optional[Callable[[str], list[int]]] = None,
        *,
        shuffle: bool = False,
        seed: int = 0,
        infinite: bool = False,
        drop_last: bool = True,
        pad_id: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
    ) -> None:
        if not isinstance(documents, Sequence) or isinstance(documents, (str, bytes)):
            raise TypeError("documents must be a sequence (list, tuple, dataset with __getitem__)")
        if len(documents) == 0:
            raise ValueError("documents is empty")
        self.documents = documents
        self.seq_len = as_positive("seq_len", seq_len)
        self.eos_id = as_int("eos_id", eos_id)
        self.tokenizer = tokenizer
        self.shuffle = bool(shuffle)
        self.seed = as_u64("seed", seed)
        self.infinite = bool(infinite)
        self.drop_last = bool(drop_last)
        self.pad_id = self.eos_id if pad_id is None else as_int("pad_id", pad_id)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose document order the next iteration uses.

        Args:
            epoch (int): the epoch, in ``[0, 2**64 - 1]``.
        """
        self.epoch = as_u64("epoch", epoch)

    def _tokens(self, document: Any) -> list[int]:
        if self.tokenizer is not None:
            return list(self.tokenizer(document))
        if isinstance(document, str):
            raise TypeError("documents are strings: pass tokenizer=... (any str -> list[int])")
        return list(document)

    def _documents(self, epoch: int, me: int, count: int) -> Iterator[Any]:
        n = len(self.documents)
        if self.shuffle:
            from .._permutation import Permutation

            # perm-v1, as in 0.3: the documents' order is in no state dict to name another.
            order = Permutation(n, seed=self.seed, epoch=epoch, algorithm="perm-v1")
            for k in range(me, n, count):
                yield self.documents[order[k]]
        else:
            for k in range(me, n, count):
                yield self.documents[k]

    def __iter__(self) -> Iterator[torch.Tensor]:
        me = consumer(self.rank, self.world_size)
        buffer: list[int] = []
        epoch = self.epoch
        while True:
            for document in self._documents(epoch, me.index, me.count):
                buffer.extend(self._tokens(document))
                buffer.append(self.eos_id)
                while len(buffer) >= self.seq_len:
                    yield torch.tensor(buffer[: self.seq_len], dtype=torch.long)
                    del buffer[: self.seq_len]
            if not self.infinite:
                break
            epoch += 1
        if buffer and not self.drop_last:
            buffer.extend([self.pad_id] * (self.seq_len - len(buffer)))
            yield torch.tensor(buffer, dtype=torch.long)
