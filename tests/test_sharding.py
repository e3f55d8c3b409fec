"""One sharding description, decided in the core: the algorithm id names the order used
(``identity`` without shuffle) in the state dict, the plan, the certificate and the
partition alike, and state dicts written by 0.1 and 0.2 still load and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import permshard
from helpers import native, reference_perm_v2
from helpers.reference_perm_v1 import ReferencePermutation
from permshard import ShardConfig, ShardedSampler, StepBatchSampler, _core

GOLDEN = json.loads((Path(__file__).parent / "golden" / "state_dicts.json").read_text())


@pytest.mark.parametrize(
    "shuffle, block_size, expected, algorithm",
    [
        (False, 0, "identity", None),
        (True, 0, "perm-v2", None),
        (True, 8, "block-v2", None),
        (True, 0, "perm-v1", "perm-v1"),
        (True, 8, "block-v1", "perm-v1"),
    ],
)
def test_every_record_names_the_order_used(shuffle, block_size, expected, algorithm):
    kw: dict = {"block_size": block_size, "window_blocks": 2} if block_size else {}
    if algorithm:
        kw["algorithm"] = algorithm
    s = ShardedSampler(100, num_replicas=3, rank=1, shuffle=shuffle, check_consensus=False, **kw)
    assert s.config.algorithm == expected
    assert s.state_dict()["algorithm"] == expected
    assert s.plan().config.algorithm == expected
    assert s.verify().config.algorithm == expected
    assert s.config.partition().algorithm == expected
    assert s.describe()["algorithm"] == expected


@pytest.mark.parametrize("version", ["0.1", "0.2"])
def test_state_dicts_of_earlier_releases_resume(version):
    for state in GOLDEN[version]:
        n, w, c = state["n"], state["num_replicas"], state["consumed"]
        kw = {k: state[k] for k in ("block_size", "window_blocks")} if state.get("block_size") else {}
        for rank in range(w):
            s = ShardedSampler(
                n,
                num_replicas=w,
                rank=rank,
                shuffle=state["shuffle"],
                seed=state["seed"],
                drop_last=state["drop_last"],
                check_consensus=False,
                **kw,
            )
            s.load_state_dict(state)
            first = next(iter(s))
            position = c + rank  # DistributedSampler's dealing of the positions left
            if not state["shuffle"]:
                assert first == position  # the identity, computed by hand
            elif not kw:
                assert first == ReferencePermutation(n, state["seed"], state["epoch"]).forward(position)
            else:
                assert (
                    first
                    == permshard.BlockPermutation(n, 16, 4, seed=7, epoch=2, algorithm="block-v1")[position]
                )
            # Re-saved, the state names the order used.
            assert s.state_dict()["algorithm"] == s.config.algorithm


def test_a_state_naming_another_order_is_refused():
    state = dict(GOLDEN["0.2"][0], algorithm="identity")  # shuffle=True says a permutation
    with pytest.raises(ValueError, match="mean 'perm-v2'"):
        ShardedSampler(1000, num_replicas=4, rank=0, seed=7, check_consensus=False).load_state_dict(state)
    state = dict(GOLDEN["0.2"][2], algorithm="perm-v1")  # block fields say block-v1
    with pytest.raises(ValueError, match="mean 'block-v1'"):
        ShardConfig.from_state_dict(state)


def test_the_core_decides_and_checks():
    core = native.sharding(10, 4, shuffle=False)
    assert core.algorithm == _core.IDENTITY_ALGORITHM == "identity"
    assert core.max_consumed == 13 and native.sharding(10, 4, drop_last=True).max_consumed == 10
    with pytest.raises(ValueError, match="needs shuffle=True"):
        ShardConfig(n=10, num_replicas=2, shuffle=False, block_size=4, window_blocks=2)
    with pytest.raises(ValueError, match="needs window_blocks"):
        ShardConfig(n=10, num_replicas=2, block_size=4)
    assert core.partition(14).num_samples == 0  # saved by more ranks: nothing left here
    with pytest.raises(ValueError, match=r"must be in \[0, 13\]"):
        ShardConfig.from_state_dict(dict(ShardConfig(n=10, num_replicas=4).state_dict(0), consumed=14))


def test_step_batches_follow_the_core_step_layout():
    # Brute force: accelerate's layout, step s, rank r: [s·B·W + r·b, s·B·W + (r + 1)·b).
    n, w, bs = 29, 3, 4
    perm = reference_perm_v2.ReferencePermutation(n, 5, 0)
    expected = {r: [] for r in range(w)}
    per_rank = -(-n // w)
    for step in range(-(-per_rank // bs)):
        b = min(bs, per_rank - step * bs)
        for r in range(w):
            first = step * bs * w + r * b
            expected[r].append(
                [perm.forward(p % n) if p < n else perm.forward(p - n) for p in range(first, first + b)]
            )
    for r in range(w):
        got = list(
            StepBatchSampler(ShardedSampler(n, num_replicas=w, rank=r, seed=5, check_consensus=False), bs)
        )
        assert got == expected[r]


def test_the_algorithm_ids_and_epoch_index_are_exported():
    assert (permshard.IDENTITY_ALGORITHM, permshard.ALGORITHM, permshard.BLOCK_ALGORITHM) == (
        "identity",
        "perm-v2",
        "block-v2",
    )
    assert (permshard.ALGORITHM_V1, permshard.ALGORITHM_V2) == ("perm-v1", "perm-v2")
    # The binding's defaults are the core's.
    assert _core.Permutation(5).algorithm == _core.ALGORITHM
    assert _core.BlockPermutation(5, 2, 2).algorithm == _core.BLOCK_ALGORITHM
    assert _core.Mixture([2], [(0, [1.0])]).algorithm == _core.MIX_ALGORITHM
    assert permshard.MIX_ALGORITHM == permshard.Mixture([1], [1.0], 1).algorithm == "mix-v3"
    assert (
        permshard.TokenBudgetBatchSampler([1], 1, 1, 0).config.algorithm
        == permshard._token_budget.BUDGET_ALGORITHM
    )
    assert permshard._token_budget.BUDGET_ALGORITHM == "budget-v2"
    assert permshard.EpochIndex(5, 2).epoch == 2 and int(permshard.EpochIndex(5, 2)) == 5
    assert {"EpochIndex", "IDENTITY_ALGORITHM", "Certificate"} <= set(dir(permshard))


def test_sampler_fields_are_read_only_and_set_epoch_is_explicit():
    s = ShardedSampler(100, num_replicas=4, rank=1, seed=3)
    assert (s.n, s.num_replicas, s.seed, s.epoch, s.shuffle, s.drop_last) == (100, 4, 3, 0, True, False)
    epoch0 = list(s)
    # Assigning a field never rebuilds the configuration behind the caller's back.
    with pytest.raises(AttributeError, match=r"read-only.*set_epoch\(2\)"):
        s.epoch = 2
    with pytest.raises(AttributeError, match=r"read-only.*ShardedSampler\(\.\.\., seed=4\)"):
        s.seed = 4
    assert s.config.epoch == 0 and s.config.seed == 3
    s.set_epoch(2)
    fresh = ShardedSampler(100, num_replicas=4, rank=1, seed=3)
    fresh.set_epoch(2)
    assert s.config.epoch == 2 and list(s) == list(fresh) != epoch0
    s.set_epoch(0)
    assert list(s) == epoch0
    with pytest.raises(TypeError, match="must be an integer"):
        s.set_epoch(1.5)
    assert s.config.epoch == 0
    # A loaded resume point belongs to its epoch: set_epoch of its epoch keeps it, of
    # another drops it (documented in set_epoch).
    donor = ShardedSampler(100, num_replicas=4, rank=1)
    it = iter(donor)
    [next(it) for _ in range(5)]
    s = ShardedSampler(100, num_replicas=4, rank=1)
    s.load_state_dict(donor.state_dict())
    s.set_epoch(0)
    assert len(s) == 20
    s.set_epoch(1)
    assert len(s) == 25


def test_the_public_names_are_sorted_and_resolve():
    assert permshard.__all__ == sorted(permshard.__all__)
    for name in permshard.__all__:
        assert getattr(permshard, name) is not None, name
    assert permshard.BUDGET_ALGORITHM == permshard._token_budget.BUDGET_ALGORITHM == "budget-v2"


def test_the_public_surface_is_narrow():
    """Public modules: the package, ``data`` and one per integration; everything else is
    private and imported from ``permshard`` or ``permshard.data``."""
    import pkgutil

    import permshard.data

    def public(package):
        return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))

    assert public(permshard) == [
        "accelerate",
        "data",
        "grain",
        "launch",
        "megatron",
        "ray",
        "torchft",
        "torchtitan",
        "transformers",
    ]
    assert public(permshard.data) == []
    for name in permshard.data.__all__:
        assert getattr(permshard.data, name) is not None, name


def test_the_module_paths_of_0_4_are_gone():
    import importlib

    # 0.5 warned that they go in 0.6: each names a module that no longer exists.
    for old in (
        "permshard.sampler",
        "permshard.token_budget",
        "permshard.data.tokens",
        "permshard.integrations",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_the_configurations_declare_the_cores_tables_of_fields():
    """Each field is listed once, in the core (name, kind, default, help, flags); the
    Python configurations declare the same names and defaults, and the CLI's flags are
    built from the table."""
    import dataclasses
    import inspect

    from permshard._token_budget import BudgetConfig

    for cls, family in ((permshard.ShardConfig, "shard"), (BudgetConfig, "budget")):
        table = {f["name"]: f for f in _core.fields(family)}
        declared = {f.name: f for f in dataclasses.fields(cls) if f.init or f.name == "dealing"}
        derived = {"algorithm", "dealing"} if cls is BudgetConfig else {"algorithm"}  # named by the core
        assert set(declared) - derived == set(table) - derived, cls
        params = {}
        for base in reversed(cls.__mro__[:-1]):
            if "__init__" in base.__dict__:
                given = inspect.signature(base.__init__).parameters.values()
                params.update({p.name: p for p in given if p.kind is not p.VAR_KEYWORD})
        for name, f in table.items():
            if name == "dealing" and cls is BudgetConfig:
                continue
            default = params[name].default
            assert (default is inspect.Parameter.empty) == f["required"], (cls, name)
            if not f["required"]:
                assert default == f["default"] == declared[name].default, (cls, name)
    assert permshard.ShardConfig.dealing_keys == ("dealing", "batch_size", "drop_last_batch")
