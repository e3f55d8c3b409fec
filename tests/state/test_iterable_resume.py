"""ShardedIterable.state_dict / load_state_dict: after any number of batches on W ranks x K
DataLoader workers with batch size B, a run on W' x K' with B' reads every remaining
element exactly once, again after a second resume; with shard files too. Through real
DataLoaders with workers (fork and spawn), ranks in lockstep as under DDP."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from helpers import stream_workers
from permshard.data import ShardedIterable

# 4 workers on a 2-core machine: torch suggests fewer, these tests need them.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS = list(range(12))
ELEMENTS = [x for s in SHARDS for x in stream_workers.read_shard(s)]


def dataset(rank: int, world: int, shards: bool, state=None, even=False) -> ShardedIterable:
    source = SHARDS if shards else range(500)
    ds = ShardedIterable(
        source,
        open_shard=stream_workers.read_shard if shards else None,
        rank=rank,
        world_size=world,
        even=even,
    )
    if state is not None:
        ds.load_state_dict(state)
    return ds


def run(world, workers, batch_size, steps, shards, state=None, method="fork", even=False):
    """One run: ``steps`` batches on every rank (``None``: to the end), the elements read
    and the state saved after them (from rank 0, as a checkpoint would)."""
    read, saved = [], None
    for rank in range(world):
        ds = dataset(rank, world, shards, state, even)
        context = method if workers else None
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, multiprocessing_context=context)
        iterator = iter(loader)
        taken = list(itertools.islice(iterator, steps))
        read += [int(x) for batch in taken for x in batch]
        if rank == 0:
            saved = ds.state_dict(iterator, consumed_batches=None if steps is None else len(taken))
        # Drained, not dropped mid-stream: the workers then end their loops themselves
        # (spawned workers torn down mid-stream by a loaded machine were seen to abort).
        for _ in iterator:
            pass
    return read, saved


def check_once(read: list[int], shards: bool) -> None:
    everything = ELEMENTS if shards else list(range(500))
    counts = Counter(read)
    assert sorted(counts) == sorted(everything), "an element is missing"
    assert max(counts.values()) == 1, [x for x, c in counts.items() if c > 1][:10]


@pytest.mark.parametrize("shards", [False, True])
def test_two_resumes_across_ranks_workers_and_batch_sizes(shards):
    first, state = run(2, 2, 4, 3, shards)
    second, state = run(3, 1, 5, 2, shards, state)
    third, _ = run(1, 4, 3, None, shards, state)
    assert len(first) == 2 * 3 * 4 and len(second) == 3 * 2 * 5
    check_once(first + second + third, shards)


@pytest.mark.slow
def test_spawned_workers_resume_alike():
    first, state = run(2, 2, 4, 3, True, method="spawn")
    second, state = run(3, 1, 5, 2, True, state, method="spawn")
    third, _ = run(1, 4, 3, None, True, state, method="spawn")
    check_once(first + second + third, True)


def test_random_layouts_and_stop_points():
    rng = random.Random(3)
    for _ in range(12):
        shards = rng.random() < 0.5
        read, state = [], None
        for _ in range(rng.randint(1, 3)):
            world, workers, batch = rng.randint(1, 4), rng.choice([0, 2]), rng.randint(1, 6)
            got, state = run(world, workers, batch, rng.randint(0, 6), shards, state)
            read += got
        read += run(rng.randint(1, 3), rng.choice([0, 2]), rng.randint(1, 6), None, shards, state)[0]
        check_once(read, shards)


def test_the_state_is_small_and_checked():
    _, state = run(2, 2, 4, 2, True)  # 12 shards over 4 consumers: whole shards
    _, state = run(4, 2, 2, 1, True, state)
    assert len(repr(state)) < 300 and [layer["dealt"] for layer in state["layers"]] == ["shards", "stride"]
    with pytest.raises(ValueError, match="same source"):
        ShardedIterable(SHARDS[:6], open_shard=stream_workers.read_shard).load_state_dict(state)
    with pytest.raises(ValueError, match="not saved by ShardedIterable"):
        dataset(0, 1, True).load_state_dict({"consumed": 3})
    bad = dict(state, layers=[dict(state["layers"][0], workers=0)])
    with pytest.raises(ValueError, match="workers"):
        dataset(0, 1, True).load_state_dict(bad)
    with pytest.raises(TypeError, match=r"\['batches'\] must be an integer"):
        dataset(0, 1, True).load_state_dict(dict(state, layers=[dict(state["layers"][0], batches="2")]))
    with pytest.raises(ValueError, match="does not save: \\['extra'\\]"):
        dataset(0, 1, True).load_state_dict(dict(state, layers=[dict(state["layers"][0], extra=1)]))
    with pytest.raises(ValueError, match="dealt must be"):
        dataset(0, 1, True).load_state_dict(dict(state, layers=[dict(state["layers"][0], dealt="rows")]))
    edited = dict(state, layers=[state["layers"][1], state["layers"][0]])  # shards after stride
    with pytest.raises(ValueError, match="only the first run"):
        dataset(0, 1, True, edited)
    loader = DataLoader(dataset(0, 1, False), batch_size=2)
    with pytest.raises(ValueError, match="consumed_batches"):
        dataset(0, 1, False).state_dict(loader)


def test_even_runs_resume_without_repeats():
    first, state = run(2, 2, 3, 2, False, even=True)
    second, _ = run(3, 1, 4, None, False, state, even=True)
    counts = Counter(first + second)
    assert max(counts.values()) == 1
    assert len(second) % 3 == 0  # every rank the same count
    assert 500 - len(counts) < 3  # only the last incomplete round of 3 consumers is dropped, declared
