"""What the documentation's examples run in (the docstrings' ``Example::`` blocks and the
guides' code blocks): the files they open, the names they use without building them,
and a process group of one."""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import permshard
from permshard.data import write_indexed


def documents(
    count: int, seed: int = 0, *, max_len: int = 600, vocab: int = 50_000, min_len: int = 1
) -> list[np.ndarray]:
    """``count`` documents of ``min_len`` to ``max_len - 1`` tokens in ``[1, vocab)``, each
    followed by EOD (0)."""
    rng = np.random.default_rng(seed)
    return [np.append(rng.integers(1, vocab, rng.integers(min_len, max_len)), 0) for _ in range(count)]


def example_files(root: pathlib.Path) -> pathlib.Path:
    """The files the examples open, by the names they use, made in ``root``."""
    rng = np.random.default_rng(0)
    for name in ("train_000.bin", "train_001.bin"):
        rng.integers(0, 50_000, 200_000).astype(np.uint16).tofile(root / name)
    rng.standard_normal((5000, 16)).astype(np.float32).tofile(root / "features.f32")
    np.save(root / "lengths.npy", rng.integers(1, 2048, 1000))
    (root / "corpus").mkdir()
    write_indexed(root / "corpus" / "web_text_document", documents(1000, 1))
    write_indexed(root / "web", documents(400, 2))
    write_indexed(root / "code", documents(300, 3))
    write_indexed(root / "web_text_document", documents(2000, 4))  # the Megatron guide's corpora
    write_indexed(root / "code_text_document", documents(2000, 5))
    for name in ("a.jsonl", "b.jsonl"):
        (root / name).write_text("".join(json.dumps({"text": f"{name} {i}"}) + "\n" for i in range(50)))
    return root


class Tokenizer:
    """The two things a tokenizer gives the examples."""

    eos_token_id = 0

    @staticmethod
    def encode(text: str) -> list[int]:
        return [1 + ord(c) % 200 for c in text]


def read_jsonl(path: str) -> Iterator[dict]:
    with open(path) as f:
        yield from map(json.loads, f)


def namespace(root: pathlib.Path) -> dict[str, object]:
    """What the examples use without building it."""
    from permshard import ShardedBatchSampler, ShardedSampler, StepBatchSampler
    from permshard.data import MemmapRows, TokenWindows

    dataset = list(range(1000))
    sampler = ShardedSampler(dataset, seed=0)  # the group's world: one rank
    names: dict[str, object] = {
        "np": np,
        "torch": torch,
        "permshard": permshard,
        "DataLoader": DataLoader,
        "ShardedSampler": ShardedSampler,
        "ShardedBatchSampler": ShardedBatchSampler,
        "StepBatchSampler": StepBatchSampler,
        "dataset": dataset,
        "ds": dataset,
        "source": dataset,
        "sampler": sampler,
        "part": ShardedSampler(5000, seed=0).config.partition(),  # over rows' 5000 records
        "loader": DataLoader(dataset, batch_size=10, sampler=sampler),
        "step": 3,
        "batch_size": 10,
        "world_size": 4,
        "rank": 0,
        "world": 2,
        "epochs": 2,
        "start_epoch": 0,
        "n_epochs": 2,
        "is_distributed": False,
        "train": lambda loader: None if [b for b in loader] else None,
        "train_step": lambda batch: None,
        "tokenizer": type("Tokenizer", (), {"eod": 0})(),
        "pad_collate": lambda batch: batch,
        "windows": TokenWindows(str(root / "train_000.bin"), 1024),
        "TokenWindows": TokenWindows,
        "rows": MemmapRows(str(root / "features.f32"), dtype=np.float32, shape=(16,)),
        "texts": [f"document {i} " * (i % 7 + 1) for i in range(100)],
        "tok": Tokenizer(),
        "read_jsonl": read_jsonl,
        "files": [str(root / "a.jsonl"), str(root / "b.jsonl")],
        "web": list(range(600)),
        "code": list(range(300)),
        "books": list(range(100)),
    }
    with contextlib.suppress(ImportError):
        import grain

        names["grain"] = grain
    with contextlib.suppress(ImportError):
        import accelerate

        names["accelerator"] = accelerate.Accelerator(cpu=True)
        names["model"] = torch.nn.Linear(2, 2)
        names["optimizer"] = torch.optim.SGD(names["model"].parameters(), lr=0.1)  # type: ignore[attr-defined]
    return names


@contextlib.contextmanager
def group_of_one() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
