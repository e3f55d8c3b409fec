"""The quality battery: perm-v1 and perm-v2 pass what numpy's Fisher–Yates passes, and the
battery has the power to flag an affine map and a 4-round Feistel."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from helpers import battery
from permshard import Permutation

#: A p-value below this fails a test. Deterministic seeds: no flakiness, and the
#: Fisher–Yates reference run shows the threshold is not too strict.
ALPHA = 1e-4


def perm_v1(n: int, seed: int, epoch: int) -> np.ndarray:
    return Permutation(n, seed, epoch, algorithm="perm-v1").take(0, n)


def perm_v2(n: int, seed: int, epoch: int) -> np.ndarray:
    return Permutation(n, seed, epoch, algorithm="perm-v2").take(0, n)


#: The shuffles the battery runs on (the 4-round control skips the tiny-n tests).
SHUFFLES = {
    "perm-v1": (perm_v1, True),
    "perm-v2": (perm_v2, True),
    "fisher-yates": (battery.fisher_yates, True),
    "affine": (battery.affine, True),
    "simon-4": (battery.simon_feistel(4), False),
}


@functools.cache
def battery_of(name: str) -> dict[str, float]:
    """The battery's p-values for one shuffle (~9 s), once per pytest worker: each test
    runs only the shuffles it judges."""
    shuffle, small_n = SHUFFLES[name]
    return battery.run(shuffle, small_n=small_n)


def test_numpy_feistel_with_8_rounds_is_perm_v1():
    for n, seed, epoch in [(1000, 5, 6), (65_537, 1, 2), (1_000_003, 9, 9)]:
        assert battery.feistel(8)(n, seed, epoch).tolist() == perm_v1(n, seed, epoch).tolist()


@pytest.mark.slow
def test_reference_passes():
    failed = {k: p for k, p in battery_of("fisher-yates").items() if p < ALPHA}
    assert not failed, f"the threshold is too strict for a true shuffle: {failed}"


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["perm-v1", "perm-v2"])
def test_the_permutations_pass_every_test(algorithm):
    failed = {k: p for k, p in battery_of(algorithm).items() if p < ALPHA}
    assert not failed, f"{algorithm} fails: {failed}"


@pytest.mark.parametrize("n", [65_537, 131_073, 1 << 18])
def test_perm_v2_passes_at_its_smallest_feistel_domains(n):
    """Just above its table (2^16), perm-v2 runs its Feistel on 17 to 19 bits: the large-n
    tests at those sizes pass as Fisher-Yates does."""
    tests = {
        "consecutive_epochs": battery.consecutive_epochs(perm_v2, n),
        "consecutive_seeds": battery.consecutive_seeds(perm_v2, n),
        "lag_one_correlation": battery.lag_one_correlation(perm_v2, n),
        "small_gaps": battery.small_gaps(perm_v2, n),
        "gap_distribution": battery.gap_distribution(perm_v2, n),
        "class_balance_windows": battery.class_balance_windows(perm_v2, n),
        "class_balance_ranks": battery.class_balance_ranks(perm_v2, n),
        "neighbouring_n": battery.neighbouring_n(perm_v2, n),
    }
    failed = {k: p for k, p in tests.items() if p < ALPHA}
    assert not failed, f"perm-v2 at n={n} fails: {failed}"


@pytest.mark.parametrize("control", ["affine", "simon-4"])
def test_battery_flags_bad_shuffles(control):
    failed = {k: p for k, p in battery_of(control).items() if p < ALPHA}
    assert failed, f"the battery cannot tell {control} from a shuffle: {battery_of(control)}"


def report(results: dict[str, dict[str, float]]) -> str:
    """The p-values as a table: a header of shuffles, a row per test."""
    names = list(results["perm-v1"])
    rows = [f"{'test':<24}" + "".join(f"{k:>14}" for k in results)]
    rows += [
        f"{name:<24}" + "".join(f"{results[k].get(name, float('nan')):>14.3g}" for k in results)
        for name in names
    ]
    return "\n".join(rows)


@pytest.mark.slow
def test_the_report_lists_every_test_and_perm_v1_sides_with_fisher_yates():
    """The p-values, for the record (printed with pytest -s): every test ran on every
    shuffle (the 4-round control skips the tiny-n tests), each value a probability, and
    perm-v1 passes exactly the tests Fisher-Yates passes."""
    results = {name: battery_of(name) for name in SHUFFLES}
    table = report(results)
    print("\n" + table)
    names = list(results["perm-v1"])
    lines = table.splitlines()
    assert lines[0].split() == ["test", *results]
    assert [line.split()[0] for line in lines[1:]] == names
    for line in lines[1:]:
        values = [float(v) for v in line.split()[1:]]
        assert all(np.isnan(v) or 0 <= v <= 1 for v in values), line
    assert set(results["affine"]) == set(names)
    assert set(results["simon-4"]) == set(names) - set(battery.SMALL_N_TESTS)
    for name in names:
        for algorithm in ("perm-v1", "perm-v2"):
            assert (results[algorithm][name] >= ALPHA) == (results["fisher-yates"][name] >= ALPHA), name
