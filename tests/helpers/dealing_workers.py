"""Worker functions for the dealing tests, run on every rank of a real gloo group."""

from __future__ import annotations

import itertools

from permshard import ShardedBatchSampler, ShardedSampler, ShardingError, StepBatchSampler

from .distributed import expect_error


def _cert(cert) -> tuple:
    return (cert.dealing, cert.method, cert.covered, cert.padding, cert.dropped, cert.start, cert.ranks)


def step_proofs(rank: int, world: int, n: int, bs: int, saved_world: int, saved_steps: int) -> dict:
    """A StepBatchSampler's epoch, proven every way, then a resume from a state saved by
    ``saved_world`` ranks after ``saved_steps`` steps, proven again."""
    out: dict = {}
    for drop_last in (False, True):
        batches = StepBatchSampler(ShardedSampler(n, seed=3), bs, drop_last)
        pending = batches.verify_in_background()
        out[f"batches_{drop_last}"] = list(batches)
        out[f"proofs_{drop_last}"] = [
            _cert(batches.verify()),
            _cert(batches.verify_distributed(exact=True)),
            _cert(batches.verify_distributed(exact=False)),
            _cert(pending.wait()),
        ]
    # The state a `saved_world`-rank run saved after `saved_steps` steps (any of its
    # ranks: every rank computes it alone), resumed here on `world` ranks.
    donor = StepBatchSampler(ShardedSampler(n, saved_world, 0, seed=3, check_consensus=False), bs)
    donor.sampler.set_epoch(1)
    list(itertools.islice(iter(donor), saved_steps))
    state = donor.state_dict()
    resumed = StepBatchSampler(ShardedSampler(n, seed=3), bs)
    resumed.load_state_dict(state)
    out["resumed_proof"] = _cert(resumed.verify_distributed(exact=True))
    out["resumed"] = list(resumed)
    # One rank deals round-robin, the others in steps: the consensus refuses.
    sampler = ShardedSampler(n, seed=3)
    mixed = ShardedBatchSampler(sampler, bs) if rank == world - 1 else StepBatchSampler(sampler, bs)
    out["mixed"] = expect_error(lambda: mixed.verify_distributed(exact=True), ShardingError)
    return out
