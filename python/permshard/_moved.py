"""The module paths of 0.4 (``permshard.sampler``, ``permshard.data.tokens``, ...), made
private in 0.5: importing one still works for this release, with a ``DeprecationWarning``
naming the public import (``from permshard import ...`` or ``from permshard.data import
...``). Removed in 0.6."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Optional

_TOP = (
    "batch_sampler bench block callers certificate cli collectives config consensus coverage "
    "demo epoch_index guards loader_count mesh mixture mixture_summary "
    "permutation plan proofs proven sampler sampler_pass token_budget weighted"
).split()
_DATA = (
    "documents indexed iterable iterable_resume mixed packing provenance rows schedule token_files tokens"
).split()

#: Old module path -> the private module that holds its code now.
MOVED = (
    {f"permshard.{m}": f"permshard._{m}" for m in _TOP}
    | {f"permshard.data.{m}": f"permshard.data._{m}" for m in _DATA}
    | {"permshard.loader_options": "permshard._adapter"}
)


class _Alias(importlib.abc.Loader):
    """Hands out the private module itself under its old name (one module object, so
    classes, isinstance checks and pickles are the same either way)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: Any) -> ModuleType:
        public = "permshard.data" if self.target.startswith("permshard.data.") else "permshard"
        warnings.warn(
            f"{spec.name} is private since permshard 0.5 and goes in 0.6: import its names "
            f"from {public} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed, as the private module


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED`."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        moved = MOVED.get(fullname)
        if moved is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(moved))
