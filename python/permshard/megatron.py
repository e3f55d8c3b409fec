"""permshard for Megatron-LM: the datasets of ``pretrain_gpt.py``, built from Megatron's own
arguments with nothing written to disk.

Megatron's ``BlendedMegatronDatasetBuilder`` builds O(N) index caches before the first
sample (minutes on large blends, on a shared file system longer). Here the blend is
:meth:`MixedDataset.from_data_path <permshard.data.MixedDataset.from_data_path>`: position
``i`` is computed on demand, the first sample is read in milliseconds, and sample ``i`` is
a pure function of ``i``, so Megatron's ``--dataloader-type single`` sampler (global
``consumed_samples``, read in order) resumes exactly on any data-parallel size.

Put the provider in ``pretrain_gpt.py``'s place::

    from permshard.megatron import train_valid_test_datasets_provider

    pretrain(train_valid_test_datasets_provider, model_provider, ...)

Samples are dicts with GPTDataset's keys and values for the same window: ``tokens``,
``labels``, ``loss_mask``, ``position_ids`` (``attention_mask`` with
``--create-attention-mask-in-dataloader``), under ``--reset-position-ids``,
``--reset-attention-mask`` and ``--eod-mask-loss``.

megatron-core is not a dependency of permshard: :func:`datasets_from_args` needs none of
it; :func:`train_valid_test_datasets_provider` imports Megatron-LM's ``megatron.training``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
from torch.utils.data import Dataset

from .data import MixedDataset

__all__ = ["GPTSamples", "datasets_from_args", "train_valid_test_datasets_provider"]

#: GPTDataset's keys, in its order (``attention_mask`` only when asked).
KEYS = ("tokens", "labels", "attention_mask", "loss_mask", "position_ids")

PARTS = ("train", "valid", "test")


class GPTSamples(Dataset[dict[str, Any]]):
    """A document-aware blend's samples as Megatron's datasets give them: a blend of
    several prefixes first names the source (``dataset_id``, as its ``BlendedDataset``),
    then GPTDataset's keys. Megatron's DataLoader (torch's default collate) stacks them:
    the varlen ``cu_seqlens`` of :class:`~permshard.data.TokenWindows` is left out.

    Args:
        blend (MixedDataset): a blend of ``TokenWindows(..., documents=True)``.
        part (str): ``"train"``, ``"valid"`` or ``"test"`` (Megatron's ``Split``).
    """

    def __init__(self, blend: MixedDataset, part: str) -> None:
        self.blend = blend
        self.part = part

    def __len__(self) -> int:
        return len(self.blend)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        indices = list(indices)
        batch = self.blend.__getitems__(indices)  # one gather per file
        samples = [{k: item[k] for k in KEYS if k in item} for item in batch]
        if len(self.blend.datasets) > 1:
            sources = self.blend.sources_of(indices).astype(np.int16)  # BlendedDataset's dtype
            samples = [{"dataset_id": source, **sample} for source, sample in zip(sources, samples)]
        return samples

    def set_weights(self, weights: Sequence[float], *, start: int) -> None:
        """The blend's weights from sample ``start`` on (a position no rank has been
        handed yet: Megatron's ``consumed_train_samples`` plus what the loader's workers
        prefetched), without exiting the job; see :meth:`MixedDataset.set_weights`."""
        self.blend.set_weights(weights, start=start)

    def __repr__(self) -> str:
        return f"GPTSamples(part={self.part!r}, samples={len(self):,})"


def _words(path: Any) -> list[str]:
    """``--data-path``-like arguments as words (Megatron keeps a list; a string splits)."""
    if path is None:
        return []
    return path.split() if isinstance(path, str) else [str(w) for w in path]


def datasets_from_args(
    args: Any, train_val_test_num_samples: Sequence[int], eod_id: int
) -> tuple[Optional[GPTSamples], Optional[GPTSamples], Optional[GPTSamples]]:
    """The train, valid and test datasets of Megatron's parsed arguments.

    Reads ``data_path`` (with ``split``) or ``train_data_path`` / ``valid_data_path`` /
    ``test_data_path``, ``data_args_path`` (the words in a file), ``seq_length``,
    ``seed``, ``reset_position_ids``, ``reset_attention_mask``, ``eod_mask_loss``,
    ``create_attention_mask_in_dataloader``. A part with no samples asked, or no data,
    is ``None``, as Megatron's builder returns it.

    Args:
        args (argparse.Namespace): Megatron's ``get_args()``.
        train_val_test_num_samples (sequence of 3 ints): what Megatron asks of each part.
        eod_id (int): the tokenizer's end-of-document id (``tokenizer.eod``).
    """
    if len(train_val_test_num_samples) != 3:
        raise ValueError(
            f"train_val_test_num_samples has 3 counts (train, valid, test), got {train_val_test_num_samples!r}"
        )
    for flag in ("mock_data", "sft", "fim_data"):
        if getattr(args, flag, False):
            raise ValueError(f"--{flag.replace('_', '-')} is Megatron's own dataset: use its provider for it")
    words = _words(getattr(args, "data_path", None))
    if getattr(args, "data_args_path", None):
        with open(args.data_args_path) as f:
            words = f.read().split()
    per_part = [_words(getattr(args, f"{part}_data_path", None)) for part in PARTS]
    if words and any(per_part):
        raise ValueError("give --data-path (with --split) or --train/valid/test-data-path, not both")
    if not words and not any(per_part):
        raise ValueError("no data: give --data-path (with --split) or --train-data-path")
    options: dict[str, Any] = dict(
        documents=True,
        eod_id=eod_id,
        reset_position_ids=bool(args.reset_position_ids),
        reset_attention_mask=bool(args.reset_attention_mask),
        eod_mask_loss=bool(args.eod_mask_loss),
        attention_mask=bool(getattr(args, "create_attention_mask_in_dataloader", False)),
    )
    out: list[Optional[GPTSamples]] = []
    for part, path, samples in zip(PARTS, per_part, train_val_test_num_samples):
        if not samples or not (words or path):
            out.append(None)
            continue
        if words:
            split = getattr(args, "split", None) or "969,30,1"
            blend = MixedDataset.from_data_path(
                words, args.seq_length, int(samples), seed=args.seed, split=split, part=part, **options
            )
        else:
            blend = MixedDataset.from_data_path(
                path, args.seq_length, int(samples), seed=args.seed, **options
            )
        out.append(GPTSamples(blend, part))
    return out[0], out[1], out[2]


def train_valid_test_datasets_provider(
    train_val_test_num_samples: Sequence[int], vp_stage: Optional[int] = None
) -> tuple[Optional[GPTSamples], Optional[GPTSamples], Optional[GPTSamples]]:
    """Megatron-LM's dataset provider for ``pretrain_gpt.py``: :func:`datasets_from_args`
    of ``megatron.training.get_args()``, with the tokenizer's ``eod``. Built on every rank
    that reads data (tensor-parallel rank 0 of the first and last pipeline stages), as
    Megatron's own provider; it costs milliseconds and writes nothing.

    Args:
        train_val_test_num_samples (sequence of 3 ints): what Megatron asks of each part.
        vp_stage (int, optional): the virtual pipeline stage, as Megatron passes it.
    """
    from megatron.core import parallel_state
    from megatron.training import get_args, get_tokenizer

    args = get_args()
    if parallel_state.model_parallel_is_initialized():
        reads = parallel_state.get_tensor_model_parallel_rank() == 0 and (
            parallel_state.is_pipeline_first_stage(ignore_virtual=vp_stage is None, vp_stage=vp_stage)
            or parallel_state.is_pipeline_last_stage(ignore_virtual=vp_stage is None, vp_stage=vp_stage)
        )
        if not reads:
            return None, None, None
    if getattr(args, "legacy_tokenizer", True):
        tokenizer = get_tokenizer()
    else:
        from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer

        tokenizer = build_tokenizer(args)
    return datasets_from_args(args, train_val_test_num_samples, int(tokenizer.eod))


# Megatron calls the provider on every rank and lets it decide where to build.
train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]
