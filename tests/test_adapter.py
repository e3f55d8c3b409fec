"""The one policy of every framework integration (permshard._adapter): permshard's samplers
kept with their world checked, a DistributedSampler replaced by the equivalent
ShardedSampler, torch's default samplers sharded, anything else refused; the same in the
accelerate and Ray shims (without starting either framework)."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from permshard import ShardedBatchSampler, ShardedSampler, ShardingError, TokenBudgetBatchSampler
from permshard._adapter import check_world, optional_import, sharded_sampler


def accelerate_shim(loader, world, rank):
    from permshard.accelerate import _sharded_sampler

    return _sharded_sampler(loader, world, rank)[0]


def ray_shim(loader, world, rank):
    from permshard.ray import _sharded

    prepared = _sharded(loader, world, rank)
    return prepared.batch_sampler.sampler if prepared.batch_sampler is not None else prepared.sampler


SHIMS = [accelerate_shim, ray_shim]


class Mine(Sampler):
    def __iter__(self):
        return iter(range(10))

    def __len__(self):
        return 10


@pytest.mark.parametrize("shim", SHIMS)
def test_a_distributed_sampler_is_replaced_by_its_equivalent(shim):
    data = list(range(101))
    for shuffle, drop_last in [(False, False), (True, True), (True, False)]:
        torch_sampler = DistributedSampler(
            data, num_replicas=3, rank=2, shuffle=shuffle, seed=7, drop_last=drop_last
        )
        torch_sampler.set_epoch(4)
        ours = shim(DataLoader(data, batch_size=5, sampler=torch_sampler), 3, 2)
        assert isinstance(ours, ShardedSampler)
        assert (ours.num_replicas, ours.rank, ours.shuffle, ours.seed, ours.drop_last, ours.epoch) == (
            3,
            2,
            shuffle,
            7,
            drop_last,
            4,
        )
        assert len(ours) == len(torch_sampler)
        if not shuffle:  # the same indices as torch's, padding included
            assert list(ours) == list(torch_sampler)


@pytest.mark.parametrize("shim", SHIMS)
def test_a_sampler_for_another_world_is_refused_naming_the_framework(shim):
    data = list(range(20))
    framework = "accelerate" if shim is accelerate_shim else "Ray Train"
    for sampler in (
        DistributedSampler(data, num_replicas=4, rank=0),
        ShardedSampler(data, num_replicas=4, rank=0),
    ):
        with pytest.raises(ShardingError, match=f"{framework} has 2 data-parallel ranks"):
            shim(DataLoader(data, batch_size=2, sampler=sampler), 2, 0)


@pytest.mark.parametrize("shim", SHIMS)
def test_defaults_are_sharded_and_custom_samplers_refused(shim):
    data = list(range(20))
    shuffled = shim(DataLoader(data, batch_size=2, shuffle=True), 2, 1)
    plain = shim(DataLoader(data, batch_size=2, shuffle=False), 2, 1)
    assert (shuffled.shuffle, plain.shuffle, plain.rank, plain.num_replicas) == (True, False, 1, 2)
    assert list(plain) == list(range(1, 20, 2))
    with pytest.raises(TypeError, match="sampler is a Mine"):
        shim(DataLoader(data, batch_size=2, sampler=Mine()), 2, 0)


def test_permshard_samplers_are_kept_as_they_are():
    data = list(range(20))
    sampler = ShardedSampler(data, num_replicas=2, rank=1)
    assert sharded_sampler(sampler, data, 2, 1, "x") is sampler
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    assert ray_shim(loader, 2, 1) is sampler and accelerate_shim(loader, 2, 1) is sampler
    batches = ShardedBatchSampler(sampler, 4)
    check_world(batches, 2, 1, "x")  # a batch sampler's split is its sampler's
    with pytest.raises(ShardingError, match="ShardedSampler splits across num_replicas=2 as rank 1"):
        check_world(batches, 2, 0, "x")
    budget = TokenBudgetBatchSampler([3] * 20, 8, num_replicas=2, rank=0)
    with pytest.raises(ShardingError, match="TokenBudgetBatchSampler splits across num_replicas=2 as rank 0"):
        check_world(budget, 3, 0, "x")


def test_a_missing_framework_names_what_to_install():
    with pytest.raises(ImportError, match="pip install not-a-framework"):
        optional_import("permshard_no_such_framework", "not-a-framework")
    assert optional_import("json", "json").dumps([]) == "[]"
