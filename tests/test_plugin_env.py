"""A benchmark family added in one file, as envs/README.md tells a researcher to, works with every tool.

The test copies the repository, saves envs/README.md's worked example (gymnasium's Pendulum with random-action
data) as `envs/pendulum.py` in the copy, edits no other file, and runs it through `main.py`, `--num_seeds=2`,
a kill and `--resume`, `scripts/sweep.py --dry_run` and `scripts/plot_curves.py`.
"""

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT, assert_same_run, csv_rows, run_driver

pytestmark = pytest.mark.slow

TINY = [
    "--env_name=pendulum-random-v1",
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--agent.actor_num_samples=4",
    "--agent.flow_steps=2",
    "--horizon_length=3",
    "--offline_steps=20",
    "--online_steps=30",
    "--start_training=2",
    "--log_interval=5",
    "--eval_interval=20",
    "--eval_episodes=2",
    "--buffer_size=2000",
    "--state_interval=5",
    "--progress=False",
]


def example_family() -> str:
    """The Python block of envs/README.md's worked example."""
    with open(os.path.join(ROOT, "envs", "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, "envs/README.md holds one worked example"
    return blocks[0]


def repository_with_example(copy) -> str:
    """`copy` (a new folder) made a copy of the repository's tracked files with `envs/pendulum.py` added."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for path in filter(None, tracked.decode().split("\0")):
        if os.path.isfile(os.path.join(ROOT, path)):
            os.makedirs(os.path.dirname(os.path.join(copy, path)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(copy, path))
    assert not os.path.exists(os.path.join(copy, "envs", "pendulum.py"))
    with open(os.path.join(copy, "envs", "pendulum.py"), "w") as f:
        f.write(example_family())
    return str(copy)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the repository's tracked files with `envs/pendulum.py` added."""
    return repository_with_example(tmp_path_factory.mktemp("repo"))


def _run(repo, save, name, *extra, fault=None, expect=0):
    return run_driver("main.py", save, name, None, [*TINY, *extra], fault=fault, expect=expect, timeout=600, root=repo)


def test_a_new_family_in_one_file_works_with_every_tool(repo, tmp_path):
    save = str(tmp_path)
    run_dir, result = _run(repo, save, "p")
    with open(os.path.join(run_dir, "flags.json")) as f:
        record = json.load(f)
    assert record["env"]["family"] == "pendulum" and record["env"]["name"] == "pendulum-random-v1"
    assert record["datasets"][0]["source"] == "generated" and len(record["datasets"][0]["sha256"]) == 64
    assert len(csv_rows(os.path.join(run_dir, "eval.csv"))) == 3  # steps 20, 40 and 50
    assert os.path.isfile(os.path.join(run_dir, "DONE.json"))
    assert "Data: envs/pendulum.py:make_dataset (generated, 40000 bytes" in result.stderr

    # The registry lists it in the one unknown-name error, and refuses what the family cannot do.
    _, bad = _run(repo, save, "bad", "--env_name=pendulum-v9", expect=2)
    assert "Unknown environment 'pendulum-v9'" in bad.stderr and "pendulum: pendulum-random-v1" in bad.stderr
    _, video = _run(repo, save, "video", "--video_episodes=1", expect=2)
    assert "pendulum envs (pendulum-random-v1) are built without a renderer" in video.stderr

    # Several seeds in one process: each its own envs and run.
    _run(repo, save, "group", "--num_seeds=2")
    for seed in (0, 1):
        assert os.path.isfile(os.path.join(save, "g", f"group_sd{seed}", "DONE.json"))

    # Killed in the online phase, resumed: equal to the uninterrupted run.
    cut, _ = _run(repo, save, "cut", fault="kill@online:12", expect=-9)
    _run(repo, save, "cut", "--resume")
    assert_same_run(run_dir, cut, 50)

    # A sweep (dry run): run names from the family's short name; --tasks is refused for a family without tasks.
    def sweep(*args):
        command = [sys.executable, "scripts/sweep.py", "--driver=main.py", "--seeds=0,1", "--dry_run",
                   f"--save_dir={save}", *args, "--", "--env_name=pendulum-random-v1"]  # fmt: skip
        return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300)

    listed = sweep()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("--run_name=pendulum_sd") == 2, listed.stdout
    refused = sweep("--tasks=1")
    assert refused.returncode == 2 and "pendulum-random-v1 has none" in refused.stderr

    # The plot: the family's runs are on its own panels, its paper_domain and short (no released curve).
    out = os.path.join(save, "plots")
    plot = subprocess.run(
        [sys.executable, "scripts/plot_curves.py", run_dir, cut, f"--out_dir={out}", "--reps=50", "--no_paper"],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    with open(os.path.join(out, "curves.csv")) as f:
        rows = list(csv.DictReader(f))
    assert rows and {(row["panel"], row["tasks"]) for row in rows} == {("pendulum-random-v1", "pendulum")}, rows[:2]


def test_a_family_file_edited_between_a_kill_and_resume_is_refused_unless_accepted(repo, tmp_path):
    """Issue 59: the family's success test edited after a kill. The run used to resume, and eval.csv then mixed the
    two definitions; the family file's sha256 is in flags.json as the agent file's is, and the resume is refused
    in one line naming the file and the flag, unless --accept_changed_family: then flags.json keeps both records."""
    save, family_file = str(tmp_path), os.path.join(repo, "envs", "pendulum.py")
    cut, _ = _run(repo, save, "cut", fault="kill@online:12", expect=-9)
    with open(os.path.join(cut, "flags.json")) as f:
        started = json.load(f)["family_source"]
    assert started["path"] == family_file and len(started["sha256"]) == 64
    with open(family_file) as f:
        original = f.read()
    states, rows = os.listdir(os.path.join(cut, "state")), csv_rows(os.path.join(cut, "eval.csv"))
    try:
        with open(family_file, "w") as f:  # another success test (and another file size: no stale bytecode)
            f.write(original.replace("ob[0] > 0.9)", "ob[0] > 0.99)"))
        _, refused = _run(repo, save, "cut", "--resume", expect=2)
        errors = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
        assert "the benchmark family's file" in errors[0] and f"{family_file}: sha256" in errors[0]
        assert "--accept_changed_family" in errors[0]
        assert os.listdir(os.path.join(cut, "state")) == states and csv_rows(os.path.join(cut, "eval.csv")) == rows
        _run(repo, save, "cut", "--resume", "--accept_changed_family")
    finally:
        with open(family_file, "w") as f:
            f.write(original)
    with open(os.path.join(cut, "flags.json")) as f:
        record = json.load(f)
    assert record["family_source_history"] == [started]
    assert record["family_source"]["path"] == family_file and record["family_source"]["sha256"] != started["sha256"]
    assert os.path.isfile(os.path.join(cut, "DONE.json"))


def _parse_in(repo, *names):
    """`envs.parse(name).family`, or the error's message, of each name, in a process started in `repo`."""
    code = "import envs, sys\nfor n in sys.argv[1:]:\n    try:\n        print(envs.parse(n).family)\n" \
           "    except ValueError as e:\n        print(e)"  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code, *names], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_a_broken_family_file_stops_no_other_family(repo):
    added = {
        "broken.py": "FAMILY = undefined_name\n",  # cannot be imported
        "a_buggy.py": example_family()
        .replace("if env_name != NAME:", 'if env_name.split("-")[5]:')
        .replace('name="pendulum"', 'name="buggy"'),  # its parse raises IndexError on most names
    }
    for file, text in added.items():
        with open(os.path.join(repo, "envs", file), "w") as f:
            f.write(text)
    try:
        family, ogbench, error = _parse_in(repo, "pendulum-random-v1", "cube-double-play-singletask-task2-v0", "x-v0")
        with open(os.path.join(repo, "envs", "pendulum_copy.py"), "w") as f:
            f.write(example_family())  # a copy that kept the family's name: both files are left out
        clash, _, _ = _parse_in(repo, "pendulum-random-v1", "cube-double-play-singletask-task2-v0", "x-v0")
    finally:
        for file in (*added, "pendulum_copy.py"):
            if os.path.exists(os.path.join(repo, "envs", file)):
                os.remove(os.path.join(repo, "envs", file))
    assert (family, ogbench) == ("pendulum", "ogbench")
    assert error.startswith("Unknown environment 'x-v0'") and "pendulum: pendulum-random-v1" in error
    assert "envs/broken.py could not be imported (NameError: name 'undefined_name' is not defined)" in error
    assert "envs/a_buggy.py's parse failed on it (IndexError: list index out of range)" in error
    assert clash.startswith("Unknown environment 'pendulum-random-v1'")
    assert "envs/pendulum_copy.py defines the family 'pendulum' as envs/pendulum.py does" in clash
