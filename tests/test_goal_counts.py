"""How often a data file reaches a task's goal (issue 58): counted by hand on a hand-made puzzle-3x3 file, and the
same counts in a run's data record, from the generator's summary and from scripts/goal_counts.py."""

import os

import numpy as np
import pytest

import goal_counts
from envs import generate_dataset, make_env_and_datasets

# Task 1 of puzzle-3x3 is solved when the nine buttons read this (ogbench's task 1 target).
GOAL = np.array([1, 1, 0, 1, 0, 1, 0, 1, 1])
OFF = np.zeros(9, dtype=np.int64)
# Two trajectories of six stored rows (five transitions each); G = in task 1's goal.
#   trajectory A: OFF G   G   OFF OFF | G (its last row: no transition starts there)
#   trajectory B: G   OFF OFF G   OFF | G
# Transitions under the 'pre' timing take each row's own state: A gives OFF G G OFF OFF, B gives G OFF OFF G OFF.
# Goal rows: 2 + 2 = 4. Entries (a row not in the goal, then one in it, same trajectory): A 0->1, B 2->3 = 2. A's
# last transition (OFF) is followed by B's first (G): another trajectory, so no entry (3 if it were counted).
BUTTONS = [OFF, GOAL, GOAL, OFF, OFF, GOAL, GOAL, OFF, OFF, GOAL, OFF, GOAL]


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory):
    n = len(BUTTONS)
    path = str(tmp_path_factory.mktemp("data") / "puzzle-3x3-play-v0.npz")
    np.savez(
        path,
        observations=np.zeros((n, 55), np.float32),
        actions=np.zeros((n, 5), np.float32),
        terminals=np.array([0, 0, 0, 0, 0, 1] * 2, np.float32),
        qpos=np.zeros((n, 23), np.float32),
        qvel=np.zeros((n, 23), np.float32),
        button_states=np.stack(BUTTONS).astype(np.int64),
    )
    return path


def test_goal_rows_and_entries_by_hand(hand_made):
    counts = generate_dataset.file_goal_counts(hand_made, "puzzle-3x3-play-v0", tasks=[1, 4])
    assert counts[1] == {"rows": 10, "goal_rows": 4, "goal_entries": 2}
    assert counts[4] == {"rows": 10, "goal_rows": 0, "goal_entries": 0}  # all nine on: never in this file
    assert generate_dataset.goal_counts_text(1, counts[1]) == "task 1: goal in 4 of 10 rows (40%), 2 entries"


def test_a_run_records_its_tasks_counts(hand_made):
    record = make_env_and_datasets("puzzle-3x3-play-singletask-task1-v0", dataset_path=hand_made).metadata
    assert record["datasets"][0]["goal"] == {
        "task": 1, "success_timing": "pre", "rows": 10, "goal_rows": 4, "goal_entries": 2
    }  # fmt: skip


def test_the_command_prints_each_task(hand_made, capsys):
    assert goal_counts.main([hand_made, "--tasks=1,4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{hand_made} (puzzle-3x3-play-v0, sha256 ")
    assert out[1:] == [
        "  task 1: goal in 4 of 10 rows (40%), 2 entries",
        "  task 4: goal in 0 of 10 rows (0%), 0 entries",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["missing.npz"], "is no file"),
        (["HAND", "--tasks=6"], "--tasks"),
        (["HAND", "--dataset_name=puzzle-4x4-play-v0"], "no dataset of a single-task OGBench domain"),
    ],
)
def test_bad_inputs_are_one_line(hand_made, capsys, argv, message):
    assert goal_counts.main([hand_made if a == "HAND" else a for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_the_generator_ends_with_every_tasks_counts(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = str(tmp_path / "puzzle-3x3-play-v0.npz")
    command = [sys.executable, "-m", "envs.generate_dataset", "--env_name=puzzle-3x3-play-v0", "--num_episodes=1",
               "--max_episode_steps=30", f"--save_path={path}"]  # fmt: skip
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    start = lines.index(f"Goals of {path}, relabelled as each task's runs load it:")
    assert [line.split(":")[0] for line in lines[start + 1 :]] == [f"  task {t}" for t in range(1, 6)]
    task1 = generate_dataset.file_goal_counts(path, "puzzle-3x3-play-v0", tasks=[1])[1]  # one task: each builds an env
    assert lines[start + 1] == f"  {generate_dataset.goal_counts_text(1, task1)}" and task1["rows"] == 29
