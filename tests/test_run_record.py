"""What a run's `flags.json` says made it (`made_by`: commit, versions, CPU, devices) and how fast each phase ran
(`speed`), and that a resumed run keeps what its earlier parts recorded (log_utils, runner.setup.setup_run)."""

import json
import os
import re
import shutil
import subprocess

import gymnasium
import jax
import pytest

import log_utils
from runner import resume, setup
from runner.seed_group import SeedGroup
from tests.test_cli import parse

HAS_GIT = shutil.which("git") is not None


def _cpuinfo_says_avx512():
    """An independent reading: any `flags` line of /proc/cpuinfo with the word avx512f (None: unreadable)."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return None
    lines = [line for line in text.splitlines() if line.startswith("flags")]
    return bool(lines) and "avx512f" in lines[0].split(":", 1)[1].split()


def test_made_by_on_this_machine():
    record = log_utils.made_by()
    assert set(record) == {"commit", "uncommitted_changes", "versions", "python", "cpu", "devices"}
    assert set(record["versions"]) == {"jax", "jaxlib", "flax", "optax", "gymnasium", "mujoco", "ogbench"}
    assert record["versions"]["jax"] == jax.__version__  # a version read from the package, not made up
    assert record["versions"]["gymnasium"] == gymnasium.__version__  # every family's env API (envs/README.md)
    assert all(isinstance(v, str) and re.match(r"^\d+\.\d+", v) for v in record["versions"].values())
    assert record["cpu"]["avx512"] == _cpuinfo_says_avx512()
    assert record["cpu"]["cores"] == os.cpu_count()
    if record["cpu"]["avx512"] is not None:
        assert isinstance(record["cpu"]["model"], str) and record["cpu"]["model"]
    device = jax.devices()[0]
    assert record["devices"] == [{"platform": device.platform, "kind": device.device_kind, "count": len(jax.devices())}]
    json.dumps(record)  # goes into flags.json as is
    if HAS_GIT and os.path.exists(os.path.join(log_utils.REPO_ROOT, ".git")):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=log_utils.REPO_ROOT, capture_output=True, text=True)
        assert record["commit"] == head.stdout.strip() and re.fullmatch(r"[0-9a-f]{40}", record["commit"])
        assert isinstance(record["uncommitted_changes"], bool)


def test_commit_is_none_outside_a_git_tree_and_without_git(tmp_path, monkeypatch):
    record = log_utils.made_by(str(tmp_path))  # an empty folder: no git tree
    assert record["commit"] is None and record["uncommitted_changes"] is None
    assert record["versions"]["jax"] == jax.__version__  # the rest is still there
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program at all
    assert log_utils.made_by()["commit"] is None


@pytest.mark.skipif(not HAS_GIT, reason="needs git")
def test_commit_and_uncommitted_changes_of_a_tree(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)  # fmt: skip

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (tmp_path / "new.txt").write_text("untracked files are not counted\n")
    clean = log_utils.made_by(str(tmp_path))
    assert clean["commit"] == head and clean["uncommitted_changes"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert log_utils.made_by(str(tmp_path))["uncommitted_changes"] is True


def test_cpu_info_reads_model_and_avx512_and_survives_a_missing_file(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\nflags\t\t: fpu sse2 avx2 avx512f avx512dq\n\n"
        "processor\t: 1\nmodel name\t: Some CPU @ 2.0GHz\nflags\t\t: fpu sse2\n"
    )
    assert log_utils.cpu_info(str(path))["model"] == "Some CPU @ 2.0GHz"
    assert log_utils.cpu_info(str(path))["avx512"] is True
    path.write_text("model name\t: Old CPU\nflags\t\t: fpu sse2 avx2 avx512_vnni_lookalike\n")
    assert log_utils.cpu_info(str(path))["avx512"] is False  # avx512f itself, not a name that starts alike
    missing = log_utils.cpu_info(str(tmp_path / "none"))
    assert missing["model"] is None and missing["avx512"] is None


def _started(monkeypatch, tmp_path, *args):
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=r", *args)
    run_dir, logger = setup.setup_run(cfg, dict(cfg.agent), {"datasets": []})
    logger.close()
    resume.release_run_dirs()
    return cfg, run_dir


def _record(run_dir):
    with open(os.path.join(run_dir, "flags.json")) as f:
        return json.load(f)


def test_a_run_records_what_made_it_and_its_speed_and_a_resume_keeps_it(monkeypatch, tmp_path):
    cfg, run_dir = _started(monkeypatch, tmp_path, "--offline_steps=40", "--online_steps=30", "--start_training=11",
                            "--utd_ratio=2")  # fmt: skip
    first = _record(run_dir)
    assert first["made_by"]["versions"]["jax"] == jax.__version__ and "speed" not in first
    run = setup.Run(cfg=cfg, agent=None, env_data=None, train_dataset=None, windows=None, run_dir=run_dir,
                    logger=None, action_dim=1, chunk_length=1, example=None)  # fmt: skip
    group = SeedGroup([run])
    group.record_speed("offline", 0, 40, 8.0)
    # Online from step 5 (a resumed part) to 30: 25 env steps, updates at steps 11..30 (20 of them) x utd 2.
    group.record_speed("online", 5, 30, 10.0)
    group.record_speed("online", 30, 30, 1.0)  # no step made: the entry stays
    speed = _record(run_dir)["speed"]
    assert speed["offline"] == {"from_step": 0, "to_step": 40, "seconds": 8.0, "steps_per_second": 5.0,
                                "gradient_steps_per_second": 5.0}  # fmt: skip
    assert speed["online"] == {"from_step": 5, "to_step": 30, "seconds": 10.0, "steps_per_second": 2.5,
                               "gradient_steps_per_second": 4.0}  # fmt: skip
    # The run is resumed (setup writes flags.json anew): the speeds stay; what made it is this process again.
    again = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=r", "--resume", "--offline_steps=40",
                  "--online_steps=30", "--start_training=11", "--utd_ratio=2")  # fmt: skip
    resume.check_runs([again])
    setup.setup_run(again, dict(again.agent), {"datasets": []})[1].close()
    resume.release_run_dirs()
    resumed = _record(run_dir)
    assert resumed["speed"] == speed and resumed["made_by"] == first["made_by"]
    assert "made_by_history" not in resumed  # the same code and machine: no second record
    # A part made by other code keeps the earlier record.
    other = dict(first["made_by"], commit="0" * 40)
    with open(os.path.join(run_dir, "flags.json"), "w") as f:
        json.dump(dict(resumed, made_by=other), f)
    resume.check_runs([again])
    setup.setup_run(again, dict(again.agent), {"datasets": []})[1].close()
    resume.release_run_dirs()
    assert _record(run_dir)["made_by_history"] == [other] and _record(run_dir)["made_by"] == first["made_by"]
