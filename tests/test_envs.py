"""Env names, default tasks, success timing, the EpisodeMonitor wrapper, warnings, metadata and shard listing.

No dataset generation here: the timing test writes its own three-row trajectory.
"""

import dataclasses
import importlib.metadata
import logging

import gymnasium
import numpy as np
import pytest

import envs
from envs import common, robomimic
from envs import ogbench as ogb
from envs.common import EpisodeMonitor
from envs.ogbench import OGBENCH_INFO_FILTERS, OGBenchName, parse_ogbench_name
from runner.config import warn_if_dense_on_sparse_domain
from utils import seeding


@pytest.mark.parametrize(
    "name, expected, dataset, env_id",
    [
        (
            "cube-double-play-singletask-task2-v0",
            OGBenchName("cube-double", "play", 2),
            "cube-double-play-v0",
            "cube-double-singletask-task2-v0",
        ),
        ("scene-play-singletask-v0", OGBenchName("scene", "play", None), "scene-play-v0", "scene-singletask-v0"),
        (
            "puzzle-3x3-noisy-singletask-task5-v0",
            OGBenchName("puzzle-3x3", "noisy", 5),
            "puzzle-3x3-noisy-v0",
            "puzzle-3x3-singletask-task5-v0",
        ),
        (
            "cube-quadruple-play-v0",
            OGBenchName("cube-quadruple", "play"),
            "cube-quadruple-play-v0",
            "cube-quadruple-singletask-v0",
        ),
    ],
)
def test_parse_names(name, expected, dataset, env_id):
    parsed = parse_ogbench_name(name)
    assert parsed == expected and parsed.dataset_name == dataset and parsed.env_id == env_id
    assert gymnasium.spec(parsed.env_id) is not None  # registered by ogbench
    assert gymnasium.spec(parsed.collection_env_id) is not None


def test_which_names_are_training_envs():
    for task in range(1, 6):
        for domain in ogb.DOMAINS:
            assert not ogb.training_name(f"{domain}-play-singletask-task{task}-v0", goal_conditioned=False).oraclerep
    assert ogb.training_name("cube-triple-noisy-singletask-v0", goal_conditioned=False).task_id is None
    for name in [
        "cube-double-play-v0",
        "cube-double-v0",
        "antmaze-large-navigate-singletask-v0",
        "cube-double-stitch-singletask-task1-v0",
        "lift-mh-low_dim",
        "puzzle-4x4-play-singletask-v0",
    ]:
        with pytest.raises(ValueError, match="Not a supported OGBench single-task env name"):
            ogb.training_name(name, goal_conditioned=False)
    assert parse_ogbench_name("visual-cube-double-play-v0") is None
    with pytest.raises(ValueError, match="task id must be in 1..5"):
        parse_ogbench_name("cube-double-play-singletask-task6-v0")


# ogbench's default task per domain (`set_tasks` of cube_env.py, scene_env.py, puzzle_env.py).
DEFAULT_TASKS = {"cube-single": 2, "cube-double": 2, "cube-triple": 2, "cube-quadruple": 2, "scene": 2, "puzzle-3x3": 4}


def test_default_task_of_every_domain_is_the_one_that_runs():
    assert set(DEFAULT_TASKS) == set(ogb.DOMAINS)
    for domain, expected in DEFAULT_TASKS.items():
        name = f"{domain}-play-singletask-v0"
        assert gymnasium.spec(ogb.parse_ogbench_name(name).env_id).kwargs["reward_task_id"] == 0
        assert ogb.run_metadata(name)["task_id"] == expected, domain
    env = ogb.make_env("puzzle-3x3-play-singletask-v0")  # the one whose default is not 2
    env.reset(seed=0)
    assert env.unwrapped.cur_task_id == 4
    env.close()
    assert ogb.run_metadata("puzzle-3x3-noisy-singletask-task1-v0")["task_id"] == 1
    assert ogb.run_metadata("scene-play-singletask-task5-v0")["task_id"] == 5


@pytest.mark.parametrize("timing", ["post", "pre"])
def test_metadata_and_env_record_the_timing_that_runs(timing):
    env = ogb.make_env("cube-double-play-singletask-v0", success_timing=timing)
    assert env.unwrapped._success_timing == timing
    assert env.spec.max_episode_steps == 500
    env.close()
    meta = {
        "ogbench_version": importlib.metadata.version("ogbench"),
        "success_timing": timing,
        "reward_timing": f"{timing}-step",
        "task_id": 2,
    }
    assert ogb.run_metadata("cube-double-play-singletask-v0", timing) == {**meta, "dataset_success_timing": "pre"}
    other = {"post": "pre", "pre": "post"}[timing]  # the offline relabelling timing is recorded on its own
    assert ogb.run_metadata("scene-play-singletask-task2-v0", timing, other) == {
        **meta,
        "dataset_success_timing": other,
    }
    assert "success_timing" not in robomimic.run_metadata("lift-mh-low_dim")  # robomimic: no setting


def test_defaults_are_post_step_and_bad_timings_are_refused(tmp_path):
    env = ogb.make_env("cube-single-play-singletask-task1-v0")
    assert env.unwrapped._success_timing == "post"  # the paper's (ogbench 1.1.2), not ogbench 1.2's 'pre'
    env.close()
    assert ogb.run_metadata("cube-single-play-singletask-task1-v0")["reward_timing"] == "post-step"
    message = "--success_timing must be one of 'post', 'pre', got 'after'"
    name = "cube-single-play-singletask-task1-v0"
    for call in (
        lambda: ogb.make_env(name, "after"),
        lambda: ogb.run_metadata(name, "after"),
        lambda: envs.make_env_and_datasets(name, success_timing="after"),
        lambda: ogb.run_metadata(name, "post", "after"),
    ):
        with pytest.raises(ValueError, match=message):
            call()


def _cube_success(qpos, goal):
    """cube-single: the task is solved when the cube is within 4 cm of the goal."""
    return bool(np.linalg.norm(np.asarray(qpos)[14:17] - goal) <= 0.04)


@pytest.mark.parametrize("timing", ["post", "pre"])
def test_env_and_offline_relabelling_share_the_success_timing(timing, tmp_path):
    """A cube thrown through its goal: s0 outside, s1 inside, s2 outside the 4 cm tolerance.

    Each step crosses the threshold, so a step returns a different reward and success depending on
    whether they are those of the state before or after it. The loaded dataset of this very trajectory
    must give each transition the reward and mask the env returned for it.
    """
    env_name = "cube-single-play-singletask-task1-v0"
    env = ogb.make_env(env_name, success_timing=timing)
    ob, _ = env.reset(seed=0)
    u = env.unwrapped
    goal = u._data.mocap_pos[0].copy()  # task 1: (0.425, -0.1, 0.02)
    qpos, qvel = u._data.qpos.copy(), u._data.qvel.copy()
    qpos[14:21] = [*(goal + [-0.05, 0.0, 0.01]), 1.0, 0.0, 0.0, 0.0]  # 5.1 cm from the goal, upright
    qvel[14:20] = [1.0, 0.0, 0.5, 0.0, 0.0, 0.0]  # flying along +x and up, far below the arm
    u.set_state(qpos, qvel)
    ob = u.compute_observation()
    assert not u._success  # the flag a 'pre' step reports for s0 (reset left it False; s0 is no success)

    rows = {k: [] for k in ("observations", "actions", "terminals", "qpos", "qvel")}
    online = []
    for _ in range(2):
        action = np.zeros(5)
        next_ob, reward, terminated, _, info = env.step(action)
        online.append((reward, bool(info["success"]), terminated))
        for k, v in zip(rows, (ob, action, False, info["prev_qpos"], info["prev_qvel"]), strict=True):
            rows[k].append(v)
        ob = next_ob
    for k, v in zip(rows, (ob, np.zeros(5), True, info["qpos"], info["qvel"]), strict=True):
        rows[k].append(v)  # s2: the trajectory's last row
    env.close()

    successes = [_cube_success(q, goal) for q in rows["qpos"]]
    assert successes == [False, True, False]
    state_of_step = [1, 2] if timing == "post" else [0, 1]  # the state whose reward step t returns
    expected = [(0.0 if successes[i] else -1.0, successes[i], successes[i]) for i in state_of_step]
    assert online == expected  # terminated = success (terminate_at_goal)

    path = str(tmp_path / "cube-single-play-v0.npz")
    np.savez(path, **{k: np.asarray(v, dtype=bool if k == "terminals" else np.float32) for k, v in rows.items()})
    data = ogb.load_ogbench_dataset(path, env_name, success_timing=timing)
    np.testing.assert_array_equal(data["rewards"], [r for r, _, _ in online])
    np.testing.assert_array_equal(data["masks"], [1.0 - s for _, s, _ in online])
    np.testing.assert_array_equal(data["terminals"], [0.0, 1.0])  # trajectory ends, whatever the timing
    shard = ogb.load_file(path, env_name, envs.DataOptions(sparse=True, dataset_success_timing=timing))
    np.testing.assert_array_equal(shard["rewards"], data["rewards"])  # already 0/-1


class _ProbeEnv(gymnasium.Env):
    """3-step episodes with rewards -1, -1, 0 and a noisy info dict."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"privileged/block_0_pos": 1, "goal": 2}

    def step(self, action):
        self.t += 1
        info = {"success": float(self.t == 3), "proprio/joint_pos": 0, "privileged/x": 1, "qpos": 3}
        return np.zeros(1, np.float32), (0.0 if self.t == 3 else -1.0), self.t == 3, False, info


def test_episode_monitor_statistics_and_filters():
    env = EpisodeMonitor(_ProbeEnv(), filter_regexes=OGBENCH_INFO_FILTERS)
    for _ in range(2):  # statistics restart at every reset
        _, info = env.reset()
        assert info == {"goal": 2}
        for _ in range(2):
            _, _, terminated, truncated, info = env.step(np.zeros(1))
            assert "episode" not in info and not terminated
        _, _, terminated, _, info = env.step(np.zeros(1))
        assert terminated and info["success"] == 1.0
        assert set(info) == {"success", "qpos", "episode"}
        assert info["episode"]["return"] == -2.0 and info["episode"]["length"] == 3
        assert info["episode"]["duration"] >= 0.0
    unfiltered = EpisodeMonitor(_ProbeEnv())
    unfiltered.reset()
    assert "proprio/joint_pos" in unfiltered.step(np.zeros(1))[-1]


def test_episode_monitor_on_ogbench_truncation():
    env = EpisodeMonitor(
        ogb.make_env("cube-single-play-singletask-task1-v0", max_episode_steps=4),
        filter_regexes=OGBENCH_INFO_FILTERS,
    )
    env.reset(seed=0)
    rewards = []
    for _ in range(4):
        _, r, terminated, truncated, info = env.step(np.zeros(5))
        rewards.append(r)
    assert truncated and info["episode"]["length"] == 4 and info["episode"]["return"] == sum(rewards)
    assert "success" in info and not any(k.startswith(("privileged", "proprio")) for k in info)
    env.close()


def test_dense_reward_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert warn_if_dense_on_sparse_domain("scene-play-singletask-task2-v0", sparse=False)
        assert warn_if_dense_on_sparse_domain("puzzle-3x3-play-singletask-task4-v0", sparse=False)
    assert (
        len(caplog.records) == 2
        and "the paper trains scene tasks with sparse rewards" in caplog.records[0].getMessage()
    )
    assert "the paper trains puzzle-3x3 tasks with sparse rewards" in caplog.records[1].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert not warn_if_dense_on_sparse_domain("scene-play-singletask-task2-v0", sparse=True)
        assert not warn_if_dense_on_sparse_domain("cube-double-play-singletask-task2-v0", False)
    assert not caplog.records


def test_list_dataset_shards(tmp_path):
    names = [
        "cube-quadruple-play-v0-001.npz",
        "cube-quadruple-play-v0-000.npz",
        "cube-quadruple-play-v0-000-val.npz",
        "cube-quadruple-play-100m-v0-002.npz",
        "cube-double-play-v0.npz",
        "notes.txt",
    ]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    shards = common.list_dataset_shards(str(tmp_path), "cube-quadruple-play-v0")
    assert [p.split("/")[-1] for p in shards] == [
        "cube-quadruple-play-100m-v0-002.npz",
        "cube-quadruple-play-v0-000.npz",
        "cube-quadruple-play-v0-001.npz",
    ]
    assert len(common.list_dataset_shards(str(tmp_path))) == 4
    with pytest.raises(FileNotFoundError, match="No dataset shards scene-play"):
        common.list_dataset_shards(str(tmp_path), "scene-play-v0")
    with pytest.raises(FileNotFoundError, match="directory not found"):
        common.list_dataset_shards(str(tmp_path / "nope"))


def test_val_path_and_default_path(monkeypatch, tmp_path):
    assert common.val_path_for("/a/b/cube-single-play-v0.npz") == "/a/b/cube-single-play-v0-val.npz"
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = f"{tmp_path}/.ogbench/data/scene-play-v0.npz"
    assert ogb.default_dataset_path("scene-play-v0") == expected
    assert ogb.default_dataset_path("scene-play-v0", "/x") == "/x/scene-play-v0.npz"


def test_result_defaults():
    out = envs.EnvAndDatasets(env="e", built_eval_env="v", train_dataset={"a": 1}, val_dataset=None)
    assert (out.env, out.eval_env, out.train_dataset, out.val_dataset) == ("e", "v", {"a": 1}, None)
    assert out.next_shard is None and out.reward_fn(-2.0) == -2.0 and out.metadata == {}


def test_training_env_relabels_the_data_and_is_then_in_an_eager_builds_state(tmp_path, monkeypatch):
    """`make_env_and_datasets` builds the OGBench training env on a thread while the file is read, relabels the data
    in it (no private env is built) and then resets it from the seed: the rewards are a private env's, and the env is
    in the state an eager build and `reset(seed)` leave (same state, same next steps, same np_random stream)."""
    name = "cube-single-play-singletask-task1-v0"
    probe = ogb.make_env(name)
    ob, _ = probe.reset(seed=0)
    qpos, qvel = probe.unwrapped._data.qpos.copy(), probe.unwrapped._data.qvel.copy()
    solved = qpos.copy()
    solved[14:17] = probe.unwrapped._data.mocap_pos[0]  # the cube on task 1's target: reward 0, mask 0
    probe.close()
    path = str(tmp_path / "cube-single-play-v0.npz")
    np.savez(path, observations=np.stack([ob, ob, ob]).astype(np.float32), actions=np.zeros((3, 5), np.float32),
             terminals=np.array([False, False, True]), qpos=np.stack([qpos, solved, qpos]),
             qvel=np.stack([qvel, qvel, qvel]))  # fmt: skip
    private = ogb.load_ogbench_dataset(path, name)
    np.testing.assert_array_equal(private["rewards"], [-1.0, 0.0])  # pre timing: the rows' own states

    def refuse(env_id):
        raise AssertionError(f"a private env was built for {env_id}")

    monkeypatch.setattr(ogb, "_relabel_env", refuse)
    out = envs.make_env_and_datasets(name, dataset_path=path, seed=3)
    for key in ("rewards", "masks"):
        np.testing.assert_array_equal(out.train_dataset[key], private[key])
    threaded = out.env
    eager = ogb.make_eval_env(name)
    eager.reset(seed=seeding.env_seed(3, "env"))
    np.testing.assert_array_equal(threaded.unwrapped._data.qpos, eager.unwrapped._data.qpos)
    for action in (np.full(5, 0.3), np.full(5, -0.7)):
        np.testing.assert_array_equal(threaded.step(action)[0], eager.step(action)[0])
    np.testing.assert_array_equal(threaded.reset()[0], eager.reset()[0])  # the same np_random stream after it
    threaded.close()
    eager.close()


def test_eval_env_is_built_on_first_read_and_reset_once_with_its_seed():
    calls = []

    class Env:
        def reset(self, seed=None):
            calls.append(("reset", seed))

    def make():
        calls.append("make")
        return Env()

    out = envs.EnvAndDatasets(env="e", train_dataset={}, val_dataset=None, make_eval_env=make, eval_env_seed=7)
    assert calls == []
    env = out.eval_env
    assert isinstance(env, Env) and out.eval_env is env and calls == ["make", ("reset", 7)]


def test_names_are_matched_whole_in_ascii_digits_and_task01_is_task1_everywhere():
    assert envs.parse("cube-double-play-singletask-task2-v0").short == "cube-double-t2"
    typed, plain = (envs.parse(f"cube-double-play-singletask-task{t}-v0") for t in ("01", "1"))
    # Every field but the name as typed: one task, one run name in a sweep (short), one curve in the plots.
    assert dataclasses.replace(typed, name=plain.name) == plain and typed.short == "cube-double-t1"
    assert ogb.training_name(typed.name).env_id == "cube-double-singletask-task1-v0"  # the env that runs
    assert envs.family(typed).with_task(typed, 3) == "cube-double-play-singletask-task3-v0"
    for bad in (
        "cube-single-play-singletask-task1-v0\n",
        "lift-mh-low_dim\n",
        "cube-double-play-singletask-task\uff11-v0",
    ):
        with pytest.raises(envs.UnknownEnvName, match="Unknown environment"):
            envs.parse(bad)


def test_the_env_block_is_read_only_when_whole_and_of_the_runs_name():
    name = "cube-double-play-singletask-task2-v0"
    good = envs.parse(name).record()
    assert envs.record_of({"flags": {"env_name": name}, "env": good}) is good
    assert envs.record_of({"flags": {"env_name": name}}) == good  # a run recorded before the block
    for damaged in ({}, {"family": "ogbench", "name": name}, {**good, "paper_domain": None}, {**good, "task": "two"},
                    {**good, "name": "cube-single-play-singletask-task1-v0"}, "ogbench"):  # fmt: skip
        assert envs.record_of({"flags": {"env_name": name}, "env": damaged}) == good, damaged
    with pytest.raises(envs.UnknownEnvName):
        envs.record_of({"flags": {"env_name": "foo-v0"}})
    with pytest.raises(ValueError, match="no flags.env_name"):
        envs.record_of({"env": good})
