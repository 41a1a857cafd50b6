"""`--method=acsac` through the whole workflow: a run that logs the executed lengths, several seeds in one
process, a kill and `--resume` equal to the uninterrupted run, a sweep over the two methods and the plots.

The agent's own tests (causality, targets, the choice) are tests/test_acsac.py; the loop's (the action
queue executing exactly the chosen prefix) tests/test_chunk_length.py.
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT, assert_same_run, csv_rows, run_driver, tiny_dataset

pytestmark = pytest.mark.slow

TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.num_layers=1",
    "--agent.num_heads=2",
    "--agent.head_dim=4",
    "--agent.batch_size=8",
    "--agent.actor_num_samples=2",
    "--agent.flow_steps=2",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--horizon_length=3",
    "--offline_steps=20",
    "--online_steps=205",  # one training episode of cube-single (200 steps) ends
    "--start_training=2",
    "--log_interval=5",
    "--eval_interval=100",
    "--eval_episodes=1",
    "--buffer_size=2000",
    "--state_interval=5",
    "--progress=False",
]
LENGTH_COLUMNS = ["executed_length.mean", *(f"executed_length.share_{k}" for k in (1, 2, 3))]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("acsac"))


def _run(save, name, dataset, *extra, method="acsac", fault=None, expect=0):
    return run_driver(
        "main.py", save, name, dataset, [f"--method={method}", *TINY, *extra], fault=fault, expect=expect, timeout=600
    )


def test_acsac_runs_resumes_sweeps_and_plots(tmp_path, dataset):
    save = str(tmp_path)
    run_dir, _ = _run(save, "a", dataset)
    evals = csv_rows(os.path.join(run_dir, "eval.csv"))
    assert evals and evals[-1]["step"] == "225"
    for row in evals:  # every evaluation logs how much of each chunk ran
        shares = [float(row[k]) for k in LENGTH_COLUMNS[1:]]
        assert sum(shares) == pytest.approx(1) and 1 <= float(row["executed_length.mean"]) <= 3
    episodes = csv_rows(os.path.join(run_dir, "env.csv"))
    assert episodes and all(set(LENGTH_COLUMNS) <= set(r) for r in episodes)

    # The fixed-length control executes whole chunks: no length columns, policy called every h steps.
    fixed, _ = _run(save, "f", dataset, method="acsac-fixed")
    for row in csv_rows(os.path.join(fixed, "eval.csv")):
        assert not [k for k in row if k.startswith("executed_length")]
        assert float(row["policy_calls_per_episode"]) == pytest.approx(-(-float(row["episode.length"]) // 3))

    # Two seeds in one process, and a run killed in the online phase (inside a chunk), resumed: the same run.
    _run(save, "group", dataset, "--num_seeds=2")
    for seed in (0, 1):
        assert os.path.isfile(os.path.join(save, "g", f"group_sd{seed}", "DONE.json"))
    cut, _ = _run(save, "cut", dataset, fault="kill@online:12", expect=-9)
    _run(save, "cut", dataset, "--resume")
    assert_same_run(run_dir, cut, 225)

    # A sweep over both methods (dry run), and the plot with one label each.
    sweep = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--driver=main.py", "--grid=method=acsac,acsac-fixed", "--seeds=0",
         "--dry_run", f"--save_dir={save}", "--", "--env_name=cube-single-play-singletask-task1-v0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.stdout.count("--method=acsac") == 2
    out = os.path.join(save, "plots")
    plot = subprocess.run(
        [sys.executable, "scripts/plot_curves.py", run_dir, fixed, f"--out_dir={out}", "--reps=50", "--no_paper"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    with open(os.path.join(out, "curves.csv")) as f:
        labels = {row["label"] for row in csv.DictReader(f)}
    assert len(labels) == 2, labels
    # The executed lengths: the adaptive run's only (the fixed control logs none), shares that sum to 1 and
    # agree with its mean, at the steps eval.csv has.
    with open(os.path.join(out, "executed_lengths.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(run_dir, "eval.csv")) as f:
        steps = [row["step"] for row in csv.DictReader(f)]
    assert len({row["label"] for row in rows}) == 1 and [row["step"] for row in rows] == steps, rows
    for row in rows:
        shares = [float(row[f"share_{k}"]) for k in range(1, 4)]  # h = 3 here
        assert sum(shares) == pytest.approx(1.0, abs=1e-5) and row["runs"] == "1" and "share_4" not in row
        assert float(row["mean"]) == pytest.approx(
            sum(k * v for k, v in zip(range(1, 4), shares, strict=True)), abs=1e-5
        )


def test_a_checkpoint_evaluated_again_equals_the_runs_evaluation_and_can_execute_whole_chunks(
    tmp_path, dataset, capsys
):
    """scripts/evaluate_checkpoint.py: unchanged, the run's own `eval.csv` row, value for value; with
    `--agent adaptive_length=False` the same networks execute whole chunks; `--agent_grid` evaluates several
    commitment margins; bad inputs are one `error:` line."""
    import evaluate_checkpoint as ec

    run_dir, _ = _run(str(tmp_path), "e", dataset, "--online_steps=0", "--eval_episodes=2")
    row = csv_rows(os.path.join(run_dir, "eval.csv"))[-1]
    assert row["step"] == "20"
    capsys.readouterr()
    assert ec.main([run_dir, "--step=20"]) == 0
    stats = json.loads(capsys.readouterr().out)
    timed = ("step", "time", "episode.duration")
    assert {k: float(v) for k, v in row.items() if k not in timed} == {k: v for k, v in stats.items() if k not in timed}

    assert ec.main([run_dir, "--step=20", "--agent", "adaptive_length=False"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert not [k for k in whole if k.startswith("executed_length")]
    assert whole["policy_calls_per_episode"] == -(-whole["episode.length"] // 3)  # h = 3: one call per chunk

    # Several commitment margins in one call, a line each on the same episodes: 0 is the run's own rule, a large
    # margin the whole-chunk choices (the same chunks, so the same episodes as adaptive_length=False).
    assert ec.main([run_dir, "--step=20", "--agent_grid", "commit_margin=0,1e6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["agent.commit_margin"] for line in lines] == [0.0, 1e6]
    zero, large = ({k: v for k, v in json.loads(line).items() if k not in timed} for line in lines)
    assert zero == {"agent.commit_margin": 0.0, **{k: v for k, v in stats.items() if k not in timed}}
    assert large["executed_length.mean"] == 3 and large["executed_length.share_3"] == 1
    assert {k: v for k, v in large.items() if k in whole} == {k: v for k, v in whole.items() if k not in timed}
    # A run recorded before the agent had these keys: their defaults (today's rule), said on stderr.
    old_run = str(tmp_path / "old_run")
    shutil.copytree(run_dir, old_run)
    with open(os.path.join(old_run, "flags.json")) as f:
        record = json.load(f)
    del record["agent"]["commit_margin"], record["agent"]["target_choice"]
    with open(os.path.join(old_run, "flags.json"), "w") as f:
        json.dump(record, f)
    assert ec.main([old_run, "--step=20", "--agent_grid", "commit_margin=0;1e6"]) == 0
    out, err = capsys.readouterr()
    assert [{k: v for k, v in json.loads(line).items() if k not in timed} for line in out.splitlines()] == [zero, large]
    assert "predates the agent key(s) commit_margin=0.0, target_choice='max'" in err

    for argv, message in [
        (["--step=7"], "checkpoints of this run: steps [20]"),
        (["--step=20", "--agent", "bogus=1"], "KEY one of the run's agent keys"),
        (["--step=20", "--agent", "adaptive_length=3"], "adaptive_length is bool (True), not int"),
        (["--step=20", "--episodes=0"], "--episodes=0: must be at least 1"),
        (["--step=20", "--agent", "actor_num_samples=0"], "actor_num_samples must be an int >= 1, got 0"),
        (["--step=20", "--agent_grid", "commit_margin=0,-1"], "commit_margin must be a finite number >= 0, got -1.0"),
        (["--step=20", "--agent_grid", "commit_margin=0,0.0"], "list one value twice: '0' and '0.0'"),
        (["--step=20", "--agent_grid", "commit_margin"], "the form is KEY=V1,V2,..."),
        (["--step=20", "--agent_grid", "margin=1,2"], "--agent_grid 'margin=1': expected KEY=VALUE with KEY one of"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            ec.main([run_dir, *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
