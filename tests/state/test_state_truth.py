"""A default ``state_dict()`` tells the truth under prefetching loaders, and every
sampler's state dict is strict: each field type- and range-checked, unknown keys refused."""

from __future__ import annotations

import copy
import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from permshard import Run, ShardedBatchSampler, ShardedSampler, StepBatchSampler, TokenBudgetBatchSampler

N, W, B, READ = 203, 2, 8, 5


def _loader(rank: int, num_workers: int, context=None, persistent=False, kind="item"):
    sampler = ShardedSampler(list(range(N)), num_replicas=W, rank=rank, seed=4, check_consensus=False)
    extra = dict(num_workers=num_workers, multiprocessing_context=context, persistent_workers=persistent)
    if kind == "item":
        return sampler, DataLoader(list(range(N)), batch_size=B, sampler=sampler, **extra)
    cls = ShardedBatchSampler if kind == "batches" else StepBatchSampler
    return sampler, DataLoader(list(range(N)), batch_sampler=cls(sampler, B), **extra)


def _read_then_resume(
    num_workers: int, context=None, persistent=False, kind="item", epochs=1, loop="break"
) -> None:
    """Both ranks read READ batches through a prefetching loader (after ``epochs - 1``
    whole epochs), save the default state, resume on fresh samplers: every sample of the
    epoch exactly once, plus the declared padding.

    ``loop="break"`` is the usual training loop: ``for step, batch in enumerate(loader)``
    left with ``break``, the state saved after it, when a loader without persistent workers
    has dropped its iterator. ``loop="open"`` saves while the iterator is still held."""
    head, states = [], []
    for rank in range(W):
        sampler, loader = _loader(rank, num_workers, context, persistent, kind)
        for epoch in range(epochs - 1):
            sampler.set_epoch(epoch)
            list(loader)
        sampler.set_epoch(epochs - 1)
        if loop == "break":
            for step, batch in enumerate(loader, 1):
                head += batch.tolist()
                if step == READ:
                    break
            states.append(sampler.state_dict())
            continue
        it = iter(loader)
        head += [x for batch in itertools.islice(it, READ) for x in batch.tolist()]
        states.append(sampler.state_dict())
        # Drained, not dropped mid-stream: the workers end their own loops (a spawned
        # worker torn down mid-prefetch on a loaded machine has aborted in torch's teardown).
        for _ in it:
            pass
        del it
    assert states[0] == states[1]
    assert states[0]["consumed"] == READ * B * W  # what the loops received, not the prefetch
    rest = []
    for rank in range(W):
        resumed = ShardedSampler(N, num_replicas=W, rank=rank, seed=4, check_consensus=False)
        resumed.load_state_dict(states[0])
        rest += list(resumed)
    padding = -N % W
    assert Counter(head + rest) - Counter(range(N)) == Counter(rest[len(rest) - padding :])
    assert set(head + rest) == set(range(N))


@pytest.mark.parametrize("loop", ["break", "open"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_default_state_counts_what_the_loop_received(num_workers, loop):
    _read_then_resume(num_workers, loop=loop)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("kind", ["item", "batches"])
def test_the_history_holds_every_pass_the_loader_read(kind, persistent):
    """Epoch 0 read whole and epoch 1 broken off after READ batches, through a prefetching
    loader: the history's ``where`` equals what the loop received, read by read. A
    persistent-workers iterator is reset for the next pass before the sampler hears of it:
    the pass before is counted as its batches left, not by the reset iterator."""
    sampler, loader = _loader(0, 2, "fork", persistent, kind)
    received, step = defaultdict(list), 0
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        for k, batch in enumerate(loader, 1):
            for position, sample in enumerate(batch.tolist()):
                received[sample].append((epoch, step, position))
            step += 1
            if epoch == 1 and k == READ:
                break
    saver = sampler if kind == "item" else loader.batch_sampler
    run = Run(saver.state_dict())
    assert [(s["epoch"], s["start"]) for s in run.segments] == [(0, 0), (1, 0)]
    for sample in range(N):
        reads = run.where(sample, batch_size=B if kind == "item" else None)
        assert [(r.epoch, r.step, r.position) for r in reads if r.rank == 0] == received[sample], sample
    run.audit()


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_every_worker_start_method_and_persistent_workers(context):
    # A break drops the iterator mid-prefetch: a spawned or forkserver worker torn down then
    # can abort in torch's own teardown on a loaded machine (seen once in three runs under
    # torch 2.11, "terminate called without an active exception"), which is torch's, not
    # the count's. The count after a break does not depend on how workers start: it is
    # tested here with fork, and with persistent workers (no teardown) with every method.
    for loop in ("break", "open") if context == "fork" else ("open",):
        _read_then_resume(2, context, loop=loop)
    for loop in ("break", "open"):
        _read_then_resume(2, context, persistent=True, epochs=2, loop=loop)


@pytest.mark.parametrize("loop", ["break", "open"])
@pytest.mark.parametrize("kind", ["batches", "step"])
def test_batch_samplers_count_what_the_loop_received(kind, loop):
    _read_then_resume(2, "fork", kind=kind, loop=loop)


@pytest.mark.parametrize("loop", ["break", "open"])
def test_a_token_budget_state_counts_what_the_loop_received(loop):
    lengths = np.arange(N) % 13 + 1
    make = lambda: TokenBudgetBatchSampler(lengths, 40, W, 0, window=64, check_consensus=False)  # noqa: E731
    reference = list(make())
    sampler = make()
    loader = DataLoader(list(range(N)), batch_sampler=sampler, num_workers=2, collate_fn=list)
    head = []
    if loop == "break":
        for step, batch in enumerate(loader, 1):
            head.append(batch)
            if step == READ:
                break
        state = sampler.state_dict()
    else:
        it = iter(loader)
        head = [next(it) for _ in range(READ)]
        state = sampler.state_dict()
        del it
    resumed = make()
    resumed.load_state_dict(state)
    assert head + list(resumed) == reference


def test_a_loader_drawn_one_batch_ahead_needs_the_loops_counter():
    # Ray's wrapper pattern: the loader is one batch ahead of the loop. The default counts
    # what the DataLoader handed out (one batch more than the loop has); the loop's own
    # counter, consumed_samples, is exact.
    def one_ahead(loader):
        it = iter(loader)
        pending = next(it)
        for batch in it:
            yield pending
            pending = batch
        yield pending

    sampler, loader = _loader(0, 2, "fork")
    wrapped = one_ahead(loader)
    head = [next(wrapped).tolist() for _ in range(READ)]
    assert sampler.state_dict()["consumed"] == (READ + 1) * B * W
    state = sampler.state_dict(consumed_samples=READ * B * W)
    resumed = ShardedSampler(N, num_replicas=W, rank=0, seed=4, check_consensus=False)
    resumed.load_state_dict(state)
    reference = list(ShardedSampler(N, num_replicas=W, rank=0, seed=4, check_consensus=False))
    assert [x for b in head for x in b] + list(resumed) == reference


# -- strict state dicts ---------------------------------------------------------------------


def _states() -> list[tuple[str, dict, object]]:
    """A saved state of every sampler, mid-epoch, with a factory of a fresh sampler."""
    item = ShardedSampler(1000, num_replicas=3, rank=1, seed=2, check_consensus=False)
    list(itertools.islice(iter(item), 10))
    blocks = ShardedSampler(
        1000, num_replicas=3, rank=1, seed=2, check_consensus=False, block_size=8, window_blocks=4
    )
    list(itertools.islice(iter(blocks), 10))
    lengths = np.arange(300) % 11 + 1
    budget = TokenBudgetBatchSampler(lengths, 32, 2, 0, window=50, check_consensus=False)
    list(itertools.islice(iter(budget), 9))
    return [
        ("item", item.state_dict(), lambda: ShardedSampler(1000, 3, 1, seed=2, check_consensus=False)),
        (
            "blocks",
            blocks.state_dict(),
            lambda: ShardedSampler(1000, 3, 1, seed=2, check_consensus=False, block_size=8, window_blocks=4),
        ),
        ("budget", budget.state_dict(), lambda: TokenBudgetBatchSampler(lengths, 32, 2, 0, window=50, check_consensus=False)),  # noqa: E501
    ]  # fmt: skip


STATES = _states()


@pytest.mark.parametrize("name, state, make", STATES, ids=[s[0] for s in STATES])
def test_unknown_keys_are_refused_by_name_unless_not_strict(name, state, make):
    extra = dict(state, typo_consumed=3)
    with pytest.raises(ValueError, match=r"does not save: \['typo_consumed'\].*strict=False"):
        make().load_state_dict(extra)
    loose, exact = make(), make()
    loose.load_state_dict(extra, strict=False)
    exact.load_state_dict(state)
    assert list(loose) == list(exact)


@pytest.mark.parametrize("name, state, make", STATES, ids=[s[0] for s in STATES])
def test_wrong_types_and_ranges_are_value_or_type_errors(name, state, make):
    for key, bad, exc in [
        ("drop_last", [], TypeError),
        ("shuffle", "identity", TypeError),
        ("shuffle", 1, TypeError),
        ("num_replicas", 2**64, ValueError),
        ("seed", -1, ValueError),
        ("n", 1.5, TypeError),
        ("algorithm", 7, TypeError),
    ]:
        with pytest.raises(exc):
            make().load_state_dict(dict(state, **{key: bad}))
    if name == "budget":
        for key, bad, exc in [
            ("taken", [], TypeError),
            ("steps", -1, ValueError),
            ("window_index", True, TypeError),
        ]:
            with pytest.raises(exc):
                make().load_state_dict(dict(state, **{key: bad}))
    else:
        for key, bad, exc in [("block_size", [], TypeError), ("consumed", False, TypeError)]:
            with pytest.raises(exc):
                make().load_state_dict(dict(state, **{key: bad}))


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(range(len(STATES))), data=st.data())
def test_a_mutated_state_is_refused_or_resumes_exactly(which, data):
    """Random edits of saved states: each is refused with ValueError/TypeError or, when it
    still loads, resumes exactly as an unedited state with the same values does."""
    name, state, make = STATES[which]
    mutated = copy.deepcopy(state)
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["set", "delete", "add"]))
        key = data.draw(st.sampled_from(sorted(mutated) or ["n"]))
        if action == "set":
            mutated[key] = data.draw(_VALUES)
        elif action == "delete":
            mutated.pop(key, None)
        else:
            mutated[data.draw(st.text(min_size=1, max_size=6))] = data.draw(_VALUES)
    sampler = make()
    try:
        sampler.load_state_dict(mutated)
    except (ValueError, TypeError):
        return
    # It loaded: every value was of its type and in range, and no key was unknown. Saved
    # again before iterating, it holds exactly the values loaded (nothing reinterpreted;
    # a state of another world size is re-split, so its resume point is this one's).
    # (A "dataset" fingerprint is compared where the dataset has one; these have none.)
    mutated.pop("dataset", None)
    assert set(mutated) <= set(state) | {"block_size", "window_blocks"}
    resaved = sampler.state_dict()
    resaved.pop("dataset", None)
    if mutated.get("num_replicas") == state["num_replicas"]:
        assert {k: resaved[k] for k in mutated} == mutated
        assert all(type(resaved[k]) is type(v) for k, v in mutated.items())
    # It resumes exactly as a sampler that loaded the state it saves: nothing read
    # differently from what it writes back.
    twin = make()
    twin.load_state_dict(resaved)
    stream = list(sampler)
    assert stream == list(twin)
    if name != "budget" and mutated.get("num_replicas") == state["num_replicas"]:
        # ... and as the state an unedited sampler of those values writes: built from the
        # values, it reaches the same resume point through consumed_samples.
        fields = {k: resaved[k] for k in ("seed", "shuffle", "drop_last") if k in resaved}
        blocks = {k: resaved[k] for k in ("block_size", "window_blocks") if resaved.get(k)}
        algorithm = "perm-v1" if resaved["algorithm"].endswith("-v1") else "perm-v2"
        unedited = ShardedSampler(
            resaved["n"], 3, 1, check_consensus=False, algorithm=algorithm, **fields, **blocks
        )
        unedited.set_epoch(resaved["epoch"])
        reference = make()
        reference.load_state_dict(unedited.state_dict(consumed_samples=resaved["consumed"]))
        assert stream == list(reference)


def test_a_loader_whose_count_cannot_be_read_refuses_naming_the_fix(monkeypatch):
    from permshard import _pass as loader_count

    # A torch whose DataLoader iterator renamed its count: refused, never an overcount.
    monkeypatch.setattr(loader_count, "_COUNTED", ("_num_yielded", "_renamed_in_a_later_torch"))
    sampler, loader = _loader(0, 0)
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match=r"_renamed_in_a_later_torch.*consumed_samples="):
        sampler.state_dict()
    exact = sampler.state_dict(consumed_samples=B * W)
    assert exact["consumed"] == B * W


def test_a_loader_whose_batches_were_not_counted_refuses_once_its_iterator_is_gone():
    # Another wrapper replaced the iterator's _next_data before the pass: while the
    # iterator lives its own count is read; once a break dropped it, nothing is guessed.
    sampler, loader = _loader(0, 2, "fork")
    it = iter(loader)
    it._next_data = lambda: type(it)._next_data(it)  # someone else's wrapper
    head = [next(it) for _ in range(READ)]
    assert sampler.state_dict()["consumed"] == READ * B * W
    for _ in it:
        pass
    sampler.set_epoch(1)
    for step, _ in enumerate(loader, 1):
        if step == READ:
            break
    assert sampler.state_dict()["consumed"] == READ * B * W  # a fresh iterator: counted
    assert len(head) == READ


@pytest.mark.multiprocess
def test_a_break_then_a_resume_on_another_world_under_torchrun(tmp_path):
    # The usual loop (workers, a break, the state saved after it) on 2 ranks, resumed on 3:
    # every sample of the epoch exactly once, but the declared padding.
    import json
    import pathlib

    from helpers.torchrun import finish, torchrun

    script = pathlib.Path(__file__).parent.parent / "scripts" / "break_and_resume.py"
    finish(torchrun("--standalone", "--nproc-per-node", "2", str(script), "first", str(tmp_path)))
    states = [json.loads((tmp_path / f"state-{r}.json").read_text()) for r in range(2)]
    assert states[0] == states[1] and states[0]["consumed"] == 2 * 10 * 16
    finish(torchrun("--standalone", "--nproc-per-node", "3", str(script), "resume", str(tmp_path)))
    read = Counter()
    for mode, world in (("first", 2), ("resume", 3)):
        for r in range(world):
            read.update(json.loads((tmp_path / f"{mode}-{r}.json").read_text()))
    assert set(read) == set(range(1000))
    assert sum(read.values()) - 1000 == json.loads((tmp_path / "padding.json").read_text())


# -- a state belongs to its dataset ---------------------------------------------------------


def _token_files(folder, name: str, seed: int):
    path = folder / name
    np.random.default_rng(seed).integers(0, 1000, 4097).astype(np.uint16).tofile(path)
    return path


def test_a_state_over_other_token_files_of_the_same_length_is_refused(tmp_path):
    from permshard.data import TokenWindows

    web, code = _token_files(tmp_path, "web.bin", 1), _token_files(tmp_path, "code.bin", 2)
    first = ShardedSampler(TokenWindows(web, 64), 2, 0, seed=3, check_consensus=False)
    list(itertools.islice(iter(first), 5))
    state = first.state_dict()
    assert isinstance(state["dataset"], str)
    same = ShardedSampler(TokenWindows(web, 64), 2, 0, seed=3, check_consensus=False)
    same.load_state_dict(state)  # the same file, opened again: resumes
    other = ShardedSampler(TokenWindows(code, 64), 2, 0, seed=3, check_consensus=False)
    assert len(other.dataset) == len(same.dataset)  # the same length, other samples
    with pytest.raises(ValueError, match="saved over another dataset.*remove the state's 'dataset' key"):
        other.load_state_dict(state)
    del state["dataset"]  # on purpose: the user's call
    other.load_state_dict(state)


def test_a_state_over_another_hf_dataset_of_the_same_length_is_refused():
    import datasets

    a = datasets.Dataset.from_dict({"x": list(range(100))})
    b = datasets.Dataset.from_dict({"x": list(range(100, 200))})
    state = ShardedSampler(a, 1, 0, seed=1).state_dict()
    assert state["dataset"] == a._fingerprint
    ShardedSampler(datasets.Dataset.from_dict({"x": list(range(100))}), 1, 0, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="saved over another dataset"):
        ShardedSampler(b, 1, 0, seed=1).load_state_dict(state)


def test_a_state_without_a_fingerprint_loads_as_before():
    # States of 0.1-0.5 record none, and a list has none: nothing is refused for it.
    state = ShardedSampler(list(range(50)), 1, 0).state_dict()
    assert "dataset" not in state
    ShardedSampler(list(range(50, 100)), 1, 0).load_state_dict(state)


def test_an_iterable_state_over_other_shards_is_refused(tmp_path):
    import json

    from permshard.data import ShardedIterable

    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(i) + "\n" for i in range(10)))

    def read(path):
        with open(path) as f:
            yield from map(json.loads, f)

    files = [str(tmp_path / n) for n in ("a.jsonl", "b.jsonl")]
    docs = ShardedIterable(files, open_shard=read, world_size=1, rank=0)
    batches = iter(DataLoader(docs, batch_size=2))
    next(batches)
    state = docs.state_dict(batches)
    ShardedIterable(files, open_shard=read, world_size=1, rank=0).load_state_dict(state)
    others = [str(tmp_path / n) for n in ("a.jsonl", "c.jsonl")]
    with pytest.raises(ValueError, match="saved over other shards"):
        ShardedIterable(others, open_shard=read, world_size=1, rank=0).load_state_dict(state)


# -- every key of the order refuses a resume in another order --------------------------------

_SHARD_ORDER = {  # key: (the saved sampler's fields, the resuming sampler's)
    "n": ({}, {"dataset": 1001}),
    "seed": ({"seed": 1}, {"seed": 2}),
    "shuffle": ({}, {"shuffle": False}),
    "drop_last": ({}, {"drop_last": True}),
    "block_size": ({"block_size": 8, "window_blocks": 4}, {"block_size": 16, "window_blocks": 4}),
    "window_blocks": ({"block_size": 8, "window_blocks": 4}, {"block_size": 8, "window_blocks": 8}),
}


@pytest.mark.parametrize("key", sorted(_SHARD_ORDER))
def test_a_resume_in_another_order_is_refused_naming_the_key(key):
    saved_fields, now_fields = _SHARD_ORDER[key]
    make = lambda **f: ShardedSampler(f.pop("dataset", 1000), 2, 0, check_consensus=False, **f)  # noqa: E731
    before = make(**saved_fields)
    list(itertools.islice(iter(before), 10))
    state = before.state_dict()
    with pytest.raises(ValueError, match=rf"\b{key}="):
        make(**{**saved_fields, **now_fields}).load_state_dict(state)
    make(**saved_fields).load_state_dict(state)  # the same order resumes


_BUDGET_ORDER = {
    "seed": {"seed": 2},
    "shuffle": {"shuffle": False},
    "drop_last": {"drop_last": True},
    "max_tokens": {"max_tokens": 40},
    "window": {"window": 128},
}


@pytest.mark.parametrize("key", sorted(_BUDGET_ORDER))
def test_a_budget_resume_in_another_plan_is_refused_naming_the_key(key):
    lengths = np.arange(500) % 11 + 1

    def make(max_tokens=32, **fields):
        return TokenBudgetBatchSampler(
            lengths, max_tokens, 2, 0, check_consensus=False, **{"window": 64, "seed": 1, **fields}
        )

    before = make()
    list(itertools.islice(iter(before), 5))
    state = before.state_dict()
    with pytest.raises(ValueError, match=rf"\b{key}="):
        make(**_BUDGET_ORDER[key]).load_state_dict(state)
    make().load_state_dict(state)


def test_a_loader_of_single_items_counts_them_after_a_break():
    # batch_size=None: the loader hands out the sampler's items one by one (no batches).
    sampler = ShardedSampler(N, num_replicas=W, rank=0, seed=4, check_consensus=False)
    loader = DataLoader(list(range(N)), batch_size=None, sampler=sampler, num_workers=2)
    for step, _ in enumerate(loader, 1):
        if step == 7:
            break
    assert sampler.state_dict()["consumed"] == 7 * W


def test_a_persistent_loader_dropped_after_its_second_epoch_keeps_its_count():
    # The second pass of a persistent loader reuses the iterator counted in the first; once
    # the loader itself is gone, the count of that second pass is what the state saves.
    sampler, loader = _loader(0, 2, "fork", persistent=True)
    list(loader)
    sampler.set_epoch(1)
    for step, _ in enumerate(loader, 1):
        if step == READ:
            break
    del loader
    import gc

    gc.collect()
    assert sampler.state_dict()["consumed"] == READ * B * W


def test_a_budget_state_over_other_lengths_is_refused():
    lengths = np.arange(500) % 11 + 1
    before = TokenBudgetBatchSampler(lengths, 32, 2, 0, window=64, check_consensus=False)
    list(itertools.islice(iter(before), 5))
    state = before.state_dict()
    other = lengths[::-1].copy()  # the same count, other samples
    with pytest.raises(ValueError, match="saved over another dataset"):
        TokenBudgetBatchSampler(other, 32, 2, 0, window=64, check_consensus=False).load_state_dict(state)
    TokenBudgetBatchSampler(lengths, 32, 2, 0, window=64, check_consensus=False).load_state_dict(state)
