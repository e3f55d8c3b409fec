"""The ``permshard`` commands that read a run's history from a checkpoint: ``where``,
``show STEP --state FILE`` and ``audit``."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable


def _load_state(path: str) -> Any:
    """The sampler state dict in ``path``: JSON, or a ``torch.save`` file (the dict itself,
    or a checkpoint holding one sampler state under any key)."""
    if path.endswith(".json"):
        with open(path) as f:
            return json.load(f)
    import torch

    obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, dict) and "consumed" not in obj and "steps" not in obj:
        found = [v for v in obj.values() if isinstance(v, dict) and ("consumed" in v or "steps" in v)]
        if len(found) != 1:
            raise ValueError(
                f"{path} holds no single sampler state dict ({len(found)} found): save sampler.state_dict() "
                "on its own, or as one value of the checkpoint dict"
            )
        return found[0]
    return obj


def add_parsers(sub: Any, count: Callable[[str], int]) -> None:
    """Adds ``where``, ``audit`` (and the history's ``show``) to the command's subparsers."""
    p = sub.add_parser("where", help="every (epoch, step, rank, position) at which a run read a sample")
    p.add_argument("sample", type=count, nargs="?", help="dataset index (or --source and --document)")
    _history_args(p, count)
    p.add_argument("--source", type=count, help="a MixedDataset's source (with --document and --data-path)")
    p.add_argument("--document", type=count, help="the source's sample")
    p.add_argument("--data-path", help="Megatron's --data-path of the run's blend (with --source)")
    p.add_argument("--seq-len", type=count, help="Megatron's --seq-length (with --data-path)")
    p.add_argument("--num-samples", type=count, help="blend length (with --data-path)")
    p.add_argument("--mix-seed", type=count, default=0, help="seed of the blend's passes (default 0)")

    p = sub.add_parser(
        "audit", help="prove from a checkpoint that every sample was read exactly once per epoch"
    )
    p.add_argument("--state", required=True, metavar="FILE", help="a sampler's state dict (.pt or .json)")
    p.add_argument("--no-recount", action="store_true", help="the history's proof only (O(#changes))")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def history_show_parser(count: Callable[[str], int]) -> argparse.ArgumentParser:
    """``permshard show STEP --state FILE``: what every rank read at a step of the run."""
    p = argparse.ArgumentParser(prog="permshard show", description="what every rank read at STEP of a run")
    p.add_argument("step", type=count, help="batches each rank had taken since the run's start")
    _history_args(p, count)
    return p


def _history_args(p: argparse.ArgumentParser, count: Callable[[str], int]) -> None:
    p.add_argument("--state", required=True, metavar="FILE", help="a sampler's state dict (.pt or .json)")
    p.add_argument(
        "--batch-size", type=count, help="an item sampler's DataLoader batch size (to count steps)"
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of {epoch, step, rank, position}")


def _print(reads: list[Any], as_json: bool, *, sample: bool) -> None:
    if as_json:
        print(json.dumps([r.as_dict(sample=sample) for r in reads]))
        return
    for r in reads:
        step = "-" if r.step is None else f"{r.step:,}"
        pad = "  (padding)" if r.padding else ""
        print(
            f"epoch {r.epoch:>4}  step {step:>10}  rank {r.rank:>5}  position {r.position:>6}  sample {r.sample:,}{pad}"
        )


def where(args: argparse.Namespace) -> int:
    from ._run import Run

    run = Run(_load_state(args.state))
    if args.source is not None or args.document is not None:
        if args.source is None or args.document is None or args.data_path is None or args.seq_len is None:
            raise ValueError("--source needs --document, --data-path and --seq-len (the run's blend)")
        from .data._mixed import MixedDataset

        blend = MixedDataset.from_data_path(args.data_path, args.seq_len, args.num_samples, args.mix_seed)
        reads = run.where_document(blend, args.source, args.document, batch_size=args.batch_size)
    elif args.sample is None:
        raise ValueError("pass SAMPLE, or --source and --document")
    else:
        reads = run.where(args.sample, batch_size=args.batch_size)
    _print(reads, args.json, sample=False)
    if not args.json and not reads:
        print("never read in this run's history")
    return 0


def show(args: argparse.Namespace) -> int:
    from ._run import Run

    reads = Run(_load_state(args.state)).show(args.step, batch_size=args.batch_size)
    _print(reads, args.json, sample=True)
    return 0


def audit(args: argparse.Namespace) -> int:
    from ._run import Run

    result = Run(_load_state(args.state)).audit(recount=not args.no_recount)
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        how = "history and every sample's reads" if result.recounted else "history"
        print(
            f"exactly once: epochs {result.epochs}, {result.segments} segment(s) from epoch "
            f"{result.begins[0]} position {result.begins[1]:,}, {result.reads:,} reads ({how} proven)"
        )
    return 0
