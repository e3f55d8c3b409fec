"""The walk up the call stack that finds what iterates a sampler: the DataLoader iterator
through any wrapper made of methods and generators, and nothing above the training loop."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from permshard import ShardedBatchSampler, ShardedSampler
from permshard._pass import LOADER_ITERATOR, iterating


class Recorder:
    """A sampler that records, at each pass, what the walk finds iterating it."""

    def __init__(self) -> None:
        self.owners: tuple = ()

    def __iter__(self):
        self.owners = iterating(until=LOADER_ITERATOR)
        return iter([[0, 1], [2, 3]])

    def __len__(self) -> int:
        return 2


def batches_of(batch_sampler):
    """A wrapper written as a generator function, not a class."""
    yield from batch_sampler


class Wrapper:
    """A wrapper written as a class, handing out a generator function's batches."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __iter__(self):
        return batches_of(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def test_the_loader_is_found_through_methods_and_generators():
    recorder = Recorder()
    for batch_sampler in (recorder, Wrapper(recorder), Wrapper(Wrapper(recorder))):
        assert [b.tolist() for b in DataLoader(range(4), batch_sampler=batch_sampler)] == [[0, 1], [2, 3]]
        first, loader = recorder.owners  # the generators between them are passed by
        assert first is recorder and isinstance(loader, LOADER_ITERATOR)


class Trainer:
    def fit(self, sampler) -> None:
        run_epoch(sampler)

    def fit_here(self, sampler) -> None:
        list(sampler)


def run_epoch(sampler) -> None:
    list(sampler)


def test_the_walk_ends_at_the_training_loop():
    trainer, recorder = Trainer(), Recorder()
    # The loop is a plain function: the trainer's method above it is not iterating the
    # sampler, and the walk ends there.
    trainer.fit(recorder)
    assert recorder.owners == (recorder,)
    # A method iterating the sampler itself is passed by, and reported.
    trainer.fit_here(recorder)
    assert recorder.owners == (recorder, trainer)


def test_a_state_dict_counts_what_the_loop_received_through_a_generator_wrapper():
    # Workers prefetch ahead of the loop: only a found loader makes the default state exact.
    n = 64
    batches = ShardedBatchSampler(ShardedSampler(n, num_replicas=1, rank=0, shuffle=False), 4)
    wrapper = Wrapper(batches)
    wrapper.batch_size = 4  # type: ignore[attr-defined]  # as torch's and accelerate's say
    it = iter(DataLoader(range(n), batch_sampler=wrapper, num_workers=1, prefetch_factor=4))
    for _ in range(3):
        next(it)
    assert batches.state_dict()["consumed"] == 12  # 3 batches, whatever was prefetched
    del it


def test_a_wrapper_without_a_batch_size_is_refused_naming_the_fix():
    n = 64
    batches = ShardedBatchSampler(ShardedSampler(n, num_replicas=1, rank=0, shuffle=False), 4)
    it = iter(DataLoader(range(n), batch_sampler=Wrapper(batches), num_workers=1, prefetch_factor=4))
    for _ in range(3):
        next(it)
    # The loader's 3 batches cannot be turned into samples: what the sampler yielded
    # (prefetched batches too) is never counted instead; the fix is named.
    with pytest.raises(ValueError, match="a Wrapper, has no batch_size.*consumed_samples"):
        batches.state_dict()
    assert batches.state_dict(consumed_samples=12)["consumed"] == 12
    del it
