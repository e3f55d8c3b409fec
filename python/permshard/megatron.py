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

Data phases change the blend's weights at given train samples without exiting the job:
list them in a file named by ``--data-weight-stages`` (:func:`add_arguments`, Megatron's
``extra_args_provider``). The file is part of the run's configuration, so a restart reads
the same stream; a change decided while the job runs (:meth:`GPTSamples.set_weights`) is
written there too to survive the next restart.

megatron-core is not a dependency of permshard: :func:`datasets_from_args` needs none of
it; :func:`train_valid_test_datasets_provider` imports Megatron-LM's ``megatron.training``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
from torch.utils.data import Dataset

from .data import MixedDataset

__all__ = ["GPTSamples", "add_arguments", "datasets_from_args", "train_valid_test_datasets_provider"]

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
        stages_file (str, optional): the ``--data-weight-stages`` file the blend's stages
            came from: :meth:`set_weights` adds its change there.
    """

    def __init__(self, blend: MixedDataset, part: str, stages_file: Optional[str] = None) -> None:
        self.blend = blend
        self.part = part
        self.stages_file = stages_file

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
        prefetched), without exiting the job; see :meth:`MixedDataset.set_weights`. Call
        it on every rank that reads data. Built with ``--data-weight-stages``, the change
        is also added to that file (by global rank 0, replacing it whole), so that a
        restart reads the same stream; without it a restart reads the first weights on.

        Args:
            weights (sequence of float): one weight per prefix.
            start (int): the first train sample read with them.
        """
        self.blend.set_weights(weights, start=start)
        if self.stages_file is None:
            return
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return
        rows = [[s, list(w)] for s, w in _weight_stages(self.stages_file)]
        rows.append([int(start), [float(w) for w in weights]])
        written = f"{self.stages_file}.{os.getpid()}.tmp"
        with open(written, "w") as f:
            json.dump(rows, f)
        os.replace(written, self.stages_file)  # whole: a reader never sees half a file

    def __repr__(self) -> str:
        return f"GPTSamples(part={self.part!r}, samples={len(self):,})"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Megatron's ``extra_args_provider``: adds ``--data-weight-stages FILE``, the train
    blend's data phases, a JSON list of ``[start, [w1, w2, ...]]`` (from train sample
    ``start`` on, these weights, one per ``--data-path`` prefix; starts increasing).

    Example::

        >>> pretrain(train_valid_test_datasets_provider, model_provider, ModelType.encoder_or_decoder,
        ...          forward_step, extra_args_provider=add_arguments)  # doctest: +SKIP

    Args:
        parser (argparse.ArgumentParser): Megatron's parser.
    """
    group = parser.add_argument_group("permshard")
    group.add_argument(
        "--data-weight-stages",
        default=None,
        help="JSON file of [start, [weights]]: the train blend's weights from sample start on",
    )
    return parser


def _weight_stages(path: str) -> list[tuple[int, list[float]]]:
    """The stages of a ``--data-weight-stages`` file: ``[(start, weights), ...]``.

    Args:
        path (str): the file.
    """
    try:
        with open(path) as f:
            rows = json.load(f)
    except OSError as e:
        raise ValueError(f"--data-weight-stages {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--data-weight-stages {path} is not JSON ({e.msg}, line {e.lineno})") from None
    shape = isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], list) for r in rows
    )
    if not shape:
        raise ValueError(
            f"--data-weight-stages {path} must hold a list of [start, [w1, w2, ...]] rows, e.g. "
            "[[1000000, [0.2, 0.8]]]: from train sample start on, one weight per --data-path prefix"
        )
    return [(start, [float(w) for w in weights]) for start, weights in rows]


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
    ``create_attention_mask_in_dataloader``, and ``data_weight_stages``
    (:func:`add_arguments`: the train blend's stages). A part with no samples asked, or no
    data, is ``None``, as Megatron's builder returns it.

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
    stages_file = getattr(args, "data_weight_stages", None)
    out: list[Optional[GPTSamples]] = []
    for part, path, samples in zip(PARTS, per_part, train_val_test_num_samples):
        if not samples or not (words or path):
            out.append(None)
            continue
        stages = _weight_stages(stages_file) if stages_file and part == "train" else []
        if words:
            options.update(split=getattr(args, "split", None) or "969,30,1", part=part)
        blend = MixedDataset.from_data_path(
            words or path, args.seq_length, int(samples), seed=args.seed, stages=stages, **options
        )
        out.append(GPTSamples(blend, part, stages_file if part == "train" else None))
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
