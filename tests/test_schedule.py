"""MixedDataset.set_weights: weights changed while the run goes equal a static stage from
that position on, item for item, in every DataLoader worker (fork, spawn, persistent);
the sampler's state dict carries them onto any world size; ranks must agree."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from helpers import stream_workers
from helpers.distributed import launch
from helpers.examples import example_files
from permshard import ShardedSampler
from permshard.data import MixedDataset

SOURCES = [list(range(100)), list(range(1000, 1060)), list(range(5000, 5030))]


def mixed(**kwargs) -> MixedDataset:
    return MixedDataset(SOURCES, [0.5, 0.3, 0.2], num_samples=600, seed=4, **kwargs)


def static(changes) -> MixedDataset:
    """The reference: the same changes as static stages."""
    return mixed(stages=[(start, w) for start, w in changes])


@pytest.mark.parametrize(
    "method, persistent", [("fork", True), ("spawn", True), ("fork", False), (None, False)]
)
def test_a_change_mid_run_reaches_every_worker_item_for_item(method, persistent):
    ds = mixed()
    sampler = ShardedSampler(ds, num_replicas=1, rank=0, shuffle=False)
    workers = 0 if method is None else 2
    loader = DataLoader(
        ds,
        sampler=sampler,
        batch_size=8,
        num_workers=workers,
        multiprocessing_context=method,
        persistent_workers=persistent,
    )
    changes = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        read = [int(x) for _, batch in zip(range(10), batches) for x in batch]
        if epoch == 0:
            start = sampler.next_unhanded_position()
            assert start >= 80  # what the loop received, plus what the workers prefetched
            ds.set_weights([0.1, 0.1, 0.8], start=start)
            changes.append((start, [0.1, 0.1, 0.8]))
            with pytest.raises(
                ValueError, match=f"earliest allowed now is {sampler.next_unhanded_position()}"
            ):
                ds.set_weights([0.2, 0.2, 0.6], start=start - 1)
            later = start + 200
            ds.set_weights([0.3, 0.6, 0.1], start=later)
            changes.append((later, [0.3, 0.6, 0.1]))
        read += [int(x) for batch in batches for x in batch]
        reference = static(changes)
        assert read == [reference[p] for p in range(600)]  # a stage by position, every epoch


def test_the_state_dict_carries_the_changes_onto_another_world_size():
    ds = mixed()
    before = ShardedSampler(ds, num_replicas=2, rank=0, shuffle=False)
    it = iter(before)
    [next(it) for _ in range(30)]
    ds.set_weights([0.0, 0.5, 0.5], start=before.next_unhanded_position())
    state = before.state_dict()
    assert state["schedule"]["changes"] == [[60, [0.0, 0.5, 0.5]]] and len(repr(state)) < 600
    reference = static([(60, [0.0, 0.5, 0.5])])
    read = []
    for rank in range(3):
        fresh = mixed()
        after = ShardedSampler(fresh, num_replicas=3, rank=rank, shuffle=False)
        after.load_state_dict(state)
        assert fresh.mixture == reference.mixture
        read += [(p, fresh[p]) for p in after]
    assert sorted(read) == [(p, reference[p]) for p in range(60, 600)]
    with pytest.raises(ValueError, match="first arguments"):
        ShardedSampler(
            MixedDataset(SOURCES, [0.4, 0.4, 0.2], num_samples=600, seed=4),
            shuffle=False,
            num_replicas=1,
            rank=0,
        ).load_state_dict(state)
    with pytest.raises(ValueError, match="not a MixedDataset"):
        ShardedSampler(600, shuffle=False, num_replicas=1, rank=0).load_state_dict(state)


def test_shuffled_samplers_and_bad_changes_are_refused():
    ds = mixed()
    shuffled = ShardedSampler(ds, num_replicas=1, rank=0)
    next(iter(shuffled))
    with pytest.raises(ValueError, match="shuffle=False"):
        ds.set_weights([0.1, 0.1, 0.8], start=300)
    plain = mixed(max_changes=1)
    plain.set_weights([0.1, 0.1, 0.8], start=300)
    with pytest.raises(ValueError, match="shuffle=False"):
        next(iter(ShardedSampler(plain, num_replicas=1, rank=0)))
    with pytest.raises(ValueError, match="max_changes=1"):
        plain.set_weights([0.2, 0.2, 0.6], start=400)
    again = mixed()
    again.set_weights([0.1, 0.1, 0.8], start=300)
    with pytest.raises(ValueError, match="after the last stage"):
        again.set_weights([0.2, 0.2, 0.6], start=300)
    with pytest.raises(ValueError, match="weights"):
        again.set_weights([0.2, 0.2], start=400)
    with pytest.raises(ValueError):
        again.set_weights([-1.0, 0.2, 0.6], start=400)
    assert len(again.mixture.stages) == 1  # a refused change changes nothing


def test_megatron_blends_take_changes(tmp_path):
    files = example_files(tmp_path)
    blend = MixedDataset.from_data_path(
        f"0.6 {files / 'web_text_document'} 0.4 {files / 'code_text_document'}", 64, 2000
    )
    blend.set_weights([0.1, 0.9], start=1000)
    reference = MixedDataset.from_data_path(
        f"0.6 {files / 'web_text_document'} 0.4 {files / 'code_text_document'}", 64, 2000
    )
    reference = MixedDataset(reference.datasets, [0.6, 0.4], 2000, stages=[(1000, [0.1, 0.9])])
    assert all(blend.mixture[p] == reference.mixture[p] for p in range(0, 2000, 7))


@pytest.mark.multiprocess
def test_ranks_must_set_the_same_weights():
    results = launch(stream_workers.scheduled_ranks, 2, False)
    reference = MixedDataset(
        [list(range(100)), list(range(1000, 1060))], [0.5, 0.5], num_samples=240, stages=[(160, [0.8, 0.2])]
    )
    for rank, result in enumerate(results):
        assert result["read"] == [reference[p] for p in range(rank, 240, 2)]
    errors = launch(stream_workers.scheduled_ranks, 2, True)
    assert all("ShardingError" in r["error"] and "set_weights" in r["error"] for r in errors)


def test_the_summary_counts_what_each_stage_reads(tmp_path):
    ds = mixed()
    ds.set_weights([0.1, 0.1, 0.8], start=250)
    summary = ds.summary()
    reads = [ds.mixture[p][0] for p in range(600)]  # brute force: the source of each position
    for rows, (lo, hi) in zip(summary.stages, [(0, 250), (250, 600)]):
        for row in rows:
            assert (row.start, row.stop) == (lo, hi)
            assert row.samples == reads[lo:hi].count(row.source)
            assert row.passes == row.samples / len(SOURCES[row.source]) and row.tokens is None
    assert [r.samples for r in summary.total] == [reads.count(s) for s in range(3)]
    assert "stage 1 [250, 600)" in str(summary)
    files = example_files(tmp_path)
    blend = MixedDataset.from_data_path(
        f"0.6 {files / 'web_text_document'} 0.4 {files / 'code_text_document'}", 64, 500
    )
    assert [r.tokens for r in blend.summary().total] == [r.samples * 64 for r in blend.summary().total]
