"""The API reference's reading of permshard's docstrings, written in Sphinx's style as
torch's are: each role (``:class:`~permshard.ShardedSampler```, ``:meth:`state_dict```)
becomes a link to the object's section where the reference documents it, and plain code
where it does not (a private class, a torch name). A griffe extension, loaded by
mkdocstrings (``mkdocs.yml``); ``tests/test_docs_site.py`` fails on a role left raw."""

from __future__ import annotations

import pathlib
import re
from typing import Any, Optional

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|attr|func|exc|mod|data|obj):`(?P<target>[^`]+)`")
#: What docs/reference.md documents, by the names its ``:::`` lines give.
DOCUMENTED = tuple(
    line[4:].strip()
    for line in (pathlib.Path(__file__).parent.parent / "docs" / "reference.md").read_text().splitlines()
    if line.startswith("::: ")
)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of the package as Markdown."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        for obj in _walk(pkg):
            if obj.docstring is not None:
                here = obj.path if obj.is_class else obj.parent.path if obj.parent else ""
                obj.docstring.value = ROLE.sub(
                    lambda m, here=here: _markdown(m.group("target"), here, collection), obj.docstring.value
                )


def _walk(obj: Any, seen: Optional[set[str]] = None) -> Any:
    """Every object of the package once (aliases are the objects they point at, elsewhere)."""
    seen = set() if seen is None else seen
    if obj.path in seen or obj.is_alias:
        return
    seen.add(obj.path)
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member, seen)


def _markdown(target: str, here: str, collection: Any) -> str:
    """A role's target as Markdown: ``[shown][identifier]`` where the reference has a
    section for it, else ``shown`` as code."""
    short = target.startswith("~")
    name = target.lstrip("~").removesuffix("()")
    shown = name.rsplit(".", 1)[-1] if short else name
    link = _documented(name, here, collection)
    return f"[`{shown}`][{link}]" if link else f"`{shown}`"


def _documented(name: str, here: str, collection: Any) -> Optional[str]:
    """The identifier of the reference's section for ``name`` (as written in a docstring
    of ``here``), or ``None``."""
    tails = [name] if name.startswith("permshard.") else []
    tails += [f"{prefix}.{name}" for prefix in ("permshard", "permshard.data")]
    public = {_target(collection, d): d for d in DOCUMENTED}
    if here:
        tails.append(f"{public.get(here, here)}.{name}")
    for candidate in tails:
        if candidate in DOCUMENTED:
            return candidate
        owner, _, member = candidate.rpartition(".")
        if owner in DOCUMENTED and not member.startswith("_"):
            try:
                obj = collection[_target(collection, owner)].members.get(member)
            except KeyError:
                obj = None
            if obj is not None and obj.docstring is not None:
                return candidate
    return None


def _target(collection: Any, path: str) -> str:
    """Where the object a public path names is defined (an alias's target)."""
    try:
        obj = collection[path]
    except KeyError:
        return path
    return str(obj.target_path) if obj.is_alias else str(obj.path)
