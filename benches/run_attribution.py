"""A run's history at 10¹² samples: the time of ``Run.where``, ``Run.show`` and
``Run.audit(recount=False)`` from a checkpoint of a run that resumed onto other world and
batch sizes and took samples down, and the bytes a change costs in the state dict
(pickled and as JSON). The targets: < 10 ms an answer, O(#changes) bytes.

Then a token-budget run (2 ranks, a resume onto 3 mid-epoch, a second epoch) at 10⁶ and
10⁷ samples: a window's steps depend on its lengths, so the first answer plans every window
the history read (the run's index), and each answer after it one window per segment; the
audit counts every read.

    python benches/run_attribution.py
"""

from __future__ import annotations

import json
import pickle
import statistics
import time

import numpy as np

from permshard import Run, ShardedBatchSampler, ShardedSampler, TokenBudgetBatchSampler

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


def budget_checkpoint(n: int) -> tuple[dict, np.ndarray]:
    """A token-budget run over ``n`` samples: 2 ranks for 100 steps, then 3 ranks to the end
    of epoch 0 (read through ``plan``, not iterated), and 100 steps of epoch 1."""
    lengths = np.random.default_rng(0).integers(16, 2048, size=n).astype(np.int32)

    def make(world: int) -> TokenBudgetBatchSampler:
        return TokenBudgetBatchSampler(lengths, 16384, world, 0, seed=1, check_consensus=False)

    first = make(2)
    it = iter(first)
    for _ in range(100):
        next(it)
    resumed = make(3)
    resumed.load_state_dict(first.state_dict())
    for _ in resumed:  # this rank's batches to the end of the epoch
        pass
    resumed.set_epoch(1)
    it = iter(resumed)
    for _ in range(100):
        next(it)
    return resumed.state_dict(), lengths


def ms(call, repeat: int = 20) -> str:
    times = []
    for _ in range(repeat):
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
    print(
        "\n| token budget, n | first answer (the index) | where (last window) | show (last step of "
        "epoch 0) | audit | bytes JSON |"
    )
    print("|---|---|---|---|---|---|")
    for n in (10**6, 10**7):
        state, lengths = budget_checkpoint(n)
        run = Run(state, lengths=lengths)
        epoch0_end = run.segments[2]["step"] - 1
        late = run.show(epoch0_end)[0].sample
        row = [
            f"{n:,}",
            ms(lambda state=state, lengths=lengths: Run(state, lengths=lengths).where(0), 1),
            ms(lambda run=run, late=late: run.where(late), 3),
            ms(lambda run=run, step=epoch0_end: run.show(step), 3),
            ms(lambda run=run: run.audit(), 1),
            f"{len(json.dumps(state)):,}",
        ]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
