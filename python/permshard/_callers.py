"""The objects whose methods are on the call stack: how a sampler learns, at the start of a
pass, which DataLoader iterator or which accelerate wrapper is iterating it."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, Optional


def iterating(depth: int = 16) -> tuple[Any, ...]:
    """The ``self`` of each method among the ``depth`` frames from the caller's up: the one
    walk of a pass, read by the accelerate guard and by the DataLoader count.

    Only frames whose code names a ``self`` build their locals (``f_locals`` costs a
    dict per frame; a pass starts every epoch).

    Args:
        depth (int, optional): frames to look through. Default: ``16``.
    """
    owners = []
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        if "self" in code.co_varnames or "self" in code.co_freevars:
            owner = frame.f_locals.get("self")
            if owner is not None:
                owners.append(owner)
        frame = frame.f_back
    return tuple(owners)
