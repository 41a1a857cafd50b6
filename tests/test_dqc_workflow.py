"""DQC through the project's workflow at tiny size: the driver, seed groups, k updates per dispatch with the
device sampler, kill-and-resume, --method and a sweep over the critic and policy chunk sizes."""

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT, assert_same_run, run_driver, tiny_dataset

pytestmark = pytest.mark.slow

TINY = [
    "--agent=agents/dqc.py",
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=16",
    "--agent.backup_horizon=5",
    "--agent.policy_chunk_size=2",
    "--agent.best_of_n=4",
    "--agent.flow_steps=2",
    "--env_name=cube-single-play-oraclerep-v0",
    "--offline_steps=40",
    "--log_interval=10",
    "--eval_interval=40",  # one evaluation, at the end: five goal episodes of up to 200 steps each
    "--eval_episodes=1",
    "--state_interval=5",
    "--progress=False",
]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


CHUNKS = ("--agent.backup_horizon", "--agent.policy_chunk_size")


def _run(save, name, dataset, *extra, fault=None, expect=0):
    """`extra` flags replace TINY's chunk sizes when they give their own."""
    own = [a.split("=")[0] for a in extra if a.startswith(CHUNKS)]
    tiny = [a for a in TINY if a.split("=")[0] not in own]
    return run_driver("main.py", save, name, dataset, [*tiny, *extra], fault=fault, expect=expect, timeout=600)


def test_dqc_runs_resumes_groups_and_dispatches(tmp_path, dataset_path):
    save = str(tmp_path)
    ref, _ = _run(save, "ref", dataset_path)
    with open(os.path.join(ref, "flags.json")) as f:
        record = json.load(f)
    assert record["agent"]["agent_name"] == "dqc" and record["flags"]["online_steps"] == 0  # offline only
    with open(os.path.join(ref, "eval.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["40"]
    tasks = [k for k in rows[0] if k.endswith("_success") and k != "success"]
    assert len(tasks) == 5  # every evaluation goal, and their mean
    mean = sum(float(rows[-1][k]) for k in tasks) / 5
    assert abs(float(rows[-1]["success"]) - mean) < 1e-9

    # Killed, resumed: the same run (the goal sampling draws from the run's own streams).
    cut, _ = _run(save, "cut", dataset_path, fault="kill@offline:23", expect=-9)
    _run(save, "cut", dataset_path, "--resume")
    assert_same_run(ref, cut, 40)

    # Two seeds in one process (map: each seed its single-seed run, bit for bit).
    _run(save, "one", dataset_path, "--seed=1")
    _run(save, "group", dataset_path, "--num_seeds=2", "--seed_batching=map")
    assert_same_run(ref, os.path.join(save, "g", "group_sd0"), 40)
    assert_same_run(os.path.join(save, "g", "one"), os.path.join(save, "g", "group_sd1"), 40)

    # k updates per dispatch, windows drawn on the device: k = 10, killed and resumed, is the run of k = 4.
    device = ["--offline_sampler=device", "--eval_interval=0"]
    k4, _ = _run(save, "k4", dataset_path, *device, "--updates_per_dispatch=4")
    kcut, _ = _run(save, "kcut", dataset_path, *device, "--updates_per_dispatch=10", fault="kill@offline:25", expect=-9)
    _run(save, "kcut", dataset_path, *device, "--updates_per_dispatch=10", "--resume")
    assert_same_run(k4, kcut, 40)


def test_dqc_method_and_a_sweep_over_the_chunk_sizes(tmp_path, dataset_path):
    save = str(tmp_path)
    method = ["--method=dqc", "--agent.backup_horizon=5", "--agent.policy_chunk_size=2"]
    # --method=dqc fixes h=25, h_a=5: other chunk sizes are another method (or none), refused.
    _, result = _run(save, "m", dataset_path, *method, expect=2)
    assert "contradict --method=dqc" in result.stderr
    # A backup horizon no trajectory holds: one line at start-up, no run directory (not a traceback at step 1).
    _, result = _run(save, "long", dataset_path, "--agent.backup_horizon=100", expect=2)
    assert "no trajectory is long enough for a window of backup_horizon=100 " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not os.path.exists(os.path.join(save, "g", "long"))
    preset = ["--method=dqc", "--agent.backup_horizon=25", "--agent.policy_chunk_size=5"]
    run_dir, _ = _run(save, "m2", dataset_path, *preset, "--eval_interval=0")  # its record is what is checked
    with open(os.path.join(run_dir, "flags.json")) as f:
        record = json.load(f)
    # cube-single takes cube-triple's values of the paper (borrowed): kappa_b 0.93, kappa_d 0.8, q_agg min.
    agent = record["agent"]
    assert (agent["kappa_b"], agent["kappa_d"], agent["q_agg"], agent["num_qs"]) == (0.93, 0.8, "min", 2)
    assert record["method"]["sources"]["agent.kappa_b"] == "preset"

    sweep = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--driver=main.py", "--grid=agent.backup_horizon=5,3",
         "--grid=agent.policy_chunk_size=1,2", "--seeds=0", "--dry_run", f"--save_dir={save}", "--",
         *[a for a in TINY if not a.startswith(CHUNKS)]],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    commands = sweep.stdout.strip().splitlines()
    assert len(commands) == 4 and all(
        "--agent.backup_horizon=" in c and "--agent.policy_chunk_size=" in c for c in commands
    )
    bad = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--driver=main.py", "--grid=agent.policy_chunk_size=2,30", "--dry_run",
         f"--save_dir={save}", "--", *TINY[:4], "--env_name=cube-single-play-oraclerep-v0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "--agent.policy_chunk_size must be an int in [1, backup_horizon=25]" in bad.stderr
