"""``PackedDataset``: ConstantLengthDataset done right — shard documents, then pack."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

import torch
from torch.utils.data import IterableDataset

from .._validation import as_int, as_positive, as_u64
from ._iterable import consumer, rank_and_world


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
