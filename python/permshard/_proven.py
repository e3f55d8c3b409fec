"""``ProvenStream``: the proofs every sampler offers, of the stream it yields: ``verify()``,
``verify_distributed()`` and ``verify_in_background()``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from . import _coverage as coverage
from . import _proofs as proofs
from ._certificate import Certificate, PendingCertificate
from ._config import EpochConfig
from ._consensus import Agreed

if TYPE_CHECKING:
    from ._coverage import AnyPass


class ProofTarget(NamedTuple):
    """What a sampler proves: the pass it yields (a partition, or a token-budget pass; the
    same proof methods either way), its configuration, this process's rank, the dataset the
    consensus fingerprints, and, for the distributed proof, what the ranks must share beside
    the configuration and the pass as that configuration deals it (``None``: a partition's
    start, and the partition of ``config``)."""

    pass_: AnyPass
    config: EpochConfig
    rank: int
    dataset: Any = None
    agreed: Optional[Sequence[Agreed]] = None
    reference: Optional[AnyPass] = None


class ProvenStream:
    """Proofs of the pass a sampler is running (from its resume point, if any), dealt the
    way the sampler deals it: a subclass says what it yields with :meth:`proof_target`.

    Example::

        >>> batches = StepBatchSampler(ShardedSampler(1000, num_replicas=4, rank=0), 8)
        >>> batches.verify().dealing
        'step'
    """

    def proof_target(self) -> ProofTarget:
        """The pass this sampler yields, dealt as it deals it, its configuration, this rank
        and the dataset the consensus fingerprints."""
        raise NotImplementedError

    def verify(self, method: str = "inverse") -> Certificate:
        """Exact proof of the stream this sampler yields in the pass being run: every item's
        sample, inverted by the order, is the position the dealing gives that item, and
        the positions outside the pass are checked once; see :func:`permshard.verify`.

        Args:
            method (str, optional): ``"inverse"`` (O(1) memory) or ``"bitmap"`` (not for
                token-budget plans, proven by the inverse only).
        """
        target = self.proof_target()
        return proofs.verify_pass(target.pass_, target.config, method=method)

    def verify_distributed(self, group: Any = None, *, exact: bool = True) -> Certificate:
        """Consensus, then a proof of the pass being run across the ranks of ``group``:
        every rank proving its own stream by the inverse (the exact proof, every sampler's
        default), or with ``exact=False`` a coverage fingerprint; see
        :func:`permshard._coverage.prove_pass`. A collective: every process of the group
        must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).
            exact (bool, optional): the exact proof (``True``, the default) or the
                fingerprint (``False``; not for token-budget plans).
        """
        return self._distributed(group, exact=exact, background=False).wait()

    def verify_in_background(self, group: Any = None) -> PendingCertificate:
        """The exact distributed proof of :meth:`verify_distributed` (``exact=True``) with
        this rank's share proven in a background thread while training goes on: the
        consensus now, the one small collective when every rank calls
        :meth:`PendingCertificate.wait` (at the same point, e.g. the epoch's end). A
        collective: every process of the group must call it.

        Args:
            group (ProcessGroup, optional): the process group (default: the world).

        Example::

            >>> pending = sampler.verify_in_background()
            >>> for batch in loader: pass
            >>> print(pending.wait())
            PROVEN (inverse, perm-v2, round-robin): n=1,000 over 1 ranks ...
        """
        return self._distributed(group, exact=True, background=True)

    def _distributed(self, group: Any, *, exact: bool, background: bool) -> PendingCertificate:
        """The distributed proof (consensus now; the rest in ``wait()``)."""
        target = self.proof_target()
        return coverage.prove_pass(
            target.pass_,
            target.config,
            target.rank,
            target.dataset,
            group,
            exact=exact,
            background=background,
            agreed=target.agreed,
            reference=target.reference,
        )
