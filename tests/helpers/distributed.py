"""Helpers for the multi-process tests: ``launch`` (real gloo groups, from
``permshard.launch``) and ``expect_error``."""

from __future__ import annotations

from typing import Any, Callable

from permshard.launch import free_port, launch

__all__ = ["expect_error", "free_port", "launch"]


def expect_error(fn: Callable[[], Any], exc: type[BaseException] = Exception) -> str:
    """Runs ``fn`` and returns the message of the exception it must raise."""
    try:
        fn()
    except exc as e:
        return f"{type(e).__name__}: {e}"
    return "NO ERROR"
