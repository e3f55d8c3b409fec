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
