"""A run's history at 10¹² samples: the time of ``Run.where``, ``Run.show`` and
``Run.audit(recount=False)`` from a checkpoint of a run that resumed onto other world and
batch sizes and took samples down, and the bytes a change costs in the state dict
(pickled and as JSON). The targets: < 10 ms an answer, O(#changes) bytes.

    python benches/run_attribution.py
"""

from __future__ import annotations

import json
import pickle
import statistics
import time

from permshard import Run, ShardedBatchSampler, ShardedSampler

N = 10**12


def checkpoint(changes: int) -> dict:
    """The state of a run of ``N`` samples after ``changes`` resumes, each onto another
    world size and batch size, every other one with a sample more taken down."""
    excluded: list[int] = []
    state = None
    for k in range(changes + 1):
        world, batch = 2 + k % 3, 4 + k % 5
        if k % 2:
            excluded.append(17 * k)
        sampler = ShardedSampler(N, num_replicas=world, rank=0, seed=3, exclude=excluded or None)
        batches = ShardedBatchSampler(sampler, batch)
        if state is not None:
            batches.load_state_dict(state)
        for step, _ in enumerate(batches):  # this rank's 100 batches: every rank in lockstep
            if step == 99:
                break
        state = batches.state_dict()
    return state


def ms(call) -> str:
    times = []
    for _ in range(20):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return f"{1e3 * statistics.median(times):.2f} ms"


def main() -> None:
    print("| changes | where | show | audit (history) | bytes pickled | bytes JSON |")
    print("|---|---|---|---|---|---|")
    sizes = {}
    for changes in (1, 10, 100):
        state = checkpoint(changes)
        run = Run(state)
        sample = run.show(5)[0].sample
        sizes[changes] = (len(pickle.dumps(state)), len(json.dumps(state)))
        step = 50 * changes
        row = [
            str(changes),
            ms(lambda run=run, sample=sample: run.where(sample)),
            ms(lambda run=run, step=step: run.show(step)),
            ms(lambda run=run: run.audit(recount=False)),
            f"{sizes[changes][0]:,}",
            f"{sizes[changes][1]:,}",
        ]
        print("| " + " | ".join(row) + " |")
    pickled, as_json = ((sizes[100][i] - sizes[1][i]) / 99 for i in (0, 1))
    print(f"\nA change costs {pickled:.0f} bytes pickled, {as_json:.0f} as JSON.")


if __name__ == "__main__":
    main()
