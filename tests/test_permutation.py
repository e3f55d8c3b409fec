"""Permutation: the public API, errors, pickling, numpy hand-over, golden vectors, GIL."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import permshard
from helpers import native
from helpers.reference_perm_v1 import ReferencePermutation
from helpers.reference_perm_v2 import ReferencePermutation as ReferencePermutationV2
from permshard import Permutation

GOLDEN = pathlib.Path(__file__).parent / "golden" / "perm-v1.json"


def test_is_a_permutation_with_inverse():
    for n in (1, 2, 3, 10, 1000, 65_537):
        p = Permutation(n, seed=5, epoch=2)
        values = list(p)
        assert sorted(values) == list(range(n))
        assert len(p) == n
        for i in (0, n // 2, n - 1):
            assert p.index_of(p[i]) == i


@pytest.mark.parametrize("algorithm", ["perm-v1", "perm-v2"])
def test_golden_vectors_from_python(algorithm):
    golden = json.loads(GOLDEN.with_name(f"{algorithm}.json").read_text())
    assert golden["algorithm"] == algorithm and permshard.ALGORITHM == "perm-v2"
    for case in golden["cases"]:
        p = Permutation(int(case["n"]), int(case["seed"]), int(case["epoch"]), algorithm=algorithm)
        assert p.algorithm == algorithm
        for pos, val in zip(case["positions"], case["values"]):
            assert p[int(pos)] == int(val)
            assert p.index_of(int(val)) == int(pos)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 2**64 - 1),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
    frac=st.floats(0, 1, exclude_max=True),
)
def test_matches_the_plain_python_reference(n, seed, epoch, frac):
    if n <= 2**15:  # the reference walks ~2**16 / n steps per lookup: keep tiny n cheap
        n += 2**15
    ref = ReferencePermutation(n, seed, epoch)
    p = Permutation(n, seed, epoch, algorithm="perm-v1")
    i = min(n - 1, int(n * frac))
    assert p[i] == ref.forward(i)
    assert p.index_of(p[i]) == i


@settings(max_examples=60, deadline=None)
@given(
    n=st.one_of(st.integers(1, 3000), st.integers(2**16 - 2, 2**16 + 3), st.integers(1, 2**64 - 1)),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
    frac=st.floats(0, 1, exclude_max=True),
)
def test_perm_v2_matches_its_plain_python_reference(n, seed, epoch, frac):
    ref = ReferencePermutationV2(n, seed, epoch)
    p = Permutation(n, seed, epoch)  # the default
    i = min(n - 1, int(n * frac))
    assert p[i] == ref.forward(i)
    assert p.index_of(p[i]) == i == ref.inverse(p[i])


def test_an_unknown_algorithm_is_refused_with_the_names():
    with pytest.raises(
        ValueError,
        match='unknown permutation algorithm "perm-v3": use "perm-v2" \\(the default\\) or "perm-v1"',
    ):
        Permutation(10, algorithm="perm-v3")
    with pytest.raises(TypeError, match="algorithm must be a str"):
        Permutation(10, algorithm=2)  # type: ignore[arg-type]
    p = Permutation(10, 1, 2, algorithm="perm-v1")
    assert pickle.loads(pickle.dumps(p)) == p != Permutation(10, 1, 2)
    assert "perm-v1" in repr(p) and Permutation(10).algorithm == "perm-v2"


def test_simd_level_names_the_level_in_use_and_a_forced_one_is_checked():
    assert permshard.simd_level() in {"scalar", "avx2", "avx512", "neon"}
    code = (
        "import permshard; print(permshard.simd_level()); permshard.Permutation(10**6, algorithm='perm-v2')"
    )
    env = dict(os.environ, PERMSHARD_SIMD="scalar")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "scalar", done.stderr
    env["PERMSHARD_SIMD"] = "avx1024"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert 'PERMSHARD_SIMD="avx1024" is not a SIMD level of this CPU; it has' in done.stderr
    assert "scalar" in done.stderr.splitlines()[-1]


def test_sequence_indexing():
    p = Permutation(10, seed=1)
    assert p[-1] == p[9] and p[-10] == p[0]
    for bad in (10, -11, 2**70):
        with pytest.raises(IndexError, match="out of range"):
            p[bad]
    assert p[np.int64(3)] == p[3]


def test_take_returns_int64_and_matches_indexing():
    p = Permutation(1_000_003, seed=9, epoch=4)
    a = p.take(500, 10_500)
    assert a.dtype == np.int64 and a.shape == (10_000,) and a.flags.writeable
    assert a.tolist() == [p[i] for i in range(500, 10_500)]
    assert p.take(7, 7).shape == (0,)
    with pytest.raises(ValueError, match="invalid range"):
        p.take(5, 4)
    with pytest.raises(ValueError, match="invalid range"):
        p.take(0, 1_000_004)
    with pytest.raises(ValueError, match="int64"):
        Permutation(2**63 + 1).take(0, 1)


def test_huge_n_indexing_and_iteration_prefix():
    n = 2**64 - 1
    p = Permutation(n, seed=3)
    head = [p[i] for i in range(5)]
    assert all(0 <= x < n for x in head)
    it = iter(p)
    assert [next(it) for _ in range(5)] == head
    assert p[-1] == p[n - 1] and p.index_of(p[-1]) == n - 1


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        ({"n": 0}, ValueError, r"n must be in \[1, 2\*\*64 - 1\], got 0"),
        ({"n": -5}, ValueError, "got -5"),
        ({"n": 2**64}, ValueError, "got 18446744073709551616"),
        ({"n": 10.0}, TypeError, "n must be an integer, got float 10.0"),
        ({"n": True}, TypeError, "got the bool True"),
        ({"n": "10"}, TypeError, "got str"),
        ({"n": 10, "seed": -1}, ValueError, r"seed must be in \[0, 2\*\*64 - 1\], got -1"),
        ({"n": 10, "seed": 2**64}, ValueError, "seed must be in"),
        ({"n": 10, "epoch": -1}, ValueError, "epoch must be in"),
        ({"n": 10, "epoch": 1.5}, TypeError, "epoch must be an integer"),
        ({"n": 10, "seed": False}, TypeError, "bool"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        Permutation(**kwargs)


def test_index_of_errors():
    p = Permutation(10)
    with pytest.raises(ValueError, match=r"sample 10 is out of range: expected 0 <= sample < 10"):
        p.index_of(10)
    with pytest.raises(ValueError, match=r"sample must be in \[0, 2\*\*64 - 1\], got -1"):
        p.index_of(-1)
    with pytest.raises(TypeError):
        p.index_of(1.0)


def test_native_layer_never_panics():
    """Arguments that skip the Python checks still get Python exceptions, never a Rust panic."""
    from permshard import _core

    with pytest.raises(ValueError):
        _core.Permutation(0)
    with pytest.raises(OverflowError):
        _core.Permutation(-1)
    p = _core.Permutation(10)
    with pytest.raises(ValueError):
        p.forward(10)
    with pytest.raises(ValueError):
        p.take(3, 2)
    part = native.sharding(10, 3, shuffle=False).partition()
    with pytest.raises(ValueError, match="Invalid rank 3"):
        part.take(3, 0, 1)
    with pytest.raises(ValueError, match=r"invalid range \[2, 7\): expected 0 <= start <= stop <= 4"):
        part.take_list(0, 2, 7)
    with pytest.raises(ValueError, match=r"invalid range \[3, 2\)"):
        part.take(0, 3, 2)
    assert part.take(1, 1, 3).tolist() == part.take_list(1, 1, 3) == [4, 7]  # positions 1 + 3k
    with pytest.raises(ValueError, match=r"invalid range \[5, 4\)"):
        part.take_positions_list(5, 4)
    with pytest.raises(ValueError):
        native.sharding(10, 0).partition()
    with pytest.raises(ValueError):
        native.sharding(2**64 - 1, 2).partition()


def test_pickle_and_equality():
    p = Permutation(12345, seed=6, epoch=7)
    q = pickle.loads(pickle.dumps(p))
    assert q == p and hash(q) == hash(p)
    assert q.take(0, 100).tolist() == p.take(0, 100).tolist()
    assert Permutation(12345, seed=6, epoch=8) != p


def test_repr_is_helpful():
    text = repr(Permutation(100, seed=2, epoch=3))
    assert text.startswith("Permutation(n=100, seed=2, epoch=3) [")
    assert "..." in text and "perm-v2" in text


def test_version_is_cargos():
    cargo = (pathlib.Path(__file__).parent.parent / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.MULTILINE)
    assert version is not None and permshard.__version__ == version.group(1)
    # maturin reads the same version into the package's metadata.
    from importlib.metadata import version as installed

    assert installed("permshard") == permshard.__version__


def ticks_during(work) -> tuple[list[float], float, float]:
    """Runs ``work`` in one thread while another stamps the time in a loop; returns the
    stamps and the work's start and end."""
    window: list[float] = []
    stamps: list[float] = []
    done = threading.Event()

    def run():
        window.append(time.perf_counter())
        work()
        window.append(time.perf_counter())
        done.set()

    def tick():
        while not done.is_set():
            stamps.append(time.perf_counter())

    worker, counter = threading.Thread(target=run), threading.Thread(target=tick)
    counter.start()
    worker.start()
    worker.join()
    counter.join()
    start, end = window
    return stamps, start, end


def releases_the_gil(work) -> bool:
    """The criterion of the GIL tests: the work lasts long enough to observe, and another
    Python thread makes progress all through it. A call that holds the GIL leaves one gap
    in the other thread's stamps as long as itself; one that releases it leaves none
    longer than a scheduler's time slice. Three quarters of the work's time between two
    stamps is the line: robust to a loaded machine, where the edges of the window blur."""
    stamps, start, end = ticks_during(work)
    seconds = end - start
    assert seconds > 0.1, f"the work ({seconds:.3f} s) is too short to observe"
    points = [start, *(t for t in stamps if start < t < end), end]
    longest = max(b - a for a, b in zip(points, points[1:]))
    return longest < 0.75 * seconds


def test_take_releases_the_gil():
    p = Permutation(2**40, seed=1)
    assert releases_the_gil(lambda: p.take(0, 30_000_000)), "no Python progress during take: GIL held"


def test_coverage_share_releases_the_gil():

    part = native.sharding(60_000_000, 1).partition()
    assert releases_the_gil(lambda: part.coverage_share(0))


def test_the_criterion_flags_a_call_that_holds_the_gil():
    """Power control: the same criterion rejects one long C call that never releases the
    GIL (sum over a range runs in C from start to end, well over 0.1 s)."""
    assert not releases_the_gil(lambda: sum(range(30_000_000)))


@pytest.mark.parametrize(
    "make", [lambda: Permutation(1000, seed=4), lambda: permshard.BlockPermutation(1000, 16, 3, seed=4)]
)
def test_slices_are_take_arrays(make):
    p = make()
    listed = list(p)  # brute force: every position one by one
    for s in [
        slice(None),
        slice(2, 10),
        slice(10, 2),
        slice(-5, None),
        slice(None, None, 3),
        slice(900, 5, -7),
        slice(None, None, -1),
        slice(3, 999, 250),
        slice(0, 1000, 999),
        slice(7, 8, 5),
    ]:
        got = p[s]
        assert isinstance(got, np.ndarray) and got.dtype == np.int64, s
        assert got.tolist() == listed[s], s
    assert np.array_equal(p[2:10], p.take(2, 10))
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        p[::0]
