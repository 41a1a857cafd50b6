"""Smoke tests: main.py and main_online.py run end to end on a real OGBench task.

These only check that a run finishes and writes its outputs (eval.csv with a success column,
flags.json with the ogbench metadata, a checkpoint that restores); the numbers they produce are
checked by the unit tests. Tiny networks, a two-episode generated dataset, a few steps each.
"""

import csv
import json
import os
import subprocess
import sys

import pytest

from envs.generate_dataset import generate_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--agent.actor_hidden_dims=(16,16)", "--agent.value_hidden_dims=(16,16)", "--agent.batch_size=8"]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "cube-single-play-v0.npz")
    generate_dataset("cube-single-play-v0", num_episodes=2, seed=0, save_path=path, max_episode_steps=60,
                     progress=False)
    return path


def _run(script, dataset_path, save_dir, *extra):
    cmd = [sys.executable, script, "--env_name=cube-single-play-singletask-task1-v0", f"--dataset_path={dataset_path}",
           f"--save_dir={save_dir}", "--eval_episodes=1", "--log_interval=2", "--eval_interval=4",
           "--buffer_size=500", "--progress=False", "--horizon_length=3", *TINY, *extra]
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled")
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = [os.path.join(root, d) for root, dirs, _ in os.walk(save_dir) for d in dirs if "_sd" in d]
    return run_dir


def _eval_rows(run_dir):
    with open(os.path.join(run_dir, "eval.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("actor", ["best-of-n", "distill-ddpg"])
def test_main_offline_then_online(dataset_path, tmp_path, actor):
    run_dir = _run("main.py", dataset_path, tmp_path, "--offline_steps=6", "--online_steps=6", "--start_training=3",
                   "--save_interval=6", f"--agent.actor_type={actor}", "--agent.actor_num_samples=4",
                   "--agent.flow_steps=2")
    rows = _eval_rows(run_dir)
    # One evaluation at each multiple of 4 and one at the end of each phase: offline 4, 6; online 10, 12.
    assert [int(r["step"]) for r in rows] == [4, 6, 10, 12]
    assert all(0.0 <= float(r["success"]) <= 1.0 for r in rows)
    meta = json.load(open(os.path.join(run_dir, "flags.json")))
    assert meta["ogbench_version"] and meta["flags"]["horizon_length"] == 3
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["agent_12.msgpack", "agent_6.msgpack"]


def test_main_online_smoke(dataset_path, tmp_path):
    run_dir = _run("main_online.py", dataset_path, tmp_path, "--online_steps=8", "--start_training=4",
                   "--offline_ratio=0.5")
    assert [int(r["step"]) for r in _eval_rows(run_dir)] == [4, 8]
    assert os.path.exists(os.path.join(run_dir, "online_agent.csv"))


@pytest.mark.parametrize("args,message", [
    (["--env_name=foo-v0"], "Unknown environment 'foo-v0'"),
    (["--horizon_length=0"], "--horizon_length=0 must be >= 1"),
    (["--env_name=cube-single-play-singletask-task1-v0", "--dataset_path=/nonexistent/x.npz"],
     "python -m envs.generate_dataset"),
])
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    """A bad flag or a missing dataset ends with exit status 2 and the message, no traceback."""
    cmd = [sys.executable, "main.py", f"--save_dir={tmp_path}", "--progress=False", *args]
    result = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
