"""permshard: O(1)-memory shuffled sharding for PyTorch that proves what it does.

* :class:`Permutation` — a keyed pseudo-random permutation of ``range(n)`` (perm-v2, or
  perm-v1 with ``algorithm="perm-v1"``), O(1) memory, O(1) access both ways;
  :func:`simd_level` names the SIMD level its batched paths use (``PERMSHARD_SIMD``
  forces one).
* :class:`ShardedSampler` — a drop-in :class:`~torch.utils.data.DistributedSampler`
  without ``randperm(N)``, with plans, ``locate``, O(1) resume (also on another number of
  ranks) and proofs; :class:`ShardedBatchSampler` yields whole batches,
  :class:`StepBatchSampler` accelerate's whole batches per step; each proves the stream
  it yields.
* :class:`WeightedShardedSampler` — torch's ``WeightedRandomSampler`` across ranks: one
  global stream of weighted draws per epoch, dealt round-robin, resumable anywhere.
* :class:`Mixture` — weighted sources, position → ``(source, index)``, no build step.
* :func:`verify` — the exact proof; :class:`ShardingError` when sharding is wrong.
* ``IDENTITY_ALGORITHM``, ``ALGORITHM`` (perm-v2, the default), ``ALGORITHM_V1``,
  ``ALGORITHM_V2``, ``BLOCK_ALGORITHM`` (block-v2), ``BUDGET_ALGORITHM`` (budget-v2),
  ``MIX_ALGORITHM`` (mix-v3), ``WEIGHTED_ALGORITHM`` (weighted-v1) —
  the orders' ids, as state dicts, plans and certificates record them;
  :class:`EpochIndex` — an index that carries its epoch to DataLoader workers.

Names are imported on first use, so ``permshard --help`` (and anything else that does
not touch a sampler) starts without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._core import (
    ALGORITHM,
    ALGORITHM_V1,
    ALGORITHM_V2,
    BLOCK_ALGORITHM,
    BUDGET_ALGORITHM,
    IDENTITY_ALGORITHM,
    MIX_ALGORITHM,
    WEIGHTED_ALGORITHM,
    ShardingError,
    __version__,
    simd_level,
)

if TYPE_CHECKING:
    from . import data
    from ._batch_sampler import ShardedBatchSampler, StepBatchSampler
    from ._config import ShardConfig
    from ._guards import check_loader
    from ._hooks import EpochIndex
    from ._mixture import Mixture
    from ._permutation import BlockPermutation, Permutation
    from ._proof import verify
    from ._report import Certificate, PendingCertificate, ShardPlan
    from ._run import Run
    from ._sampler import ShardedSampler
    from ._token_budget import BudgetPlan, TokenBudgetBatchSampler
    from ._weighted import WeightedShardedSampler

#: Public name -> the module that defines it.
_LAZY = {
    "BlockPermutation": "._permutation",
    "BudgetPlan": "._token_budget",
    "Certificate": "._report",
    "EpochIndex": "._hooks",
    "Mixture": "._mixture",
    "PendingCertificate": "._report",
    "Permutation": "._permutation",
    "Run": "._run",
    "ShardConfig": "._config",
    "ShardPlan": "._report",
    "ShardedBatchSampler": "._batch_sampler",
    "ShardedSampler": "._sampler",
    "StepBatchSampler": "._batch_sampler",
    "TokenBudgetBatchSampler": "._token_budget",
    "WeightedShardedSampler": "._weighted",
    "check_loader": "._guards",
    "data": ".data",
    "verify": "._proof",
}

__all__ = [
    "ALGORITHM",
    "ALGORITHM_V1",
    "ALGORITHM_V2",
    "BLOCK_ALGORITHM",
    "BUDGET_ALGORITHM",
    "BlockPermutation",
    "BudgetPlan",
    "Certificate",
    "EpochIndex",
    "IDENTITY_ALGORITHM",
    "MIX_ALGORITHM",
    "Mixture",
    "PendingCertificate",
    "Permutation",
    "Run",
    "ShardConfig",
    "ShardPlan",
    "ShardedBatchSampler",
    "ShardedSampler",
    "ShardingError",
    "StepBatchSampler",
    "TokenBudgetBatchSampler",
    "WEIGHTED_ALGORITHM",
    "WeightedShardedSampler",
    "__version__",
    "check_loader",
    "data",
    "simd_level",
    "verify",
]


# 0.4's module paths (permshard.sampler, ...) import for one more release, with a warning.
def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'permshard' has no attribute {name!r}")
    imported = importlib.import_module(module, __name__)
    value = imported if name == "data" else getattr(imported, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
