"""permshard.torchft under real torchft 0.2.0 (its own test harness: ``Runner`` and
``EventInjector``, gloo, the lighthouse in-process): over the committed steps of every
replica group, every sample of every epoch is read exactly once, whatever fails, heals,
rejoins or is not committed; compared with an independent reference (the epochs of a
one-rank ``ShardedSampler``, concatenated) and proven by ``permshard.torchft.audit`` from
the loaders' states, which names the positions read twice in a split brain."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from torchft.manager_integ_test import EventInjector

import permshard
import permshard.torchft
from helpers.one_group import Joined, OneGroup
from helpers.torchft_groups import Features, run_groups
from permshard.torchft import CommittedLoader, StreamOrder, audit, share

pytestmark = [
    pytest.mark.multiprocess,
    # torch warns inside torchft's heal (a checkpoint read from a read-only buffer) and
    # of its own deprecations under torchft's DDP: not permshard's, and raised as errors
    # they would break the heal this suite tests.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

N = 50


def reference(count: int, n: int = N, seed: int = 0, shuffle: bool = True) -> list[int]:
    """The first ``count`` samples of the stream: epoch after epoch of one rank's order."""
    out: list[int] = []
    epoch = 0
    while len(out) < count:
        sampler = permshard.ShardedSampler(n, num_replicas=1, rank=0, seed=seed, shuffle=shuffle)
        sampler.set_epoch(epoch)
        out += list(sampler)
        epoch += 1
    return out[:count]


def check_exactly_once(record, **order) -> permshard.torchft.CommittedAudit:
    assert record.misread == []  # every batch holds the samples of the positions it was read for
    samples = record.samples()
    assert Counter(samples) == Counter(reference(len(samples), **order))
    proof = audit(record.states)
    assert proof.positions == len(samples)
    return proof


@pytest.mark.parametrize("async_quorum", [False, True], ids=["sync", "async"])
def test_a_group_killed_and_restarted_reads_nothing_twice_and_loses_nothing(async_quorum):
    # Group 1 dies after step 4 and restarts with a new loader (no state of its own).
    record = run_groups(
        async_quorum=async_quorum,
        injectors=[EventInjector(), EventInjector().fail_at(0, 4), EventInjector()],
        batch_size=2,
    )
    proof = check_exactly_once(record)
    assert proof.epochs >= 1 and proof.steps >= 12
    assert len(record.states) == 4  # group 1's two attempts each left a state


@pytest.mark.parametrize("async_quorum", [False, True], ids=["sync", "async"])
def test_a_step_no_group_commits_is_read_again(async_quorum):
    record = run_groups(async_quorum=async_quorum, batch_size=2, error_at={(0, 3), (1, 3), (2, 3)})
    check_exactly_once(record)
    attempts = [(group, samples) for step, group, _, samples, _ in record.reads if step == 3]
    assert len(attempts) == 6 and all(attempts.count(a) == 2 for a in attempts)  # the same batch twice


@pytest.mark.parametrize("async_quorum", [False, True], ids=["sync", "async"])
def test_a_step_one_group_does_not_commit_is_trained_by_the_others(async_quorum):
    # Group 1 does not commit step 3; the others do, with its gradients: it heals past it.
    record = run_groups(async_quorum=async_quorum, batch_size=2, error_at={(1, 3)})
    check_exactly_once(record)
    assert [own for step, group, _, _, own in record.reads if (step, group) == (3, 1)] == [False]


@contextlib.contextmanager
def default_sigchld(start: str) -> Iterator[None]:
    """The default SIGCHLD handler while groups fork workers (``start="fork"``). The groups
    are threads of a ThreadPoolExecutor, as in torchft's own tests. Forked from such a
    thread, a worker of Python 3.11 exits with code 1 at shutdown (the executor's atexit
    hook joins the forking thread: "cannot join current thread"), and torch's SIGCHLD
    handler, installed in this process's main thread by an earlier test's DataLoader, would
    report that as a crash there."""
    before = signal.signal(signal.SIGCHLD, signal.SIG_DFL) if start == "fork" else None
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGCHLD, before)


@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_prefetching_workers_through_a_restart(start):
    # Spawned workers start slowly (each imports torch): one per loader.
    with default_sigchld(start):
        record = run_groups(
            async_quorum=True,
            injectors=[EventInjector(), EventInjector(), EventInjector().fail_at(0, 5)],
            batch_size=3,
            num_workers=2 if start == "fork" else 1,
            multiprocessing_context=start,
            seed=7,
        )
    check_exactly_once(record, seed=7)


def test_a_constant_global_batch_whatever_the_membership():
    record = run_groups(
        injectors=[EventInjector().fail_at(0, 3), EventInjector(), EventInjector()], global_batch_size=5
    )
    check_exactly_once(record)
    per_step = Counter()
    for step, _, _, samples in record.committed():
        per_step[step] += len(samples)
    assert set(per_step.values()) == {5}  # 5 a step with 3 groups or 2 (sizes 2, 2, 1 or 3, 2)


def test_groups_of_two_ranks():
    injectors = [EventInjector(), EventInjector().fail_at(0, 4).fail_at(1, 4)]
    record = run_groups(
        groups=2, world_size=2, injectors=injectors, batch_size=2, min_replicas=1, shuffle=False
    )
    check_exactly_once(record, shuffle=False)
    assert {rank for _, _, rank, _ in record.committed()} == {0, 1}


def test_a_split_brain_is_caught_by_the_audit():
    # The last group asks a lighthouse of its own: it commits alone from position 0.
    record = run_groups(lighthouses=2, expect_together=1, batch_size=2)
    samples = record.samples()
    assert len(samples) > len(set(samples))  # read twice in one epoch, and nothing noticed
    with pytest.raises(permshard.ShardingError, match=r"positions read twice.*position 0 \(sample"):
        audit(record.states)


# -- without torchft's processes --


def test_share_splits_into_parts_that_differ_by_at_most_one():
    for total in range(0, 30):
        for parts in range(1, 7):
            pieces = [share(total, parts, i) for i in range(parts)]
            assert sum(length for _, length in pieces) == total
            assert max(length for _, length in pieces) - min(length for _, length in pieces) <= 1
            assert [offset for offset, _ in pieces] == [
                sum(length for _, length in pieces[:i]) for i in range(parts)
            ]


def test_the_stream_is_the_epochs_of_a_one_rank_sampler():
    order = StreamOrder(N, 3, True)
    assert order.samples(0, 3 * N) == reference(3 * N, seed=3)
    assert order.samples(N - 7, 2 * N + 5) == reference(2 * N + 5, seed=3)[N - 7 :]
    assert StreamOrder(N, 3, False).samples(45, 60) == reference(60, shuffle=False)[45:]


def test_bad_arguments_name_the_fix():
    data = Features(10)
    with pytest.raises(ValueError, match="batch_size= .* or global_batch_size="):
        CommittedLoader(data, OneGroup())
    with pytest.raises(ValueError, match="not both"):
        CommittedLoader(data, OneGroup(), batch_size=2, global_batch_size=4)
    with pytest.raises(TypeError, match="torchft.Manager"):
        CommittedLoader(data, object(), batch_size=2)
    with pytest.raises(ValueError, match="rank 2 is not below world_size 2"):
        CommittedLoader(data, OneGroup(), batch_size=2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        CommittedLoader(data, OneGroup(), batch_size=0)


def test_what_defines_the_stream_is_fixed():
    loader = CommittedLoader(Features(10), OneGroup(), batch_size=2, seed=5)
    with pytest.raises(AttributeError, match=r"seed is fixed.*CommittedLoader\(\.\.\., seed=6\)"):
        loader.seed = 6
    assert loader.seed == 5 and loader.next_batch()[1].tolist() == reference(2, n=10, seed=5)


def test_state_dict_round_trip_and_refusals():
    loader = CommittedLoader(Features(10), OneGroup(), batch_size=2, seed=5)
    features, samples = loader.next_batch()
    assert samples.tolist() == reference(2, n=10, seed=5) and features.shape == (2, 3)
    state = loader.state_dict()
    again = CommittedLoader(Features(10), OneGroup(), batch_size=2, seed=5)
    again.load_state_dict(state)
    assert again.state_dict() == state
    with pytest.raises(ValueError, match="seed=5, this loader has 6"):
        CommittedLoader(Features(10), OneGroup(), batch_size=2, seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match="unknown keys \\['extra'\\]"):
        again.load_state_dict(dict(state, extra=1))
    again.load_state_dict(dict(state, extra=1), strict=False)


def test_an_empty_batch_has_the_samples_shape():
    class Healing(OneGroup):
        def is_participating(self):
            return False

    features, samples = CommittedLoader(Features(10), Healing(), batch_size=2).next_batch()
    assert features.shape == (0, 3) and features.dtype == torch.float32 and samples.shape == (0,)


# One group alone at steps 0 and 1, joined by another from step 2 on (its batches then come
# from positions 4, 8, 12, ...: the other reads 6, 10, ...), in order: this group's samples.
JOINED_AT_2 = [[0, 1], [2, 3], [4, 5], [8, 9], [12, 13], [16, 17]]


def steps_read(loader, manager, steps=6):
    """The samples of this group's batch at each step, every step committed."""
    out = []
    for _ in range(steps):
        _, samples = loader.next_batch()
        out.append(samples.tolist())
        manager.step += 1
    return out


class FailsInWorkers(Features):
    """Features that raise in a DataLoader worker on sample ``fails`` (only the first time
    where ``once`` names a file to create then)."""

    def __init__(self, n, fails, once=None):
        super().__init__(n)
        self.fails, self.once = fails, once

    def __getitem__(self, i):
        if i == self.fails and torch.utils.data.get_worker_info() is not None:
            if self.once is None or not os.path.exists(self.once):
                if self.once is not None:
                    open(self.once, "w").close()
                raise OSError(f"sample {i} cannot be read")
        return super().__getitem__(i)


def test_a_failure_while_discarding_stale_batches_restarts_the_workers(monkeypatch):
    # At step 2 the batches prefetched for one group are discarded in a thread; the order
    # fails there once (as a worker's crash would): the workers start again at step 3,
    # and no batch is handed for a read it was not fetched for.
    real = StreamOrder.samples
    failed = []

    def samples(self, start, stop):
        if threading.current_thread().name == "permshard-discard" and not failed:
            failed.append(start)
            raise RuntimeError("the order failed while discarding")
        return real(self, start, stop)

    monkeypatch.setattr(StreamOrder, "samples", samples)
    manager = Joined(lambda step: 1 if step < 2 else 2)
    loader = CommittedLoader(Features(40), manager, batch_size=2, shuffle=False, num_workers=2)
    assert steps_read(loader, manager) == JOINED_AT_2 and failed
    loader.close()


def test_a_workers_failure_on_a_discarded_batch_is_not_the_steps():
    manager = Joined(lambda step: 1 if step < 2 else 2)
    loader = CommittedLoader(FailsInWorkers(40, fails=6), manager, batch_size=2, shuffle=False, num_workers=1)
    assert steps_read(loader, manager) == JOINED_AT_2  # 6 was prefetched for one group, then dropped
    loader.close()


def test_a_workers_failure_on_the_steps_batch_is_raised_and_the_step_read_again(tmp_path):
    manager = Joined(lambda step: 1 if step < 2 else 2)
    dataset = FailsInWorkers(40, fails=8, once=str(tmp_path / "failed"))
    loader = CommittedLoader(dataset, manager, batch_size=2, shuffle=False, num_workers=1)
    assert steps_read(loader, manager, 3) == JOINED_AT_2[:3]
    with pytest.raises(OSError, match="sample 8 cannot be read"):
        loader.next_batch()  # step 3's batch, from the workers
    assert steps_read(loader, manager, 3) == JOINED_AT_2[3:]  # step 3 again, read by new workers
    # Recorded once: steps 0-1 from 0 by one group, steps 2-5 from 4 by two (stride 4).
    assert loader.state_dict()["reads"] == [[0, 2, 0, 2, 2, 1, 0], [2, 4, 4, 4, 2, 2, 0]]
    loader.close()


def test_forged_records_fail_the_audit_naming_the_positions():
    base = {
        "algorithm": "committed-v1",
        "n": 10,
        "seed": 0,
        "shuffle": True,
        "batch_size": 2,
        "global_batch_size": None,
        "world_size": 1,
        "rank": 0,
        "consumed": 0,
    }
    a = dict(base, reads=[[0, 5, 0, 4, 2, 2, 0]])  # steps 0-4: [0, 2), [4, 6), ...
    b = dict(base, reads=[[0, 5, 2, 4, 2, 2, 1]])  # steps 0-4: [2, 4), [6, 8), ...
    assert audit([a, b]).positions == 20 and audit([a, b]).epochs == 2
    with pytest.raises(
        permshard.ShardingError,
        match=r"2 positions read twice; position 2 \(sample \d+\) read again at step 0",
    ):
        audit([a, b, dict(base, reads=[[0, 1, 2, 2, 2, 1, 0]])])
    with pytest.raises(ValueError, match="state 1 is not a CommittedLoader's"):
        audit([a, {"n": 10, "consumed": 0}])
    with pytest.raises(ValueError, match="disagree on seed"):
        audit([a, dict(b, seed=1)])
    with pytest.raises(permshard.ShardingError, match=r"positions \[2, 4\) never read"):
        audit([a, dict(base, reads=[[1, 4, 6, 4, 2, 2, 1]])])


def test_the_audit_command_reads_every_ranks_state(tmp_path, capsys):
    import json

    from permshard import _cli

    record = run_groups(groups=2, min_replicas=1, batch_size=2, steps=6)
    paths = []
    for i, state in enumerate(record.states):
        paths += ["--state", str(tmp_path / f"rank{i}.json")]
        (tmp_path / f"rank{i}.json").write_text(json.dumps(state))
    capsys.readouterr()  # what torchft's harness printed
    assert _cli.main(["audit", *paths, "--json"]) == 0
    proof = json.loads(capsys.readouterr().out)
    assert proof["positions"] == len(record.samples()) and proof["steps"] >= 6
    assert _cli.main(["audit", *paths[:2]]) == 1  # one group's reads alone leave gaps
    assert "never read" in capsys.readouterr().err


def test_the_example_under_torchrun_with_a_crash(tmp_path):
    import os
    import pathlib
    import subprocess
    import sys

    from torchft._torchft import LighthouseServer

    example = pathlib.Path(__file__).parent.parent / "examples" / "torchft_ddp.py"
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=1000)
    try:
        groups = []
        for group, extra in ((0, []), (1, ["--max-restarts", "1"])):
            env = dict(
                os.environ,
                REPLICA_GROUP_ID=str(group),
                NUM_REPLICA_GROUPS="2",
                TORCHFT_LIGHTHOUSE=lighthouse.address(),
            )
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                "1",
                *extra,
            ]
            command += [str(example), "--out", str(tmp_path), "--steps", "12", "--workers", "1"]
            command += ["--kill-at", "5"] if group == 1 else []
            groups.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        outputs = [g.communicate(timeout=240)[0] for g in groups]
        assert [g.returncode for g in groups] == [0, 0], outputs
    finally:
        lighthouse.shutdown()
    records = sorted(tmp_path.glob("group*.json"))
    assert [r.name for r in records] == [
        "group0-attempt0-rank0.json",
        "group1-attempt0-rank0.json",
        "group1-attempt1-rank0.json",
    ]
    states = [json.loads(r.read_text()) for r in records]
    proof = audit(states)
    # Steps where a group heals (its first step, torchft's asynchronous quorum) are read by the other alone.
    read = sum(steps * length for state in states for _, steps, _, _, length, _, _ in state["reads"])
    assert proof.positions == read and 12 * 8 < read <= 12 * 2 * 8 and proof.steps == 12


@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_workers_end_with_a_crashed_trainer(start):
    # A forkserver's workers watch the forkserver, which they keep alive: without the
    # loader's own watch on the trainer they would outlive every crash of a group.
    import os
    import pathlib
    import subprocess
    import sys
    import time

    tests = pathlib.Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, str(tests / "scripts" / "crash_with_workers.py"), start],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    workers = [int(pid) for pid in done.stdout.split()]
    assert len(workers) == 2

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return pathlib.Path(f"/proc/{pid}/status").read_text().find("zombie") < 0

    deadline = time.monotonic() + 20
    while any(map(alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(alive, workers)), f"{start} workers {workers} outlived the trainer"


def test_batches_prefetched_for_steps_that_did_not_come_are_discarded():
    """Async quorum, one prefetching worker, a constant global batch: group 1 does not
    commit step 3, so the next steps' reads differ from what its worker fetched ahead. The
    loader takes the batches in flight and hands the one fetched for this step's read (each
    batch travels with the read it was fetched for); the samples of every batch are those of
    the positions the loader says it read (``misread``), and the reference holds."""
    with default_sigchld("fork"):
        record = run_groups(async_quorum=True, global_batch_size=6, num_workers=1, error_at={(1, 3)})
    check_exactly_once(record)
