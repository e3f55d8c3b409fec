"""The objects whose methods are on the call stack: how a sampler learns, at the start of a
pass, which DataLoader iterator or which accelerate wrapper is iterating it."""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType
from typing import Any, Optional

#: permshard's own frames (a sampler's ``__iter__``, a batch sampler's) hold neither a
#: DataLoader iterator nor accelerate's wrapper: the walk does not read their locals.
_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def iterating(depth: int = 16, until: Optional[type] = None) -> tuple[Any, ...]:
    """The ``self`` of each method among the ``depth`` frames from the caller's up (but
    permshard's own): the one walk of a pass, read by the accelerate guard and by the
    DataLoader count.

    Only frames whose code names a ``self`` build their locals (``f_locals`` costs a
    dict per frame; a pass starts every epoch), and which code does is decided once per
    code object.

    Args:
        depth (int, optional): frames to look through. Default: ``16``.
        until (type, optional): stop after the first owner of this type (the DataLoader
            iterator: whatever iterates the sampler sits between it and the sampler).
    """
    owners = []
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        has_owner = _HAS_OWNER.get(code)
        if has_owner is None:
            has_owner = _HAS_OWNER[code] = _names_an_owner(code)
        if has_owner:
            owner = frame.f_locals.get("self")
            if owner is not None:
                owners.append(owner)
                if until is not None and isinstance(owner, until):
                    break
        frame = frame.f_back
    return tuple(owners)


#: Whether a code object's frames may hold an owner, by code object (a program has few).
_HAS_OWNER: dict[CodeType, bool] = {}


def _names_an_owner(code: CodeType) -> bool:
    """Whether frames of ``code`` hold a ``self`` worth reading: a method's, outside
    permshard."""
    named = "self" in code.co_varnames or "self" in code.co_freevars
    return named and not code.co_filename.startswith(_OWN_FILES)
