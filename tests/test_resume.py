"""Killed runs continue exactly: SIGKILL at several points, `--resume`, same results as never interrupted.

Each case runs a tiny driver to the end once without interruption, and once killed (SIGKILL from inside
the process at a chosen step, after rows were logged beyond the latest state) and resumed with
`--resume`. Both must end with the same `eval.csv`, `env.csv`, the same loss rows (timing columns
aside) and the same final parameters. Also: the SIGTERM path (state at once, mid-episode, exit
status 3, then exact continuation), a finished run left alone, and damaged states skipped.
"""

import json
import os
import shutil

import pytest

from runner import resume
from tests.driver_runs import assert_same_run, assert_warm_compiles, run_driver, tiny_dataset, tmpfs

pytestmark = pytest.mark.slow

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
    return tiny_dataset(tmp_path_factory.mktemp("data"))


def _run(script, save_dir, name, dataset_path, *extra, fault=None, expect=0, compiles=False):
    return run_driver(script, save_dir, name, dataset_path, [*TINY, *extra], fault=fault, expect=expect, timeout=600,
                      compiles=compiles)  # fmt: skip


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory, dataset_path):
    save_dir = str(tmp_path_factory.mktemp("reference"))
    main_dir, main = _run("main.py", save_dir, "main", dataset_path, *MAIN, compiles=True)
    online_dir, online = _run("main_online.py", save_dir, "online", dataset_path, *ONLINE, compiles=True)
    return {"main": main_dir, "online": online_dir, "stderr": {"main": main.stderr, "online": online.stderr}}


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
    """Killed, resumed, and with the agent donated to its updates (the reference: not donated, CPU's default).
    Also: the runs compile nothing after their warm-up (each run state, log row, evaluation and episode of the
    same programs), and the resumed one nothing the uninterrupted one did not (`assert_warm_compiles`)."""
    extra = [*(MAIN if script == "main.py" else ONLINE), "--donate_agent=true"]
    run_dir, _ = _run(script, str(tmp_path), "r", dataset_path, *extra, fault=f"kill@{kill_at}",
                      expect=-9)  # fmt: skip
    assert resume.state_dirs(run_dir) and not os.path.exists(os.path.join(run_dir, "DONE.json"))
    with open(os.path.join(resume.state_dirs(run_dir)[-1], "state.json")) as f:
        assert json.load(f)["format_version"] == resume.FORMAT_VERSION
    if script == "main_online.py":  # a byte of the newest state's buffer flipped since: the one before it is used
        older, newest = resume.state_dirs(run_dir)[-2:]
        with open(os.path.join(newest, "buffer", "observations.npy"), "r+b") as f:
            f.seek(-5, os.SEEK_END)
            byte = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x10]))
    _, resumed = _run(script, str(tmp_path), "r", dataset_path, *extra, "--resume", compiles=True)
    if script == "main_online.py":
        assert f"Skipping damaged run state {newest} (ValueError: buffer/observations.npy has sha256" in resumed.stderr
        assert f"Resuming from {older} " in resumed.stderr
    final = 456 if script == "main.py" else 450
    name = "main" if script == "main.py" else "online"
    assert_same_run(reference_runs[name], run_dir, final)
    fresh = reference_runs["stderr"][name]
    assert assert_warm_compiles(fresh) >= 400
    assert assert_warm_compiles(resumed.stderr, fresh=fresh) >= 100


@pytest.mark.parametrize("kind", ["signal", "interrupt"])  # SIGTERM (SLURM) and SIGINT (Ctrl-C)
def test_a_signal_writes_state_mid_episode_then_resumes(tmp_path, dataset_path, reference_runs, kind):
    run_dir, result = _run("main.py", str(tmp_path), "t", dataset_path, *MAIN, "--progress=True",
                           fault=f"{kind}@online:121", expect=resume.EXIT_PREEMPTED)  # fmt: skip
    # Its log (a pipe, not a terminal) has plain progress lines (the default --progress=True): no carriage returns,
    # no escape codes, no start-up noise.
    log = result.stderr
    assert "\r" not in log and "\x1b[" not in log and "offline: 6/6 steps (100%)" in log, log[-2000:]
    assert "DISPLAY" not in log and "precision lowered" not in log
    with open(os.path.join(resume.state_dirs(run_dir)[-1], "state.json")) as f:
        meta = json.load(f)
    assert meta["format_version"] == resume.FORMAT_VERSION
    # The state is written at the signal's step, in the middle of an episode (200 steps) and of a chunk (h = 3):
    # the episode's actions are saved and replayed on resume, the rest of the chunk is kept.
    assert (meta["phase"], meta["step_in_phase"]) == ("online", 121)
    episode = meta["collector"]["episode"]
    assert len(episode["actions"]) == 121 and len(episode["queue"]) == 2
    # The run and its data then move, as a cluster user copies them off node-local scratch (signal: copied,
    # interrupt: moved); the run resumes where it now is, on the same data, and records the move.
    save, data = str(tmp_path / "elsewhere"), str(tmp_path / "data" / "cube-single-play-v0.npz")
    relocate = shutil.copytree if kind == "signal" else shutil.move
    relocate(run_dir, os.path.join(save, "g", "t"))
    os.makedirs(os.path.dirname(data))
    shutil.copy(dataset_path, data)
    run_dir, _ = _run("main.py", save, "t", data, *MAIN, "--resume")
    assert_same_run(reference_runs["main"], run_dir, 456)
    with open(os.path.join(run_dir, "flags.json")) as f:
        (move,) = json.load(f)["moves"]
    assert move["save_dir"] == {"then": str(tmp_path), "now": save} and move["dataset_path"]["now"] == data
    # A finished run is left alone, and refused for other settings (its results were not made with them).
    _, result = _run("main.py", save, "t", data, *MAIN, "--resume")
    assert "has finished" in result.stderr
    _, result = _run("main.py", save, "t", data, *MAIN, "--resume", "--agent.lr=0.001", expect=2)
    # Start-up warnings about the settings (here: intervals the tiny run never reaches) may come first; the
    # refusal is the one error line, and the last.
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: --resume: ") and "--agent.lr: 0.0003 then, 0.001 now" in error


@pytest.fixture
def small_filesystem(tmp_path):
    """A 64 MiB tmpfs (root only: skipped where it cannot be mounted), unmounted after the test."""
    with tmpfs(tmp_path / "small", "64m") as where:
        yield where


def test_a_full_disk_at_resume_is_one_line_and_the_run_resumes_once_space_returns(
    small_filesystem, dataset_path, reference_runs
):
    """Issue 29: a run killed on a disk that then fills up. Its --resume ends with one error line, leaves no
    temporary file and changes nothing; with the space back, it resumes and ends as the run never stopped."""
    save = str(small_filesystem)
    run_dir, _ = _run("main.py", save, "f", dataset_path, *MAIN, fault="kill@online:100", expect=-9)
    before = sorted(os.path.relpath(os.path.join(d, f), run_dir) for d, _, fs in os.walk(run_dir) for f in fs)
    filler = os.path.join(save, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    for size in (1 << 20, 1 << 12, 1):  # every free byte, the last block too
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError:
            pass
    os.close(fd)
    _, result = _run("main.py", save, "f", dataset_path, *MAIN, "--resume", expect=1)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith("error: no space left"), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    after = sorted(os.path.relpath(os.path.join(d, f), run_dir) for d, _, fs in os.walk(run_dir) for f in fs)
    assert not [p for p in after if ".tmp" in p] and set(after) <= set(before) | {"run.lock"}, after
    os.remove(filler)
    _run("main.py", save, "f", dataset_path, *MAIN, "--resume")
    assert_same_run(reference_runs["main"], run_dir, 456)


def test_a_run_recorded_before_eval_temperature_resumes_as_it_evaluated():
    """Runs recorded before `--eval_temperature` existed: an agent without a temperature resumes unchanged; IQL
    and ReBRAC evaluated with the collection noise (1), so the new default 0 is a change the resume names."""
    for name, before in (("acfql", 0.0), ("iql", 1.0), ("rebrac", 1.0), ("ifql", 0.0)):
        agent = {"agent_name": name}
        record = {"flags": {"seed": 0}, "agent": agent}
        assert resume.changed_settings(record, {"seed": 0, "eval_temperature": before}, agent) == []
        other = 1.0 - before
        assert resume.changed_settings(record, {"seed": 0, "eval_temperature": other}, agent) == [
            f"--eval_temperature: {before!r} then, {other!r} now"
        ]
    recorded = {"flags": {"seed": 0, "eval_temperature": 0.0}, "agent": {"agent_name": "iql"}}  # compared as usual
    assert resume.changed_settings(recorded, {"seed": 0, "eval_temperature": 0.0}, {"agent_name": "iql"}) == []


def test_a_run_recorded_before_an_agent_key_existed_resumes_at_its_default():
    """ACSAC runs recorded before `commit_margin` and `target_choice` (issue 60) resume: a key the record lacks
    counts as the agent's default, which is what the run did; another value is a change the resume names."""
    from agents import acsac

    now = acsac.get_config().to_dict()
    recorded = {k: v for k, v in now.items() if k not in ("commit_margin", "target_choice")}
    record = {"flags": {"seed": 0, "eval_temperature": 0.0}, "agent": recorded}
    flag_values = {"seed": 0, "eval_temperature": 0.0}
    assert now["commit_margin"] == 0.0 and now["target_choice"] == "max"
    assert resume.changed_settings(record, flag_values, now) == []
    assert resume.changed_settings(record, flag_values, {**now, "commit_margin": 0.5, "target_choice": "double"}) == [
        "--agent.commit_margin: 0.0 then, 0.5 now",
        "--agent.target_choice: 'max' then, 'double' now",
    ]
    # A key the record holds is compared as recorded, default or not.
    record["agent"] = {**recorded, "commit_margin": 0.25}
    assert resume.changed_settings(record, flag_values, now) == ["--agent.commit_margin: 0.25 then, 0.0 now"]
