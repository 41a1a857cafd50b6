"""A run refused during setup leaves no folder behind (issue 29 item 9).

A sweep starts every point with `--resume --start_if_missing`, which made and locked the run folder before the
data was loaded: a point refused for its windows (a horizon longer than the data) left a folder holding only
`.lock`. Refused runs are made here from a horizon longer than the tiny dataset's 118 rows and from a missing
data file; no training.
"""

import os
import re
import subprocess
import sys

import pytest
from absl import flags

from runner import cli, resume
from runner.config import RunConfig
from runner.flags import define_flags
from runner.setup import setup_runs
from tests.driver_runs import ROOT, tiny_dataset

ENV = "--env_name=cube-single-play-singletask-task1-v0"
REFUSED = "has 118 rows, fewer than --horizon_length=200: no window can be drawn."


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


def _config(monkeypatch, *args):
    argv = ["main.py", *args]
    monkeypatch.setattr(sys, "argv", argv)
    flag_values = flags.FlagValues()
    define_flags("main", flag_values)
    cli.parse_flags(argv, "main", flag_values)
    return RunConfig.from_flags(flag_values, "main")


@pytest.mark.parametrize("refusal", ["windows", "data"])
def test_a_refused_main_run_leaves_no_folder(monkeypatch, tmp_path, request, refusal):
    """`--resume --start_if_missing`, as the sweep starts a point: refused for its windows or a missing file."""
    save = tmp_path / "exp"
    if refusal == "windows":
        data, message = request.getfixturevalue("dataset"), REFUSED
    else:
        data = str(tmp_path / "missing.npz")
        message = f"OGBench dataset file not found: {data}"
    args = [
        f"--save_dir={save}",
        "--run_group=g",
        "--run_name=r",
        f"--dataset_path={data}",
        ENV,
        "--horizon_length=200",
    ]
    cfg = _config(monkeypatch, *args, "--offline_steps=1", "--online_steps=0", "--resume", "--start_if_missing")
    with pytest.raises(cli.InputError, match=re.escape(message)):
        setup_runs(cfg)
    assert not save.exists(), sorted(str(p) for p in save.rglob("*"))
    assert not resume._LOCKS


def test_a_folder_with_other_files_is_kept(tmp_path):
    """Only folders this process made, holding nothing but its `.lock`, are removed."""
    mine, kept = tmp_path / "a" / "mine", tmp_path / "a" / "kept"
    resume.make_dirs(str(mine))
    resume.make_dirs(str(kept))
    (kept / "notes.txt").write_text("a user's file")
    resume.lock_run_dir(str(mine))
    resume.discard_unused_run_dirs()
    assert not mine.exists() and (kept / "notes.txt").exists() and not resume._LOCKS


def test_a_refused_sweep_point_leaves_no_run_folder(tmp_path):
    save, data = tmp_path / "sweeps", tmp_path / "missing.npz"
    result = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--driver=main.py", "--grid=horizon_length=3", "--seeds=0",
         f"--save_dir={save}", "--sweep_name=s", "--", f"--dataset_path={data}", ENV, "--offline_steps=1",
         "--online_steps=0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )  # fmt: skip
    assert result.returncode != 0 and "1 failed" in result.stdout + result.stderr, result.stdout + result.stderr
    (log,) = (save / "s" / "logs").iterdir()
    assert f"error: OGBench dataset file not found: {data}" in log.read_text()
    assert sorted(p.name for p in (save / "s").iterdir()) == [".sweep.lock", "logs"]
