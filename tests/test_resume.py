"""Killed runs continue exactly: SIGKILL at several points, `--resume`, same results as never interrupted.

Each case runs a tiny driver to the end once without interruption, and once killed (SIGKILL from inside
the process at a chosen step, after rows were logged beyond the latest state) and resumed with
`--resume`. Both must end with the same `eval.csv`, `env.csv`, the same loss rows (timing columns
aside) and the same final parameters. Also: the SIGTERM path (state at once, mid-episode, exit
status 3, then exact continuation), a finished run left alone, and damaged states skipped.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from flax import serialization

import run_state
from envs.generate_dataset import generate_dataset

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--eval_episodes=1",
    "--eval_interval=200",
    "--log_interval=50",
    "--buffer_size=2000",
    "--progress=False",
    "--horizon_length=3",
    "--state_interval=3",
    "--start_training=2",
]
MAIN = [
    "--offline_steps=6",
    "--online_steps=450",
    "--agent.actor_num_samples=4",
    "--agent.flow_steps=2",
]  # cube-single episodes: 200 steps
ONLINE = ["--online_steps=450"]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=2, seed=0, save_path=path, max_episode_steps=60, progress=False
    )
    return path


def _run(script, save_dir, name, dataset_path, *extra, env_extra=None, expect=0):
    cmd = [sys.executable, script, f"--save_dir={save_dir}", "--run_group=g", f"--run_name={name}",
           f"--dataset_path={dataset_path}", *TINY, *extra]  # fmt: skip
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", **(env_extra or {}))
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == expect, result.stderr[-3000:]
    return os.path.join(save_dir, "g", name), result


def _rows(path, drop_time=True):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if not (drop_time and (k.startswith("time") or "duration" in k))} for r in rows]


def _params(run_dir, step):
    with open(os.path.join(run_dir, "checkpoints", f"agent_{step}.msgpack"), "rb") as f:
        payload = serialization.msgpack_restore(f.read())
    return payload["agent"]["network"]["params"]


def _assert_same_run(a, b, final_step):
    for name in ("eval.csv", "env.csv", "offline_agent.csv", "online_agent.csv"):
        assert _rows(os.path.join(a, name)) == _rows(os.path.join(b, name)), name
    assert _rows(os.path.join(a, "eval.csv")), "the reference run evaluated nothing"
    flat_a = serialization.to_state_dict(_params(a, final_step))
    flat_b = serialization.to_state_dict(_params(b, final_step))

    def compare(x, y):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                compare(x[k], y[k])
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    compare(flat_a, flat_b)
    assert os.path.isfile(os.path.join(b, "DONE.json"))


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory, dataset_path):
    save_dir = str(tmp_path_factory.mktemp("reference"))
    main_dir, _ = _run("main.py", save_dir, "main", dataset_path, *MAIN)
    online_dir, _ = _run("main_online.py", save_dir, "online", dataset_path, *ONLINE)
    return {"main": main_dir, "online": online_dir}


@pytest.mark.parametrize(
    "script, kill_at",
    [
        ("main.py", "offline:4"),  # latest state: offline step 3
        ("main.py", "online:100"),  # latest state: online step 99
        ("main.py", "online:250"),  # latest state: online step 249, mid-episode (replayed on resume)
        ("main_online.py", "online:300"),
    ],
)
def test_sigkill_then_resume_is_exact(tmp_path, dataset_path, reference_runs, script, kill_at):
    extra = MAIN if script == "main.py" else ONLINE
    run_dir, _ = _run(script, str(tmp_path), "r", dataset_path, *extra, env_extra={"QC_TEST_KILL_AT": kill_at},
                      expect=-9)  # fmt: skip
    assert run_state.latest_state(run_dir) is not None and not os.path.exists(os.path.join(run_dir, "DONE.json"))
    _run(script, str(tmp_path), "r", dataset_path, *extra, "--resume")
    final = 456 if script == "main.py" else 450
    _assert_same_run(reference_runs["main" if script == "main.py" else "online"], run_dir, final)


def test_sigterm_writes_state_mid_episode_then_resumes(tmp_path, dataset_path, reference_runs):
    run_dir, result = _run("main.py", str(tmp_path), "t", dataset_path, *MAIN,
                           env_extra={"QC_TEST_SIGNAL_AT": "online:121"}, expect=run_state.EXIT_PREEMPTED)  # fmt: skip
    with open(os.path.join(run_state.latest_state(run_dir), "state.json")) as f:
        meta = json.load(f)
    # The state is written at the signal's step, in the middle of an episode (200 steps) and of a chunk (h = 3):
    # the episode's actions are saved and replayed on resume, the rest of the chunk is kept.
    assert (meta["phase"], meta["step_in_phase"]) == ("online", 121)
    episode = meta["collector"]["episode"]
    assert len(episode["actions"]) == 121 and len(episode["queue"]) == 2
    _run("main.py", str(tmp_path), "t", dataset_path, *MAIN, "--resume")
    _assert_same_run(reference_runs["main"], run_dir, 456)
    # A finished run is left alone.
    _, result = _run("main.py", str(tmp_path), "t", dataset_path, *MAIN, "--resume")
    assert "has finished" in result.stderr
