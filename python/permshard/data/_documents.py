"""Document-aware training samples: Megatron's masks and position ids, and varlen
``cu_seqlens``, computed for a whole batch at once (no Python loop per item)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union, overload

import numpy as np
import numpy.typing as npt
import torch


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
