"""The drivers' kit (runner/): error forms, start-up checks, checkpoint order, replay buffers, run states."""

import errno
import json
import logging
import os
import re
import types

import numpy as np
import pytest

import envs
from runner import checks, cli, resume, seed_group, setup
from runner.collector import make_replay_buffer
from runner.seed_group import SeedGroup
from tests.test_cli import parse
from utils import seeding
from utils.datasets import Dataset
from utils.flax_utils import load_checkpoint_metadata


def _dataset(terminals, seed=0):
    n = len(terminals)
    return Dataset.create(
        observations=np.arange(n, dtype=np.float32)[:, None],
        actions=np.zeros((n, 2), np.float32),
        rewards=-np.ones(n, np.float32),
        terminals=np.asarray(terminals, np.float32),
        masks=np.ones(n, np.float32),
        next_observations=np.arange(1, n + 1, dtype=np.float32)[:, None],
        seed=seed,
    )


# ---------------------------------------------------------------- error forms


def test_input_error_is_one_line_and_exit_2(capsys):
    def main(_):
        with cli.input_errors():
            raise FileNotFoundError("dataset missing")

    with pytest.raises(SystemExit) as e:
        cli.run_cli(main)([])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error: dataset missing\n")


def test_error_during_training_keeps_its_traceback():
    """Only input errors found during setup get the one-line form; a ValueError at step 700k does not."""

    def main(_):
        with cli.input_errors():
            pass  # setup went fine
        raise ValueError("NaN in the critic at step 700000")

    with pytest.raises(ValueError, match="step 700000"):
        cli.run_cli(main)([])


# ---------------------------------------------------------------- start-up checks


def test_trajectory_lengths():
    np.testing.assert_array_equal(checks.trajectory_lengths(np.array([0, 0, 1, 0, 1, 0, 0])), [3, 2, 2])
    np.testing.assert_array_equal(checks.trajectory_lengths(np.array([1, 1, 0, 0, 0, 1])), [1, 1, 4])


def test_dataset_without_one_window_is_an_error():
    with pytest.raises(ValueError, match="has 3 rows, fewer than --horizon_length=4"):
        checks.check_dataset_windows(_dataset([0, 0, 1]), 4)


def test_warning_when_every_trajectory_is_shorter_than_the_chunk(caplog):
    short = _dataset([0, 1, 0, 0, 1, 0, 1])  # trajectories of 2, 3, 2 rows
    with caplog.at_level(logging.WARNING):
        assert checks.check_dataset_windows(short, 4) is False
    assert "shorter than --horizon_length=4 (longest: 3 rows)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert checks.check_dataset_windows(short, 3) is True  # one trajectory holds a full window
    assert "shorter" not in caplog.text


def test_an_online_phase_that_never_updates_is_a_warning(monkeypatch, caplog):
    base = ["--env_name=cube-single-play-singletask-task1-v0", "--offline_steps=100"]
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", *base, "--online_steps=200")  # --start_training defaults to 5000
    assert "--online_steps=200 ends before the first online update (step 5000, --start_training=5000)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", *base, "--online_steps=200", "--start_training=50")
        parse(monkeypatch, "main", *base, "--online_steps=0")  # offline only: nothing to warn about
    assert "first online update" not in caplog.text


def _interval_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "never reaches" in r.getMessage()]


def test_intervals_a_phase_never_reaches_are_one_warning_line(monkeypatch, caplog):
    """The toy run of issue 27: 400 offline steps with the default intervals write no loss CSV."""
    base = ["--env_name=cube-single-play-singletask-task1-v0"]
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", *base, "--offline_steps=400", "--online_steps=0")
    assert _interval_warnings(caplog) == [
        "Intervals this run never reaches: --log_interval=5000 in the offline phase (400 steps): no loss rows; "
        "--eval_interval=100000 in the offline phase (400 steps): evaluated only at its end; "
        "--state_interval=50000 in the offline phase (400 steps): no run state before its end."
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # online logs start at the first update: 2000 < 2500, 4000 > 3000
        parse(monkeypatch, "main_online", *base, "--online_steps=3000", "--start_training=2500",
              "--log_interval=2000", "--eval_interval=1000", "--save_interval=5000", "--state_interval=0")  # fmt: skip
    assert _interval_warnings(caplog) == [
        "Intervals this run never reaches: --log_interval=2000 in the online phase (3000 steps): no loss rows; "
        "--save_interval=5000 in the online phase (3000 steps): a checkpoint only at its end."
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # every interval reached in both phases: no line
        parse(monkeypatch, "main", *base, "--offline_steps=1000", "--online_steps=1000", "--start_training=1",
              "--log_interval=100", "--eval_interval=500", "--save_interval=1000", "--state_interval=1000")  # fmt: skip
    assert _interval_warnings(caplog) == []


def test_chunk_cuts_not_shorter_than_the_chunk_are_a_warning(monkeypatch, caplog):
    base = ["--env_name=cube-single-play-singletask-task1-v0", "--horizon_length=5"]
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", *base, "--action_chunk_eval_sizes=0,1,5,7")
    assert "--action_chunk_eval_sizes=0,1,5,7: 5,7 not shorter than the policy's chunk of 5 action(s)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", *base, "--action_chunk_eval_sizes=1,4")
        parse(monkeypatch, "main", *base, "--action_chunk_eval_sizes=1", "--noagent.action_chunking")
    assert "not shorter than the policy's chunk of 1 action(s)" in caplog.text and "1,4" not in caplog.text


class _NoGL:
    def render(self):
        raise RuntimeError("an OpenGL platform library has not been loaded into this process")


def test_rendering_is_checked_at_start_up():
    with pytest.raises(ValueError, match="MUJOCO_GL=egl .* MUJOCO_GL=osmesa .* --video_episodes=0"):
        checks.check_rendering(
            envs.family("cube-single-play-singletask-task1-v0"), "cube-single-play-singletask-task1-v0", _NoGL()
        )
    with pytest.raises(ValueError, match="robomimic envs .* without a renderer"):
        checks.check_rendering(envs.family("lift-mh-low_dim"), "lift-mh-low_dim", None)


# ---------------------------------------------------------------- the loop's pieces


def _run(monkeypatch, tmp_path, *args):
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", *args)
    data = _dataset([0] * 9 + [1])
    example = data.sample(1, idxs=np.zeros(1, dtype=int))
    return setup.Run(
        cfg=cfg,
        agent=None,
        env_data=types.SimpleNamespace(eval_env=None),
        train_dataset=data,
        windows=None,
        run_dir=str(tmp_path),
        logger=None,
        action_dim=2,
        chunk_length=5,
        example=example,
    )


def test_checkpoint_is_written_before_a_failing_evaluation(monkeypatch, tmp_path):
    run = _run(monkeypatch, tmp_path, "--offline_steps=10", "--eval_interval=5", "--save_interval=5", "--eval_envs=1")

    def failing_evaluation(*args, **kwargs):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(seed_group, "evaluate_and_log", failing_evaluation)
    run.agent = {"w": np.arange(3.0)}  # any flax-serializable pytree
    with pytest.raises(RuntimeError, match="renderer crashed"):
        SeedGroup([run]).save_and_evaluate(run.agent, 10, "offline")  # what the drivers call
    assert load_checkpoint_metadata(os.path.join(tmp_path, "checkpoints", "agent_10.msgpack")) == {
        "step": 10,
        "phase": "offline",
    }


def test_online_steps_are_logged_after_the_offline_ones(monkeypatch, tmp_path):
    run = _run(monkeypatch, tmp_path, "--offline_steps=7", "--online_steps=5")
    assert seed_group.global_step(run.cfg, 3, "offline") == 3 and seed_group.global_step(run.cfg, 3, "online") == 10


@pytest.mark.parametrize("stop", [False, True])
def test_replay_buffers_use_their_own_stream_and_the_reward_flag(monkeypatch, tmp_path, stop):
    run = _run(monkeypatch, tmp_path, "--seed=3", "--buffer_size=4", f"--stop_reward_at_mask_zero={stop}")
    buffer = make_replay_buffer(run, with_offline_data=True)
    assert buffer.size == 10 and buffer.max_size == 11 and buffer.stop_reward_at_mask_zero is stop
    expected = seeding.numpy_rng(3, "replay_buffer").integers(0, 1000, 5)
    np.testing.assert_array_equal(buffer.rng.integers(0, 1000, 5), expected)
    # The offline sampler's stream is a different one.
    assert not np.array_equal(seeding.numpy_rng(3, "dataset").integers(0, 1000, 5), expected)
    empty = make_replay_buffer(run, with_offline_data=False)
    assert empty.size == 0 and empty.max_size == 4 and empty.stop_reward_at_mask_zero is stop


def test_sample_windows_reads_h_and_discount_from_the_agent_config():
    data = _dataset([0] * 9 + [1])
    batch = seed_group.sample_windows(data, {"horizon_length": 3, "discount": 0.5}, 4)
    assert batch["actions"].shape == (4, 3, 2)
    np.testing.assert_allclose(batch["rewards"][:, -1], -(1 + 0.5 + 0.25))


class _Spaces:
    def __init__(self, ob, act):
        import gymnasium as gym

        self.observation_space = gym.spaces.Box(-1, 1, ob)
        self.action_space = gym.spaces.Box(-1, 1, act)


def test_dataset_must_fit_the_env():
    data = _dataset([0] * 9 + [1])  # observations (1,), actions (2,)
    checks.check_dataset_fits_env(data, _Spaces((1,), (2,)), "env")
    with pytest.raises(ValueError, match=r"dataset x.npz: its actions have shape \(2,\) per row, but env has \(5,\)"):
        checks.check_dataset_fits_env(data, _Spaces((1,), (5,)), "env", "dataset x.npz")
    with pytest.raises(ValueError, match=r"its observations have shape \(1,\) per row, but env has \(28,\)"):
        checks.check_dataset_fits_env(data, _Spaces((28,), (2,)), "env")


@pytest.mark.parametrize(
    "args, named",
    [
        (["--buffer_size=1000000000000"], r"--buffer_size=1000000000000: this run needs about .* GiB \(1 agent"),
        (["--num_seeds=100000"], r"--num_seeds=100000 .*: this run needs about .* GiB \(200000 training"),
        (["--num_seeds=4294967296"], r"--num_seeds=4294967296 .*: this run needs about"),  # seeds 0 .. 2**32 - 1
        (["--agent.actor_hidden_dims=(100000,100000,100000)"], r"the agent's config: this run needs about"),
        # The flags of the largest part are named, not another's.
        (
            ["--agent.batch_size=1000000000"],
            r"^--agent.batch_size=1000000000 --utd_ratio=1 --horizon_length=5: .*1 batch",
        ),
        (["--utd_ratio=100000000", "--agent.batch_size=256"], r"^--agent.batch_size=256 --utd_ratio=100000000 "),
        (["--eval_envs=1000000", "--eval_episodes=1000000"], r"--eval_envs=1000000: this run needs"),
    ],
)
def test_a_run_that_cannot_fit_in_memory_is_an_error_before_it_allocates(monkeypatch, tmp_path, args, named):
    run = _run(monkeypatch, tmp_path, *args)
    example = run.train_dataset.sample(1, idxs=np.zeros(1, dtype=int))
    with pytest.raises(ValueError, match=named):
        checks.check_sizes(run.cfg, envs.family(run.cfg.env_name))
        checks.check_memory(run.cfg, envs.family(run.cfg.env_name), run.train_dataset, example)


def test_the_default_sizes_fit(monkeypatch, tmp_path):
    run = _run(monkeypatch, tmp_path, "--buffer_size=1000")
    checks.check_sizes(run.cfg, envs.family(run.cfg.env_name))
    checks.check_memory(
        run.cfg,
        envs.family(run.cfg.env_name),
        run.train_dataset,
        run.train_dataset.sample(1, idxs=np.zeros(1, dtype=int)),
    )


# ---------------------------------------------------------------- run directories are never shared


def test_same_second_runs_get_different_directories(monkeypatch, tmp_path):
    import log_utils

    class FrozenClock:  # every call is the same second
        @staticmethod
        def now():
            import datetime

            return datetime.datetime(2026, 11, 30, 12, 0, 0)

    monkeypatch.setattr(log_utils, "datetime", FrozenClock)
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_group=sweep")
    dirs = {setup.setup_run(cfg, {"agent_name": "acfql"}, {})[0] for _ in range(20)}
    assert len(dirs) == 20
    for d in dirs:
        name = os.path.basename(d)
        assert name.startswith("20261130_120000_cube-double-play-singletask-task2-v0_sd000_") and len(name) == 67
        assert os.path.isfile(os.path.join(d, "flags.json"))


def test_run_name_is_used_once(monkeypatch, tmp_path):
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=qc_h5_sd0")
    run_dir, _ = setup.setup_run(cfg, {"agent_name": "acfql"}, {})
    assert run_dir == os.path.join(str(tmp_path), "Debug", "qc_h5_sd0")
    with open(os.path.join(run_dir, "eval.csv"), "w") as f:
        f.write("step,success\n4,0.5\n")
    with pytest.raises(ValueError, match="exists already"):
        setup.setup_run(cfg, {"agent_name": "acfql"}, {})
    assert open(os.path.join(run_dir, "eval.csv")).read() == "step,success\n4,0.5\n"  # untouched


@pytest.mark.parametrize("name", ["a/b", "..", " "])
def test_run_name_must_be_a_plain_name(monkeypatch, capsys, name):
    from tests.test_cli import error_of

    assert "--run_name" in error_of(monkeypatch, capsys, "main", f"--run_name={name}")


# ---------------------------------------------------------------- run states


def test_damaged_newest_state_falls_back_to_the_previous_one(tmp_path):
    agent = {"w": np.arange(3.0)}
    meta = {"phase": "offline", "step_in_phase": 1, "dataset_rng": {}, "csv_rows": {}}
    first = resume.write_state(str(tmp_path), {**meta, "global_step": 3}, agent, keep=3)
    second = resume.write_state(str(tmp_path), {**meta, "global_step": 6}, agent, keep=3)

    def latest():
        state = resume.read_latest_usable_state(str(tmp_path), {"w": np.zeros(3)}, None)
        return state and state["path"]

    assert latest() == second
    with open(os.path.join(second, "state.json"), "w") as f:
        f.write('{"global_step": 6, "pha')  # truncated
    assert latest() == first
    os.makedirs(os.path.join(tmp_path, "state", "step_000000000009"))  # a state without COMPLETE
    assert latest() == first
    for step in (12, 15, 18):
        resume.write_state(str(tmp_path), {**meta, "global_step": step}, agent, keep=2)
    kept = [os.path.basename(p) for p in resume.state_dirs(str(tmp_path))]
    assert kept == ["step_000000000015", "step_000000000018"]


def test_truncate_csvs_drops_rows_after_the_state(tmp_path):
    (tmp_path / "eval.csv").write_text("step,success\n3,0.0\n6,1.0\n9,0.5\n")
    (tmp_path / "online_agent.csv").write_text("step,x\n9,1\n")  # created after the state
    (tmp_path / "my_notes.csv").write_text("a,b\n1,2\n")  # the user's own: never touched
    assert resume.csv_row_counts(str(tmp_path)) == {"eval.csv": 3, "online_agent.csv": 1}
    counts = {"eval.csv": 2}
    resume.truncate_csvs(str(tmp_path), counts)
    assert (tmp_path / "eval.csv").read_text() == "step,success\n3,0.0\n6,1.0\n"
    assert not (tmp_path / "online_agent.csv").exists()
    assert (tmp_path / "my_notes.csv").read_text() == "a,b\n1,2\n"


def test_a_second_signal_while_writing_does_not_corrupt_the_state(tmp_path, monkeypatch):
    import signal

    from utils.datasets import ReplayBuffer

    flag = resume.PreemptionFlag().install()
    try:
        buffer = ReplayBuffer.create_from_initial_dataset(dict(_dataset([0] * 9 + [1])), size=20)
        real_save = np.save

        def save_then_signal(*args, **kwargs):  # SIGTERM (and then SIGUSR1) arrive in the middle of the write
            real_save(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGUSR1)

        monkeypatch.setattr(resume.np, "save", save_then_signal)
        path = resume.write_state(str(tmp_path), {"global_step": 5, "phase": "online"}, {"w": np.ones(2)}, buffer)
        assert flag.raised and flag.signum == signal.SIGUSR1
        assert resume.state_dirs(str(tmp_path))[-1] == path
        restored = resume.read_state(path, {"w": np.zeros(2)})
        assert restored["format_version"] == resume.FORMAT_VERSION
        np.testing.assert_array_equal(restored["buffer_arrays"]["observations"], buffer["observations"])
        assert restored["buffer"] == {"pointer": 10, "size": 10, "max_size": 20, "rows": 10}
    finally:
        for signum, previous in flag._previous.items():
            signal.signal(signum, previous)


def _started(monkeypatch, tmp_path, *args):
    """A run directory as a start leaves it (flags.json), for `resume.check_runs`."""
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=r", *args)
    run_dir, _ = setup.setup_run(
        cfg, dict(cfg.agent), {"datasets": [{"path": "/d.npz", "size_bytes": 3, "sha256": "ab"}]}
    )
    return cfg, run_dir


def _resume(monkeypatch, tmp_path, *args):
    return parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=r", "--resume", *args)


def test_resume_refuses_other_settings_agent_keys_included(monkeypatch, tmp_path):
    _started(monkeypatch, tmp_path, "--agent.lr=0.0003")
    resume.release_run_dirs()  # as the start above would at its end
    same = parse(monkeypatch, "main", f"--save_dir={tmp_path}/", "--run_name=r", "--resume", "--agent.lr=0.0003")
    assert resume.check_runs([same])[0]["agent"]["lr"] == 0.0003  # `dir/` is `dir`
    other = _resume(monkeypatch, tmp_path, "--agent.lr=0.001")
    with pytest.raises(ValueError, match=r"--agent\.lr: 0\.0003 then, 0\.001 now"):
        resume.check_runs([other])
    with pytest.raises(ValueError, match="--seed: 0 then, 1 now"):
        resume.check_runs([_resume(monkeypatch, tmp_path, "--seed=1")])


def test_a_finished_run_is_refused_for_other_settings_and_left_alone_for_the_same(monkeypatch, tmp_path):
    _, run_dir = _started(monkeypatch, tmp_path)
    resume.release_run_dirs()
    (tmp_path / "Debug" / "r" / "DONE.json").write_text("{}")
    with pytest.raises(ValueError, match="--online_steps: 1000000 then, 5 now"):
        resume.check_runs([_resume(monkeypatch, tmp_path, "--online_steps=5")])
    with pytest.raises(resume.RunFinished):
        resume.check_runs([_resume(monkeypatch, tmp_path)])


def test_a_resume_that_finds_no_run_is_an_error_unless_asked_to_start(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match=r"there is no run .*Debug/r .*--start_if_missing"):
        resume.check_runs([_resume(monkeypatch, tmp_path)])
    assert resume.check_runs([_resume(monkeypatch, tmp_path, "--start_if_missing")]) == [None]
    # A seed group resumed without --num_seeds: its members are named.
    for seed in (0, 1):
        os.makedirs(tmp_path / "Debug" / f"g_sd{seed}")
    with pytest.raises(ValueError, match=r"g_sd0, g_sd1 exist: resume the seed group with --num_seeds=2"):
        resume.check_runs([parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=g", "--resume")])
    # ... and "start if missing" does not start a single run of the group's name beside it.
    group = ["main", f"--save_dir={tmp_path}", "--run_name=g", "--resume", "--start_if_missing"]
    with pytest.raises(ValueError, match=r"g_sd0, g_sd1 exist: resume the seed group with --num_seeds=2"):
        resume.check_runs([parse(monkeypatch, *group)])
    # A seed added to a group that started cannot join its states: said as such, nothing created.
    for seed in (0, 1):
        (tmp_path / "Debug" / f"g_sd{seed}" / "flags.json").write_text('{"flags": {}}')
        os.makedirs(tmp_path / "Debug" / f"g_sd{seed}" / "state" / "step_000000000004")
        (tmp_path / "Debug" / f"g_sd{seed}" / "state" / "step_000000000004" / "COMPLETE").write_text("")
    configs = setup.seed_configs(parse(monkeypatch, *group, "--num_seeds=3"))
    with pytest.raises(ValueError, match=r"the seed group has runs g_sd0, g_sd1 but not g_sd2: a seed was added"):
        resume.check_runs(configs)
    assert not (tmp_path / "Debug" / "g_sd2").exists()
    # A group that never wrote a state (its start failed after one seed's directory was made) starts afresh.
    argv = ["main", f"--save_dir={tmp_path}", "--run_name=h", "--resume", "--start_if_missing", "--num_seeds=2"]
    configs = setup.seed_configs(parse(monkeypatch, *argv))
    os.makedirs(tmp_path / "Debug" / "h_sd0")
    record = {"flags": configs[0].flag_values, "agent": configs[0].agent}
    (tmp_path / "Debug" / "h_sd0" / "flags.json").write_text(json.dumps(record))
    assert resume.check_runs(configs) == [json.loads(json.dumps(record)), None]
    resume.release_run_dirs()
    # A single-seed run resumed as a seed group: pointed at the run, not at --start_if_missing.
    os.makedirs(tmp_path / "Debug" / "one")
    (tmp_path / "Debug" / "one" / "flags.json").write_text('{"flags": {}}')
    for extra in ([], ["--start_if_missing"]):
        argv = ["main", f"--save_dir={tmp_path}", "--run_name=one", "--resume", "--num_seeds=2", *extra]
        with pytest.raises(ValueError, match=r"Debug/one exists as a single-seed run: resume it without --num_seeds"):
            resume.check_runs(setup.seed_configs(parse(monkeypatch, *argv)))


def test_a_seed_group_is_created_whole_or_not_at_all(monkeypatch, tmp_path):
    os.makedirs(tmp_path / "Debug" / "g_sd1")  # an earlier run of seed 1 alone
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=g", "--num_seeds=2")
    with pytest.raises(cli.InputError, match=r"--run_name=g: .*Debug/g_sd1 exists already"):
        setup.setup_runs(cfg)
    assert sorted(os.listdir(tmp_path / "Debug")) == ["g_sd1"]


def test_start_if_missing_and_accept_changed_data_need_resume(monkeypatch, capsys):
    from tests.test_cli import error_of

    assert "--start_if_missing applies to --resume only" in error_of(monkeypatch, capsys, "main", "--start_if_missing")
    assert "--accept_changed_data applies" in error_of(monkeypatch, capsys, "main", "--accept_changed_data")
    assert "--accept_changed_family applies" in error_of(monkeypatch, capsys, "main", "--accept_changed_family")


def test_a_damaged_flags_json_is_named(monkeypatch, tmp_path):
    _, run_dir = _started(monkeypatch, tmp_path)
    resume.release_run_dirs()
    with open(os.path.join(run_dir, "flags.json"), "w") as f:
        f.write('{"flags": {"se')
    with pytest.raises(ValueError, match=r"Debug/r/flags.json is damaged"):
        resume.check_runs([_resume(monkeypatch, tmp_path)])
    # Valid JSON with parts of the wrong shape: the file is named, not a traceback from the comparison.
    for key, value, want in [
        ("agent", '"x"', "a JSON object"),
        ("datasets", "5", "a JSON list of objects"),
        ("datasets", "[1]", "a JSON list of objects"),
        ("agent_source", "[]", "a JSON object"),
        ("family_source", "[]", "a JSON object"),
        ("family_source_history", "{}", "a JSON list of objects"),
    ]:
        with open(os.path.join(run_dir, "flags.json"), "w") as f:
            f.write(f'{{"flags": {{}}, "{key}": {value}}}')
        with pytest.raises(ValueError, match=rf"flags.json is damaged \('{key}' is .*, not {want}\)"):
            resume.check_runs([_resume(monkeypatch, tmp_path)])


def test_changed_data_is_refused_unless_accepted_and_then_both_records_are_kept(tmp_path):
    old = {"datasets": [{"path": "/d.npz", "size_bytes": 3, "sha256": "ab", "role": "train", "source": "generated"}]}
    same = [{"path": "/d.npz", "size_bytes": 3, "sha256": "ab", "role": "train", "source": "official"}]
    assert resume.check_datasets("r", old, same, accept_changed=False) == []
    regenerated = [{"path": "/d.npz", "size_bytes": 3, "sha256": "cd", "role": "train"}]
    with pytest.raises(ValueError, match=r"/d.npz: sha256 changed.*--accept_changed_data"):
        resume.check_datasets("r", old, regenerated, accept_changed=False)
    shards = [*same, {"path": "/e.npz", "size_bytes": 4, "sha256": "ef", "role": "train"}]
    with pytest.raises(ValueError, match="1 data file\\(s\\) then, 2 now"):
        resume.check_datasets("r", old, shards, accept_changed=False)
    assert resume.check_datasets("r", old, regenerated, accept_changed=True) == [old["datasets"]]
    # The val file is not trained on: it may come and go.
    assert resume.check_datasets("r", old, [*same, {"path": "/v.npz", "role": "val"}], accept_changed=False) == []


def test_every_run_holds_its_directory(monkeypatch, tmp_path):
    """A fresh run locks its directory at once: a --resume of it from another process is refused."""
    _started(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match="in use by another process"):
        resume.check_runs([_resume(monkeypatch, tmp_path)])
    resume.release_run_dirs()
    assert resume.check_runs([_resume(monkeypatch, tmp_path)])[0] is not None
    resume.release_run_dirs()


def test_rows_lost_since_the_state_are_refused(tmp_path):
    (tmp_path / "eval.csv").write_text("step,success\n3,0.0\n")
    with pytest.raises(ValueError, match=r"eval.csv has 1 rows, but the run state recorded 2"):
        resume.check_csv_rows(str(tmp_path), {"eval.csv": 2})
    with pytest.raises(ValueError, match=r"env.csv is missing, but the run state recorded 4"):
        resume.check_csv_rows(str(tmp_path), {"eval.csv": 1, "env.csv": 4})
    resume.check_csv_rows(str(tmp_path), {"eval.csv": 1})  # more rows than recorded are cut, not refused
    # A row torn by a full disk (no newline), cut short or without a step is broken, not a row.
    for torn, number in [("3,0.0\r\n6,0.", 2), ("3,0.0\n6\n", 2), ("x,0.0\n6,1.0\n", 1)]:
        (tmp_path / "eval.csv").write_text("step,success\n" + torn)
        with pytest.raises(ValueError, match=rf"eval.csv row {number} \(of the 2 the run state recorded\) is broken"):
            resume.check_csv_rows(str(tmp_path), {"eval.csv": 2})
    (tmp_path / "eval.csv").write_text("step,success\r\n3,0.0\r\n6,\r\n9,0.")  # as CsvLogger writes; 3rd torn
    resume.check_csv_rows(str(tmp_path), {"eval.csv": 2})


def test_json_records_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    import log_utils

    path = str(tmp_path / "flags.json")
    log_utils.write_json(path, {"a": 1})

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_utils.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        log_utils.write_json(path, {"a": 2})
    assert json.loads(open(path).read()) == {"a": 1} and os.listdir(tmp_path) == ["flags.json"]


def test_records_get_the_mode_open_would_give(tmp_path):
    """Not the owner-only mode of a temporary file: others on the cluster read the results."""
    from utils.files import atomic_write

    old = os.umask(0o022)
    try:
        atomic_write(str(tmp_path / "a.json"), "{}")
        assert os.stat(tmp_path / "a.json").st_mode & 0o777 == 0o644
        os.umask(0o002)
        atomic_write(str(tmp_path / "b.csv"), b"step\n")
        assert os.stat(tmp_path / "b.csv").st_mode & 0o777 == 0o664
        os.chmod(tmp_path / "b.csv", 0o640)  # a replaced file keeps its mode
        atomic_write(str(tmp_path / "b.csv"), b"step\n1\n")
        assert os.stat(tmp_path / "b.csv").st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def _two_online_states(run_dir):
    """Two complete online states (global steps 3 and 6) of `run_dir`: `(dataset, older, newest)`."""
    from utils.datasets import ReplayBuffer

    data = _dataset([0] * 9 + [1])
    buffer = ReplayBuffer.create_from_initial_dataset(dict(data), size=20)
    meta = {"phase": "online", "step_in_phase": 1, "dataset_rng": {}, "csv_rows": {}, "collector": {}}
    older = resume.write_state(run_dir, {**meta, "global_step": 3}, {"w": np.ones(2)}, buffer)
    newest = resume.write_state(run_dir, {**meta, "global_step": 6}, {"w": np.ones(2)}, buffer)
    return data, older, newest


def test_a_damaged_complete_state_falls_back_and_the_run_dir_is_locked(tmp_path):
    data, older, newest = _two_online_states(str(tmp_path))
    os.remove(os.path.join(newest, "buffer", "rewards.npy"))  # marked COMPLETE, but damaged
    got = resume.read_latest_usable_state(str(tmp_path), {"w": np.zeros(2)}, data)
    assert got["path"] == older and got["global_step"] == 3
    # A text file in place of an array (in a state written before checksums, which would name the change):
    # named as such, never with numpy's advice to load it unsafely.
    _as_before_checksums(newest)
    with open(os.path.join(newest, "buffer", "rewards.npy"), "w") as f:
        f.write("0.0,1.0\n")
    with pytest.raises(ValueError, match=r"buffer/rewards.npy is not a .npy array file") as e:
        resume.read_state(newest, {"w": np.zeros(2)})
    assert "pickle" not in str(e.value)
    assert resume.read_latest_usable_state(str(tmp_path), {"w": np.zeros(2)}, data)["path"] == older
    resume.lock_run_dir(str(tmp_path))
    with pytest.raises(ValueError, match="in use by another process"):
        resume.lock_run_dir(str(tmp_path))
    resume.release_run_dir(str(tmp_path))
    resume.lock_run_dir(str(tmp_path))  # free again
    resume.release_run_dir(str(tmp_path))


def _as_before_checksums(state):
    """Make `state` as a qc before run-state checksums wrote it: no SHA256SUMS, no `checksums` key."""
    os.remove(os.path.join(state, resume.CHECKSUMS))
    with open(os.path.join(state, "state.json")) as f:
        meta = json.load(f)
    del meta["checksums"]
    with open(os.path.join(state, "state.json"), "w") as f:
        json.dump(meta, f)


def _flip_last_byte(path):
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x01]))


def _nan_into(path):
    array = np.load(path)
    array[2] = np.nan
    np.save(path, array)


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda s: _flip_last_byte(os.path.join(s, "buffer", "rewards.npy")), r"buffer/rewards.npy has sha256 .*says"),
        (lambda s: _nan_into(os.path.join(s, "buffer", "observations.npy")), r"buffer/observations.npy has sha256"),
        (lambda s: _flip_last_byte(os.path.join(s, "agent.msgpack")), r"agent.msgpack has sha256"),
        (lambda s: os.remove(os.path.join(s, resume.CHECKSUMS)), r"SHA256SUMS is missing"),
        (lambda s: np.save(os.path.join(s, "buffer", "extra.npy"), np.zeros(3)), r"buffer/extra.npy is not in"),
    ],
    ids=["flipped-byte-buffer", "nan-in-buffer", "flipped-byte-agent", "sums-deleted", "file-added"],
)
def test_a_state_changed_since_written_is_passed_over_with_a_line(tmp_path, caplog, damage, why):
    """Issue 59 item 5b: each state carries the sha256 of its files; a damaged newest state gives one warning
    line naming the file, and the one before it is resumed; with none left the run is refused."""
    cfg = types.SimpleNamespace(save_dir=str(tmp_path), run_group="g", run_name="r")
    run_dir = resume.run_dir_of(cfg)
    data, older, newest = _two_online_states(run_dir)
    with open(os.path.join(newest, resume.CHECKSUMS)) as f:
        listed = sorted(line.split("  ")[1] for line in f.read().splitlines())
    assert listed == ["agent.msgpack"] + [f"buffer/{k}.npy" for k in sorted(data.keys())] + ["state.json"]
    damage(newest)
    with caplog.at_level(logging.WARNING):
        got = resume.read_latest_usable_state(run_dir, {"w": np.zeros(2)}, data)
    assert got["path"] == older and got["global_step"] == 3
    assert re.search(r"Skipping damaged run state .*step_000000000006 \(ValueError: " + why, caplog.text)
    assert resume.group_resume_states([cfg], [{"w": np.zeros(2)}], [data])[0]["path"] == older
    damage(older)
    with pytest.raises(ValueError, match=r"no run state can be read back .*3, 6"):
        resume.group_resume_states([cfg], [{"w": np.zeros(2)}], [data])
    assert resume.state_steps(run_dir) == [3, 6]  # nothing deleted


def test_a_state_written_before_checksums_still_resumes_and_sha256sum_can_check_one(tmp_path):
    import shutil
    import subprocess

    data, older, newest = _two_online_states(tmp_path)
    if shutil.which("sha256sum"):  # the file is in the standard format
        subprocess.run(["sha256sum", "--quiet", "-c", resume.CHECKSUMS], cwd=newest, check=True)
    _as_before_checksums(newest)
    assert resume.read_latest_usable_state(str(tmp_path), {"w": np.zeros(2)}, data)["path"] == newest


def _seed_states(tmp_path, steps_per_seed):
    """Run directories g/r_sd<i> with complete states at the given steps; their configs, agents and datasets."""
    data = _dataset([0] * 9 + [1])
    meta = {"phase": "offline", "step_in_phase": 1, "dataset_rng": {}, "csv_rows": {}}
    configs = []
    for seed, steps in enumerate(steps_per_seed):
        cfg = types.SimpleNamespace(save_dir=str(tmp_path), run_group="g", run_name=f"r_sd{seed}")
        os.makedirs(resume.run_dir_of(cfg))
        for step in steps:
            resume.write_state(resume.run_dir_of(cfg), {**meta, "global_step": step}, {"w": np.ones(2)}, keep=None)
        configs.append(cfg)
    n = len(steps_per_seed)
    return configs, [{"w": np.zeros(2)}] * n, [data] * n


def test_a_group_whose_seeds_have_no_step_in_common_is_refused_and_kept(tmp_path):
    # Seed 0 was resumed alone after the group was killed: its states are past seed 1's.
    configs, templates, datasets = _seed_states(tmp_path, [[130, 150], [70, 90]])
    with pytest.raises(
        ValueError, match=r"no step in common .*r_sd0: 130, 150; .*r_sd1: 70, 90.*Resume each seed alone"
    ):
        resume.group_resume_states(configs, templates, datasets)
    assert [resume.state_steps(resume.run_dir_of(c)) for c in configs] == [[130, 150], [70, 90]]  # nothing deleted
    # With a step in common the group continues from it.
    configs, templates, datasets = _seed_states(tmp_path / "b", [[70, 90, 130], [70, 90]])
    assert [m["global_step"] for m in resume.group_resume_states(configs, templates, datasets)] == [90, 90]


def test_a_run_whose_every_state_is_damaged_is_refused_not_started_over(tmp_path):
    configs, templates, datasets = _seed_states(tmp_path, [[3, 6]])
    for step in (3, 6):
        os.remove(os.path.join(resume.state_path(resume.run_dir_of(configs[0]), step), "agent.msgpack"))
    with pytest.raises(ValueError, match=r"no run state can be read back .*3, 6.*delete the state/ directory"):
        resume.group_resume_states(configs, templates, datasets)
    assert resume.state_steps(resume.run_dir_of(configs[0])) == [3, 6]
    # A run killed before its first state starts fresh, as before.
    configs, templates, datasets = _seed_states(tmp_path / "b", [[], []])
    assert resume.group_resume_states(configs, templates, datasets) == [None, None]


@pytest.mark.parametrize("seeds", [1, 2])
def test_a_state_in_another_format_is_refused_not_skipped(tmp_path, seeds):
    configs, templates, datasets = _seed_states(tmp_path, [[3, 6]] * seeds)
    newest = resume.state_path(resume.run_dir_of(configs[-1]), 6)
    with open(os.path.join(newest, "state.json")) as f:
        meta = json.load(f)
    assert meta["format_version"] == resume.FORMAT_VERSION == 1
    with open(os.path.join(newest, "state.json"), "w") as f:
        json.dump({**meta, "format_version": 2}, f)  # written by a later qc: the older state 3 must not be used
    with pytest.raises(resume.StateFormatError, match=r"step_000000000006 is in format 2, and this code reads format"):
        resume.group_resume_states(configs, templates, datasets)
    assert [resume.state_steps(resume.run_dir_of(c)) for c in configs] == [[3, 6]] * seeds  # nothing deleted
    # A state.json without the key was not written by any qc: damaged, so the state before it is used.
    del meta["format_version"]
    with open(os.path.join(newest, "state.json"), "w") as f:
        json.dump(meta, f)
    assert [m["global_step"] for m in resume.group_resume_states(configs, templates, datasets)] == [3] * seeds


@pytest.mark.parametrize("added", [0, 7, 25])  # none, some, and past a wrap of the 20-row buffer
def test_a_state_holds_the_buffers_rows_not_its_capacity(tmp_path, added):
    from utils.datasets import ReplayBuffer

    buffer = ReplayBuffer.create_from_initial_dataset(dict(_dataset([0] * 9 + [1])), size=20)
    for i in range(added):
        buffer.add_transition({k: np.full_like(v[0], 100 + i) for k, v in buffer.items()})
    path = resume.write_state(str(tmp_path), {"global_step": 1, "phase": "online"}, {"w": np.ones(2)}, buffer)
    stored = np.load(os.path.join(path, "buffer", "observations.npy"))
    assert len(stored) == min(10 + added, 20)
    restored = resume.read_state(path, {"w": np.zeros(2)})
    for key in buffer:
        np.testing.assert_array_equal(restored["buffer_arrays"][key], buffer[key])  # capacity and zeros included
        assert restored["buffer_arrays"][key].dtype == buffer[key].dtype
    assert restored["buffer"]["max_size"] == 20 and restored["buffer"]["size"] == min(10 + added, 20)


def test_an_unwritable_save_dir_is_one_line(monkeypatch, tmp_path, capsys):
    """/sys refuses new directories even to root: a read-only --save_dir is named before anything runs."""
    cfg = parse(monkeypatch, "main", "--save_dir=/sys/qc_runs")
    with pytest.raises(ValueError, match=r"cannot write the run directory in /sys/qc_runs/Debug \(Operation not"):
        setup.setup_run(cfg, dict(cfg.agent), {})
    resumed = parse(monkeypatch, "main", "--save_dir=/sys/qc_runs", "--run_name=r", "--resume", "--start_if_missing")
    with pytest.raises(ValueError, match=r"--resume: cannot write to /sys/qc_runs/Debug/r"):
        resume.check_runs([resumed])


def test_wandb_online_without_a_login_is_refused_before_any_directory(monkeypatch, tmp_path, capsys):
    from tests.test_cli import error_of

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    err = error_of(monkeypatch, capsys, "main", f"--save_dir={tmp_path}", "--wandb_mode=online")
    assert "--wandb_mode=online needs a wandb login" in err and not os.listdir(tmp_path)


def test_a_wandb_that_cannot_start_leaves_no_run_directory(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("wandb: network unreachable\nmore lines")

    monkeypatch.setattr(setup, "setup_wandb", broken)
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", "--run_name=w", "--wandb_mode=offline")
    with pytest.raises(ValueError, match=r"--wandb_mode=offline: wandb could not start \(RuntimeError: wandb: netw"):
        setup.setup_run(cfg, dict(cfg.agent), {})
    assert not os.path.exists(tmp_path / "Debug" / "w")  # the name stays free for the next try
    assert str(tmp_path / "Debug" / "w") not in resume._LOCKS  # and no lock is held on it


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", args[0] if args and isinstance(args[0], str) else None)


def test_a_full_disk_leaves_no_temporary_file_and_the_last_state_whole(tmp_path, monkeypatch, capsys):
    """Issue 29: a write that meets a full disk (states, the CSV truncation of a resume) leaves the files as they
    were and no temporary one; the driver says so in one line (the same for a quota, EDQUOT)."""
    data = _dataset([0] * 9 + [1])
    meta = {"phase": "offline", "step_in_phase": 1, "dataset_rng": {}, "csv_rows": {}}
    older = resume.write_state(str(tmp_path), {**meta, "global_step": 3}, {"w": np.ones(2)})
    with monkeypatch.context() as m:
        m.setattr(resume, "save_agent", _no_space)
        with pytest.raises(OSError):
            resume.write_state(str(tmp_path), {**meta, "global_step": 6}, {"w": np.ones(2)})
    assert os.listdir(tmp_path / "state") == [os.path.basename(older)]
    assert resume.read_latest_usable_state(str(tmp_path), {"w": np.zeros(2)}, data)["global_step"] == 3
    # A resume's truncation of the CSV files on a full disk: the file stays as it was, no `.tmp` beside it.
    csv_path = tmp_path / "eval.csv"
    csv_path.write_text("step,success\n1,0.0\n2,0.5\n")
    with monkeypatch.context() as m:
        m.setattr(os, "fdopen", _no_space)
        with pytest.raises(OSError):
            resume.truncate_csvs(str(tmp_path), {"eval.csv": 1})
    assert csv_path.read_text() == "step,success\n1,0.0\n2,0.5\n"
    assert sorted(os.listdir(tmp_path)) == ["eval.csv", "state"]
    # The driver's one line, for ENOSPC and EDQUOT alike; other OS errors keep their traceback.
    for code in (errno.ENOSPC, errno.EDQUOT):

        def main(_, code=code):
            raise OSError(code, os.strerror(code), str(csv_path))

        with pytest.raises(SystemExit) as e:
            cli.run_cli(main)([])
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 1 and line.startswith(f"error: no space left writing {csv_path} (")
        assert line.endswith("free space, then continue it with --resume (the same flags).")
    with pytest.raises(PermissionError):
        cli.run_cli(lambda _: _no_permission())([])


def _no_permission():
    raise PermissionError(errno.EACCES, "Permission denied")
