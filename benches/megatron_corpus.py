"""Megatron indexed datasets, blended: megatron-core's own pipeline against permshard on the
same files, weights and split, side by side in one run.

The corpus is written by megatron-core's ``IndexedDatasetBuilder`` (``--prefixes`` files,
``--tokens`` uint16 tokens in all, documents of lognormal lengths ending with EOD). Then,
each in a fresh process (so caches, imports and memory do not leak between them):

* Megatron: ``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` with ``--data-path``
  weights 0.15/0.10 alternating, ``split="969,30,1"``, ``--samples`` train samples (valid
  and test 1/1000 of it), ``create_attention_mask=False`` (no dense mask, as permshard)
  cold (empty index cache) and warm (cache written by the cold run), and once with its
  default ``create_attention_mask=True``;
* permshard: ``MixedDataset.from_data_path`` of ``TokenWindows`` with the same weights
  and split, a ``ShardedSampler`` over it, and the first batch.

Reported: build time, bytes written, resident memory growth, the first sample, and per-item
cost (random indices) without and with ``reset_position_ids``, ``reset_attention_mask`` and
``eod_mask_loss``, for per-item ``__getitem__`` and permshard's batched ``__getitems__`` of
32 (blended, and the same windows read from its sources).

Usage (``make bench-megatron``; installs megatron-core 0.16.1 without dependencies)::

    python benches/megatron_corpus.py [--tokens 2e9] [--samples 1e8] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np
from side_by_side import blend_and_sources

EOD = 0
SEQ = 2048
WEIGHTS = [0.15, 0.10]


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def write_corpus(root: str, prefixes: int, tokens: int) -> list[str]:
    """The corpus, written by megatron-core's builder (kept between runs)."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    marker = os.path.join(root, f"done-{prefixes}-{tokens}")
    paths = [os.path.join(root, f"part_{k:02d}_text_document") for k in range(prefixes)]
    if os.path.exists(marker):
        return paths
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    rng = np.random.default_rng(0)
    per_file = tokens // prefixes
    for path in paths:
        builder = IndexedDatasetBuilder(path + ".bin", dtype=np.uint16)
        written = 0
        while written < per_file:
            lengths = np.minimum(rng.lognormal(6.5, 1.0, 4096).astype(np.int64) + 2, per_file - written + 1)
            block = rng.integers(1, 50_000, int(lengths.sum()), dtype=np.uint16)
            ends = np.cumsum(lengths)
            block[ends - 1] = EOD
            for doc in np.split(block, ends[:-1]):
                builder.add_document(doc.astype(np.int64), [doc.size])
                written += doc.size
                if written >= per_file:
                    break
        builder.finalize(path + ".idx")
    open(marker, "w").close()
    return paths


def per_item(get: Any, n: int, count: int, rng: np.random.Generator) -> float:
    idx = rng.integers(0, n, count).tolist()
    began = time.perf_counter()
    for i in idx:
        get(i)
    return (time.perf_counter() - began) / count


class _Tokenizer:
    eod = EOD
    pad = -1
    vocab_size = 50_000
    unique_identifiers = {"class": "bench"}


def megatron_child(paths: list[str], samples: int, cache: str, flags: bool, dense: bool) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from permshard.launch import free_port

    # Megatron's builder needs a process group, even for one process.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    weights = [WEIGHTS[k % 2] for k in range(len(paths))]
    rss, before = rss_mib(), dir_bytes(cache) if os.path.exists(cache) else 0
    began = time.perf_counter()
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=(paths, weights),
        split="969,30,1",
        tokenizer=_Tokenizer(),
        reset_position_ids=flags,
        reset_attention_mask=flags,
        eod_mask_loss=flags,
        create_attention_mask=dense,
        path_to_cache=cache,
    )
    sizes = [samples, max(1, samples // 1000), max(1, samples // 1000)]
    train = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()[0]
    train[0]
    first = time.perf_counter() - began
    out = {
        "first_s": first,
        "written_bytes": dir_bytes(cache) - before,
        "rss_growth_mib": rss_mib() - rss,
    }
    rng = np.random.default_rng(1)
    out["per_item_s"] = per_item(train.__getitem__, len(train), 100 if dense else 300 if flags else 3000, rng)
    dist.destroy_process_group()
    return out


def permshard_child(paths: list[str], samples: int, flags: bool) -> dict[str, Any]:
    from permshard import ShardedBatchSampler, ShardedSampler
    from permshard.data import MixedDataset, TokenWindows

    weights = [WEIGHTS[k % 2] for k in range(len(paths))]
    data_path = " ".join(f"{w} {p}" for w, p in zip(weights, paths))
    options: dict[str, Any] = {"split": "969,30,1"}
    if flags:
        options.update(
            documents=True, eod_id=EOD, reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True
        )
    rss = rss_mib()
    began = time.perf_counter()
    blend = MixedDataset.from_data_path(data_path, SEQ, samples, **options)
    sampler = ShardedSampler(blend, num_replicas=8, rank=3, seed=1234, check_consensus=False)
    batch = next(iter(ShardedBatchSampler(sampler, 32)))
    TokenWindows.collate(blend.__getitems__(batch))
    first = time.perf_counter() - began
    out: dict[str, Any] = {"first_s": first, "written_bytes": 0, "rss_growth_mib": rss_mib() - rss}
    rng = np.random.default_rng(1)
    out["per_item_s"] = per_item(blend.__getitem__, len(blend), 3000, rng)
    positions = [rng.integers(0, len(blend), 32) for _ in range(1000)]
    mixed, direct = blend_and_sources(blend, positions, 3.0)
    out["batched_s"], out["source_batched_s"] = 1 / mixed, 1 / direct
    for n in (10**8, 10**12):
        began = time.perf_counter()
        b = MixedDataset.from_data_path(data_path, SEQ, n, **options)
        s = ShardedSampler(b, num_replicas=8, rank=3, seed=1234, check_consensus=False)
        TokenWindows.collate(b.__getitems__(next(iter(ShardedBatchSampler(s, 32)))))
        out[f"first_batch_s_{n:.0e}"] = time.perf_counter() - began
    return out


def child(args: argparse.Namespace) -> None:
    paths = args.paths.split(",")
    if args.child == "permshard":
        result = permshard_child(paths, args.samples, args.flags)
    else:
        result = megatron_child(paths, args.samples, args.cache, args.flags, args.dense)
    print(json.dumps(result))


def run(
    kind: str, paths: list[str], samples: int, cache: str, flags: bool, dense: bool = False
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--paths", ",".join(paths), "--samples", str(samples)]
    cmd += ["--cache", cache] + (["--flags"] if flags else []) + (["--dense"] if dense else [])
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=float, default=2e9, help="uint16 tokens in all (default 2e9)")
    p.add_argument("--prefixes", type=int, default=8, help="Megatron prefixes (default 8)")
    p.add_argument("--samples", type=float, default=1e8, help="train samples (default 1e8)")
    p.add_argument("--dir", default="/tmp/permshard-megatron-corpus", help="where the corpus is written")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--paths", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    p.add_argument("--flags", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dense", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.samples = int(args.samples)
    if args.child:
        child(args)
        return
    began = time.perf_counter()
    paths = write_corpus(args.dir, args.prefixes, int(args.tokens))
    print(
        f"corpus: {args.prefixes} prefixes, {int(args.tokens):,} tokens ({time.perf_counter() - began:.0f} s)"
    )
    cache = os.path.join(args.dir, "megatron-cache")
    shutil.rmtree(cache, ignore_errors=True)
    m_cold = run("megatron", paths, args.samples, cache, False)
    m_warm = run("megatron", paths, args.samples, cache, False)
    m_flags = run("megatron", paths, args.samples, cache, True)
    m_dense = run("megatron", paths, args.samples, cache, True, dense=True)
    shutil.rmtree(cache, ignore_errors=True)
    p_plain = run("permshard", paths, args.samples, cache, False)
    p_flags = run("permshard", paths, args.samples, cache, True)

    us = 1e6
    rows = [
        (
            "first sample, cold",
            f"{m_cold['first_s']:.2f} s",
            f"{p_plain['first_s'] * 1e3:.1f} ms (first batch of 32)",
        ),
        ("first sample, warm (index cache written)", f"{m_warm['first_s']:.2f} s", "no cache"),
        (
            "first batch at 10^8 / 10^12 samples",
            "—",
            f"{p_plain['first_batch_s_1e+08'] * 1e3:.1f} ms / {p_plain['first_batch_s_1e+12'] * 1e3:.1f} ms",
        ),
        ("bytes written", f"{m_cold['written_bytes'] / 1e9:.2f} GB", f"{p_plain['written_bytes']}"),
        (
            "resident memory held after the first sample",
            f"{m_cold['rss_growth_mib']:.0f} MiB",
            f"{p_plain['rss_growth_mib']:.0f} MiB",
        ),
        (
            "per item, `__getitem__`",
            f"{m_warm['per_item_s'] * us:.1f} µs",
            f"{p_plain['per_item_s'] * us:.1f} µs",
        ),
        (
            "per item, batched `__getitems__` of 32 (blend / the same windows from its sources)",
            "—",
            f"{p_plain['batched_s'] * us:.2f} µs / {p_plain['source_batched_s'] * us:.2f} µs",
        ),
        (
            "per item with the three document flags, `__getitem__`",
            f"{m_flags['per_item_s'] * us:.1f} µs",
            f"{p_flags['per_item_s'] * us:.1f} µs",
        ),
        (
            "per item with the three flags and Megatron's default dense mask, `__getitem__`",
            f"{m_dense['per_item_s'] * us:.1f} µs",
            "(no dense mask unless attention_mask=True)",
        ),
        (
            "per item with the three flags, batched (blend / the same windows from its sources)",
            "—",
            f"{p_flags['batched_s'] * us:.2f} µs / {p_flags['source_batched_s'] * us:.2f} µs",
        ),
    ]
    head = (
        f"{args.prefixes} Megatron prefixes written by megatron-core's IndexedDatasetBuilder, "
        f"{int(args.tokens):,} uint16 tokens, weights {WEIGHTS[0]}/{WEIGHTS[1]} alternating, "
        f'split "969,30,1", seq_len {SEQ}, {args.samples:,} train samples; each side in a fresh '
        "process; Megatron with create_attention_mask=False unless said.\n"
    )
    table = "| | Megatron (BlendedMegatronDatasetBuilder + GPTDataset) | permshard (MixedDataset of TokenWindows) |\n"
    table += "|---|---|---|\n" + "".join(f"| {a} | {b} | {c} |\n" for a, b, c in rows)
    ratio = p_plain["batched_s"] / p_plain["source_batched_s"]
    ratio_flags = p_flags["batched_s"] / p_flags["source_batched_s"]
    tail = (
        f"\nBlended batch / the same windows read from its sources, per item: {ratio:.2f}x plain, "
        f"{ratio_flags:.2f}x with the flags. Per-item Megatron / permshard: "
        f"{m_warm['per_item_s'] / p_plain['per_item_s']:.1f}x plain, "
        f"{m_flags['per_item_s'] / p_flags['per_item_s']:.1f}x with the flags "
        f"({m_flags['per_item_s'] / p_flags['batched_s']:.0f}x batched).\n"
    )
    print(head + "\n" + table + tail)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Megatron indexed datasets: megatron-core vs permshard\n\n")
            f.write("Regenerate with `make bench-megatron`.\n\n" + head + "\n" + table + tail)


if __name__ == "__main__":
    main()
