"""Every fenced Python block of the documentation (``docs/*.md`` and the README) runs as a
user runs it: saved as a script in an empty folder and started with ``python``, or with
``torchrun --nproc_per_node K`` where the line before it says ``<!-- docs-test: torchrun K
-->``. Nothing is supplied: a block makes its own data, imports and process group. A block
that cannot stand alone says so on the page, ``<!-- docs-test: fragment (why) -->``, and in
its first line (``# A fragment ...``); a fragment is compiled, not run. The CLI sessions the
pages show are run and compared too."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from helpers.torchrun import torchrun

ROOT = pathlib.Path(__file__).parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(
    r"(?:<!-- docs-test: (?:torchrun (?P<procs>\d+)|fragment \((?P<why>[^)]*)\)) -->\n)?```python\n(?P<code>.*?)```",
    re.S,
)


def _blocks() -> list[tuple[str, str, int, str]]:
    """``(name, code, processes, why)``: ``processes`` 0 for ``python``, ``why`` for a fragment."""
    found = []
    for page in PAGES:
        for k, m in enumerate(BLOCK.finditer(page.read_text())):
            procs = int(m.group("procs") or 0)
            found.append((f"{page.relative_to(ROOT)}#{k}", m.group("code"), procs, m.group("why") or ""))
    return found


BLOCKS = _blocks()
#: What the test appends to a block: printed once by each process that ran it to the end.
END = "docs-test: the block ran to its end"
#: What torch prints when its threads abort a process in interpreter teardown.
TEARDOWN = "terminate called without an active exception"


@pytest.mark.multiprocess
@pytest.mark.parametrize("name, code, processes, why", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_the_block_runs_as_written(name, code, processes, why, tmp_path):
    assert code.strip(), f"{name} is empty"
    if why:  # not a whole script: it must still be Python, and say what it is
        assert code.startswith("# A fragment"), f"{name}: a fragment's first line says so"
        compile(code, name, "exec")
        return
    script = tmp_path / "docs_block.py"
    script.write_text(code + f"\nprint({END!r}, flush=True)\n")
    if processes:
        run = torchrun("--standalone", "--nproc-per-node", str(processes), str(script), cwd=tmp_path)
        out, _ = run.communicate(timeout=300)
        returncode = run.returncode
    else:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        out, returncode = done.stdout + done.stderr, done.returncode
    ended = out.count(END) == max(processes, 1)
    assert ended, out  # every process ran the block to its end
    # torch's threads can abort a process at interpreter exit after the work is done
    # (docs/troubleshooting.md): that, and only that, is not the block's failure.
    assert returncode == 0 or TEARDOWN in out, out


def test_every_page_with_code_is_collected_and_every_fragment_says_why():
    assert len(BLOCKS) >= 14 and any(name.startswith("README.md") for name, *_ in BLOCKS)
    assert all(len(why) > 10 for *_, why in BLOCKS if why)
    assert sum(1 for *_, why in BLOCKS if why) <= 2  # whole scripts, but for a dataset's hook or two
    # Every marker is read: a misspelt one would run a torchrun block under python.
    markers = sum(page.read_text().count("<!-- docs-test:") for page in PAGES)
    assert markers == sum(1 for _, _, procs, why in BLOCKS if procs or why)


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


#: The folder each page block that saves files ran in, by block name (once per process).
_RAN: dict[str, pathlib.Path] = {}


@pytest.mark.parametrize("name, argv, shown", SESSIONS, ids=[s[0] for s in SESSIONS])
def test_the_cli_prints_what_the_docs_show(name, argv, shown, capsys, tmp_path_factory, monkeypatch):
    from permshard._cli import main

    files = [a for a in argv if a.endswith((".pt", ".npy"))]
    if files:  # the page's own script saves the files the command reads
        page = name.split(":")[0]
        block, code = next(
            (n, code) for n, code, _, _ in BLOCKS if n.startswith(page) and all(f in code for f in files)
        )
        if block not in _RAN:
            _RAN[block] = tmp_path_factory.mktemp("cli")
            monkeypatch.chdir(_RAN[block])
            exec(compile(code, page, "exec"), {"__name__": "__main__"})
            capsys.readouterr()
        monkeypatch.chdir(_RAN[block])
    assert main(argv) == 0
    assert capsys.readouterr().out == shown, name
