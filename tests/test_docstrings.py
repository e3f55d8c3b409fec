"""Every ``Example::`` block of the package's docstrings runs as a doctest, in a namespace
with what the examples name: a dataset, a sampler, a loader, numpy and torch, and in a
directory holding the files they open (token files, a Megatron corpus, feature rows,
lengths, JSON lines), all made here, and in a process group of one (gloo) made for the
example and torn down after it: the examples are written for a launched rank."""

from __future__ import annotations

import doctest
import importlib
import pathlib
import pkgutil

import pytest

import permshard
from helpers.examples import namespace


def _examples() -> list[doctest.DocTest]:
    found = []
    finder = doctest.DocTestFinder(exclude_empty=True)
    for info in pkgutil.walk_packages(permshard.__path__, "permshard."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [t for t in finder.find(module) if t.examples]
    return sorted(found, key=lambda t: t.name)


EXAMPLES = _examples()


@pytest.mark.parametrize("test", EXAMPLES, ids=lambda t: t.name)
def test_the_example_runs(
    test: doctest.DocTest,
    example_root: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    group_of_one: None,
) -> None:
    monkeypatch.chdir(example_root)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    test.globs = {**test.globs, **namespace(example_root)}  # samplers of the group's world
    result = runner.run(test, out=out.append)
    assert result.failed == 0, "".join(out)


def test_every_module_with_an_example_is_collected() -> None:
    assert len(EXAMPLES) >= 40 and any(t.name.endswith("sampler.ShardedSampler") for t in EXAMPLES)
