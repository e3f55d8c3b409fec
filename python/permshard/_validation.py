"""Argument checks shared by the public API: clear messages before anything reaches Rust."""

from __future__ import annotations

import operator
from typing import Any

U64_MAX = 2**64 - 1


def as_int(name: str, value: Any) -> int:
    """Returns ``value`` as an int; bools, floats and other non-integers are refused."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def as_u64(name: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an int in ``[minimum, 2**64 - 1]``."""
    number = as_int(name, value)
    if not minimum <= number <= U64_MAX:
        raise ValueError(f"{name} must be in [{minimum}, 2**64 - 1], got {number}")
    return number


def as_positive(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (sizes, batch sizes, world sizes)."""
    number = as_int(name, value)
    if not 1 <= number <= U64_MAX:
        raise ValueError(f"{name} should be a positive integer below 2**64, got {number}")
    return number
