"""permshard.ray under real Ray Train: a TorchTrainer with CPU workers on gloo reads every
sample exactly once per epoch through permshard.ray.prepare_data_loader (a ShardedSampler,
a ShardedBatchSampler, a TokenBudgetBatchSampler and a plain shuffle=True loader), batch
sizes kept; a Ray checkpoint taken mid-epoch on 1 worker resumes on 3, exactly."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from collections import Counter

import pytest
import ray  # noqa: E402  (a test dependency, installed by make)
import ray.train.torch  # noqa: E402

# Ray and its dependencies warn of their own deprecations at import and start.
pytestmark = [pytest.mark.multiprocess, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

N = 1001


@pytest.fixture(scope="module")
def local_ray():
    here = str(pathlib.Path(__file__).parent)  # the workers import this module's functions
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}},
    )
    yield
    ray.shutdown()


def fit(train, workers: int, config: dict, storage: str):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    os.makedirs(storage, exist_ok=True)
    trainer = TorchTrainer(
        train,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, name=f"run-{workers}-{len(os.listdir(storage))}"),
    )
    return trainer.fit()


def read_every_loader(config):
    """Each worker writes, per loader kind, the batches it read in one epoch."""
    import numpy as np
    import ray.train
    from torch.utils.data import DataLoader

    import permshard.ray
    from permshard import ShardedBatchSampler, ShardedSampler, TokenBudgetBatchSampler

    n, rank = config["n"], ray.train.get_context().get_world_rank()
    lengths = np.arange(n) % 50 + 1
    loaders = {
        "sampler": DataLoader(range(n), batch_size=8, sampler=ShardedSampler(n, seed=1)),
        "batch_sampler": DataLoader(
            range(n), batch_sampler=ShardedBatchSampler(ShardedSampler(n, seed=1), 8)
        ),
        "token_budget": DataLoader(range(n), batch_sampler=TokenBudgetBatchSampler(lengths, 400, seed=1)),
        "shuffle": DataLoader(range(n), batch_size=8, shuffle=True, num_workers=1, persistent_workers=True),
    }
    out = {}
    for kind, loader in loaders.items():
        prepared = permshard.ray.prepare_data_loader(loader)
        out[kind] = [batch.tolist() for batch in prepared]
        if kind == "shuffle":
            out["shuffle_kept"] = [
                prepared.num_workers,
                prepared.persistent_workers,
                type(prepared.sampler).__name__,
            ]
    pathlib.Path(config["out"], f"{rank}.json").write_text(json.dumps(out))


def resume_and_save(config):
    """Reads `steps` batches (all with None), saving the sampler's state in a Ray checkpoint."""
    import ray.train
    from ray.train import Checkpoint
    from torch.utils.data import DataLoader

    import permshard.ray
    from permshard import ShardedBatchSampler, ShardedSampler

    n, rank = config["n"], ray.train.get_context().get_world_rank()
    loader = permshard.ray.prepare_data_loader(
        DataLoader(range(n), batch_sampler=ShardedBatchSampler(ShardedSampler(n, seed=4), 8))
    )
    loader.batch_sampler.set_epoch(3)
    saved = config["checkpoint"]  # the last run's (Ray Train 2's way to resume in a new run)
    if saved is not None:
        with saved.as_directory() as d:
            loader.load_state_dict(json.loads(pathlib.Path(d, "sampler.json").read_text()))
    read = []
    for step, batch in enumerate(loader):
        read.append(batch.tolist())
        if config["steps"] is not None and step + 1 == config["steps"]:
            break
    pathlib.Path(config["out"], f"{config['run']}-{rank}.json").write_text(json.dumps(read))
    with tempfile.TemporaryDirectory() as d:
        pathlib.Path(d, "sampler.json").write_text(json.dumps(loader.state_dict()))
        ray.train.report({"steps": len(read)}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
    if config["steps"] is None:  # the resumed run reads every kind of loader too
        read_every_loader(config)


def test_a_checkpoint_on_one_worker_resumes_on_three_and_every_loader_reads_once(local_ray, tmp_path):
    """Two Ray Train runs (each costs a cluster of workers importing torch): the first
    stops mid-epoch on 1 worker with a checkpoint, the second resumes it on 3, then reads
    one epoch of every kind of loader."""
    out, storage = tmp_path / "out", str(tmp_path / "ray")
    out.mkdir()
    checkpoint = None
    for run, (workers, steps) in enumerate([(1, 40), (3, None)]):
        config = {"n": N, "out": str(out), "steps": steps, "run": run, "checkpoint": checkpoint}
        checkpoint = fit(resume_and_save, workers, config, storage).checkpoint
        assert checkpoint is not None
    resumed = [out / f for f in ("0-0.json", "1-0.json", "1-1.json", "1-2.json")]
    counts = Counter(x for f in resumed for batch in json.loads(f.read_text()) for x in batch)
    # Every sample once; the only repeats are the last run's declared padding (< 3).
    assert set(counts) == set(range(N)) and sum(counts.values()) - N < 3
    ranks = [json.loads((out / f"{r}.json").read_text()) for r in range(3)]
    for kind in ("sampler", "batch_sampler", "token_budget", "shuffle"):
        counts = Counter(x for r in ranks for batch in r[kind] for x in batch)
        padding = {"token_budget": 0}.get(kind, 1)  # n = 1001 over 3: one padded sample
        assert set(counts) == set(range(N)) and sum(counts.values()) == N + padding, kind
    for kind in ("sampler", "batch_sampler", "shuffle"):  # batches of 8 kept (the last may be short)
        assert all(len(b) == 8 for r in ranks for b in r[kind][:-1]), kind
    assert all(sum(x for x in map(len, r["token_budget"])) > len(r["token_budget"]) for r in ranks)
    assert ranks[0]["shuffle_kept"] == [1, True, "ShardedSampler"]
    assert ranks[0]["shuffle"] != sorted(ranks[0]["shuffle"])  # shuffle=True: shuffled


def test_outside_ray_and_bad_loaders_are_clear_errors():
    from torch.utils.data import DataLoader, Sampler

    import permshard.ray

    class Mine(Sampler):
        def __iter__(self):
            return iter(range(10))

        def __len__(self):
            return 10

    with pytest.raises(TypeError, match="torch DataLoader"):
        permshard.ray.prepare_data_loader([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sampler is a Mine"):
        permshard.ray._sharded(DataLoader(range(10), sampler=Mine()), 2, 0)
    from permshard import ShardedSampler, ShardingError

    built_for_4 = DataLoader(range(10), sampler=ShardedSampler(10, num_replicas=4, rank=0))
    with pytest.raises(ShardingError, match="Ray Train has 2 data-parallel ranks"):
        permshard.ray._sharded(built_for_4, 2, 0)
    kept = permshard.ray._sharded(DataLoader(range(10), batch_size=4, shuffle=False, drop_last=True), 2, 1)
    assert (kept.batch_size, kept.drop_last, kept.sampler.rank, kept.sampler.shuffle) == (4, True, 1, False)
    assert [b.tolist() for b in kept] == [[1, 3, 5, 7]]
