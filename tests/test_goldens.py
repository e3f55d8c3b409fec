"""Every committed golden file is what its plain-Python reference computes, in the suite:
the vectors the core is checked against (from Rust and from Python) were never edited by
hand, and a reference that drifted from its file fails here."""

from __future__ import annotations

import json

import pytest

from helpers import reference_budget, reference_mix, reference_perm_v1, reference_perm_v2, reference_weighted


def _generated(name: str) -> dict:
    if name == "perm-v1":
        return reference_perm_v1.generate()
    if name == "perm-v2":
        return reference_perm_v1.generate(
            "perm-v2", reference_perm_v2.CASES, reference_perm_v2.ReferencePermutation
        )
    if name.startswith("mix-"):
        return reference_mix.generate(name)
    if name.startswith("budget-"):
        return reference_budget.generate(name)
    return reference_weighted.generate()


FILES = {
    "perm-v1": reference_perm_v1.GOLDEN,
    "perm-v2": reference_perm_v2.GOLDEN,
    **reference_mix.GOLDEN,
    **reference_budget.GOLDEN,
    "weighted-v1": reference_weighted.GOLDEN,
}
#: The references that take seconds in plain Python.
SLOW = {"perm-v1", "mix-v1", "budget-v1"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(FILES)]
)
def test_the_golden_file_is_its_references_output(name):
    committed = json.loads(FILES[name].read_text())
    generated = json.loads(json.dumps(_generated(name)))  # as written: tuples become lists
    assert committed == generated
    assert committed["cases"], name  # it holds vectors


def test_committed_v1_reads_perm_v2s_golden_orders():
    """A torchft loader's committed stream (committed-v1) is pinned to perm-v2 in the core's
    registry: position ``e * n + k`` is perm-v2's golden value at ``k`` in epoch ``e``,
    whatever the default permutation becomes."""
    from permshard import _core
    from permshard._committed import ALGORITHM, StreamOrder

    assert (ALGORITHM, _core.COMMITTED_PERMUTATION) == ("committed-v1", "perm-v2")
    for case in json.loads(reference_perm_v2.GOLDEN.read_text())["cases"]:
        n, seed, epoch = int(case["n"]), int(case["seed"]), int(case["epoch"])
        if n > 2**63:  # the committed stream's samples are int64
            continue
        stream = StreamOrder(n, seed, shuffle=True)
        for p, value in zip(case["positions"], case["values"]):
            at = epoch * n + int(p)
            assert stream.samples(at, at + 1) == [int(value)], case
