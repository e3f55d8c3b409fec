"""The documentation site as a reader opens it: built by mkdocs (strict: a broken link or
cross-reference fails), with every docstring's Sphinx roles rendered as links or code,
never left raw."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent
RAW_ROLE = re.compile(r":(?:py:)?(?:class|meth|attr|func|exc|mod|data|obj):(?:<code>|`)")


def test_the_site_renders_every_role(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted(tmp_path.rglob("*.html"))
    raw = {str(p.relative_to(tmp_path)): RAW_ROLE.findall(p.read_text()) for p in pages}
    assert not {page: found for page, found in raw.items() if found}
    reference = (tmp_path / "reference" / "index.html").read_text()
    # A role became a working link: ShardedBatchSampler's docstring names ShardedSampler.
    assert reference.count('href="#permshard.ShardedSampler"') >= 5
    assert 'id="permshard.ShardedSampler"' in reference
