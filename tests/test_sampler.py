"""ShardedSampler: DistributedSampler parity, lengths, epochs, plans, locate, padding,
errors, O(1) memory (its batch samplers: test_batch_sampler.py)."""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from helpers import reference_perm_v1, reference_perm_v2
from permshard import ShardedSampler

GRID = [(n, w) for n in (1, 2, 3, 7, 10, 64, 101, 1000) for w in (1, 2, 3, 4, 8, 13)]


@pytest.mark.parametrize("n, w", GRID)
@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_equals_distributed_sampler(n, w, drop_last):
    for r in range(w):
        ours = ShardedSampler(list(range(n)), num_replicas=w, rank=r, shuffle=False, drop_last=drop_last)
        torchs = DistributedSampler(
            list(range(n)), num_replicas=w, rank=r, shuffle=False, drop_last=drop_last
        )
        assert list(ours) == list(torchs)
        assert len(ours) == len(torchs) == ours.num_samples == torchs.num_samples
        assert ours.total_size == torchs.total_size


@pytest.mark.parametrize("n, w", GRID)
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("algorithm", [None, "perm-v1"])
def test_shuffled_follows_distributed_samplers_rule_on_the_permutation(n, w, drop_last, algorithm):
    """DistributedSampler's padding and interleaving, applied to the permutation's order
    (from the independent plain-Python reference): perm-v2 by default, perm-v1 pinned."""
    reference = reference_perm_v1 if algorithm else reference_perm_v2
    perm = reference.ReferencePermutation(n, seed=3, epoch=2)
    order = [perm.forward(p) for p in range(n)]
    pinned = {"algorithm": algorithm} if algorithm else {}
    for r in range(w):
        ref = DistributedSampler(order, num_replicas=w, rank=r, shuffle=False, drop_last=drop_last)
        s = ShardedSampler(n, num_replicas=w, rank=r, seed=3, drop_last=drop_last, **pinned)
        s.set_epoch(2)
        assert list(s) == [order[i] for i in ref]


def test_is_a_distributed_sampler_and_never_calls_randperm(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("randperm called")

    monkeypatch.setattr(torch, "randperm", boom)
    s = ShardedSampler(100, num_replicas=2, rank=0)
    assert isinstance(s, DistributedSampler)
    assert len(list(s)) == 50


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 3000),
    w=st.integers(1, 9),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_properties(n, w, seed, epoch, drop_last, shuffle):
    ranks = []
    for r in range(w):
        s = ShardedSampler(n, num_replicas=w, rank=r, seed=seed, drop_last=drop_last, shuffle=shuffle)
        s.set_epoch(epoch)
        ranks.append(list(s.iter_with_padding()))
    expected_len = n // w if drop_last else -(-n // w)
    assert all(len(items) == expected_len for items in ranks)  # closed form, equal ranks
    real = [i for items in ranks for i, pad in items if not pad]
    padding = [i for items in ranks for i, pad in items if pad]
    assert len(real) == len(set(real))  # disjoint
    assert set(real) <= set(range(n))
    if drop_last:
        assert not padding and len(real) == expected_len * w
    else:
        assert set(real) == set(range(n))  # covering
        assert len(padding) == expected_len * w - n  # padding only as declared
        assert set(padding) <= set(real)
    plan = ShardedSampler(n, num_replicas=w, rank=0, seed=seed, drop_last=drop_last, shuffle=shuffle)
    plan.set_epoch(epoch)
    p = plan.plan()
    assert sorted(p.padding_samples) == sorted(padding)
    assert len(p.dropped_samples) == n - len(real)
    assert set(p.dropped_samples).isdisjoint(real)


def test_epochs_and_seeds_change_the_order():
    s = ShardedSampler(1000, num_replicas=2, rank=0)
    first = list(s)
    s.set_epoch(1)
    second = list(s)
    # A new epoch deals rank 0 another half of the data, not the same half reordered:
    # two independent halves of 1000 share 250 samples on average (sd ~8).
    assert first != second and 200 < len(set(first) & set(second)) < 300
    t = ShardedSampler(1000, num_replicas=2, rank=0, seed=1)
    assert list(t) != first
    u = ShardedSampler(1000, num_replicas=2, rank=0)
    assert list(u) == first  # deterministic


def test_iterating_twice_without_set_epoch_warns_once():
    s = ShardedSampler(100, num_replicas=2, rank=0)
    first = list(s)
    with pytest.warns(UserWarning, match="without set_epoch"):
        again = list(s)
    assert again == first
    list(s)  # a second repeat: no second warning (filterwarnings=error would raise)
    s.set_epoch(1)
    list(s)


def test_auto_epoch_advances():
    s = ShardedSampler(100, num_replicas=2, rank=0, auto_epoch=True)
    a, b, c = list(s), list(s), list(s)
    assert s.epoch == 2 and len({tuple(a), tuple(b), tuple(c)}) == 3
    ref = ShardedSampler(100, num_replicas=2, rank=0)
    ref.set_epoch(1)
    assert list(ref) == b


def test_plan_is_exact_and_readable():
    s = ShardedSampler(10, num_replicas=4, rank=1, seed=2)
    plan = s.plan()
    items = [list(ShardedSampler(10, num_replicas=4, rank=r, seed=2).iter_with_padding()) for r in range(4)]
    assert plan.lengths == (3, 3, 3, 3) and plan.total_size == 12
    assert plan.padding_per_rank == tuple(sum(p for _, p in it) for it in items)
    assert plan.padding_positions == (10, 11)
    assert sorted(plan.padding_samples) == sorted(i for it in items for i, p in it if p)
    text = str(plan)
    assert "n=10" in text and "padding: position 10 repeats sample" in text
    dropped = ShardedSampler(10, num_replicas=4, rank=0, drop_last=True).plan()
    assert len(dropped.dropped_samples) == 2 and dropped.padding_positions == ()
    assert "dropped samples" in str(dropped)
    assert plan.steps(2) == 2 and plan.steps(2, drop_last=True) == 1


def test_locate_matches_iteration(rank_streams, where):
    n, w = 103, 4
    samplers = [ShardedSampler(n, num_replicas=w, rank=r, seed=9) for r in range(w)]
    found = where(rank_streams(lambda r: samplers[r], w))
    for sample in range(n):
        assert sorted(samplers[0].locate(sample)) == found.get(sample, [])
    later = samplers[0].locate(5, epoch=3)
    ref = ShardedSampler(n, num_replicas=w, rank=0, seed=9)
    ref.set_epoch(3)
    r, k = later[0]
    other = ShardedSampler(n, num_replicas=w, rank=r, seed=9)
    other.set_epoch(3)
    assert list(other)[k] == 5
    with pytest.raises(ValueError, match="not in range"):
        samplers[0].locate(n)


def test_huge_dataset_in_constant_memory():
    # 2^62 samples: anything O(n) (a randperm, a list, a bitmap) could not even be allocated.
    n = 2**62
    s = ShardedSampler(n, num_replicas=8, rank=3, seed=1)
    it = iter(s)
    head = [next(it) for _ in range(50_000)]
    assert len(s) == n // 8
    assert all(0 <= x < n for x in head) and len(set(head)) == len(head)
    assert s.locate(head[7]) == [(3, 7)]


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        ({"dataset": 10, "num_replicas": 0, "rank": 0}, ValueError, "Invalid num_replicas 0"),
        (
            {"dataset": 10, "num_replicas": 3, "rank": 3},
            ValueError,
            r"Invalid rank 3, rank should be in the interval \[0, 2\]",
        ),
        ({"dataset": 10, "num_replicas": 3, "rank": -1}, ValueError, "Invalid rank -1"),
        ({"dataset": 0, "num_replicas": 1, "rank": 0}, ValueError, "at least 1, got 0"),
        ({"dataset": [], "num_replicas": 1, "rank": 0}, ValueError, "empty"),
        ({"dataset": iter([1]), "num_replicas": 1, "rank": 0}, TypeError, "__len__"),
        ({"dataset": True, "num_replicas": 1, "rank": 0}, TypeError, "bool"),
        ({"dataset": 10, "num_replicas": 1, "rank": 0, "seed": -1}, ValueError, "seed must be in"),
        ({"dataset": 10, "num_replicas": 1, "rank": 0, "seed": 2**64}, ValueError, "seed must be in"),
        ({"dataset": 10, "num_replicas": 2.0, "rank": 0}, TypeError, "num_replicas must be an integer"),
        ({"dataset": 10}, ValueError, "torch.distributed is not initialized"),
        ({"dataset": 2**63 + 1, "num_replicas": 1, "rank": 0}, ValueError, "2\\*\\*63"),
    ],
)
def test_errors(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        ShardedSampler(**kwargs)


def test_negative_epoch_and_changed_dataset():
    data = list(range(10))
    s = ShardedSampler(data, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="epoch must be in"):
        s.set_epoch(-1)
    data.append(10)
    with pytest.raises(ValueError, match="length changed from 10 to 11"):
        list(s)


def test_pickles_into_workers():
    s = ShardedSampler(1000, num_replicas=4, rank=2, seed=5)
    s.set_epoch(3)
    t = pickle.loads(pickle.dumps(s))
    assert list(t) == list(s)


def test_works_in_a_dataloader_with_workers():
    data = list(range(500))
    s = ShardedSampler(data, num_replicas=2, rank=1, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=16, sampler=s, num_workers=2)
    got = torch.cat(list(loader)).tolist()
    assert got == list(ShardedSampler(data, num_replicas=2, rank=1, seed=1))


class _FakeMesh:
    """The three DeviceMesh methods the sampler reads, for a (2, 3, 2) mesh at (1, 2, 0)."""

    mesh_dim_names = ("dp_replicate", "dp_shard", "tp")
    _shape, _coord = (2, 3, 2), (1, 2, 0)

    def size(self, dim: int) -> int:
        return self._shape[dim]

    def get_local_rank(self, name: str) -> int:
        return self._coord[self.mesh_dim_names.index(name)]


def test_device_mesh_gives_the_data_parallel_size_and_rank():
    mesh = _FakeMesh()
    s = ShardedSampler(100, device_mesh=mesh, mesh_dim="dp_shard")
    assert (s.num_replicas, s.rank) == (3, 2)
    s = ShardedSampler(100, device_mesh=mesh, mesh_dim=("dp_replicate", "dp_shard"))
    assert (s.num_replicas, s.rank) == (6, 1 * 3 + 2)  # row-major flattening
    with pytest.raises(ValueError, match="needs mesh_dim"):
        ShardedSampler(100, device_mesh=mesh)
    with pytest.raises(ValueError, match=r"\['pp'\] not in the mesh's dimensions"):
        ShardedSampler(100, device_mesh=mesh, mesh_dim="pp")
    with pytest.raises(ValueError, match="not both"):
        ShardedSampler(100, num_replicas=2, rank=0, device_mesh=mesh, mesh_dim="tp")
    with pytest.raises(ValueError, match="needs device_mesh"):
        ShardedSampler(100, num_replicas=2, rank=0, mesh_dim="tp")
    with pytest.raises(TypeError, match="DeviceMesh"):
        ShardedSampler(100, device_mesh=object(), mesh_dim="dp")


def test_a_copy_taken_mid_pass_does_not_resume_that_pass_again():
    full = list(ShardedSampler(100, num_replicas=2, rank=0, seed=3))
    saved = ShardedSampler(100, num_replicas=2, rank=0, seed=3)
    saved.load_state_dict({**saved.state_dict(), "consumed": 20})
    it = iter(saved)
    assert next(it) == full[10]
    copy = pickle.loads(pickle.dumps(saved))  # the resumed pass has started: its point is used up
    with pytest.warns(UserWarning, match="iterated again"):
        assert list(copy) == full
    assert list(it) == full[11:]  # the original pass goes on
