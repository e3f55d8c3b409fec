"""Every fenced Python block of the documentation (``docs/*.md`` and the README) runs, in
the namespace and files of the docstrings' examples and a process group of one: a guide
that drifts from the code fails here. A block that cannot run alone says why, on the
line before it: ``<!-- docs-test: skip (reason) -->``."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest
import torch.distributed as dist

from examples import namespace

ROOT = pathlib.Path(__file__).parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"(?:<!-- docs-test: skip \((?P<why>[^)]*)\) -->\n)?```python\n(?P<code>.*?)```", re.S)
#: Packages a guide imports that a machine may lack: its block skips without them.
OPTIONAL = ("accelerate", "datasets", "grain", "lightning", "ray", "torchdata", "transformers")


def _blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        for k, m in enumerate(BLOCK.finditer(page.read_text())):
            found.append((f"{page.relative_to(ROOT)}#{k}", m.group("code"), m.group("why") or ""))
    return found


BLOCKS = _blocks()


# The guides pin memory for GPUs; this machine may have none. Their toy corpora stand for
# sources of millions of windows: up-sampled to a guide's 10^8 samples, a toy source is
# read in millions of passes, whose tables outgrow a mixture's store (warned).
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
@pytest.mark.filterwarnings("ignore:a shuffled sampler reads this MixedDataset at random:UserWarning")
@pytest.mark.parametrize("name, code, why", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_the_block_runs(name, code, why, example_root, monkeypatch, group_of_one):
    if why:
        pytest.skip(why)
    for package in OPTIONAL:
        if (
            re.search(rf"^\s*(import|from) {package}\b", code, re.M)
            and importlib.util.find_spec(package) is None
        ):
            pytest.skip(f"{package} is not installed")
    monkeypatch.chdir(example_root)
    # A block written for a launched rank joins the group that torchrun would have made.
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    exec(compile(code, name, "exec"), namespace(example_root))  # noqa: S102


def test_every_page_with_code_is_collected_and_every_skip_says_why():
    assert len(BLOCKS) >= 14 and any(name.startswith("README.md") for name, _, _ in BLOCKS)
    assert all(len(why) > 10 for _, _, why in BLOCKS if why)


CONSOLE = re.compile(r"```\n(?P<session>\$ permshard .*?)```", re.S)


def _sessions() -> list[tuple[str, list[str], str]]:
    """Every ``$ permshard ...`` command of a console block, with the output shown under it."""
    found = []
    for page in PAGES:
        for m in CONSOLE.finditer(page.read_text()):
            for part in m.group("session").split("$ permshard ")[1:]:
                command, _, shown = part.partition("\n")
                found.append((f"{page.relative_to(ROOT)}: permshard {command}", command.split(), shown))
    return found


SESSIONS = _sessions()


@pytest.mark.parametrize("name, argv, shown", SESSIONS, ids=[s[0] for s in SESSIONS])
def test_the_cli_prints_what_the_docs_show(name, argv, shown, capsys):
    from permshard._cli import main

    assert main(argv) == 0
    assert capsys.readouterr().out == shown, name
