"""The persistent compilation cache (`--compilation_cache_dir`, utils/startup.py): where it lives, and that runs
sharing one folder at the same time, and a run reading it, give the same run."""

import os
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT, assert_same_run, run_driver, tiny_dataset
from utils.startup import compilation_cache_dir


def test_the_folder_is_the_flag_then_jax_env_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache_dir(None) == str(tmp_path / "xdg" / "qc" / "jax_cache")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compilation_cache_dir(None) == str(tmp_path / "home" / ".cache" / "qc" / "jax_cache")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert compilation_cache_dir(None) == str(tmp_path / "jax")
    assert compilation_cache_dir("~/c") == str(tmp_path / "home" / "c")  # the flag wins
    assert compilation_cache_dir("none") is None and compilation_cache_dir("None") is None


FLAGS = ["--env_name=cube-single-play-singletask-task1-v0", "--agent.actor_hidden_dims=(16,16)",
         "--agent.value_hidden_dims=(16,16)", "--agent.batch_size=8", "--horizon_length=3", "--offline_steps=6",
         "--online_steps=6", "--start_training=2", "--log_interval=2", "--eval_interval=6", "--eval_episodes=1",
         "--buffer_size=500", "--progress=False"]  # fmt: skip


@pytest.mark.slow
def test_runs_sharing_a_cache_at_once_equal_a_run_without_one(tmp_path):
    data = tiny_dataset(tmp_path)
    cache = tmp_path / "cache"
    save = str(tmp_path / "exp")
    # Two runs start together on an empty folder: both compile and write the same entries at once.
    cmds = [
        [sys.executable, "main.py", f"--save_dir={save}", "--run_group=g", f"--run_name={name}",
         f"--dataset_path={data}", f"--compilation_cache_dir={cache}", *FLAGS]
        for name in ("a", "b")
    ]  # fmt: skip
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled")
    procs = [subprocess.Popen(c, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True) for c in cmds]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    entries = os.listdir(cache)
    assert len(entries) > 5
    # A third reads them (nothing new to compile): the code loaded from the cache makes the run the compiled
    # code made, bit for bit.
    run_driver("main.py", save, "c", data, [f"--compilation_cache_dir={cache}", *FLAGS])
    assert sorted(os.listdir(cache)) == sorted(entries)
    for name in ("b", "c"):
        assert_same_run(os.path.join(save, "g", "a"), os.path.join(save, "g", name), 12)
