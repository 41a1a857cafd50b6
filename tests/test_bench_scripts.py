"""The benchmark scripts refuse bad arguments with one argparse error line (exit status 2), before timing anything;
the overhead section's workers run."""

import json
import os
import subprocess
import sys

import pytest

import bench_agents
import bench_reference
import benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sections=updates", "--methods=qc,xyz"], "--methods: unknown method 'xyz'"),
        (["--utd=0"], "--utd=0 must be comma-separated integers >= 1"),
        (["--utd=a"], "--utd=a must be comma-separated integers >= 1"),
        (["--seeds=0"], "--seeds=0 must be comma-separated integers >= 1"),
        (["--dispatch=1,0"], "--dispatch=1,0 must be comma-separated integers >= 1"),
        (["--rows=3"], "--rows=3 must be > 5"),
        (["--sections=foo"], "--sections: unknown section 'foo'"),
        (["--steps=0"], "--steps must be >= 1"),
        (["--rounds=0"], "--rounds must be >= 1"),
    ],
)
def test_bench_agents_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        bench_agents.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--repeats=0"], ["--warmup=-1"]])
def test_benchmark_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        benchmark.main(argv)
    assert e.value.code == 2 and "must be >= 1 and --warmup" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        # The FQL release's baselines are one-step agents: a chunk length is refused, not silently dropped.
        (["--method=iql", "--h=5"], "--method=iql: the release's agent is one-step, --h must be 1, got 5"),
        # The reference folder must hold the method's own agent file (an ACFQL release has no agents/rebrac.py).
        (["--method=rebrac", "--reference_dir=REF"], "has no agents/rebrac.py"),
    ],
)
def test_bench_reference_baselines_bad_arguments(argv, message, tmp_path, capsys):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "acfql.py").write_text("")
    argv = [a.replace("REF", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as e:
        bench_reference.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_bench_reference_baselines_default_to_one_step(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "ifql.py").write_text("")
    args = bench_reference.parse_args(["--method=ifql", f"--reference_dir={tmp_path}"])
    assert args.h == 1 and bench_reference.AGENTS["ifql"] == ("ifql", "IFQLAgent")
    assert bench_reference.parse_args(["--method=qc", f"--reference_dir={tmp_path}", "--worker=ours"]).h == 5
    # The release's batches: the one-step window's numbers without the window axis.
    import numpy as np

    args = bench_reference.parse_args(["--method=ifql", f"--reference_dir={tmp_path}", "--batch=3"])
    batch = bench_reference.make_batches(args)[0]
    single = bench_reference.single_step(batch)
    assert single["observations"].shape == (3, 40) and single["actions"].shape == (3, 5)
    assert single["rewards"].shape == (3,) and np.array_equal(single["next_actions"], batch["next_actions"][:, 0])


@pytest.mark.parametrize("worker", ["loop", "online", "device"])
def test_bench_agents_workers_on_our_side_run(worker):
    """The overhead section's workers (our side; the authors' needs their code) time a few steps at a tiny size."""
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_agents.py"), f"--worker={worker}", "--side=ours",
           "--steps=4", "--rows=2000", "--hidden=8", "--layers=1", "--batch=4", "--k=2"]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["worker"] == worker and line["steps_per_s"] > 0
