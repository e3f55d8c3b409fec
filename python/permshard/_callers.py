"""The objects whose methods are on the call stack: how a sampler learns, at the start of a
pass, which DataLoader iterator or which accelerate wrapper is iterating it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any, Optional


def callers(depth: int) -> Iterator[Any]:
    """The ``self`` of each method among the ``depth`` frames above the caller's.

    Only frames whose code names a ``self`` build their locals (``f_locals`` costs a
    dict per frame; a pass starts every epoch).

    Args:
        depth (int): frames to look through.
    """
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return
        code = frame.f_code
        if "self" in code.co_varnames or "self" in code.co_freevars:
            owner = frame.f_locals.get("self")
            if owner is not None:
                yield owner
        frame = frame.f_back


def iterating(depth: int = 16) -> tuple[Any, ...]:
    """The ``self`` of each method among the ``depth`` frames from the caller's up: the one
    walk of a pass, read by the accelerate guard and by the DataLoader count.

    Args:
        depth (int, optional): frames to look through. Default: ``16``.
    """
    return tuple(callers(depth))
