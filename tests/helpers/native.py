"""The native layer reached directly, past the Python checks (to test the core's own)."""

from __future__ import annotations

from typing import Any

from permshard import _core


def sharding(n: int, num_replicas: int, **fields: Any) -> _core.Sharding:
    """``_core.Sharding`` of a configuration no Python check has seen (the defaults of a
    ``ShardConfig`` for the fields not given)."""
    return _core.Sharding(n=n, num_replicas=num_replicas, **fields)
