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


def as_str(name: str, value: Any, choices: str = "") -> str:
    """``value`` if it is a str; ``choices`` (`` ('perm-v2' or 'perm-v1')``) goes in the error."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{choices}, got {value!r}")
    return value


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


def as_lengths(lengths: Any) -> tuple[Any, Any]:
    """``(lengths, native)``: one length per sample as a 1-D integer numpy array (a memmap
    stays one), and the same in the layout the core reads in place (contiguous, native
    byte order; usually the array itself, not a copy)."""
    import numpy as np

    array = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths)
    if array.size == 0:
        raise ValueError("lengths is empty: a sampler needs at least one sample (one length per sample)")
    if array.ndim != 1 or array.dtype.kind not in "ui":
        raise TypeError(
            f"lengths must be a 1-D integer array (one length per sample), got {array.ndim}-D {array.dtype}"
        )
    if array.size == 0:
        raise ValueError("lengths is empty: a sampler needs at least one sample")
    if array.flags.c_contiguous and array.dtype.isnative:
        return array, array
    return array, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
