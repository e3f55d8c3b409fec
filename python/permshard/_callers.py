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


def _torch_files() -> tuple[str, ...]:
    """torch's own folder (its DataLoader iterates samplers), where torch is importable."""
    import torch

    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)


#: The libraries between a user's line and a warning permshard raises.
_LIBRARY_FILES = (_OWN_FILES, *_torch_files())


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised inside permshard that points at the user's
    line: the first frame, from the caller's up, that is neither permshard's nor torch's
    (a sampler's pass starts inside torch's DataLoader, a fixed level would name torch)."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARY_FILES):
        frame, level = frame.f_back, level + 1
    return level


def iterating(depth: int = 16, until: Optional[type] = None) -> tuple[Any, ...]:
    """The ``self`` of each method among the ``depth`` frames from the caller's up (but
    permshard's own): the one walk of a pass, read by the accelerate guard and by the
    DataLoader count.

    Whatever iterates a sampler — a DataLoader iterator, and the batch samplers between
    it and the sampler (torch's, accelerate's, Lightning's) — does so from methods and
    generators. The walk ends at the first frame that is neither: a plain function or a
    module's code is the training loop itself, and nothing above it is iterating the
    sampler. Only frames whose code names a ``self`` build their locals (``f_locals``
    costs a dict per frame; a pass starts every epoch), and what each code object is gets
    decided once.

    Args:
        depth (int, optional): frames to look through at most. Default: ``16``.
        until (type, optional): stop after the first owner of this type (the DataLoader
            iterator: whatever iterates the sampler sits between it and the sampler).
    """
    owners = []
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        code = frame.f_code
        kind = _KINDS.get(code)
        if kind is None:
            kind = _KINDS[code] = _kind_of(code)
        if kind == _METHOD:
            owner = frame.f_locals.get("self")
            if owner is not None:
                owners.append(owner)
                if until is not None and isinstance(owner, until):
                    break
        elif kind == _LOOP:
            break
        frame = frame.f_back
    return tuple(owners)


# What a frame of a code object is to the walk:
_OWN = 0  # permshard's own (a sampler's __iter__, a batch sampler's): passed by
_METHOD = 1  # a method outside permshard: its ``self`` may iterate the sampler
_GENERATOR = 2  # a generator or coroutine without a ``self``: passed by
_LOOP = 3  # a plain function or a module's code: the loop, where the walk ends

#: Each code object's kind, decided once (a program has few).
_KINDS: dict[CodeType, int] = {}

#: A generator's or coroutine's code (``inspect``'s flags, without importing it).
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR


def _kind_of(code: CodeType) -> int:
    """What frames of ``code`` are to the walk (see :func:`iterating`)."""
    if code.co_filename.startswith(_OWN_FILES):
        return _OWN
    if "self" in code.co_varnames or "self" in code.co_freevars:
        return _METHOD
    return _GENERATOR if code.co_flags & _RESUMABLE else _LOOP
