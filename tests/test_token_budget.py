"""TokenBudgetBatchSampler: the budget, equal batch counts, exactly once, padding, load
balance, order, epochs, resume (also onto other world sizes), bad input, a 1e8-entry
memmap, and real ranks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import dist_workers
import numpy as np
import pytest
from distributed import launch

from permshard.token_budget import TokenBudgetBatchSampler

BUDGET = 16384


def lognormal(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.5, 0.8, size=n), 1, 4096).astype(np.int64)


def run_ranks(lengths, world, **kwargs) -> list[list[list[int]]]:
    out = []
    for rank in range(world):
        out.append(list(TokenBudgetBatchSampler(lengths, BUDGET, world, rank, **kwargs)))
    return out


@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_property_on_lognormal_lengths(world):
    lengths = lognormal(150_000)
    ranks = run_ranks(lengths, world, seed=3, window=1 << 14)
    assert len({len(r) for r in ranks}) == 1  # every rank the same number of batches
    assert len(ranks[0]) == len(TokenBudgetBatchSampler(lengths, BUDGET, world, 0, seed=3, window=1 << 14))
    counts = Counter(x for r in ranks for b in r for x in b)
    assert counts == Counter(range(len(lengths)))  # every sample exactly once
    batches = [b for r in ranks for b in r]
    assert all(len(b) * lengths[b].max() <= BUDGET for b in batches)
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    assert (padded - real) / real <= 0.03
    if world > 1:
        loads = np.array([[lengths[r[s]].sum() for r in ranks] for s in range(len(ranks[0]))])
        assert np.median(loads.max(1) / loads.min(1)) <= 1.05
    means = np.array([lengths[b].mean() for b in ranks[0]])
    assert abs(np.corrcoef(means[:-1], means[1:])[0, 1]) <= 0.3  # not ordered by length


def test_a_new_plan_every_epoch():
    lengths = lognormal(20_000)
    s = TokenBudgetBatchSampler(lengths, BUDGET, 2, 0, seed=1)
    first = list(s)
    s.set_epoch(1)
    second = list(s)
    assert first != second and Counter(map(tuple, first)) != Counter(map(tuple, second))


@pytest.mark.parametrize("n, world, drop_last", [(1, 4, False), (3, 4, False), (3, 4, True), (17, 4, False)])
def test_tiny_datasets_pad_or_drop_as_declared(n, world, drop_last):
    lengths = np.full(n, 5000)  # 3 per batch at most
    ranks = run_ranks(lengths, world, drop_last=drop_last)
    assert len({len(r) for r in ranks}) == 1
    cert = TokenBudgetBatchSampler(lengths, BUDGET, world, 0, drop_last=drop_last).verify()
    seen = Counter(x for r in ranks for b in r for x in b)
    assert sum(seen.values()) - len(seen) == cert["padding"]
    assert n - len(seen) == cert["dropped"]
    assert (cert["dropped"] == 0) if not drop_last else (cert["padding"] == 0)


def test_bad_input_names_the_fix():
    with pytest.raises(ValueError, match="sample 7 has length 20000 > max_tokens=16384"):
        lengths = np.full(10, 10)
        lengths[7] = 20000
        list(TokenBudgetBatchSampler(lengths, BUDGET, 1, 0, shuffle=False))
    with pytest.raises(TypeError, match="1-D integer array"):
        TokenBudgetBatchSampler(np.ones((2, 2), dtype=np.int64), BUDGET, 1, 0)
    with pytest.raises(TypeError, match="1-D integer array"):
        TokenBudgetBatchSampler(np.ones(4), BUDGET, 1, 0)
    with pytest.raises(ValueError, match="max_tokens should be a positive integer"):
        TokenBudgetBatchSampler(np.ones(4, dtype=np.int64), 0, 1, 0)
    with pytest.raises(ValueError, match="empty"):
        TokenBudgetBatchSampler(np.ones(0, dtype=np.int64), BUDGET, 1, 0)


def test_resume_continues_the_plan_on_the_same_world_size():
    lengths = lognormal(30_000)
    full = list(TokenBudgetBatchSampler(lengths, BUDGET, 2, 1, seed=5, window=4096))
    s = TokenBudgetBatchSampler(lengths, BUDGET, 2, 1, seed=5, window=4096)
    it = iter(s)
    head = [next(it) for _ in range(40)]
    [next(it) for _ in range(5)]  # a prefetching loader pulled more than the loop used
    state = s.state_dict(consumed_steps=40)
    resumed = TokenBudgetBatchSampler(lengths, BUDGET, 2, 1, seed=5, window=4096)
    resumed.load_state_dict(state)
    assert head + list(resumed) == full


def test_resumes_onto_other_world_sizes_are_exactly_once():
    lengths = lognormal(40_000, seed=2)
    seen: Counter = Counter()
    state = None
    for world, steps in [(4, 37), (3, 50), (2, None)]:
        saved = None
        for rank in range(world):
            s = TokenBudgetBatchSampler(lengths, BUDGET, world, rank, seed=9, window=4096)
            if state is not None:
                s.load_state_dict(state)
            it = iter(s)
            taken = list(it) if steps is None else [next(it) for _ in range(steps)]
            seen.update(x for b in taken for x in b)
            if rank == 0:
                saved = s.state_dict()
        state = saved
    assert seen == Counter(range(len(lengths)))


def test_first_batch_of_a_1e8_memmap_is_fast_and_small(tmp_path):
    path = tmp_path / "lengths.bin"
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        for _ in range(10):
            np.clip(rng.lognormal(5.5, 0.8, size=10**7), 1, 4096).astype(np.int32).tofile(f)
    script = textwrap.dedent(f"""
        import time, numpy as np
        from permshard.token_budget import TokenBudgetBatchSampler

        def anon_mib():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
        lengths = np.memmap({str(path)!r}, dtype=np.int32, mode="r")
        before = anon_mib()
        began = time.perf_counter()
        batch = next(iter(TokenBudgetBatchSampler(lengths, {BUDGET}, 8, 3, seed=1)))
        print(len(lengths), time.perf_counter() - began, anon_mib() - before, len(batch))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    n, seconds, mib, size = done.stdout.split()
    assert int(n) == 10**8 and int(size) > 0
    assert float(seconds) < 2 and float(mib) < 200, done.stdout


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 4])
def test_real_ranks_with_a_dataloader(world):
    results = launch(dist_workers.token_budget, world, 20_000)
    assert len({len(r["batches"]) for r in results}) == 1
    seen = Counter(x for r in results for b in r["batches"] for x in b)
    assert seen == Counter(range(20_000))
    # The properties, on what the real ranks' DataLoaders delivered.
    lengths = np.clip(np.random.default_rng(0).lognormal(5.5, 0.8, size=20_000), 1, 4096).astype(np.int64)
    batches = [b for r in results for b in r["batches"]]
    assert all(len(b) * lengths[b].max() <= BUDGET for b in batches)
    real = sum(int(lengths[b].sum()) for b in batches)
    assert sum(len(b) * int(lengths[b].max()) for b in batches) <= 1.03 * real
    loads = np.array(
        [[lengths[r["batches"][s]].sum() for r in results] for s in range(len(results[0]["batches"]))]
    )
    assert np.median(loads.max(1) / loads.min(1)) <= 1.05
    for r in results:
        assert "ranks disagree on max_tokens" in r["disagree"]


def test_device_mesh_gives_the_data_parallel_rank():
    class Mesh:
        mesh_dim_names = ("dp", "tp")

        def size(self, dim: int) -> int:
            return 2

        def get_local_rank(self, name: str) -> int:
            return {"dp": 1, "tp": 0}[name]

    s = TokenBudgetBatchSampler(lognormal(1000), BUDGET, device_mesh=Mesh(), mesh_dim="dp")
    assert (s.num_replicas, s.rank) == (2, 1)
    assert list(s) == list(TokenBudgetBatchSampler(lognormal(1000), BUDGET, 2, 1))


@pytest.mark.multiprocess
def test_accelerate_helper_saves_and_restores_the_position(tmp_path):
    pytest.importorskip("accelerate")
    first = launch(dist_workers.accelerate_token_budget, 2, 6000, str(tmp_path), 12)
    rest = launch(dist_workers.accelerate_token_budget, 2, 6000, str(tmp_path), None)
    assert Counter(x for r in first + rest for x in r) == Counter(range(6000))
