"""permshard.torchft's CommittedLoader under real torchft: the time from the quorum to the
batch, steady and at the step after a membership change, with the batch fetched at the call
(no workers) or prefetched by DataLoader workers for the last membership; and the audit's
time over a long run's records. Writes docs/torchft.md.

    python benches/torchft_loader.py --markdown docs/torchft.md

Three replica groups (threads, gloo, the lighthouse in-process: torchft's own test harness),
a dataset whose sample costs ``--sample-ms`` to read (a decode), a step of ``--step-ms``
(a model); group 2 fails at step 10 and restarts (the membership changes twice: when it
leaves, and when it is back).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(
    0, str(pathlib.Path(__file__).parent.parent / "tests")
)  # torchft's harness, as the tests run it
from torchft.manager_integ_test import EventInjector  # noqa: E402

from helpers.torchft_groups import run_groups  # noqa: E402
from permshard.torchft import audit  # noqa: E402


class SlowSamples(torch.utils.data.Dataset):
    """Sample ``i`` costs ``seconds`` to read (a decode, a read from storage)."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.seconds)
        return torch.full((3,), float(i)), i


Times = list[tuple[float, float]]


def latencies(workers: int, args: argparse.Namespace) -> tuple[Times, Times, Times]:
    """(quorum-to-batch, of which the batch) seconds of the groups' steps: steady, at the
    step after a membership change, and each loader's first (its workers start)."""
    record = run_groups(
        steps=args.steps,
        async_quorum=False,
        injectors=[EventInjector(), EventInjector(), EventInjector().fail_at(0, 10)],
        dataset=SlowSamples(10_000, args.sample_ms / 1e3),
        step_seconds=args.step_ms / 1e3,
        rejoin_after=0.5,
        batch_size=args.batch_size,
        num_workers=workers,
        multiprocessing_context="fork" if workers else None,
    )
    audit(record.states)  # exactly once, or the numbers mean nothing
    groups_at = {step: groups for step, _, groups, *_ in record.waits}
    steady, changed, first = [], [], []
    for step, _, groups, call, wait, fetch in record.waits:
        if call == 0:
            first.append((wait, fetch))  # a loader's first batch: its workers start
        elif groups_at.get(step - 1, groups) != groups:
            changed.append((wait, fetch))
        else:
            steady.append((wait, fetch))
    return steady, changed, first


def audit_seconds(steps: int, groups: int) -> float:
    """The audit of ``groups`` loaders' records over ``steps`` steps, one membership change each 1,000."""
    states = []
    for g in range(groups):
        rows = [[s, 1000, (s * groups + g) * 8, groups * 8, 8, groups, g] for s in range(0, steps, 1000)]
        states.append({"algorithm": "committed-v1", "n": 10**9, "seed": 0, "shuffle": True, "reads": rows})
    began = time.perf_counter()
    proof = audit(states)
    assert proof.positions == steps * groups * 8
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sample-ms", type=float, default=0.5)
    parser.add_argument("--step-ms", type=float, default=30.0)
    parser.add_argument("--markdown", help="write the table to this file")
    args = parser.parse_args()

    def ms(times: Times) -> str:
        wait, fetch = (statistics.median(t[i] for t in times) * 1e3 for i in (0, 1))
        return f"{wait:.2f} ms ({fetch:.2f}; max {1e3 * max(t[0] for t in times):.2f}, {len(times)} steps)"

    rows = []
    for workers in (0, 2):
        steady, changed, first = latencies(workers, args)
        rows.append(f"| {workers} | {ms(steady)} | {ms(changed)} | {ms(first)} |")
        print(rows[-1], flush=True)
    audits = [f"| {s:,} | {3} | {audit_seconds(s, 3) * 1e3:.1f} ms |" for s in (10_000, 100_000)]
    text = "\n".join(
        [
            "# torchft: measured",
            "",
            "`python benches/torchft_loader.py --markdown docs/torchft.md`: three replica groups under",
            f"real torchft (gloo, threads), batches of {args.batch_size} samples that cost "
            f"{args.sample_ms} ms each to read, steps of {args.step_ms:.0f} ms; group 2 fails at step 10 and",
            "restarts. The time from the quorum to the batch in the loop (the groups' one small collective",
            "included; in parentheses the batch's part of it), median over the groups' steps:",
            "",
            "| DataLoader workers | steady | the step after a membership change | a loader's first batch |",
            "|---|---|---|---|",
            *rows,
            "",
            "With workers the steady batch was prefetched for the last membership: the loop waits",
            "for the collective, which waits for the slowest group. After a change the prefetched",
            "batches are discarded and the right one is read in the loop's process (as without",
            "workers); a loader's first batch starts its workers. On a machine of few cores shared",
            "by all groups and their workers (as here) the change step also waits for the CPU the",
            "restarted group's new workers take; on a cluster each group has its own.",
            "",
            "The audit of the groups' records (one row per 1,000 steps a group):",
            "",
            "| steps | groups | audit |",
            "|---|---|---|",
            *audits,
            "",
        ]
    )
    print(text)
    if args.markdown:
        pathlib.Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
