"""The ``permshard`` command: plan, verify, locate, mix, inspect, show, where, audit, bench, demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn, Optional

from . import _core
from . import _run as run_commands
from ._config import ShardConfig
from ._core import ShardingError


class _Parser(argparse.ArgumentParser):
    """Bad arguments end in one line on stderr and exit code 2, never a traceback."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def count(text: str) -> int:
    """An exact non-negative integer: 1000, 1_000, 1e9, 1.5e6."""
    try:
        value = Decimal(text.replace("_", ""))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value.to_integral_value() or value < 0:
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text!r}")
    return int(value)


def counts(text: str) -> list[int]:
    return [count(part) for part in text.split(",") if part]


def weights(text: str) -> list[float]:
    """Comma-separated non-negative numbers: 0.6,0.3,0.1 or 6,3,1."""
    try:
        values = [float(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    return values


def stage(text: str) -> tuple[int, list[float]]:
    """START:WEIGHTS, e.g. 1e9:0.2,0.8."""
    start, sep, rest = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"a stage is START:WEIGHTS (e.g. 1e9:0.2,0.8), got {text!r}")
    return count(start), weights(rest)


def id_file(path: str) -> Any:
    """The sample ids of a file: a ``.npy`` array, or text with one id per line (``#``
    comments and blank lines allowed)."""
    import numpy as np

    try:
        if path.endswith(".npy"):
            return np.load(path)
        return np.loadtxt(path, dtype=np.int64, comments="#", ndmin=1)
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"cannot read sample ids from {path!r}: {e}") from None


def _config_args(p: argparse.ArgumentParser, *, dealing: bool = False, given: Sequence[str] = ()) -> None:
    """The flags of :class:`ShardConfig`'s fields, from the core's table of them: all but
    the dealing's (unless ``dealing``) and those ``given`` otherwise."""
    for f in _core.fields("shard"):
        if f["name"] in given or (f["dealing"] and not dealing):
            continue
        flags = f["flags"] or [f"--{f['name'].replace('_', '-')}"]
        options: dict[str, Any] = {"dest": f["name"], "help": f["help"]}
        if f["metavar"]:
            options["metavar"] = f["metavar"]
        if f["kind"] == "ids":
            options.update(type=id_file, default=None)
        elif f["kind"] == "flag":
            options["action"] = "store_false" if f["default"] else "store_true"
        elif f["kind"] == "choice":
            options.update(choices=f["choices"], default=f["default"])
        else:
            options.update(type=count, required=f["required"], default=f["default"])
        p.add_argument(*flags, **options)


def _config(args: argparse.Namespace, **given: Any) -> ShardConfig:
    """The configuration the flags of :func:`_config_args` (and ``given``) describe."""
    fields = {f["name"]: getattr(args, f["name"]) for f in _core.fields("shard") if hasattr(args, f["name"])}
    return ShardConfig(**fields, **given)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="permshard", description="O(1)-memory shuffled sharding for PyTorch, with proofs.")
    sub = top.add_subparsers(
        dest="command",
        metavar="{plan,verify,locate,mix,inspect,show,where,audit,bench,demo}",
        parser_class=_Parser,
    )
    sub.required = True

    p = sub.add_parser("plan", help="per-rank table: samples, padding, dropped, steps")
    _config_args(p)
    p.add_argument("--batch-size", dest="steps_of", type=count, help="add a steps column for this batch size")

    p = sub.add_parser("verify", help="exact proof (by the inverse, O(1) memory), with a progress bar")
    _config_args(p, dealing=True)
    p.add_argument(
        "--method",
        choices=("inverse", "bitmap"),
        default="inverse",
        help="inverse: every item inverted back to its position (default); bitmap: a bit per sample",
    )
    p.add_argument(
        "--rank", type=count, help="prove only this rank's share (each machine of a cluster its own)"
    )
    p.add_argument("--threads", type=count, default=0, help="worker threads (default: every core)")

    p = sub.add_parser("locate", help="which rank yields SAMPLE, at which local position and step")
    p.add_argument("sample", type=count, help="dataset index")
    _config_args(p)
    p.add_argument("--batch-size", dest="steps_of", type=count, help="also print the step")

    p = sub.add_parser("mix", help="realised proportions of a weighted mixture at a few prefixes")
    p.add_argument("--sizes", type=counts, required=True, help="samples per source, e.g. 1e9,1e6,5e5")
    p.add_argument("--weights", type=weights, required=True, help="weight per source, e.g. 0.6,0.3,0.1")
    p.add_argument("-n", type=count, help="positions in the mixture (default: the longest without repeats)")
    p.add_argument("--seed", type=count, default=0, help="seed of the per-pass orders (default 0)")
    p.add_argument(
        "--stage",
        type=stage,
        action="append",
        default=[],
        metavar="START:WEIGHTS",
        help="from position START on mix with these weights (repeatable), e.g. 1e9:0.2,0.8",
    )

    p = sub.add_parser("inspect", help="Megatron indexed datasets: validated, counted, split")
    p.add_argument("prefixes", nargs="+", metavar="PREFIX", help="path/name of name.bin + name.idx")
    p.add_argument("--seq-len", type=count, default=2048, help="window length for the counts (default 2048)")
    p.add_argument("--split", default="969,30,1", help='train,valid,test split (default "969,30,1")')

    p = sub.add_parser(
        "show",
        help="which source, document and tokens each sample of a rank's step holds; "
        "show STEP --state FILE: what every rank of a run read at STEP",
    )
    p.add_argument(
        "--data-path",
        required=True,
        help='Megatron\'s --data-path: "w1 prefix1 w2 prefix2 ..." or "prefix1 prefix2 ..."',
    )
    p.add_argument("--seq-len", type=count, required=True, help="Megatron's --seq-length")
    p.add_argument("--split", help='train,valid,test split, e.g. "969,30,1" (default: no split)')
    p.add_argument("--part", default="train", choices=["train", "valid", "test"], help="default train")
    p.add_argument("--num-samples", type=count, help="blend length (default: every source read once)")
    p.add_argument("--mix-seed", type=count, default=0, help="seed of the blend's passes (default 0)")
    _config_args(p, given=("n",))
    p.add_argument("--rank", type=count, required=True, help="data-parallel rank")
    p.add_argument("--step", type=count, required=True, help="step within the epoch")
    p.add_argument("--batch-size", dest="steps_of", type=count, required=True, help="per-rank batch size")

    run_commands.add_parsers(sub, count)

    p = sub.add_parser("bench", help="side by side with DistributedSampler, in fresh processes")
    p.add_argument("--n", type=counts, default=[10**6, 10**7, 10**8], help="sizes, e.g. 1e6,1e7,1e8")
    p.add_argument("--json", action="store_true", help="print machine-readable results only")
    p.add_argument("--markdown", metavar="PATH", help="also write a markdown table")
    p.add_argument("--plot", metavar="PATH", help="also write a PNG plot")

    p = sub.add_parser("demo", help="4 real ranks shard a generated token file; proofs; resume on 3")
    p.add_argument("--ranks", type=count, default=4, help="ranks of the first run (default 4)")
    p.add_argument("--resume-ranks", type=count, default=3, help="ranks of the resumed run (default 3)")
    return top


def _plan(args: argparse.Namespace) -> int:
    from ._report import build_plan

    config = _config(args)
    plan = build_plan(config.partition(), config, 0)
    print(plan.text(args.steps_of, shown=20))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ._proof import verify_pass

    config = _config(args)
    part = config.partition()
    outside = part.n - min(part.end, part.n)  # positions no rank yields (drop_last)
    if args.method == "bitmap":
        total = part.total_size
    elif args.rank is None:
        total = part.total_size + outside
    else:  # its stream and its slice of the positions outside the pass
        total = part.share_len(args.rank)
    bar: list[Any] = []  # created at the first tick, after the arguments were accepted
    last = [0]

    def on_progress(done: int) -> None:
        if not bar:
            bar.append(_progress(total))
        bar[0].update(done - last[0])
        last[0] = done

    try:
        cert = verify_pass(
            part, config, method=args.method, rank=args.rank, threads=args.threads, on_progress=on_progress
        )
    except ShardingError as e:
        print(f"NOT PROVEN: {e}")
        return 1
    finally:
        if bar:
            bar[0].close()
    print(cert)
    cores = args.threads or os.cpu_count() or 1
    per_item = cert.seconds * cores / max(total, 1) * 1e9
    print(
        f"{total:,} items checked in {cert.seconds:.2f} s: {per_item:.1f} ns per item per core ({cores} cores)"
    )
    if args.rank is not None:
        print(
            f"projected cluster wall time: {cert.seconds:.1f} s with each of the {config.num_replicas} ranks proving "
            "its share on a machine like this one"
        )
    return 0


def _progress(total: int):  # type: ignore[no-untyped-def]
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="idx", unit_scale=True, desc="verify", file=sys.stderr)
    except ImportError:  # tqdm is optional: a silent bar

        class _Silent:
            def update(self, _: int) -> None: ...
            def close(self) -> None: ...

        return _Silent()


def _locate(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.sample >= config.n:
        raise ValueError(f"sample {args.sample} is not in range({config.n})")
    part = config.replace(batch_size=args.steps_of or 0).partition()  # the core cuts the steps
    hits = part.locate(args.sample)
    if not hits:
        why = (
            "excluded"
            if config.exclude is not None and args.sample in config.exclude
            else "dropped by drop_last"
        )
        print(f"sample {args.sample:,} is not yielded in epoch {args.epoch} ({why})")
        return 0
    for rank, local in hits:
        where = ""
        if args.steps_of:
            step, item = part.batch_of(local)
            where = f", step {step:,} (item {item} of the batch)"
        print(f"sample {args.sample:,}: rank {rank}, local position {local:,}{where}")
    return 0


def _mix(args: argparse.Namespace) -> int:
    from fractions import Fraction

    from ._mixture import Mixture

    m = Mixture(args.sizes, args.weights, args.n, args.seed, stages=args.stage)
    schedule = [(0, m.weights), *m.stages]
    bounds = [start for start, _ in schedule[1:]] + [None]
    shares = [
        (start, end, [Fraction(w) / sum(map(Fraction, ws)) for w in ws])
        for (start, ws), end in zip(schedule, bounds)
    ]

    def expected(n: int) -> list[Fraction]:
        """Per source: the weights' share of the positions [0, n), stage by stage."""
        out = [Fraction(0)] * len(m.sizes)
        for start, end, share in shares:
            length = max(0, min(n, end if end is not None else n) - start)
            out = [e + w * length for e, w in zip(out, share)]
        return out

    exact = shares[0][2]
    shown = min(len(exact), 6)
    print(f"{m!r}".replace(f"weights={list(m.weights)}, ", "") if len(exact) > 6 else repr(m))
    head = f"{'prefix':>26} " + " ".join(f"{f'source {s}':>12}" for s in range(shown))
    print(head + f" {'max |count - w·n|':>18}")
    print(f"{'weight':>26} " + " ".join(f"{float(w):>12.6f}" for w in exact[:shown]))
    # Round prefixes and odd ones in between (3·10^k + 1), the stages' starts, the end.
    candidates = {10**k for k in range(1, 20)} | {3 * 10**k + 1 for k in range(1, 19)}
    candidates |= {start for start, _ in m.stages}
    prefixes = sorted({n for n in candidates if n < m.num_samples} | {m.num_samples})
    for n in prefixes:
        c = m.counts(n)
        worst = max(abs(x - e) for x, e in zip(c, expected(n)))
        realised = " ".join(f"{x / n:>12.6f}" for x in c[:shown])
        print(f"{n:>26,} {realised} {float(worst):>18.3f}")
    print()
    print(m.summary())
    if m.table_bytes:  # sources read in tables (mix-v3: up to 512 samples): what random reads keep
        fits = "fit" if m.table_bytes <= m.table_store_bytes else "do not fit"
        print(
            f"\nread at random (a shuffled sampler), the shuffle tables of its passes take "
            f"{m.table_bytes / 2**20:,.1f} MiB and {fits} the {m.table_store_bytes // 2**20:,} MiB "
            "a mixture keeps (PERMSHARD_MIX_TABLE_MIB)"
        )
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .data._indexed import MegatronIndex, find_prefix, split_bounds

    status = 0
    for path in args.prefixes:
        try:
            prefix = find_prefix(path)
            if prefix is None:
                raise ValueError(f"{path}: no {path}.idx beside it, so not a Megatron indexed dataset")
            ix = MegatronIndex(prefix)
        except ValueError as e:
            print(f"{path}: INVALID: {e}")
            status = 1
            continue
        print(
            f"{prefix}: valid; {ix.num_sequences:,} documents, {ix.num_tokens:,} tokens of {ix.dtype}, "
            f"{max(0, (ix.num_tokens - 1) // args.seq_len):,} windows of seq_len {args.seq_len}"
        )
        for part, (lo, hi) in zip(("train", "valid", "test"), split_bounds(args.split, ix.num_sequences)):
            tokens = ix.token_offset(hi) - ix.token_offset(lo)
            windows = max(0, (tokens - 1) // args.seq_len)
            print(
                f"  {part:>5} ({args.split}): documents [{lo:,}, {hi:,}), {tokens:,} tokens, {windows:,} windows"
            )
    return status


def _show(args: argparse.Namespace) -> int:
    from .data._mixed import MixedDataset

    if args.rank >= args.num_replicas:
        raise ValueError(f"--rank {args.rank} is not below --world {args.num_replicas}")
    blend = MixedDataset.from_data_path(
        args.data_path, args.seq_len, args.num_samples, args.mix_seed, split=args.split, part=args.part
    )
    config = _config(args, n=len(blend))
    part = config.replace(batch_size=args.steps_of).partition()  # the core cuts the steps
    if args.step >= part.num_batches:
        raise ValueError(
            f"step {args.step} is past the epoch: rank {args.rank} has {part.num_samples:,} samples "
            f"({part.num_batches:,} steps)"
        )
    positions = part.take_list(args.rank, *part.batch_bounds(args.step))
    print(f"{blend!r}\nrank {args.rank} of {config.num_replicas}, epoch {config.epoch}, step {args.step}:")
    for k, position in enumerate(positions):
        source, window = blend.mixture[position]
        ds = blend.datasets[source]
        pieces = ", ".join(f"doc {d:,} tokens [{a:,}, {b:,})" for d, a, b in ds.documents_of(window))
        print(
            f"  [{k:>3}] position {position:,}: source {source} ({ds.paths[0]}) window {window:,}: {pieces}"
        )
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ._demo import bench

    return bench(args.n, args.json, args.markdown, args.plot)


def _demo(args: argparse.Namespace) -> int:
    from ._demo import demo

    return demo(args.ranks, args.resume_ranks)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["show"] and any(a == "--state" or a.startswith("--state=") for a in argv):
        args = run_commands.history_show_parser(count).parse_args(argv[1:])
        args.command = "show"
        return _run_command(run_commands.show, args)
    args = parser().parse_args(argv)
    commands = {
        "plan": _plan,
        "verify": _verify,
        "locate": _locate,
        "mix": _mix,
        "inspect": _inspect,
        "show": _show,
        "where": run_commands.where,
        "audit": run_commands.audit,
        "bench": _bench,
        "demo": _demo,
    }
    return _run_command(commands[args.command], args)


def _run_command(command: Any, args: argparse.Namespace) -> int:
    try:
        return int(command(args))
    except ShardingError as e:  # a failed proof: its own exit code
        print(f"permshard {args.command}: {e}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as e:  # the library's argument errors: one line
        print(f"permshard {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
