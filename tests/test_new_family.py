"""A new family needs one file, truly (issue 59, item 6): what the papers' families have and a family added since
has not, seen through a copy of the repository with family files added to its envs/ (as envs/README.md says).

The copy holds envs/README.md's worked example as `envs/pendulum.py`, `envs/lookalike.py` (that example with a
domain spelled like a paper domain, `cube-double` `play`) and `envs/swing.py` (Pendulum with numbered tasks 1..9).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT
from tests.test_plugin_env import example_family

LOOKALIKE = "lookalike-v1"
# Pendulum with numbered tasks: its `with_task` takes 1..9, more than OGBench's 1..5.
SWING = '''"""Pendulum with numbered tasks, swing-task<N>-v1 for N in 1..9 (a test's family)."""

import dataclasses
import re

from envs import pendulum
from envs.common import EnvName


def parse(env_name):
    match = re.fullmatch(r"swing-task(\\d+)-v1", env_name)
    if match is None:
        return None
    task = int(match[1])
    if not 1 <= task <= 9:
        raise ValueError(f"{env_name}: swing tasks are 1..9")
    return EnvName("swing", env_name, "swing", "random", task, False, "swing", f"swing-task{task}", f"swing-t{task}")


def with_task(name, task):
    if not 1 <= task <= 9:
        raise ValueError(f"task {task} of swing: its tasks are 1..9.")
    return f"swing-task{task}-v1"


FAMILY = dataclasses.replace(
    pendulum.FAMILY, name="swing", patterns=("swing-task{1..9}-v1",), parse=parse, with_task=with_task
)
'''


def _variant(text: str, replacements: dict) -> str:
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the repository's tracked files with the three family files added to envs/."""
    copy = tmp_path_factory.mktemp("repo")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for path in filter(None, tracked.decode().split("\0")):
        if os.path.isfile(os.path.join(ROOT, path)):
            os.makedirs(os.path.dirname(os.path.join(copy, path)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(copy, path))
    example = example_family()
    lookalike = _variant(
        example,
        {
            'NAME = "pendulum-random-v1"': f'NAME = "{LOOKALIKE}"',
            'EnvName("pendulum", NAME, "pendulum", "random", None, False, NAME, NAME, "pendulum")': (
                'EnvName("lookalike", NAME, "cube-double", "play", None, False, "cube-double", NAME, "lookalike")'
            ),
            'name="pendulum"': 'name="lookalike"',
        },
    )
    for name, text in (("pendulum", example), ("lookalike", lookalike), ("swing", SWING)):
        with open(os.path.join(copy, "envs", f"{name}.py"), "w") as f:
            f.write(text)
    return str(copy)


def _python(repo, code, *args, expect=0):
    """`python -c code args` in the copy; its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=repo,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == expect, result.stderr[-3000:]
    return result.stdout


def _error_line(result):
    """The one `error:` line of a refused command."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


def _main(repo, tmp_path, *flags):
    command = [sys.executable, "main.py", f"--save_dir={tmp_path}", *flags]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_method_on_a_family_without_paper_values_says_to_drop_it(repo, tmp_path):
    line = _error_line(_main(repo, tmp_path, "--method=qc", "--env_name=pendulum-random-v1"))
    assert line == (
        "error: --method=qc: no paper settings for --env_name=pendulum-random-v1: the papers did not run the "
        "pendulum family (theirs: ogbench, robomimic); run without --method and set the flags yourself "
        "(docs/settings.md lists the paper's)."
    )
    assert not os.listdir(tmp_path)  # nothing made


def test_paper_values_apply_only_to_the_families_the_papers_ran(repo, tmp_path):
    """`lookalike-v1`'s domain and data type are cube-double's and play, as OGBench's: it gets no paper value, no
    note, no label suffix; OGBench's cube-double (the same question) gets them."""
    code = """
import json, sys
from runner import methods
out = {}
for env in sys.argv[1:]:
    try:
        out[env] = ("domain", methods.domain_of(env))
    except ValueError as e:
        out[env] = ("error", str(e))
    out[env] += (methods.paper_values("qc", env), methods.paper_values("qc-fql", env))
print(json.dumps(out))
"""
    ogbench = "cube-double-play-singletask-task2-v0"
    found = json.loads(_python(repo, code, LOOKALIKE, ogbench))
    kind, said, qc, qc_fql = found[LOOKALIKE]
    assert kind == "error" and "the papers did not run the lookalike family" in said
    assert qc == {} and qc_fql == {}
    kind, domain, qc, qc_fql = found[ogbench]
    assert (kind, domain) == ("domain", "cube-double") and qc["agent.actor_num_samples"] == 32
    assert qc_fql["agent.alpha"] == 300
    line = _error_line(_main(repo, tmp_path, "--method=qc", f"--env_name={LOOKALIKE}"))
    assert "the papers did not run the lookalike family" in line and "run without --method" in line


def test_dm_control_is_imported_only_by_the_families_that_use_it(repo):
    """A driver's start-up (main.py's imports and flags, as `--help` runs them), the registry and a Pendulum run's
    envs and data import no dm_control; OGBench's first env does (so the check can see it)."""
    code = """
import runpy, sys
sys.argv = ["main.py", "--help"]
try:
    runpy.run_path("main.py", run_name="__main__")
except SystemExit:
    pass
import envs
from runner import setup
env_data = envs.make_env_and_datasets("pendulum-random-v1")
env_data.env.step(env_data.env.action_space.sample())
env_data.eval_env.step(env_data.env.action_space.sample())
print("after pendulum:", sorted(m for m in sys.modules if m.split(".")[0] == "dm_control"))
import envs.ogbench
envs.ogbench.make_eval_env("cube-single-play-singletask-task1-v0")
print("after ogbench:", "dm_control.mjcf" in sys.modules)
"""
    lines = [line for line in _python(repo, code).splitlines() if line.startswith("after ")]
    assert lines == ["after pendulum: []", "after ogbench: True"]


def test_sweep_tasks_are_the_tasks_the_familys_with_task_accepts(repo, tmp_path):
    """`swing`'s tasks are 1..9: `--tasks=6-9` (past OGBench's 5) sweeps them; its own refusal names --tasks."""

    def sweep(*args):
        command = [sys.executable, "scripts/sweep.py", "--driver=main.py", "--seeds=0", "--dry_run",
                   f"--save_dir={tmp_path}", "--sweep_name=s", *args, "--", "--env_name=swing-task1-v1"]  # fmt: skip
        return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300)

    listed = sweep("--tasks=6-9")
    assert listed.returncode == 0, listed.stderr[-3000:]
    envs_run = [w.split("=", 1)[1] for line in listed.stdout.splitlines() for w in line.split() if "--env_name=" in w]
    assert envs_run == [f"swing-task{n}-v1" for n in (6, 7, 8, 9)], listed.stdout
    assert [f"--run_name=swing-t{n}_sd0" in listed.stdout for n in (6, 7, 8, 9)] == [True] * 4
    assert _error_line(sweep("--tasks=8-10")) == "error: --tasks=8-10: task 10 of swing: its tasks are 1..9."
