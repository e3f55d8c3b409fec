"""The permshard command: every subcommand, its exit codes, output shape and bad arguments."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from permshard import Mixture, ShardedSampler, ShardingError
from permshard import _cli as cli


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "permshard", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_on_every_command():
    commands = ["plan", "verify", "locate", "mix", "inspect", "show", "where", "audit", "bench", "demo"]
    for command in ([], *([c] for c in commands)):
        done = run(*command, "--help")
        assert done.returncode == 0 and "usage: permshard" in done.stdout
    # The command list names every command.
    assert "{" + ",".join(commands) + "}" in run("--help").stdout


def test_help_does_not_import_torch():
    script = (
        "import sys\n"
        "from permshard._cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_plan(capsys):
    assert cli.main(["plan", "-n", "1000", "-w", "3", "--batch-size", "32"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ShardPlan: n=1,000 num_replicas=3")
    assert out[1].split() == ["rank", "samples", "padding", "steps"]
    rows = [line.split() for line in out[2:5]]
    assert rows == [["0", "334", "0", "11"], ["1", "334", "1", "11"], ["2", "334", "1", "11"]]
    assert "padding=2" in out[5]
    assert cli.main(["plan", "-n", "1e3", "-w", "3", "--drop-last"]) == 0
    assert "dropped=1" in capsys.readouterr().out


def test_locate_agrees_with_the_sampler(capsys):
    assert cli.main(["locate", "17", "-n", "1000", "-w", "8", "--batch-size", "16", "--seed", "3"]) == 0
    out = capsys.readouterr().out.strip()
    ((rank, local),) = ShardedSampler(1000, num_replicas=8, rank=0, seed=3).locate(17)
    assert (
        out
        == f"sample 17: rank {rank}, local position {local}, step {local // 16} (item {local % 16} of the batch)"
    )
    # A sample drop_last leaves out is reported as such (checked against the sampler).
    dropped = next(s for s in range(1000) if not ShardedSampler(1000, 3, 0, drop_last=True).locate(s))
    assert cli.main(["locate", str(dropped), "-n", "1000", "-w", "3", "--drop-last"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"sample {dropped:,} is not yielded in epoch 0 (dropped by drop_last)"
    )


def test_verify_exit_codes(capsys, monkeypatch):
    assert cli.main(["verify", "-n", "100000", "-w", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PROVEN (inverse, perm-v2, round-robin): n=100,000 over 4 ranks")
    assert "100,000 items checked in" in out  # every item, no position outside the pass
    assert cli.main(["verify", "-n", "100000", "-w", "4", "--method", "bitmap"]) == 0
    assert capsys.readouterr().out.startswith("PROVEN (bitmap, perm-v2, round-robin): n=100,000 over 4 ranks")
    assert cli.main(["verify", "-n", "1e6", "-w", "64", "--rank", "5", "--drop-last"]) == 0
    out = capsys.readouterr().out
    # Rank 5's 15,625 items and its 1/64 slice of the 0 dropped positions (1e6 = 64 x 15,625).
    assert out.startswith(
        "PROVEN (inverse, perm-v2, round-robin): the share of rank 5 of n=1,000,000 over 64 ranks"
    )
    assert "15,625 items checked in" in out and "projected cluster wall time" in out
    assert cli.main(["verify", "-n", "1000", "-w", "8", "--rank", "8"]) == 2
    assert "Invalid rank 8, rank should be in the interval [0, 7]" in capsys.readouterr().err

    def broken(*args, **kwargs):
        raise ShardingError("sample 3 is yielded twice")

    monkeypatch.setattr("permshard._proof._run", broken)  # where the core's proof runs
    for method in ("bitmap", "inverse"):
        assert cli.main(["verify", "-n", "100", "-w", "4", "--method", method]) == 1
        assert "NOT PROVEN: sample 3 is yielded twice" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, text",
    [
        (["plan", "-n", "abc", "-w", "2"], "not a number"),
        (["plan", "-n", "1.5", "-w", "2"], "not a non-negative integer"),
        (["plan", "-w", "2"], "required"),
        (["plan", "-n", "0", "-w", "2"], "n should be a positive integer below 2**64, got 0"),
        (["plan", "-n", "10", "-w", "0"], "num_replicas"),
        (["verify", "-n", "10", "-w", "2", "--seed", "1e30"], "seed must be in"),
        (["locate", "10", "-n", "10", "-w", "2"], "not in range"),
        # An argument no epoch can hold is an argument error, not NOT PROVEN.
        (["verify", "-n", str(2**64 - 1), "-w", "2"], "needs positions past 2**64 - 1"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_one_line_exit_2(args, text):
    done = run(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "NOT PROVEN" not in done.stdout


@pytest.mark.slow
def test_bench_smoke(tmp_path):
    md, png = tmp_path / "b.md", tmp_path / "b.png"
    done = run("bench", "--n", "1000,20000", "--json", "--markdown", str(md), "--plot", str(png))
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["n"] for r in results["rows"]] == [1000, 20000]
    for row in results["rows"]:
        assert row["permshard"]["indices"] == row["torch"]["indices"] == -(-row["n"] // 8)
        ours, theirs = row["permshard"], row["torch"]
        assert row["speedup_first_index"] == pytest.approx(theirs["first_index_s"] / ours["first_index_s"])
        assert row["per_index_ratio"] == pytest.approx(ours["ns_per_index"] / theirs["ns_per_index"])
    assert "| 1,000 |" in md.read_text() and png.read_bytes()[:4] == b"\x89PNG"
    # Without --json, the same rows for people (each measurement is a fresh process: not rerun).
    from permshard._demo import HEADER, format_row

    assert "first index" in HEADER and "1,000" in format_row(results["rows"][0])


@pytest.mark.multiprocess
def test_demo_runs_and_proves():
    done = run("demo", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "exactly once: OK" in out and "exactly once across both runs: OK" in out
    assert "SOME CHECKS FAILED" not in out
    assert (
        "all checks passed" in out
        and "PROVEN (fingerprint" in out
        and "PROVEN (inverse" in out
        and "PROVEN (bitmap" in out
    )


def _ddp_train(out: str) -> None:
    lines = re.findall(r"rank (\d)/2 epoch (\d): (\d+) windows of (\d+)", out)
    assert sorted((r, e) for r, e, _, _ in lines) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    for _, _, windows, total in lines:
        assert int(windows) == -(-int(total) // 2)  # each rank its half, every epoch
    assert "PROVEN (inverse, perm-v2, round-robin)" in out  # the exact proof, the default


def _accelerate_train(out: str) -> None:
    assert "2 processes: trained on 1003 samples once each; evaluation gathered 1003 = N" in out


def _stateful_resume(out: str) -> None:
    lines = re.findall(r"rank (\d): 7 batches before the checkpoint, (\d+) after, (\d+) samples", out)
    assert sorted(r for r, _, _ in lines) == ["0", "1"]
    # 500 samples per rank in batches of 10: 7 before the checkpoint, 43 after, none twice.
    assert all((int(after), int(samples)) == (43, 500) for _, after, samples in lines)


def _iterable_packing(out: str) -> None:
    lines = re.findall(r"rank (\d)/2: (\d+) packed sequences of 128 tokens \((\d+) on all ranks\)", out)
    assert sorted(r for r, _, _ in lines) == ["0", "1"]
    assert sum(int(s) for _, s, _ in lines) == int(lines[0][2]) > 0


def _online_mixing(out: str) -> None:
    lines = re.findall(r"rank (\d)/2: (\d+) steps, (\d+) weight changes, first at (\d+)", out)
    assert sorted(r for r, *_ in lines) == ["0", "1"]
    # 12,000 positions over 2 ranks in batches of 32: 188 steps; the controller runs 6 times,
    # the first after 25 steps (1,600 positions) plus what the workers prefetched.
    assert {tuple(rest) for _, *rest in lines} == {(lines[0][1], "6", lines[0][3])}
    assert lines[0][1] == "188" and int(lines[0][3]) >= 1600
    assert "resumed schedule equals the run's: True" in out


EXAMPLES = {
    "online_mixing.py": _online_mixing,
    "ddp_train.py": _ddp_train,
    "accelerate_train.py": _accelerate_train,
    "stateful_resume.py": _stateful_resume,
    "iterable_packing.py": _iterable_packing,
}


@pytest.mark.multiprocess
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_examples_run_under_torchrun(script):
    """Each example's ranks report what they read; the checks recompute it. The examples
    leave with os._exit after their last collective, so torch's teardown cannot fail them."""
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    # The launch line the example's docstring gives, as written (a free port: --standalone).
    launch = re.search(r"`torchrun ([^`]+)`", (root / "examples" / script).read_text())
    assert launch is not None, f"examples/{script} names no `torchrun ...` launch line"
    args = launch.group(1).split()
    assert args[-1] == f"examples/{script}"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    EXAMPLES[script](done.stdout)


def test_mix_prints_realised_proportions(capsys):
    assert cli.main(["mix", "--sizes", "1e6,1e5", "--weights", "0.7,0.3", "-n", "1e7"]) == 0
    table, summary = capsys.readouterr().out.split("\n\n")
    lines = table.splitlines()
    assert lines[0].startswith("Mixture(sizes=[1000000, 100000], weights=[0.7, 0.3], num_samples=10000000")
    rows = {int(line.split()[0].replace(",", "")): line.split()[1:] for line in lines[3:]}
    assert summary.strip() == str(Mixture([10**6, 10**5], [0.7, 0.3], 10**7).summary())
    m = Mixture([10**6, 10**5], [0.7, 0.3], 10**7)
    for n, (share0, share1, worst) in rows.items():
        c = m.counts(n)
        assert (float(share0), float(share1)) == pytest.approx((c[0] / n, c[1] / n), abs=1e-6)
        assert float(worst) == pytest.approx(max(abs(c[0] - 0.7 * n), abs(c[1] - 0.3 * n)), abs=1e-3)
    assert 10**7 in rows and 31 in rows
    assert run("mix", "--sizes", "10,10", "--weights", "1,-1").returncode == 2


def test_mix_says_what_random_reads_keep(capsys, monkeypatch):
    monkeypatch.delenv("PERMSHARD_MIX_TABLE_MIB", raising=False)
    for n, verdict in (("1e6", "fit"), ("1e8", "do not fit")):
        assert cli.main(["mix", "--sizes", "300,1e6", "--weights", "0.5,0.5", "-n", n]) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        need = Mixture([300, 10**6], [0.5, 0.5], int(float(n))).table_bytes / 2**20
        assert last == (
            f"read at random (a shuffled sampler), the shuffle tables of its passes take {need:,.1f} MiB "
            f"and {verdict} the 32 MiB a mixture keeps (PERMSHARD_MIX_TABLE_MIB)"
        )


def test_exclude_file_on_verify_plan_and_locate(capsys, tmp_path):
    text, array = tmp_path / "takedown.txt", tmp_path / "takedown.npy"
    text.write_text("# a takedown request\n3\n9\n\n17\n9\n")
    np.save(array, np.array([3, 9, 17]))
    for path in (text, array):
        assert cli.main(["verify", "-n", "1000", "-w", "4", "--exclude", str(path)]) == 0
        out = capsys.readouterr().out
        assert "every kept (excluded 3 never) sample exactly once -- covered 997, padding 3" in out
    assert cli.main(["locate", "9", "-n", "1000", "-w", "4", "--exclude", str(text)]) == 0
    assert capsys.readouterr().out.strip() == "sample 9 is not yielded in epoch 0 (excluded)"
    assert cli.main(["plan", "-n", "1000", "-w", "4", "--exclude", str(text)]) == 0
    assert "excluded: 3 samples, never read" in capsys.readouterr().out
    done = run("verify", "-n", "10", "-w", "2", "--exclude", str(tmp_path / "missing.txt"))
    assert done.returncode == 2 and "cannot read sample ids from" in done.stderr


def test_history_commands_fail_in_one_line_naming_the_file(capsys, tmp_path):
    """where, show and audit over a file that is not a state with a history: exit 2 and
    one line naming the file and the fix, never a traceback (the CLI's main catches only
    ValueError/TypeError: anything else would escape it)."""
    import torch

    from permshard import ShardedBatchSampler

    batches = ShardedBatchSampler(ShardedSampler(100, num_replicas=1, rank=0), 4)
    first = next(iter(batches))
    good = tmp_path / "state.pt"
    torch.save(batches.state_dict(), good)
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "truncated.pt").write_bytes(good.read_bytes()[:100])
    (tmp_path / "list.json").write_text("[1, 2]")
    no_history = {k: v for k, v in batches.state_dict().items() if k != "history"}
    (tmp_path / "old.json").write_text(json.dumps({**no_history, "consumed": 40}))
    (tmp_path / "dcp").mkdir()
    cases = {
        "missing.pt": "cannot read .*missing.pt: No such file",
        "dcp": "dcp is a folder",
        "empty.json": "empty.json is not a state dict saved with json.dump",
        "empty.pt": "empty.pt is not a state dict saved with torch.save",
        "truncated.pt": "truncated.pt is not a state dict saved with torch.save",
        "list.json": "list.json holds a list, not a sampler's state_dict",
        "old.json": "old.json holds no history: it was saved by permshard 0.5 or before",
    }
    for name, message in cases.items():
        path = str(tmp_path / name)
        for command in (["where", "3"], ["show", "0"], ["audit"]):
            assert cli.main([*command, "--state", path]) == 2, (name, command)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and re.search(message, err), (name, command, err)
    assert cli.main(["where", "3", "--state", str(good), "--lengths", str(tmp_path / "no.npy")]) == 2
    assert "cannot read --lengths" in capsys.readouterr().err
    assert cli.main(["where", str(first[0]), "--state", str(good)]) == 0
    assert "step          0  rank     0  position      0" in capsys.readouterr().out


def test_an_audit_says_what_a_history_begun_at_a_load_does_not_cover(capsys, tmp_path):
    from permshard import ShardedBatchSampler

    state = {**ShardedSampler(100, num_replicas=2, rank=0).state_dict(), "consumed": 40}  # as 0.5 wrote it
    batches = ShardedBatchSampler(ShardedSampler(100, num_replicas=2, rank=0), 5)
    batches.load_state_dict(state)
    list(batches)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(batches.state_dict()))
    assert cli.main(["audit", "--state", str(path)]) == 0
    assert (
        "not covered: positions [0, 40) of epoch 0 were read before the history begins"
        in capsys.readouterr().out
    )
    assert cli.main(["audit", "--state", str(path), "--json"]) == 0
    assert "positions [0, 40)" in json.loads(capsys.readouterr().out)["not_covered"]
