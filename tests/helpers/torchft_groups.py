"""Replica groups training under real torchft, as torchft's own integration tests run them
(``torchft.manager_integ_test``: a ``Runner`` per group in a thread, its ranks in threads,
gloo, the lighthouse in-process, an ``EventInjector`` that kills a group or fails an
allreduce), each rank reading through ``permshard.torchft.CommittedLoader``.

Every rank records what it read at each step the manager committed (the samples the
batch held, not what the loader says it read), and its loader's state at the end of each
attempt: the tests compare the first with an independent reference and audit the second.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

import torch
from torch import optim
from torchft._torchft import LighthouseServer
from torchft.ddp import DistributedDataParallel
from torchft.manager import Manager
from torchft.manager_integ_test import INIT_LOCK, EventInjector, MyModel, Runner
from torchft.optim import OptimizerWrapper
from torchft.process_group import FakeProcessGroupWrapper, ProcessGroupGloo

import permshard.torchft
from permshard.torchft import StreamOrder


class Features(torch.utils.data.Dataset):
    """Sample ``i`` is ``(features, i)``: the batch says which samples it holds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3,), float(i) / self.n), i


@dataclass
class Record:
    """What the ranks of every group read, committed, and their loaders' states."""

    # Every step's read: (step, group, rank, samples, whether the group committed the step)
    reads: list[tuple[int, int, int, list[int], bool]] = field(default_factory=list)
    # (step, group, groups, the loader's call, quorum-to-batch seconds, of which the batch's)
    waits: list[tuple[int, int, int, int, float, float]] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)
    started: set[tuple[int, int]] = field(default_factory=set)  # (group, rank) that ran once
    # Batches whose samples are not those of the positions the loader says it read:
    # (step, group, rank, samples, the stream's samples at loader.last_read)
    misread: list[tuple[int, int, int, list[int], list[int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def committed(self) -> list[tuple[int, int, int, list[int]]]:
        """The reads the run trained on: those of the steps a group committed, and those of
        a group that did not commit a step the others committed (its gradients went into
        their update, and it heals past the step) unless it read the step again."""
        by_others = {step for step, *_, own in self.reads if own}
        out = []
        for i, (step, group, rank, samples, own) in enumerate(self.reads):
            again = any(r[:3] == (step, group, rank) for r in self.reads[i + 1 :])
            if own or (step in by_others and not again):
                out.append((step, group, rank, samples))
        return out

    def samples(self) -> list[int]:
        """Every committed sample, all groups and ranks together."""
        return [s for *_, samples in self.committed() for s in samples]


def train_loop(
    rank: int, store_port: int, device: torch.device, runner: Runner, train_loop_args: dict
) -> None:
    record: Record = train_loop_args["record"]
    with record.lock:
        restarted = (runner.replica_id, rank) in record.started
        record.started.add((runner.replica_id, rank))
    if restarted:
        time.sleep(train_loop_args.get("rejoin_after", 0.0))  # the others go on without it meanwhile
    pg = FakeProcessGroupWrapper(ProcessGroupGloo())
    runner.event_injector.set_pg(pg)
    model: Any = None

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])

    manager = Manager(
        pg=pg,
        min_replica_size=train_loop_args.get("min_replica_size", 2),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=str(runner.replica_id),
        store_addr="localhost",
        store_port=store_port,
        rank=rank,
        world_size=runner.world_size,
        lighthouse_addr=runner.lighthouse_address,
        port=0,
        timeout=timedelta(seconds=20),
        quorum_timeout=timedelta(seconds=20),
        **runner.manager_args,
    )
    try:
        with INIT_LOCK:
            torch.manual_seed(42)
            model = MyModel()
        model = DistributedDataParallel(manager, model)
        optimizer = OptimizerWrapper(manager, optim.Adam(model.parameters()))
        loader = permshard.torchft.CommittedLoader(
            train_loop_args.get("dataset") or Features(train_loop_args["n"]),
            manager,
            rank=rank,
            world_size=runner.world_size,
            **train_loop_args["loader"],
        )
        order = StreamOrder(loader.n, loader.seed, loader.shuffle)
        calls = 0
        try:
            while True:
                optimizer.zero_grad()  # starts the quorum
                features, samples = loader.next_batch()
                step, groups = manager.current_step(), manager.num_participants()
                read = loader.last_read
                positions = [] if read is None else order.samples(read.start, read.start + read.length)
                if samples.tolist() != positions:
                    record.misread.append((step, runner.replica_id, rank, samples.tolist(), positions))
                record.waits.append(
                    (step, runner.replica_id, groups, calls, loader.last_wait, loader.last_fetch)
                )
                calls += 1
                time.sleep(train_loop_args.get("step_seconds", 0.0))  # the forward and backward passes
                out = model(features) if len(features) else model(torch.zeros(1, 3)) * 0.0
                out.sum().backward()
                if (runner.replica_id, step) in train_loop_args.get("error_at", ()):
                    train_loop_args["error_at"].discard((runner.replica_id, step))
                    manager.report_error(RuntimeError("injected"))  # this group will not commit the step
                optimizer.step()  # commits or not
                with record.lock:
                    record.reads.append(
                        (step, runner.replica_id, rank, samples.tolist(), manager.current_step() > step)
                    )
                # Every group stops at the same step: the first past the end with all of them.
                if manager.current_step() >= train_loop_args["steps"] and groups >= train_loop_args["groups"]:
                    break
                runner.event_injector.check(rank, manager.current_step())
        finally:
            with record.lock:
                record.states.append(loader.state_dict())
            loader.close()
    finally:
        manager.shutdown(wait=False)


def run_groups(
    *,
    groups: int = 3,
    steps: int = 12,
    n: int = 50,
    async_quorum: bool = False,
    injectors: Optional[list[EventInjector]] = None,
    world_size: int = 1,
    lighthouses: int = 1,
    min_replicas: int = 2,
    expect_together: Optional[int] = None,
    dataset: Any = None,
    step_seconds: float = 0.0,
    rejoin_after: float = 0.0,
    error_at: Optional[set[tuple[int, int]]] = None,
    **loader: Any,
) -> Record:
    """Trains ``groups`` replica groups of ``world_size`` ranks for at least ``steps``
    committed steps (until all of them, or ``expect_together``, take part in one), with
    ``loader`` the CommittedLoader's options (over ``dataset``, default :class:`Features`;
    each step takes ``step_seconds`` more, as a model would; a restarted group
    rejoins ``rejoin_after`` seconds later; a group of ``error_at``'s ``(group, step)``
    reports an error to its manager after the backward pass: it does not commit the step).
    With ``lighthouses=2`` the last group asks
    a lighthouse of its own: a split brain."""
    record = Record()
    servers = [
        LighthouseServer(bind="[::]:0", min_replicas=min_replicas if i == 0 else 1, join_timeout_ms=200)
        for i in range(lighthouses)
    ]
    injectors = injectors or [EventInjector() for _ in range(groups)]
    try:
        with ThreadPoolExecutor(max_workers=groups) as executor:
            futures = [
                executor.submit(
                    Runner(
                        replica_id=g,
                        num_replicas=groups,
                        lighthouse_address=servers[lighthouses - 1 if g == groups - 1 else 0].address(),
                        event_injector=injectors[g],
                        train_loop=train_loop,
                        world_size=world_size,
                        manager_args={"use_async_quorum": async_quorum},
                        train_loop_args={
                            "record": record,
                            "n": n,
                            "steps": steps,
                            "groups": groups if expect_together is None else expect_together,
                            "loader": loader,
                            "dataset": dataset,
                            "step_seconds": step_seconds,
                            "rejoin_after": rejoin_after,
                            "error_at": error_at if error_at is not None else set(),
                            # The group on a lighthouse of its own commits alone.
                            "min_replica_size": 1 if lighthouses > 1 and g == groups - 1 else min_replicas,
                        },
                    ).run_replica
                )
                for g in range(groups)
            ]
            for future in futures:
                future.result()
    finally:
        for server in servers:
            server.shutdown()
    return record
