"""The statistical quality battery of perm-v1 (design §6), as plain functions.

Every test takes a *shuffler* ``shuffle(n, seed, epoch) -> numpy int64 array`` (a whole
permutation of ``range(n)``) and returns a p-value. Fixed seeds make every p-value
deterministic. ``tests/test_quality.py`` runs the battery on perm-v1, on numpy's
Fisher–Yates (the reference that must pass) and on two bad shuffles (an affine map and a
4-round Feistel) that it must flag.
"""

from __future__ import annotations

import math
from itertools import permutations
from typing import Callable

import numpy as np
from scipy import stats
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

Shuffler = Callable[[int, int, int], np.ndarray]


# -- shufflers ------------------------------------------------------------------------------


def fisher_yates(n: int, seed: int, epoch: int) -> np.ndarray:
    """numpy's Fisher–Yates, independent streams per (seed, epoch): the reference."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def affine(n: int, seed: int, epoch: int) -> np.ndarray:
    """p -> (a p + b) mod n: a bijection with no randomness to speak of (power control)."""
    rng = np.random.default_rng([seed, epoch, 99])
    while True:
        a = int(rng.integers(1, n)) if n > 1 else 1
        if math.gcd(a, n) == 1:
            break
    b = int(rng.integers(0, n))
    return (
        (a * np.arange(n, dtype=object) + b).astype(np.int64) % n
        if n > 2**31
        else ((a * np.arange(n, dtype=np.int64) + b) % n)
    )


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _cycle_walk(encrypt: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """The whole permutation of [0, n): encrypt every position, re-encrypt until < n."""
    x = encrypt(np.arange(n, dtype=np.uint64))
    out = x >= np.uint64(n)
    while out.any():
        x[out] = encrypt(x[out])
        out = x >= np.uint64(n)
    return x.astype(np.int64)


def feistel(rounds: int) -> Shuffler:
    """perm-v1's construction with ``rounds`` rounds, vectorised in numpy. With 8 rounds it
    must equal perm-v1 (a cross-check); with 4 (as Grain / TF index_shuffle) it is weak."""
    from .reference_perm_v1 import ReferencePermutation

    def shuffle(n: int, seed: int, epoch: int) -> np.ndarray:
        ref = ReferencePermutation(n, seed, epoch, rounds=rounds)
        keys = [np.uint64(k) for k in ref.keys]

        def encrypt(x: np.ndarray) -> np.ndarray:
            for i, k in enumerate(keys):
                h, l = ref._widths(i)
                mh, ml = np.uint64((1 << h) - 1), np.uint64((1 << l) - 1)
                lo, hi = x & ml, x >> np.uint64(l)
                hi = hi ^ (_splitmix64(lo ^ k) & mh)
                x = (lo << np.uint64(h)) | hi
            return x

        return _cycle_walk(encrypt, n)

    return shuffle


def simon_feistel(rounds: int = 4) -> Shuffler:
    """A Feistel network with the Simon round function ``(x<<<1 & x<<<8) ^ x<<<2 ^ k``
    (rotations within the half), as Grain's / TF's index_shuffle use, with their 4 rounds.
    Same domain, split and cycle walk as perm-v1: only the rounds differ (power control)."""

    def shuffle(n: int, seed: int, epoch: int) -> np.ndarray:
        bits = max(16, (n - 1).bit_length())
        hi_bits, lo_bits = (bits + 1) // 2, bits // 2
        rng = np.random.default_rng([seed, epoch, 4])
        keys = [np.uint64(int(k)) for k in rng.integers(0, 2**32, size=rounds)]

        def rotl(x: np.ndarray, r: int, w: int) -> np.ndarray:
            r %= w
            m = np.uint64((1 << w) - 1)
            return ((x << np.uint64(r)) | (x >> np.uint64(w - r))) & m

        def encrypt(x: np.ndarray) -> np.ndarray:
            h, l = hi_bits, lo_bits
            for k in keys:
                mh, ml = np.uint64((1 << h) - 1), np.uint64((1 << l) - 1)
                lo, hi = x & ml, x >> np.uint64(l)
                f = (rotl(lo, 1, l) & rotl(lo, 8, l)) ^ rotl(lo, 2, l) ^ (k & ml)
                hi = hi ^ (f & mh)
                x = (lo << np.uint64(h)) | hi
                h, l = l, h
            return x

        return _cycle_walk(encrypt, n)

    return shuffle


# -- helpers --------------------------------------------------------------------------------


def _corr_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Pearson's r under independence (normal approximation)."""
    r = np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1]
    z = r * math.sqrt(len(a))
    return float(2 * stats.norm.sf(abs(z)))


def _chi2_p(observed: np.ndarray, expected: np.ndarray, ddof: int = 0) -> float:
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum(), ddof=ddof).pvalue)


def _cycles(perm: np.ndarray) -> int:
    n = len(perm)
    graph = csr_matrix((np.ones(n), (np.arange(n), perm)), shape=(n, n))
    return int(connected_components(graph, directed=True, connection="strong")[0])


# -- the battery ----------------------------------------------------------------------------


def all_orders_equally_likely(shuffle: Shuffler, n: int, over: str, trials: int) -> float:
    """Chi-square of the n! orders' counts, over seeds or over epochs."""
    index = {p: i for i, p in enumerate(permutations(range(n)))}
    counts = np.zeros(len(index))
    for t in range(trials):
        perm = shuffle(n, t, 0) if over == "seeds" else shuffle(n, 12345, t)
        counts[index[tuple(int(v) for v in perm)]] += 1
    return _chi2_p(counts, np.ones(len(index)))


def position_uniformity(shuffle: Shuffler, n: int = 10, trials: int = 3000) -> float:
    """Chi-square of where each value lands ((n-1)^2 degrees of freedom)."""
    counts = np.zeros((n, n))
    for t in range(trials):
        counts[np.arange(n), shuffle(n, t, 1)] += 1
    expected = trials / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(chi2, (n - 1) ** 2))


def fixed_points_poisson(shuffle: Shuffler, n: int = 1000, trials: int = 2000) -> float:
    """Number of fixed points ~ Poisson(1): chi-square over 0, 1, 2, 3, >= 4."""
    counts = np.zeros(5)
    for t in range(trials):
        k = int((shuffle(n, t, 2) == np.arange(n)).sum())
        counts[min(k, 4)] += 1
    pmf = [stats.poisson.pmf(k, 1) for k in range(4)]
    expected = np.array(pmf + [1 - sum(pmf)]) * trials
    return _chi2_p(counts, expected)


def cycle_count_mean(shuffle: Shuffler, n: int = 1000, trials: int = 1000) -> float:
    """Mean cycle count vs H_n (variance H_n - H_n^(2)): z-test."""
    cycles = np.array([_cycles(shuffle(n, t, 3)) for t in range(trials)], dtype=np.float64)
    h1 = sum(1 / k for k in range(1, n + 1))
    h2 = sum(1 / k**2 for k in range(1, n + 1))
    z = (cycles.mean() - h1) / math.sqrt((h1 - h2) / trials)
    return float(2 * stats.norm.sf(abs(z)))


def parity_half(shuffle: Shuffler, n: int, trials: int = 1000) -> float:
    """Odd permutations make half: binomial test."""
    odd = sum((n - _cycles(shuffle(n, t, 4))) % 2 for t in range(trials))
    return float(stats.binomtest(odd, trials, 0.5).pvalue)


def consecutive_epochs(shuffle: Shuffler, n: int = 100_000, pairs: int = 10) -> float:
    """corr(π_e, π_{e+1}) at equal positions, combined over pairs: chi-square of z²."""
    zs = []
    for e in range(pairs):
        a, b = shuffle(n, 7, e), shuffle(n, 7, e + 1)
        zs.append(stats.norm.isf(_corr_p(a, b) / 2))
    return float(stats.chi2.sf(sum(z * z for z in zs), pairs))


def consecutive_seeds(shuffle: Shuffler, n: int = 100_000, pairs: int = 10) -> float:
    zs = []
    for s in range(pairs):
        a, b = shuffle(n, s, 5), shuffle(n, s + 1, 5)
        zs.append(stats.norm.isf(_corr_p(a, b) / 2))
    return float(stats.chi2.sf(sum(z * z for z in zs), pairs))


def lag_one_correlation(shuffle: Shuffler, n: int = 1_000_000) -> float:
    """corr(π(i), π(i+1))."""
    perm = shuffle(n, 11, 0)
    return _corr_p(perm[:-1], perm[1:])


def small_gaps(shuffle: Shuffler, n: int = 1_000_000, gap: int = 100) -> float:
    """How often |π(i+1) - π(i)| <= gap: Poisson test against n · 2·gap / n."""
    perm = shuffle(n, 13, 0)
    count = int((np.abs(np.diff(perm)) <= gap).sum())
    expected = (n - 1) * 2 * gap / (n - 1)
    return float(2 * min(stats.poisson.cdf(count, expected), stats.poisson.sf(count - 1, expected)))


def gap_distribution(shuffle: Shuffler, n: int = 1_000_000, bins: int = 100) -> float:
    """(π(i+1) - π(i)) mod n is uniform on [1, n): chi-square over bins."""
    perm = shuffle(n, 17, 0)
    gaps = (np.diff(perm) % n) - 1
    counts = np.bincount(gaps * bins // (n - 1), minlength=bins)[:bins]
    return _chi2_p(counts.astype(np.float64), np.ones(bins))


def _balance_p(labels: np.ndarray, window: int, classes: int) -> float:
    usable = len(labels) // window * window
    windows = labels[:usable].reshape(-1, window)
    counts = np.stack([(windows == c).sum(axis=1) for c in range(classes)], axis=1)
    expected = window / classes
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # Sampling without replacement: scale by (n - 1) / (n - window) to stay conservative.
    return float(stats.chi2.sf(chi2, windows.shape[0] * (classes - 1)))


def class_balance_windows(shuffle: Shuffler, n: int = 1_000_000, classes: int = 10) -> float:
    """Samples labelled by ``id * classes // n`` (sorted data, the worst case): every
    window of 100 consecutive positions should look like a random draw."""
    labels = shuffle(n, 19, 0) * classes // n
    return _balance_p(labels, 100, classes)


def class_balance_ranks(shuffle: Shuffler, n: int = 1_000_000, classes: int = 10, world: int = 8) -> float:
    """The same for per-rank strided streams (positions r, r + W, ...)."""
    labels = shuffle(n, 23, 0) * classes // n
    ps = [_balance_p(labels[r::world], 100, classes) for r in range(world)]
    return float(stats.combine_pvalues(np.clip(ps, 1e-300, 1.0)).pvalue)


def bit_correlation(shuffle: Shuffler, bits: int = 20) -> float:
    """Every input bit against every output bit over n = 2^bits: min p, Bonferroni."""
    n = 1 << bits
    perm = shuffle(n, 29, 0)
    pos = np.arange(n)
    worst = 1.0
    for i in range(bits):
        x = ((pos >> i) & 1).astype(np.float64) * 2 - 1
        for j in range(bits):
            y = ((perm >> j) & 1).astype(np.float64) * 2 - 1
            z = abs(float(x @ y)) / math.sqrt(n)
            worst = min(worst, float(2 * stats.norm.sf(z)))
    return min(1.0, worst * bits * bits)


def neighbouring_n(shuffle: Shuffler, n: int = 100_000) -> float:
    """π_n and π_{n+1} (same seed and epoch) are unrelated: corr over [0, n)."""
    a, b = shuffle(n, 31, 0), shuffle(n + 1, 31, 0)[:n]
    return _corr_p(a, b)


SMALL_N_TESTS = (
    "orders_n3_seeds",
    "orders_n4_epochs",
    "orders_n5_seeds",
    "orders_n5_epochs",
    "position_uniformity",
    "fixed_points_poisson",
    "cycle_count_mean",
    "parity_n6",
    "parity_n1000",
)


def run(shuffle: Shuffler, small_n: bool = True) -> dict[str, float]:
    """The whole battery: test name -> p-value. ``small_n=False`` skips the tests on
    n <= 1000 (thousands of tiny permutations), too slow for the numpy Feistel controls,
    whose cycle walk over a 16-bit domain is not batched."""
    results = {}
    if small_n:
        results.update(
            {
                "orders_n3_seeds": all_orders_equally_likely(shuffle, 3, "seeds", 2400),
                "orders_n4_epochs": all_orders_equally_likely(shuffle, 4, "epochs", 2400),
                "orders_n5_seeds": all_orders_equally_likely(shuffle, 5, "seeds", 4800),
                "orders_n5_epochs": all_orders_equally_likely(shuffle, 5, "epochs", 4800),
                "position_uniformity": position_uniformity(shuffle),
                "fixed_points_poisson": fixed_points_poisson(shuffle),
                "cycle_count_mean": cycle_count_mean(shuffle),
                "parity_n6": parity_half(shuffle, 6),
                "parity_n1000": parity_half(shuffle, 1000),
            }
        )
    results.update(
        {
            "consecutive_epochs": consecutive_epochs(shuffle),
            "consecutive_seeds": consecutive_seeds(shuffle),
            "lag_one_correlation": lag_one_correlation(shuffle),
            "small_gaps": small_gaps(shuffle),
            "gap_distribution": gap_distribution(shuffle),
            "class_balance_windows": class_balance_windows(shuffle),
            "class_balance_ranks": class_balance_ranks(shuffle),
            "bit_correlation": bit_correlation(shuffle),
            "neighbouring_n": neighbouring_n(shuffle),
        }
    )
    return results
