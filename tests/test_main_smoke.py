"""End-to-end runs of main.py and main_online.py on a real OGBench task (slow tier).

They check what a finished run writes: the evaluation schedule, the open-loop chunk count of every
evaluation episode, `flags.json` (the resolved agent config, the task and timing that ran) and
the checkpoints. The learning itself is checked by the unit tests. Tiny networks, a two-episode
generated dataset, a few steps each.
"""

import csv
import ctypes.util
import json
import math
import os
import subprocess
import sys

import pytest

from envs import make_env_and_datasets
from envs.common import goal_counts
from envs.generate_dataset import generate_dataset

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--agent.actor_hidden_dims=(16,16)", "--agent.value_hidden_dims=(16,16)", "--agent.batch_size=8"]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=2, seed=0, save_path=path, max_episode_steps=60, progress=False
    )
    return path


def _run(script, dataset_path, save_dir, *extra):
    cmd = [
        sys.executable,
        script,
        "--env_name=cube-single-play-singletask-task1-v0",
        f"--dataset_path={dataset_path}",
        f"--save_dir={save_dir}",
        "--eval_episodes=1",
        "--log_interval=2",
        "--eval_interval=4",
        "--buffer_size=500",
        "--progress=False",
        "--horizon_length=3",
        *TINY,
        *extra,
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled")
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    (run_dir,) = [os.path.join(root, d) for root, dirs, _ in os.walk(save_dir) for d in dirs if "_sd" in d]
    with open(f"{run_dir}.stderr", "w") as f:  # the run's log, beside its folder
        f.write(result.stderr)
    return run_dir


def _eval_rows(run_dir):
    with open(os.path.join(run_dir, "eval.csv")) as f:
        return list(csv.DictReader(f))


def _check_eval_rows(rows, h):
    """One episode per evaluation: success is 0 or 1 and the chunks are executed open-loop."""
    for r in rows:
        length = float(r["episode.length"])
        assert float(r["success"]) in (0.0, 1.0)
        assert 1 <= length <= 1000 and length == int(length)
        assert float(r["policy_calls_per_episode"]) == math.ceil(length / h)


@pytest.mark.parametrize("actor", ["best-of-n", "distill-ddpg"])
def test_main_offline_then_online(dataset_path, tmp_path, actor):
    # QC-FQL by name (--method), QC by its flags: both ways of choosing a method run.
    method = ["--method=qc-fql"] if actor == "distill-ddpg" else [f"--agent.actor_type={actor}"]
    run_dir = _run(
        "main.py",
        dataset_path,
        tmp_path,
        "--offline_steps=6",
        "--online_steps=6",
        "--start_training=3",
        "--save_interval=6",
        *method,
        "--agent.actor_num_samples=4",
        "--agent.flow_steps=2",
    )
    rows = _eval_rows(run_dir)
    # One evaluation at each multiple of 4 and one at the end of each phase: offline 4, 6; online 10, 12.
    assert [int(r["step"]) for r in rows] == [4, 6, 10, 12]
    _check_eval_rows(rows, h=3)
    meta = json.load(open(os.path.join(run_dir, "flags.json")))
    assert meta["ogbench_version"] and meta["flags"]["horizon_length"] == 3
    assert meta["task_id"] == 1 and meta["success_timing"] == "post" and meta["dataset_success_timing"] == "pre"
    # How often the file reaches task 1's goal: the record and the Data: line say the loader's own count.
    data = make_env_and_datasets("cube-single-play-singletask-task1-v0", dataset_path=dataset_path).train_dataset
    goal = meta["datasets"][0]["goal"]
    assert goal == {
        "task": 1,
        "success_timing": "pre",
        "rows": 118,
        **goal_counts(data["masks"], data["terminals"]),
    }
    with open(f"{run_dir}.stderr") as f:
        assert (f"task 1's goal in {goal['goal_rows']} of 118 rows, {goal['goal_entries']} entries into it") in f.read()
    # The agent section is the config the agent was built with, not the unresolved flag config.
    agent = meta["agent"]
    assert agent["horizon_length"] == 3 and agent["action_dim"] == 5 and agent["ob_dims"] == [28]
    assert agent["actor_type"] == actor and agent["actor_num_samples"] == 4 and agent["flow_steps"] == 2
    assert agent["actor_hidden_dims"] == [16, 16] and agent["batch_size"] == 8
    if actor == "distill-ddpg":  # cube-single borrows cube-double's QC-FQL alpha
        assert agent["alpha"] == 300.0 and meta["method"]["name"] == "qc-fql"
        assert meta["method"]["sources"]["agent.alpha"] == "preset"
        assert meta["method"]["sources"]["horizon_length"] == "command line"
    else:
        assert "method" not in meta
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["agent_12.msgpack", "agent_6.msgpack"]


def test_main_online_smoke(dataset_path, tmp_path):
    run_dir = _run(
        "main_online.py", dataset_path, tmp_path, "--online_steps=8", "--start_training=4", "--offline_ratio=0.5"
    )
    rows = _eval_rows(run_dir)
    assert [int(r["step"]) for r in rows] == [4, 8]
    _check_eval_rows(rows, h=3)
    meta = json.load(open(os.path.join(run_dir, "flags.json")))
    assert meta["agent"]["agent_name"] == "acrlpd" and meta["agent"]["target_entropy"] == -0.5 * 3 * 5
    assert meta["flags"]["offline_ratio"] == 0.5 and meta["flags"]["offline_steps"] == 0
    with open(os.path.join(run_dir, "online_agent.csv")) as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [4, 6, 8]  # log_interval 2, updates from step 4


@pytest.mark.parametrize(
    "args,message",
    [
        (["--env_name=foo-v0"], "Unknown environment 'foo-v0'"),
        (
            ["--env_name=cube-single-play-singletask-task1-v0", "--dataset_path=/nonexistent/x.npz"],
            "python -m envs.generate_dataset",
        ),
        # Found while setting up, before any training step: no window of h rows; no renderer for videos.
        (["DATA", "--horizon_length=100000"], "fewer than --horizon_length=100000"),
        (["DATA", "--video_episodes=1"], "MUJOCO_GL=egl"),
        # The dataset of another domain: cube-single's file for a cube-double task.
        (
            ["DATA", "--env_name=cube-double-play-singletask-task2-v0"],
            "does not fit cube-double-play-singletask-task2-v0",
        ),
        (["--env_name=cube-single-play-singletask-task1-v0", "--dataset_path=/tmp"], "is a directory"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path, dataset_path):
    """A bad input found during setup ends with exit status 2 and one error line, no traceback."""
    if args[0] == "DATA":
        args = ["--env_name=cube-single-play-singletask-task1-v0", f"--dataset_path={dataset_path}", *TINY, *args[1:]]
    cmd = [sys.executable, "main.py", f"--save_dir={tmp_path}", "--progress=False", *args]
    # No display and MuJoCo's default (GLFW) backend: rendering cannot work, as on a headless node.
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}
    result = subprocess.run(
        cmd, cwd=ROOT, env=dict(env, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in result.stderr.split("error:", 1)[1]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(os.path.join(tmp_path, "Debug")) or not any(
        "eval.csv" in files for _, _, files in os.walk(tmp_path)
    )  # nothing trained, nothing evaluated


def test_a_mujoco_gl_backend_that_cannot_start_is_one_line(tmp_path):
    """dm_control picks the backend when it is imported (the drivers import it at start-up): an unknown name, or one
    whose library is missing, is one line naming MUJOCO_GL, not an OpenGL traceback."""
    backends = ["glx"] + (["osmesa"] if ctypes.util.find_library("OSMesa") is None else [])
    for backend in backends:
        cmd = [sys.executable, "main.py", f"--save_dir={tmp_path}", "--env_name=cube-single-play-singletask-task1-v0"]
        env = dict(os.environ, JAX_PLATFORMS="cpu", MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: MUJOCO_GL={backend} cannot start"), result.stderr
    assert not os.listdir(tmp_path)
