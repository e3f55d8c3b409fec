"""A blend of 10,000 Megatron prefixes: megatron-core's ``BlendedMegatronDatasetBuilder``
beside permshard's ``MixedDataset.from_data_path``, each in a fresh process under an
open-file limit and traced by ``strace``: time to the first sample, files opened and
stat'ed before it (per process: the rank, and each DataLoader worker), files and bytes
written, anonymous resident memory (the heap, the mapped file pages aside).

The corpus is written by megatron-core's ``IndexedDatasetBuilder`` (``--prefixes``
prefixes of ``--tokens`` uint16 tokens in all, lognormal documents, kept between runs);
weights 0.15/0.10 alternating, train only (``split="100,0,0"``), sequence length 256.
Megatron is tried on all the prefixes under ``ulimit -n 1024`` and under this machine's
hard limit, then measured on the first ``--few`` of them: its first rank builds the index
caches (into a fresh folder), a second rank loads them. permshard reads the same
``--few``, then all of them under ``ulimit -n 1024``, each rank with 2 DataLoader
workers (fork, then spawn) reading the first batch of 32 in a shuffled order; the first
batch is timed again through fresh DataLoaders, each beside torch's own share (the same
workers started for a list of ints).

Run: ``python benches/blend_at_scale.py [--prefixes 10000] [--few 1000] [--markdown PATH]``
(needs megatron-core and strace).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from megatron_corpus import _Tokenizer, dir_bytes, write_corpus

SEQ = 256
WEIGHTS = [0.15, 0.10]
LIMIT = 1024
#: Fresh DataLoaders whose first batch is timed, each beside torch's own share.
REPEAT = 5


def rss_anon_mib() -> float:
    """Anonymous resident memory of this process (its heap: mapped files aside), in MiB."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
    return kib / 1024


def data_path(paths: list[str]) -> str:
    return " ".join(f"{WEIGHTS[k % 2]} {p}" for k, p in enumerate(paths))


def megatron_child(paths: list[str], samples: int, cache: str) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from permshard.launch import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    heap = rss_anon_mib()
    began = time.perf_counter()
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=(paths, [WEIGHTS[k % 2] for k in range(len(paths))]),
        split="100,0,0",
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=cache,
    )
    train = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()[0]
    train[0]
    out = {"first_s": time.perf_counter() - began, "heap_mib": rss_anon_mib() - heap}
    dist.destroy_process_group()
    return out


def permshard_child(paths: list[str], samples: int, start_method: str, repeat: int) -> dict[str, Any]:
    """Builds the blend, then takes the first batch of ``repeat`` fresh DataLoaders, each
    followed by torch's own share: the same workers started for a list of ints."""
    from torch.utils.data import DataLoader

    from permshard import ShardedBatchSampler, ShardedSampler
    from permshard.data import MixedDataset, TokenWindows

    def first_batch(loader: DataLoader[Any]) -> float:
        began = time.perf_counter()
        batches = iter(loader)
        next(batches)
        taken = time.perf_counter() - began
        del batches  # its workers stop outside the time
        return taken

    heap = rss_anon_mib()
    began = time.perf_counter()
    blend = MixedDataset.from_data_path(data_path(paths), SEQ, samples, split="100,0,0")
    built = time.perf_counter() - began
    sampler = ShardedSampler(blend, num_replicas=8, rank=3, seed=1234, check_consensus=False)
    workers = {"num_workers": 2, "multiprocessing_context": start_method}
    ours, floors, grown = [], [], 0.0
    for k in range(repeat):
        batches = ShardedBatchSampler(sampler, 32)
        ours.append(
            first_batch(DataLoader(blend, batch_sampler=batches, collate_fn=TokenWindows.collate, **workers))
        )
        if k == 0:
            grown = rss_anon_mib() - heap
        floors.append(first_batch(DataLoader(list(range(1024)), batch_size=32, **workers)))
    return {
        "built_s": built,
        "first_s": built + ours[0],
        "heap_mib": grown,
        "batch_ms": [t * 1e3 for t in ours],
        "floor_ms": [t * 1e3 for t in floors],
    }


def child(args: argparse.Namespace) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.limit, hard), hard))
    with open(args.paths) as f:
        paths = f.read().split("\n")
    if args.child == "megatron":
        result = megatron_child(paths, args.samples, args.cache)
    else:
        result = permshard_child(paths, args.samples, args.child.split(":")[1], args.repeat)
    print(json.dumps(result), flush=True)


CALL = re.compile(r'^(?P<call>openat|open|newfstatat|statx|stat|lstat)\((?:AT_FDCWD, )?"(?P<path>[^"]+)"')
SPAWN = re.compile(r"^(clone3?|fork|vfork)\(")
RETURN = re.compile(r"= (-?\d+)(?: \w+)?(?: \(.*\))?$")


def calls(trace: str) -> list[tuple[int, str]]:
    """``(pid, call)`` of each system call in an ``strace -f`` log, the calls another thread
    interrupted joined back to their ends."""
    pending: dict[int, str] = {}
    out = []
    with open(trace) as f:
        for line in f:
            pid, _, rest = line.rstrip("\n").partition(" ")
            if not pid.isdigit():
                continue
            rest = rest.strip()
            if rest.endswith("<unfinished ...>"):
                pending[int(pid)] = rest[: -len("<unfinished ...>")]
                continue
            if rest.startswith("<..."):
                rest = pending.pop(int(pid), "") + rest.split("resumed>", 1)[1]
            out.append((int(pid), rest))
    return out


def per_process(trace: str, root: str) -> list[dict[str, Any]]:
    """Per process (threads folded into theirs), in the order they started: the corpus files
    it opened (by extension) and stat'ed, and the ones it opened for writing."""
    process: dict[int, int] = {}
    seen: dict[int, dict[str, Any]] = {}
    for pid, call in calls(trace):
        owner = process.setdefault(pid, pid)
        ret = RETURN.search(call)
        if SPAWN.match(call) and ret and int(ret[1]) > 0:
            process[int(ret[1])] = owner if "CLONE_THREAD" in call else int(ret[1])
            continue
        m = CALL.match(call)
        if not m or not m["path"].startswith(root) or not ret or int(ret[1]) < 0:
            continue
        p = seen.setdefault(owner, {"opened": collections.Counter(), "stats": 0, "written": 0})
        if m["call"] in ("openat", "open"):
            p["opened"][os.path.splitext(m["path"])[1] or "(folder)"] += 1
            p["written"] += "O_WRONLY" in call or "O_RDWR" in call
        else:
            p["stats"] += 1
    return [seen[pid] for pid in sorted(seen, key=list(process.values()).index)]


def traced(
    kind: str, list_file: str, samples: int, cache: str, root: str, limit: int, cold: bool = False
) -> dict[str, Any]:
    """One side in a child under ``ulimit -n limit``: timed on its own, then again under
    strace for what each of its processes opened and stat'ed in the corpus folder
    (``cache`` emptied before each run when ``cold``: Megatron's first rank builds it, a
    later run loads it). A run that fails gives ``{"failed": its error}``."""

    def run(prefix: list[str]) -> dict[str, Any]:
        if cold:
            shutil.rmtree(cache, ignore_errors=True)
        cmd = prefix + [sys.executable, __file__, "--child", kind, "--paths", list_file]
        cmd += ["--samples", str(samples), "--cache", cache, "--limit", str(limit)]
        cmd += ["--repeat", "1" if prefix else str(REPEAT)]  # traced: the first loader's workers only
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors = [
                line for line in done.stderr.splitlines() if re.search(r"^(\[rank0\]: )?\w*Error: ", line)
            ]
            return {"failed": (errors or done.stderr.splitlines()[-1:] or ["no output"])[0]}
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    result = run([])
    if "failed" in result:
        return result
    log = tempfile.mktemp(prefix="permshard-trace-")  # strace writes it
    syscalls = "openat,open,newfstatat,statx,stat,lstat,clone,clone3,fork,vfork"
    run(["strace", "-f", "-qq", "-e", f"trace={syscalls}", "-o", log])
    result["processes"] = per_process(log, root)
    os.unlink(log)
    return result


def describe(processes: list[dict[str, Any]]) -> str:
    parts = []
    for p in processes:
        opens = ", ".join(f"{n:,} {ext}" for ext, n in sorted(p["opened"].items()))
        parts.append(f"{opens or 'none'}; {p['stats']:,} stats")
    return " / ".join(parts) or "none"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prefixes", type=int, default=10_000, help="Megatron prefixes (default 10,000)")
    p.add_argument(
        "--few", type=int, default=1_000, help="the fewer prefixes both sides read (default 1,000)"
    )
    p.add_argument("--tokens", type=float, default=2e8, help="uint16 tokens in all (default 2e8)")
    p.add_argument("--samples", type=float, default=1e7, help="train samples (default 1e7)")
    p.add_argument("--dir", default="/tmp/permshard-blend-at-scale", help="where the corpus is written")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--paths", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    p.add_argument("--limit", type=int, default=LIMIT, help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.samples = int(args.samples)
    if args.child:
        child(args)
        return
    began = time.perf_counter()
    paths = write_corpus(args.dir, args.prefixes, int(args.tokens))
    print(
        f"corpus: {args.prefixes:,} prefixes, {int(args.tokens):,} tokens ({time.perf_counter() - began:.0f} s)"
    )
    lists = {}
    for count in (args.prefixes, args.few):
        lists[count] = os.path.join(args.dir, f"paths-{count}")
        with open(lists[count], "w") as f:
            f.write("\n".join(paths[:count]))
    root = os.path.realpath(args.dir)
    cache = os.path.join(root, "megatron-cache")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    sides: dict[str, dict[str, Any]] = {}
    for limit in sorted({LIMIT, hard}):
        name = f"Megatron, {args.prefixes:,} prefixes, `ulimit -n {limit}`"
        sides[name] = traced("megatron", lists[args.prefixes], args.samples, cache, root, limit, cold=True)
    few = f"{args.few:,} prefixes, `ulimit -n {hard}`"
    sides[f"Megatron, {few}, first rank (builds the cache)"] = traced(
        "megatron", lists[args.few], args.samples, cache, root, hard, cold=True
    )
    written_files = sum(len(files) for _, _, files in os.walk(cache))
    written_bytes = dir_bytes(cache)
    sides[f"Megatron, {few}, another rank (loads it)"] = traced(
        "megatron", lists[args.few], args.samples, cache, root, hard
    )
    shutil.rmtree(cache, ignore_errors=True)
    sides[f"permshard, {few}, any rank, 2 workers by fork"] = traced(
        "permshard:fork", lists[args.few], args.samples, cache, root, hard
    )
    for method in ("fork", "spawn"):
        name = f"permshard, {args.prefixes:,} prefixes, `ulimit -n {LIMIT}`, any rank, 2 workers by {method}"
        sides[name] = traced(f"permshard:{method}", lists[args.prefixes], args.samples, cache, root, LIMIT)
    rows = []
    for name, r in sides.items():
        if "failed" in r:
            rows.append(f"| {name} | fails: `{r['failed'].removeprefix('[rank0]: ')}` | | | |")
            continue
        writes = (
            f"{written_files:,} files, {written_bytes / 2**20:,.0f} MiB" if "first rank" in name else "none"
        )
        first = f"{r['first_s']:.2f} s"
        if "built_s" in r:
            batch_ms = (r["first_s"] - r["built_s"]) * 1e3
            ours, floor = statistics.median(r["batch_ms"]), statistics.median(r["floor_ms"])
            first += (
                f" (built in {r['built_s']:.2f} s, then the first batch in {batch_ms:.0f} ms; "
                f"median of {REPEAT} fresh DataLoaders {ours:.0f} ms, torch's own share {floor:.0f} ms)"
            )
        rows.append(f"| {name} | {first} | {describe(r['processes'])} | {writes} | {r['heap_mib']:.0f} MiB |")
    print(json.dumps(sides))
    head = (
        f"Megatron prefixes written by megatron-core's IndexedDatasetBuilder, {int(args.tokens):,} uint16 "
        f"tokens over {args.prefixes:,} (lognormal documents), weights {WEIGHTS[0]}/{WEIGHTS[1]} alternating, "
        f"train only, seq_len {SEQ}, {args.samples:,} train samples; each side in a fresh process "
        "under the open-file limit shown, timed alone, then run again under strace for the files "
        "opened and stat'ed inside the corpus folder before the first sample, per process in the "
        "order they started (the rank / its DataLoader workers; threads counted with their "
        "process). Heap: anonymous resident memory added (mapped file pages aside).\n"
    )
    table = (
        "| | first sample | files opened; stat calls, per process | written | heap growth |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(head + "\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# A blend of 10,000 prefixes: megatron-core beside permshard\n\n")
            f.write("`make bench-blend-at-scale` (`benches/blend_at_scale.py`).\n\n" + head + "\n" + table)


if __name__ == "__main__":
    main()
