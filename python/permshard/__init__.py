"""permshard: O(1)-memory shuffled sharding for PyTorch that proves what it does.

* :class:`Permutation` — a keyed pseudo-random permutation of ``range(n)`` (perm-v1),
  O(1) memory, O(1) access both ways.
* :class:`ShardedSampler` — a drop-in :class:`~torch.utils.data.DistributedSampler`
  without ``randperm(N)``, with plans, ``locate``, O(1) resume (also on another number of
  ranks) and proofs; :class:`ShardedBatchSampler` yields whole batches.
* :func:`verify` — the exact proof; :class:`ShardingError` when sharding is wrong.
"""

from ._core import ALGORITHM, ShardingError, __version__
from .permutation import Permutation
from .plan import ShardPlan
from .proofs import Certificate, check_loader, verify
from .sampler import ShardedBatchSampler, ShardedSampler
from . import data

__all__ = [
    "ALGORITHM",
    "Certificate",
    "Permutation",
    "ShardPlan",
    "ShardedBatchSampler",
    "ShardedSampler",
    "ShardingError",
    "__version__",
    "check_loader",
    "data",
    "verify",
]
