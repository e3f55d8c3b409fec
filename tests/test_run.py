"""``permshard.Run``: a run's history from its checkpoint — where, show, audit — against what
real processes recorded they read, and against forged histories."""

from __future__ import annotations

import collections
import copy
import json
import pathlib
import subprocess
import sys

import pytest

from helpers.torchrun import finish, torchrun
from permshard import Run, ShardedBatchSampler, ShardedSampler, ShardingError, StepBatchSampler

SCRIPTS = pathlib.Path(__file__).parent / "scripts"  # on the path by pytest's `pythonpath`


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[tuple]]:
    """2 gloo ranks (batch 4, a weight change, a break at step 9), then 3 ranks (batch 3,
    step dealing, three more samples excluded) to the end of epoch 0 and through epoch 1,
    two DataLoader workers throughout (persistent ones after the resume): the final state and every read the ranks recorded,
    ``(epoch, step, rank, position in the batch, mixture position, source, document)``."""
    return run_twice(SCRIPTS / "run_history.py", tmp_path_factory.mktemp("run"))


def run_twice(script: pathlib.Path, folder: pathlib.Path) -> tuple[dict, list[tuple]]:
    """``script`` under torchrun on 2 processes (``first``), then on 3 (``resume``): the
    final state dict (saved as ``state.json`` too) and every read the ranks recorded."""
    finish(torchrun("--nproc-per-node", "2", str(script), "first", str(folder)))
    finish(torchrun("--nproc-per-node", "3", str(script), "resume", str(folder)))
    reads = []
    for path in sorted(folder.glob("reads-*.json")):
        reads += [tuple(r) for r in json.loads(path.read_text())]
    state = json.loads((folder / "state-resume.json").read_text())
    (folder / "state.json").write_text(json.dumps(state))
    return state, reads


def test_where_equals_every_read_the_processes_recorded(recorded):
    state, reads = recorded
    run = Run(state)
    assert [s["change"] for s in run.segments] == ["start", "resume", "epoch"]
    assert [(s["world"], s["batch_size"], s["dealing"]) for s in run.segments] == [
        (2, 4, "round-robin"), (3, 3, "step"), (3, 3, "step"),
    ]  # fmt: skip
    want = collections.defaultdict(list)
    for epoch, step, rank, k, position, _, _ in reads:
        want[position].append((epoch, step, rank, k))
    got = {}
    for sample in range(run.n):
        hits = [(r.epoch, r.step, r.rank, r.position) for r in run.where(sample)]
        if hits:
            got[sample] = sorted(hits)
    assert got == {p: sorted(v) for p, v in want.items()}
    assert {r[0] for r in reads} == {0, 1} and len(reads) > 2 * 230


def test_show_equals_what_every_rank_read_at_each_step(recorded):
    state, reads = recorded
    run = Run(state)
    by_step = collections.defaultdict(list)
    for epoch, step, rank, k, position, _, _ in reads:
        by_step[step].append((epoch, rank, k, position))
    for step, want in by_step.items():
        got = [(r.epoch, r.rank, r.position, r.sample) for r in run.show(step)]
        assert sorted(got) == sorted(want), step
    last = max(by_step)
    with pytest.raises(ValueError, match=rf"step {last + 1} is not in this run's history"):
        run.show(last + 1)


def test_where_document_follows_the_weight_change(recorded):
    from run_history import blend  # noqa: PLC0415 - the script's own dataset

    state, reads = recorded
    run = Run(state)
    ds = blend()
    want = collections.defaultdict(list)
    for epoch, step, rank, k, _, source, doc in reads:
        want[(source, doc)].append((epoch, step, rank, k))
    for (source, doc), hits in list(want.items())[:80]:
        got = [(r.epoch, r.step, r.rank, r.position) for r in run.where_document(ds, source, doc)]
        assert sorted(got) == sorted(hits), (source, doc)
    # Without the schedule the initial weights would answer, differently.
    static = ds.mixture_of(None)
    assert static != ds.mixture_of(state["schedule"])
    # A schedule read for attribution is checked as a loaded one is.
    with pytest.raises(ValueError, match=r"a change must be \[start, weights\]"):
        ds.mixture_of({**state["schedule"], "changes": [[64]]})
    with pytest.raises(ValueError, match="saved over another mixture"):
        ds.mixture_of({**state["schedule"], "mixture": "0"})


def test_the_recorded_run_audits_and_the_cli_answers_the_same(recorded, tmp_path):
    state, reads = recorded
    audit = Run(state).audit()
    assert audit.epochs == [0, 1] and audit.recounted and audit.segments == 3
    # Reads of kept samples, padding aside: each sample the ranks read in an epoch, once.
    assert audit.reads == len({(r[0], r[4]) for r in reads})
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    cli = [sys.executable, "-m", "permshard"]
    out = subprocess.run([*cli, "audit", "--state", str(path)], capture_output=True, text=True)
    assert out.returncode == 0 and f"{audit.reads:,} reads" in out.stdout, out.stderr
    # where, by the CLI, against what the ranks recorded.
    sample = reads[0][4]
    out = subprocess.run(
        [*cli, "where", str(sample), "--state", str(path), "--json"], capture_output=True, text=True
    )
    got = [(d["epoch"], d["step"], d["rank"], d["position"]) for d in json.loads(out.stdout)]
    assert sorted(got) == sorted(r[:4] for r in reads if r[4] == sample), out.stderr
    # show of the last step, where the ranks pad: the padding flag against the recorded
    # reads (a read is padding when its sample was read before in the epoch).
    flagged = recorded_padding(reads)
    last = max(r[1] for r in reads)
    assert any(flagged[r[:4]] for r in reads if r[1] == last)
    for step in (5, last):
        out = subprocess.run(
            [*cli, "show", str(step), "--state", str(path), "--json"], capture_output=True, text=True
        )
        shown = sorted((d["rank"], d["position"], d["sample"], d["padding"]) for d in json.loads(out.stdout))
        want = sorted((r[2], r[3], r[4], flagged[r[:4]]) for r in reads if r[1] == step)
        assert shown == want, out.stderr


def recorded_padding(reads: list[tuple]) -> dict[tuple, bool]:
    """Each recorded read ``(epoch, step, rank, position)`` → whether it repeats its sample:
    in each epoch, every read of a sample after its first in (step, rank, position) order."""
    seen, padding = set(), {}
    for r in sorted(reads):
        padding[r[:4]] = (r[0], r[4]) in seen
        seen.add((r[0], r[4]))
    return padding


def _forge(state: dict, edit) -> dict:  # noqa: ANN001 - a function editing the history rows
    forged = copy.deepcopy(state)
    edit(forged["history"])
    return forged


def test_a_forged_history_fails_the_audit_naming_the_sample_and_its_steps(recorded):
    state, _ = recorded
    assert Run(state).audit()
    # The resume starts 6 positions early: samples read twice.
    # Each is caught by the history's own proof, without counting every sample's reads.
    for recount in (True, False):
        early = _forge(state, lambda h: h[1].__setitem__(2, h[1][2] - 6))
        with pytest.raises(
            ShardingError, match=r"sample \d+ is read twice in epoch 0: .*step 8 .*; epoch 0 step 9"
        ):
            Run(early).audit(recount=recount)
        # It starts one step (3 ranks x 3) late, the steps after it moved to add up: samples
        # never read. (Moved alone, the steps would not add up: refused on reading.)
        late = _forge(state, lambda h: (h[1].__setitem__(2, h[1][2] + 9), h[2].__setitem__(4, h[2][4] - 1)))
        with pytest.raises(ShardingError, match=r"sample \d+ is never read in epoch 0"):
            Run(late).audit(recount=recount)
        with pytest.raises(ValueError, match=r"history'\]\[2\] has step=\d+, .*steps do not add up"):
            Run(_forge(state, lambda h: h[1].__setitem__(2, h[1][2] + 9)))
        # An exclusion that shrinks: a sample read after its exclusion.
        shrunk = _forge(state, lambda h: h[2].__setitem__(9, 2))
        with pytest.raises(ShardingError, match="was excluded before segment 2"):
            Run(shrunk).audit(recount=recount)
    # A history that does not end at the state's resume point is refused on reading.
    moved = _forge(state, lambda h: h[2].__setitem__(3, h[2][3] - 1))
    with pytest.raises(ValueError, match="the history was not saved with this state"):
        Run(moved)


def test_item_sampler_runs_count_steps_with_the_loader_batch_and_equal_a_replay():
    """ShardedSampler through a DataLoader of batch 5: 2 ranks, a break, a resume on 3
    ranks, a second epoch; the reads replayed by hand from the samplers' own streams."""
    n, batch = 101, 5
    reads = collections.defaultdict(list)
    # Without a batch size, a read's position is its place in the stream the rank of that
    # number read in the epoch, across the resume: counted here rank by rank.
    items = collections.defaultdict(list)
    taken = collections.Counter()

    def took(epoch: int, rank: int, sample: int) -> None:
        items[sample].append((epoch, rank, taken[epoch, rank]))
        taken[epoch, rank] += 1

    samplers = [ShardedSampler(n, num_replicas=2, rank=r, seed=4) for r in range(2)]
    streams = [iter(s) for s in samplers]
    for step in range(4):
        for r, it in enumerate(streams):
            for k in range(batch):
                sample = next(it)
                reads[sample].append((0, step, r, k))
                took(0, r, sample)
    state = samplers[0].state_dict(consumed_samples=4 * batch * 2)
    resumed = [ShardedSampler(n, num_replicas=3, rank=r, seed=4) for r in range(3)]
    for s in resumed:
        s.load_state_dict(state)
    step0 = 4
    for epoch in (0, 1):
        if epoch == 1:
            for s in resumed:
                s.set_epoch(1)
        lists = [list(s) for s in resumed]
        steps = -(-len(lists[0]) // batch)
        for r, stream in enumerate(lists):
            for i, sample in enumerate(stream):
                reads[sample].append((epoch, step0 + i // batch, r, i % batch))
                took(epoch, r, sample)
        step0 += steps
    run = Run(resumed[0].state_dict())
    for sample in range(n):
        got = sorted((x.epoch, x.step, x.rank, x.position) for x in run.where(sample, batch_size=batch))
        assert got == sorted(reads[sample]), sample
        # Without a batch size an item sampler's reads have no step.
        unbatched = run.where(sample)
        assert all(r.step is None for r in unbatched)
        assert sorted((r.epoch, r.rank, r.position) for r in unbatched) == sorted(items[sample]), sample
    with pytest.raises(ValueError, match="item sampler, which knows no batches"):
        run.show(0)
    assert run.audit().epochs == [0, 1]


def test_a_state_without_history_starts_its_history_at_the_load():
    s = ShardedSampler(100, num_replicas=2, rank=0, seed=3)
    state = {**s.state_dict(), "consumed": 40}  # as 0.5 wrote it: no history
    state.pop("history", None)
    b = ShardedBatchSampler(ShardedSampler(100, num_replicas=2, rank=0, seed=3), 5)
    b.load_state_dict(state)
    list(b)
    run = Run(b.state_dict())
    assert run.segments[0]["change"] == "start" and run.segments[0]["start"] == 40
    audit = run.audit()
    assert audit.begins == (0, 40) and audit.reads == 60


def test_a_repeated_epoch_is_in_the_history_and_fails_the_audit():
    s = ShardedSampler(20, num_replicas=1, rank=0, seed=3)
    b = StepBatchSampler(s, 4)
    list(b)
    with pytest.warns(UserWarning, match="iterated again"):
        list(b)
    run = Run(b.state_dict())
    assert [seg["change"] for seg in run.segments] == ["start", "repeat"]
    with pytest.raises(ShardingError, match="read twice in epoch 0"):
        run.audit()


def test_a_removed_schedule_is_refused():
    from run_history import blend  # noqa: PLC0415

    ds = blend()
    s = ShardedSampler(ds, num_replicas=1, rank=0, shuffle=False, check_consensus=False)
    it = iter(s)
    next(it)
    ds.set_weights([0.5, 0.5], start=10)
    state = s.state_dict()
    assert state["weight_changes"] == 1
    del state["schedule"]
    with pytest.raises(ValueError, match="records 1 weight change.*no 'schedule'"):
        ShardedSampler(blend(), num_replicas=1, rank=0, shuffle=False).load_state_dict(state)


def test_bad_arguments_name_the_fix():
    s = ShardedSampler(10, num_replicas=1, rank=0)
    list(s)
    run = Run(s.state_dict())
    with pytest.raises(ValueError, match=r"not in range\(10\)"):
        run.where(10)
    with pytest.raises(TypeError, match="mapping"):
        Run([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="history"):
        Run({**s.state_dict(), "history": [[0, 0, 0]]})


# -- a token-budget run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def budget_recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[tuple], pathlib.Path]:
    """A TokenBudgetBatchSampler under torchrun with two DataLoader workers: 2 gloo ranks
    break after 7 steps; 3 ranks read the rest of epoch 0 and break after 4 steps of epoch
    1. The final state, every read the ranks recorded ``(epoch, step, rank, position in the
    batch, sample)``, and the lengths' file."""
    folder = tmp_path_factory.mktemp("budget_run")
    state, reads = run_twice(SCRIPTS / "budget_history.py", folder)
    return state, reads, folder


@pytest.mark.multiprocess
def test_a_token_budget_run_answers_what_its_processes_read(budget_recorded):
    import numpy as np  # noqa: PLC0415

    state, reads, folder = budget_recorded
    lengths = np.load(folder / "lengths.npy")
    run = Run(state, lengths=lengths)
    assert [(s["change"], s["world"]) for s in run.segments] == [("start", 2), ("resume", 3), ("epoch", 3)]
    want = collections.defaultdict(list)
    for epoch, step, rank, k, sample in reads:
        want[sample].append((epoch, step, rank, k))
    for sample in range(run.n):
        got = sorted((r.epoch, r.step, r.rank, r.position) for r in run.where(sample))
        assert got == sorted(want[sample]), sample
    last = max(r[1] for r in reads)
    for step in (0, 6, 7, last):
        shown = [(r.epoch, r.step, r.rank, r.position, r.sample) for r in run.show(step)]
        assert shown == sorted(r for r in reads if r[1] == step), step
    audit = run.audit()
    assert audit.epochs == [0, 1] and audit.segments == 3
    assert audit.reads == len(reads) - sum(r.padding for s in range(run.n) for r in run.where(s))
    assert collections.Counter(r[4] for r in reads if r[0] == 0).keys() == set(range(3000))
    cli = [sys.executable, "-m", "permshard"]
    path, npy = str(folder / "state.json"), str(folder / "lengths.npy")
    out = subprocess.run([*cli, "audit", "--state", path, "--lengths", npy], capture_output=True, text=True)
    assert out.returncode == 0 and "exactly once: epochs [0, 1]" in out.stdout, out.stderr
    sample = reads[-1][4]
    out = subprocess.run(
        [*cli, "where", str(sample), "--state", path, "--lengths", npy, "--json"],
        capture_output=True,
        text=True,
    )
    assert json.loads(out.stdout) == [r.as_dict() for r in run.where(sample)], out.stderr
    out = subprocess.run([*cli, "show", "3", "--state", path], capture_output=True, text=True)
    assert out.returncode == 2 and "--lengths FILE.npy" in out.stderr


@pytest.mark.multiprocess
def test_a_forged_token_budget_history_fails_its_audit(budget_recorded):
    import numpy as np  # noqa: PLC0415

    state, _, folder = budget_recorded
    lengths = np.load(folder / "lengths.npy")

    # The resume on 3 ranks starts 2 steps into the window's new plan: their samples are
    # never read; it starts over as a repeat of the epoch: samples read twice.
    def late_by_2(h: list) -> None:
        h[1][3], h[1][6], h[2][5] = 2, h[1][6] - 2, h[2][5] - 2

    late = _forge(state, late_by_2)
    with pytest.raises(ShardingError, match=r"sample \d+ is never read in epoch 0"):
        Run(late, lengths=lengths).audit()
    again = _forge(state, lambda h: h[1].__setitem__(0, 3))  # a repeat: from the epoch's start
    with pytest.raises(ShardingError, match=r"sample \d+ is read twice in epoch 0: read at epoch 0 step \d+"):
        Run(again, lengths=lengths).audit()
    with pytest.raises(ValueError, match="pass Run\\(state_dict, lengths=lengths\\)"):
        Run(state)
    with pytest.raises(ValueError, match="lengths holds 2999 samples, the run 3000: pass the run's lengths"):
        Run(state, lengths=lengths[:-1])
    with pytest.raises(ValueError, match="saved over another dataset"):
        Run(state, lengths=lengths[::-1].copy())
    with pytest.raises(ValueError, match="history.*7"):
        Run({**state, "history": [[0, 0, 0]]}, lengths=lengths)
    with pytest.raises(ValueError, match="taken holds 16 bits for a window of 500 positions"):
        Run({**state, "history_taken": "AAA="}, lengths=lengths).where(0)


def test_a_token_budget_sampler_copied_mid_pass_carries_its_history():
    import pickle  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from permshard import TokenBudgetBatchSampler  # noqa: PLC0415

    lengths = np.random.default_rng(1).integers(1, 200, size=800)
    s = TokenBudgetBatchSampler(lengths, 512, 1, 0, window=200, check_consensus=False)
    it = iter(s)
    first = [next(it) for _ in range(5)]
    copy_ = pickle.loads(pickle.dumps(s))
    state = copy_.state_dict()
    assert state["history"] == s.state_dict()["history"] == [[0, 0, 0, 0, 1, 0, 5]]
    run = Run(state, lengths=lengths)
    assert [(r.step, r.position) for r in run.where(first[4][0])] == [(4, 0)]
    assert run.audit().reads == sum(map(len, first))
    with pytest.raises(ValueError, match="counts its own batches: drop batch_size"):
        run.show(0, batch_size=4)
    with pytest.raises(ValueError, match="lengths= is for a TokenBudgetBatchSampler's state"):
        Run(ShardedSampler(10, num_replicas=1, rank=0).state_dict(), lengths=lengths)


_FORGE = r"""
import copy, json, random, resource, sys
import numpy as np
from permshard import Run, ShardedBatchSampler, ShardedSampler, ShardingError, TokenBudgetBatchSampler

state = json.loads(open(sys.argv[1]).read())
lengths = np.load(sys.argv[4]) if len(sys.argv) > 4 else None  # a token-budget run's
# The reader may use what it holds now and 1 GiB more: a forged integer that made it allocate
# more is a MemoryError (or an abort), and fails the test.
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
rng = random.Random(int(sys.argv[2]))
deltas = [1, -1, 2, -3, 7, 1 << 20, 1 << 40, 1 << 63, 1 << 64, -(1 << 40)]
junk = [1.5, "3", None, [1], True]
outcomes = {"refused": 0, "audit failed": 0, "passed": 0}
for trial in range(int(sys.argv[3])):
    forged = copy.deepcopy(state)
    rows = forged["history"]
    for _ in range(rng.choice([1, 1, 2])):
        edit = rng.choice(["cell", "cell", "junk", "drop", "duplicate", "swap"])
        i = rng.randrange(len(rows))
        if edit == "cell":
            rows[i][rng.randrange(len(rows[i]))] += rng.choice(deltas)
        elif edit == "junk":
            rows[i][rng.randrange(len(rows[i]))] = rng.choice(junk)
        elif edit == "drop" and len(rows) > 1:
            del rows[i]
        elif edit == "duplicate":
            rows.insert(i, list(rows[i]))
        elif edit == "swap" and len(rows) > 1:
            j = rng.randrange(len(rows))
            rows[i], rows[j] = rows[j], rows[i]
    try:
        run = Run(forged, lengths=lengths)
    except (ValueError, TypeError) as e:
        outcomes["refused"] += 1
        if lengths is not None:
            world, seed, window = state["num_replicas"], state["seed"], state["window"]
            sampler = TokenBudgetBatchSampler(lengths, state["max_tokens"], world, 0, seed=seed, window=window)
        else:
            sampler = ShardedSampler(state["n"], num_replicas=state["num_replicas"], rank=0, seed=1, shuffle=False)
            sampler = ShardedBatchSampler(sampler, 3)
        try:  # what Run refuses, a sampler refuses too
            sampler.load_state_dict(forged)
        except (ValueError, TypeError):
            continue
        raise AssertionError(f"load_state_dict accepted what Run refused ({e}): {rows}")
    try:
        run.audit(recount=trial % 2 == 0)
        outcomes["passed"] += 1
    except ShardingError:
        outcomes["audit failed"] += 1
    try:  # answers never crash, whatever the audit said
        for s in range(0, run.n, 7):
            run.where(s)
        for step in range(0, 200, 9):
            try:
                run.show(step)
            except ValueError as e:  # a step past the history
                assert "step" in str(e), e
    except ValueError as e:  # a token budget's forged plan is found by planning it
        assert lengths is not None, e
print(json.dumps(outcomes))
"""


@pytest.mark.parametrize("kind", ["sharded", "budget"])
def test_forged_histories_are_refused_or_fail_the_audit_within_a_memory_limit(request, kind, tmp_path):
    """Randomised forgeries of a recorded run's history (an item run's and a token
    budget's: cells moved by small and huge deltas, values of the wrong type, rows dropped,
    duplicated and swapped), read by a process that may allocate 1 GiB beyond what it
    holds: each is refused with a ValueError/TypeError naming the row, fails the audit, or
    passes it whole; never an abort, a MemoryError or another exception."""
    if kind == "sharded":
        state, _ = request.getfixturevalue("recorded")
        extra = []
    else:
        state, _, folder = request.getfixturevalue("budget_recorded")
        extra = [str(folder / "lengths.npy")]
    (tmp_path / "state.json").write_text(json.dumps(state))
    out = subprocess.run(
        [sys.executable, "-c", _FORGE, str(tmp_path / "state.json"), "0", "150", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    outcomes = json.loads(out.stdout)
    assert outcomes["refused"] > 75 and outcomes["audit failed"] > 0, outcomes
