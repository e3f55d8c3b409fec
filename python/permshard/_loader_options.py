"""What a DataLoader rebuilt on a permshard sampler keeps of the loader it replaces."""

from __future__ import annotations

from typing import Any

#: The DataLoader arguments a rebuilt loader keeps (read from the loader's attributes).
KEPT = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "generator",
    "multiprocessing_context",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)

#: Arguments torch refuses without workers.
_WORKERS_ONLY = ("multiprocessing_context", "prefetch_factor", "persistent_workers")


def kept_options(loader: Any) -> dict[str, Any]:
    """The arguments ``loader`` was built with that a loader of the same data on another
    sampler keeps: its workers and their options, collation, pinning, ordering.

    Args:
        loader (DataLoader): the loader being replaced.
    """
    kept = {name: getattr(loader, name) for name in KEPT if hasattr(loader, name)}
    if not kept.get("num_workers"):
        for name in _WORKERS_ONLY:
            kept.pop(name, None)
    return kept
