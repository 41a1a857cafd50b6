"""The local OGBench dataset generator and loading its files (short episodes; nothing touches ~/.ogbench).

Reward timing checked here: with `success_timing='pre'` (ogbench 1.2's registered default)
`env.step(a_t)` returns the reward and success of the state s_t it starts from, with 'post' (ours, the
paper's) those of s_{t+1}. The relabelled `rewards[t]`/`masks[t]` of the loaded data come from the stored
simulator state of s_t or s_{t+1} accordingly, so we put the env in that state (`set_state` + the env's
own `pre_step`/`post_step` refresh, as `initialize_episode` does) and compare with what the env computes
there. tests/test_envs.py checks the same end to end on a real two-step trajectory.
"""

import concurrent.futures.process
import filecmp
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile

import numpy as np
import ogbench.utils
import pytest
from ogbench.relabel_utils import relabel_dataset

from envs import common, make_env_and_datasets
from envs import generate_dataset as gd
from envs import ogbench as ogb
from envs.common import sparse_reward_transform
from envs.generate_dataset import generate_dataset
from envs.ogbench import generator_command
from tests.driver_runs import ROOT

STEPS = 50  # rows per generated episode
CUBE_ENV = "cube-single-play-singletask-task1-v0"
PUZZLE_ENV = "puzzle-3x3-play-singletask-task4-v0"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """ogbench's download code must never be reached."""

    def fail(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(ogbench.utils, "download_datasets", fail)
    monkeypatch.setattr(urllib.request, "urlopen", fail)


def _generate(directory, name="cube-single-play-v0", num_episodes=2, seed=0, **kwargs):
    path = os.path.join(directory, f"{name}.npz")
    generate_dataset(
        name, num_episodes=num_episodes, seed=seed, save_path=path, max_episode_steps=STEPS, progress=False, **kwargs
    )
    return path


@pytest.fixture(scope="module")
def cube_file(tmp_path_factory):
    return _generate(str(tmp_path_factory.mktemp("cube")))


@pytest.fixture(scope="module")
def puzzle_file(tmp_path_factory):
    return _generate(str(tmp_path_factory.mktemp("puzzle")), "puzzle-3x3-play-v0", num_episodes=1)


def _stored(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# ---- the generator ------------------------------------------------------------------------------


def test_generated_file_keys_dtypes_shapes_and_terminals(cube_file):
    d = _stored(cube_file)
    assert sorted(d) == ["actions", "generator_metadata", "observations", "qpos", "qvel", "terminals"]
    meta = json.loads(str(d["generator_metadata"][()]))  # a 0-d unicode array: no pickle needed
    assert d["generator_metadata"].shape == () and d["generator_metadata"].dtype.kind == "U"
    assert meta["seed"] == 0 and meta["num_episodes"] == 2 and meta["split"] == "train"
    assert meta["dataset_type"] == "play" and meta["max_episode_steps"] == STEPS
    assert meta["ogbench_version"] == importlib.metadata.version("ogbench")
    val_meta = json.loads(str(_stored(common.val_path_for(cube_file))["generator_metadata"][()]))
    assert val_meta == {**meta, "split": "val", "num_episodes": 1}
    n = 2 * STEPS
    assert d["observations"].shape == (n, 28) and d["observations"].dtype == np.float32
    assert d["actions"].shape == (n, 5) and d["actions"].dtype == np.float32
    assert d["qpos"].shape == (n, 21) and d["qpos"].dtype == np.float32
    assert d["qvel"].shape == (n, 20) and d["qvel"].dtype == np.float32
    assert d["terminals"].shape == (n,) and d["terminals"].dtype == bool
    np.testing.assert_array_equal(np.flatnonzero(d["terminals"]), [STEPS - 1, 2 * STEPS - 1])
    assert np.all(np.abs(d["actions"]) <= 1.0)
    # Each episode starts from a fresh reset: the cube moves between rows only within an episode.
    assert not np.allclose(d["qpos"][0, 14:17], d["qpos"][STEPS, 14:17])


def test_val_split_has_the_right_episode_count(cube_file, tmp_path):
    val = _stored(common.val_path_for(cube_file))
    assert len(val["terminals"]) == STEPS  # max(1, 2 // 10) = 1 episode
    np.testing.assert_array_equal(np.flatnonzero(val["terminals"]), [STEPS - 1])
    path = _generate(str(tmp_path), num_episodes=1, num_val_episodes=3)
    assert np.flatnonzero(_stored(common.val_path_for(path))["terminals"]).tolist() == [49, 99, 149]


def test_button_domains_store_button_states(puzzle_file):
    d = _stored(puzzle_file)
    assert d["button_states"].shape == (STEPS, 9) and d["button_states"].dtype == np.int64
    assert set(np.unique(d["button_states"])) <= {0, 1}
    assert d["qpos"].shape == (STEPS, 23)


def test_same_seed_gives_identical_bytes_other_seed_differs(cube_file, tmp_path):
    again = _generate(str(tmp_path / "again"))
    val_path_for = common.val_path_for
    for a, b in [(cube_file, again), (val_path_for(cube_file), val_path_for(again))]:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    other = _stored(_generate(str(tmp_path / "other"), seed=1))
    assert not np.allclose(other["observations"], _stored(cube_file)["observations"])


def test_generation_leaves_global_numpy_state_alone(tmp_path):
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    _generate(str(tmp_path), num_episodes=1)
    assert np.random.rand() == expected


def test_generator_refuses_to_overwrite_and_checks_names(cube_file, tmp_path):
    with pytest.raises(FileExistsError, match="exists"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path=cube_file, max_episode_steps=STEPS)
    with pytest.raises(ValueError, match="names a 'play' dataset"):
        generate_dataset("cube-single-play-v0", num_episodes=1, dataset_type="noisy", save_path=str(tmp_path / "x.npz"))
    with pytest.raises(ValueError, match="Cannot generate"):
        generate_dataset("antmaze-large-navigate-v0", num_episodes=1, save_path=str(tmp_path / "x.npz"))
    with pytest.raises(ValueError, match=r"must end in \.npz"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path=str(tmp_path / "x.h5"))
    # Where no file can be written, before any episode: a file on the way, a directory, a read-only place.
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match=r"notes.txt is a file, not a directory"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path=str(tmp_path / "notes.txt" / "d" / "x.npz"))
    (tmp_path / "y.npz").mkdir()
    with pytest.raises(ValueError, match=r"y.npz is a directory"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path=str(tmp_path / "y.npz"))
    with pytest.raises(ValueError, match=r"cannot write /sys/x.npz: /sys does not take files"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path="/sys/x.npz")


# ---- worker processes (--num_workers) --------------------------------------------------------------
# Since GENERATOR_VERSION 2 every episode draws from its own streams, derived from (seed, episode index)
# (`episode_streams`), so the files cannot depend on how episodes are split across processes. (Version 1
# drew all episodes from one sequential stream; no test here pinned its values, so none had to change.)


def _files_equal(a, b):
    return filecmp.cmp(a, b, shallow=False) and filecmp.cmp(
        common.val_path_for(a), common.val_path_for(b), shallow=False
    )


# noisy cube draws from all three streams of an episode (our Generator: noise level, random actions, action
# noise; the env's; the global legacy RNG in the Markov oracles' resets), play scene from the env's and the
# legacy one (plan-oracle noise) with four oracles, play cube-octuple from all three (p_stack ~ U(0, 0.35) from
# our Generator). (cube-single play never draws from our Generator.)
@pytest.mark.parametrize("name", ["cube-single-noisy-v0", "scene-play-v0", "cube-octuple-play-v0"])
def test_num_workers_give_byte_identical_files(name, tmp_path):
    one = _generate(str(tmp_path / "w1"), name)  # 2 train + 1 val episodes of STEPS rows, seed 0
    for w in (2, 3):
        many = _generate(str(tmp_path / f"w{w}"), name, num_workers=w)
        # Byte for byte: arrays, the metadata (which holds no num_workers) and the zip container.
        assert _files_equal(one, many), w
    meta = json.loads(str(_stored(one)["generator_metadata"][()]))
    assert meta["generator_version"] == gd.GENERATOR_VERSION == 2 and "num_workers" not in meta


def test_episode_streams_are_spawned_per_index_and_episodes_ignore_history():
    children = np.random.SeedSequence(11).spawn(4)
    for i, child in enumerate(children):
        env_seed, legacy_seed, rng = gd.episode_streams(11, i)
        env_ss, legacy_ss, rng_ss = child.spawn(3)
        assert env_seed == int(env_ss.generate_state(1)[0]) and legacy_seed == int(legacy_ss.generate_state(1)[0])
        assert rng.bit_generator.state == np.random.default_rng(rng_ss).bit_generator.state
    assert len({gd.episode_streams(11, i)[0] for i in range(50)}) == 50
    assert gd.episode_streams(11, 0)[0] != gd.episode_streams(12, 0)[0]

    # Episode 2 is the same whether its env made episodes 0 and 1 before or nothing (a fresh worker).
    settings = gd._Settings(
        name=gd.resolve_dataset_name("cube-single-play-v0"),
        seed=11,
        max_episode_steps=STEPS,
        noise=0.1,
        noise_smoothing=0.5,
        min_norm=0.4,
        p_random_action=0.0,
    )
    in_sequence, fresh = gd._EpisodeMaker(settings), gd._EpisodeMaker(settings)
    state = np.random.get_state()
    try:
        first = [in_sequence.episode(i)[0] for i in range(3)]
        alone = fresh.episode(2)[0]
    finally:
        np.random.set_state(state)
        in_sequence.close()
        fresh.close()
    for k in first[2]:
        np.testing.assert_array_equal(first[2][k], alone[k], err_msg=k)
    assert first[2]["qpos"].shape == (STEPS, 21) and first[2]["qpos"].dtype == np.float32
    assert not np.array_equal(first[1]["observations"], first[2]["observations"])


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_num_workers_must_be_a_positive_integer(bad, tmp_path):
    with pytest.raises(ValueError, match=r"--num_workers=.* must be an integer >= 1"):
        generate_dataset("cube-single-play-v0", num_episodes=1, save_path=str(tmp_path / "x.npz"), num_workers=bad)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"num_episodes": 0}, "--num_episodes=0 must be >= 1"),
        ({"num_episodes": -3}, "--num_episodes=-3 must be >= 1"),
        ({"num_val_episodes": 0}, "--num_val_episodes=0 must be >= 1"),
        ({"max_episode_steps": 1}, "--max_episode_steps=1 must be >= 2"),
        ({"seed": -1}, r"--seed=-1 must be in \[0, 2\*\*32\)"),
        ({"noise": -0.1}, "--noise=-0.1 must be a finite number >= 0"),
        ({"noise": float("inf")}, "--noise=inf must be a finite number >= 0"),
        ({"noise": float("nan")}, "--noise=nan must be a finite number >= 0"),
        ({"noise_smoothing": -1.0}, "--noise_smoothing=-1.0 must be a finite number >= 0"),
        ({"min_norm": float("nan")}, "--min_norm=nan must be a finite number >= 0"),
        ({"min_norm": -5.0}, "--min_norm=-5.0 must be a finite number >= 0"),
        ({"p_random_action": 1.5}, r"--p_random_action=1.5 must be in \[0, 1\]"),
    ],
)
def test_bad_settings_are_refused_before_any_episode(settings, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        generate_dataset("cube-single-play-v0", **{"num_episodes": 1, **settings}, save_path=str(tmp_path / "x.npz"))
    assert not os.listdir(tmp_path)


def _raise_at_two(message, i):
    """Run in a spawned worker (pickled by reference): fails on index 2."""
    if i == 2:
        raise ValueError(f"{message} at {i}")
    return i * 10


def _die_at_one(_, i):
    """Run in a spawned worker: the process dies without a Python exception (like a segfault or OOM kill)."""
    if i == 1:
        os._exit(7)
    return i


@pytest.fixture
def hang_guard():
    """Fail (instead of hanging) if the test body takes more than 60 s."""

    def on_alarm(*_):
        raise TimeoutError("worker pool hung")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_worker_failures_surface_in_the_parent(hang_guard):
    with pytest.raises(ValueError, match="boom at 2") as e:
        list(gd._map_in_processes(_raise_at_two, "boom", range(5), 2))
    assert "episode index 2" in "".join(e.value.__notes__)
    assert "_raise_at_two" in str(e.value.__cause__)  # the worker's traceback
    with pytest.raises(concurrent.futures.process.BrokenProcessPool) as e:
        list(gd._map_in_processes(_die_at_one, None, range(4), 2))
    assert "generate_dataset worker process" in "".join(e.value.__notes__)


def test_command_line_num_workers(cube_file, tmp_path, hang_guard):
    """`python -m envs.generate_dataset --num_workers=5` (workers unpickle `__main__` functions) matches one process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = str(tmp_path / "cli.npz")
    args = ["--env_name=cube-single-play-v0", "--num_episodes=2", "--seed=0", f"--max_episode_steps={STEPS}"]
    cmd = [sys.executable, "-m", "envs.generate_dataset", *args, f"--save_path={path}", "--num_workers=5"]
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}  # as on a login node: GLFW probes for X11
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(3 worker(s))" in out.stdout  # no more processes than the 3 episodes
    # No start-up noise from this process or its workers (utils/startup.py).
    for noise in ("DISPLAY", "OpenGL backend", "MuJoCo library version", "precision lowered"):
        assert noise not in out.stderr, out.stderr
    assert _files_equal(path, cube_file)  # the module fixture: the same settings in this process
    bad = subprocess.run([*cmd[:-1], "--num_workers=0"], cwd=root, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "num_workers" in bad.stderr


def test_generator_command():
    cmd = generator_command(CUBE_ENV, save_path="/d/x.npz")
    assert cmd == (
        "python -m envs.generate_dataset --env_name=cube-single-play-v0 --num_episodes=1000 "
        "--seed=0 --save_path=/d/x.npz"
    )
    assert "--env_name=cube-quadruple-noisy-v0 --num_episodes=5000" in generator_command(
        "cube-quadruple-noisy-singletask-v0"
    )


# ---- loading ------------------------------------------------------------------------------------


def test_loaded_transitions_shift_clip_and_relabel(cube_file):
    out = make_env_and_datasets(CUBE_ENV, dataset_path=cube_file, load_val=True)
    train, val = out.train_dataset, out.val_dataset
    stored = _stored(cube_file)
    assert sorted(train) == ["actions", "masks", "next_observations", "observations", "rewards", "terminals"]
    assert all(v.dtype == np.float32 for v in train.values())
    n = 2 * (STEPS - 1)  # the last state of each trajectory is no transition source
    assert all(len(v) == n for v in train.values())
    assert len(val["observations"]) == STEPS - 1
    # Rows 0..48 and 50..98 of the file; next observations are the following stored rows.
    keep = np.r_[0 : STEPS - 1, STEPS : 2 * STEPS - 1]
    np.testing.assert_array_equal(train["observations"], stored["observations"][keep])
    np.testing.assert_array_equal(train["next_observations"], stored["observations"][keep + 1])
    within = train["terminals"][:-1] == 0
    np.testing.assert_array_equal(train["next_observations"][:-1][within], train["observations"][1:][within])
    np.testing.assert_array_equal(np.flatnonzero(train["terminals"]), [STEPS - 2, n - 1])
    eps = 1e-5
    assert train["actions"].min() >= -1 + eps and train["actions"].max() <= 1 - eps
    np.testing.assert_allclose(train["actions"], np.clip(stored["actions"][keep], -1 + eps, 1 - eps))
    # cube-single: reward 0 when the cube is within 4 cm of the task goal, else -1.
    assert set(np.unique(train["rewards"])) <= {-1.0, 0.0}
    np.testing.assert_array_equal(train["masks"], -train["rewards"])  # mask 0 exactly on success
    out.env.close()
    out.eval_env.close()


def test_loader_matches_ogbench_reference_loader(puzzle_file):
    # ogbench's loader relabels from s_t: our 'pre' timing.
    ours = ogb.load_ogbench_dataset(puzzle_file, PUZZLE_ENV, action_clip_eps=None, success_timing="pre")
    ref = ogbench.utils.load_dataset(puzzle_file, compact_dataset=False, add_info=True)
    env_id = ogb.parse_ogbench_name(PUZZLE_ENV).env_id
    relabel_dataset(env_id, ogb.make_env(PUZZLE_ENV), ref)
    for k in ours:
        np.testing.assert_array_equal(ours[k], ref[k], err_msg=k)
    assert len(np.unique(ours["rewards"])) > 1  # button rewards are informative (-9..0)

    # 'post': everything the same except rewards/masks, which are those of the next stored row.
    post = ogb.load_ogbench_dataset(puzzle_file, PUZZLE_ENV, action_clip_eps=None, success_timing="post")
    stored = _stored(puzzle_file)
    keep = np.flatnonzero(~stored["terminals"])
    nxt = {"qpos": stored["qpos"][keep + 1], "button_states": stored["button_states"][keep + 1]}
    relabel_dataset(env_id, ogb.make_env(PUZZLE_ENV), nxt)
    for k in post:
        np.testing.assert_array_equal(post[k], nxt[k] if k in ("rewards", "masks") else ours[k], err_msg=k)
    np.testing.assert_array_equal(post["rewards"][:-1], ours["rewards"][1:])  # one trajectory: a shift by one
    assert not np.array_equal(post["rewards"], ours["rewards"])


@pytest.mark.parametrize("timing", ["post", "pre"])
@pytest.mark.parametrize("env_name, file_fixture", [(CUBE_ENV, "cube_file"), (PUZZLE_ENV, "puzzle_file")])
def test_relabelled_rewards_match_what_the_env_reports(env_name, file_fixture, timing, request, tmp_path):
    path = request.getfixturevalue(file_fixture)
    name = ogb.parse_ogbench_name(env_name)
    env = ogb.make_env(env_name, success_timing=timing)
    env.reset(seed=0)
    u = env.unwrapped
    # Put every third row in the task's goal state, so success states are compared too.
    stored = _stored(path)
    if name.has_button_states:
        stored["button_states"][::3] = u._target_button_states
    else:
        stored["qpos"][::3, 14:17] = u._data.mocap_pos[0]
    path = str(tmp_path / "with_successes.npz")
    np.savez(path, **stored)
    data = ogb.load_ogbench_dataset(path, env_name, success_timing=timing)
    assert 0.0 in data["masks"] and 1.0 in data["masks"]
    assert len(np.unique(data["rewards"])) > (2 if name.has_button_states else 1)
    rows = np.flatnonzero(~stored["terminals"])  # the stored row of s_t for each transition t
    rows = rows + 1 if timing == "post" else rows  # the row of the state whose reward step(a_t) returns

    def put(row):
        qpos, qvel = stored["qpos"][row].astype(np.float64), stored["qvel"][row].astype(np.float64)
        if name.has_button_states:
            u.set_state(qpos, qvel, stored["button_states"][row].copy())
        else:
            u.set_state(qpos, qvel)
        u.pre_step()
        u.post_step()  # refresh the env's success flag for the state it was put in

    for t in range(0, len(data["rewards"]), 4):
        put(rows[t])
        if timing == "pre":  # step(a_t) reports the state it starts from
            _, reward, terminated, _, info = env.step(data["actions"][t])
            success = info["success"]
        else:  # step(a_t) reports, after `post_step`, the state it reached: the one `put` set up
            reward, success, terminated = u.compute_reward(), u._success, u.terminate_episode()
        assert reward == data["rewards"][t], t
        assert float(success) == 1.0 - data["masks"][t] == float(terminated), t
    env.close()


def test_sparse_rewards_and_proportion(cube_file):
    dense = ogb.load_ogbench_dataset(cube_file, CUBE_ENV)
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"dataset_proportion must be in \(0, 1\]"):
            make_env_and_datasets(CUBE_ENV, dataset_path=cube_file, dataset_proportion=bad)
    out = make_env_and_datasets(CUBE_ENV, dataset_path=cube_file, sparse=True, dataset_proportion=0.25, load_val=True)
    assert out.reward_fn is sparse_reward_transform and common.dense_reward(-3.0) == -3.0
    train = out.train_dataset
    n = int(2 * (STEPS - 1) * 0.25)  # the first quarter of the rows
    assert all(len(v) == n for v in train.values())
    np.testing.assert_array_equal(train["rewards"], sparse_reward_transform(dense["rewards"][:n]))
    for k in ("observations", "actions", "next_observations", "masks"):
        np.testing.assert_array_equal(train[k], dense[k][:n], err_msg=k)
    np.testing.assert_array_equal(train["terminals"][:-1], dense["terminals"][: n - 1])
    assert train["terminals"][-1] == 1.0  # the cut ends a trajectory
    assert len(out.val_dataset["rewards"]) == STEPS - 1  # the val split is never cut
    assert set(np.unique(out.val_dataset["rewards"])) <= {-1.0, 0.0}
    out.env.close()
    out.eval_env.close()


def test_default_dir_dataset_dir_and_shards(cube_file, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(FileNotFoundError) as e:
        make_env_and_datasets(CUBE_ENV)
    expected = str(tmp_path / "home" / ".ogbench" / "data" / "cube-single-play-v0.npz")
    assert expected in str(e.value) and f"--save_path={expected}" in str(e.value)
    assert "  python -m envs.download_datasets --env_names=cube-single-play-v0\n" in str(e.value)  # default dir
    with pytest.raises(FileNotFoundError) as e:
        make_env_and_datasets("cube-quadruple-play-singletask-task1-v0")
    assert "python -m envs.download_datasets --env_names=cube-quadruple-play-100m-v0" in str(e.value)

    # A dataset_dir in the official layout: the val file is loaded only when asked for and present.
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(cube_file, flat / "cube-single-play-v0.npz")
    train_path = str(flat / "cube-single-play-v0.npz")
    assert ogb.resolve_dataset_paths(CUBE_ENV, dataset_dir=str(flat)) == [train_path]
    shutil.copy(common.val_path_for(cube_file), flat / "cube-single-play-v0-val.npz")
    assert common.existing_val_path([train_path]) == str(flat / "cube-single-play-v0-val.npz")
    assert make_env_and_datasets(CUBE_ENV, dataset_dir=str(flat)).val_dataset is None
    assert len(make_env_and_datasets(CUBE_ENV, dataset_dir=str(flat), load_val=True).val_dataset["rewards"]) == (
        STEPS - 1
    )

    # A directory of shards (other datasets' files ignored) is cycled by next_shard.
    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copy(cube_file, shards / "cube-single-play-v0-000.npz")
    shutil.copy(common.val_path_for(cube_file), shards / "cube-single-play-v0-001.npz")
    shutil.copy(common.val_path_for(cube_file), shards / "cube-single-play-v0-000-val.npz")
    shutil.copy(cube_file, shards / "cube-double-play-v0.npz")
    with pytest.raises(ValueError, match="sharded"):
        make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards), dataset_proportion=0.5)
    out = make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards), sparse=True, load_val=True)
    assert [os.path.basename(p) for p in out.next_shard.paths] == [
        "cube-single-play-v0-000.npz",
        "cube-single-play-v0-001.npz",
    ]
    first = out.train_dataset
    assert len(first["rewards"]) == 2 * (STEPS - 1) and len(out.val_dataset["rewards"]) == STEPS - 1
    second = out.next_shard()
    assert out.next_shard.index == 1 and len(second["rewards"]) == STEPS - 1
    assert set(np.unique(second["rewards"])) <= {-1.0, 0.0}  # same processing (sparse) as the first
    np.testing.assert_array_equal(out.next_shard()["observations"], first["observations"])  # wraps around
    out.env.close()
    out.eval_env.close()


def test_a_run_needs_only_the_training_file(cube_file, tmp_path, monkeypatch):
    """The -val file is optional everywhere: default dir, dataset_dir, dataset_path and shards."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    data_dir = tmp_path / "home" / ".ogbench" / "data"
    data_dir.mkdir(parents=True)
    shutil.copy(cube_file, data_dir / "cube-single-play-v0.npz")  # and no cube-single-play-v0-val.npz
    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copy(cube_file, shards / "cube-single-play-v0-000.npz")
    shutil.copy(cube_file, shards / "cube-single-play-v0-001.npz")
    train_path = str(data_dir / "cube-single-play-v0.npz")
    shard_paths = [str(shards / f"cube-single-play-v0-00{i}.npz") for i in (0, 1)]
    for kwargs, paths in [
        ({}, [train_path]),
        ({"dataset_dir": str(data_dir)}, [train_path]),
        ({"dataset_path": train_path}, [train_path]),
        ({"dataset_dir": str(shards)}, shard_paths),
    ]:
        assert ogb.resolve_dataset_paths(CUBE_ENV, **kwargs) == paths, kwargs
        assert common.existing_val_path(paths) is None
    # A path that exists but is no file says what it is, not "not found".
    fifo = str(tmp_path / "pipe.npz")
    os.mkfifo(fifo)
    for path, kind in [("/dev/null", "a character device"), (fifo, "a named pipe"), (str(shards), "a directory")]:
        with pytest.raises(ValueError, match=rf"--dataset_path={path} is {kind}"):
            ogb.resolve_dataset_paths(CUBE_ENV, dataset_path=path)
    out = make_env_and_datasets(CUBE_ENV, load_val=True)  # asks for the val file, runs without it
    assert out.val_dataset is None and len(out.train_dataset["rewards"]) == 2 * (STEPS - 1)
    out.env.close()
    out.eval_env.close()


# ---- errors -------------------------------------------------------------------------------------


def test_missing_file_names_download_then_generator_command(tmp_path):
    missing = str(tmp_path / "nothere.npz")
    with pytest.raises(FileNotFoundError, match="nothere.npz") as e:
        make_env_and_datasets(CUBE_ENV, dataset_path=missing)
    message = str(e.value)
    download = f"python -m envs.download_datasets --env_names=cube-single-play-v0 --dataset_dir={tmp_path}"
    generate = (
        f"python -m envs.generate_dataset --env_name=cube-single-play-v0 --num_episodes=1000 "
        f"--seed=0 --save_path={missing}"
    )
    assert download in message and generate in message
    assert message.index(download) < message.index(generate)  # the official data first: it reproduces the paper
    assert f"pass --dataset_path={tmp_path}/cube-single-play-v0.npz" in message  # the name it downloads to
    assert "To reproduce the paper" in message and "Without network" in message
    with pytest.raises(FileNotFoundError, match=r"python -m envs\.generate_dataset --env_name=scene-play-v0"):
        make_env_and_datasets("scene-play-singletask-task2-v0", dataset_dir=str(tmp_path))


def _write_broken(tmp_path, cube_file, edit):
    d = _stored(cube_file)
    edit(d)
    path = str(tmp_path / "broken.npz")
    np.savez(path, **d)
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("qpos"), r"lacks key\(s\) \['qpos'\]"),
        (lambda d: d["observations"].__setitem__((3, 0), np.nan), r"'observations' has non-finite .* at row 3"),
        (lambda d: d["qvel"].__setitem__((60, 2), np.inf), r"'qvel' has non-finite .* first at row 60"),
        (lambda d: d.__setitem__("actions", d["actions"][:-1]), "mismatched lengths"),
        (lambda d: d.__setitem__("terminals", d["terminals"][:-1].copy()), "mismatched lengths"),
        (lambda d: d["terminals"].__setitem__(-1, False), "last row is not a trajectory end"),
    ],
)
def test_malformed_files_raise_value_error(cube_file, tmp_path, edit, message):
    path = _write_broken(tmp_path, cube_file, edit)
    with pytest.raises(ValueError, match=message) as e:
        ogb.load_ogbench_dataset(path, CUBE_ENV)
    assert path in str(e.value)


@pytest.mark.parametrize("cut", [0, 100, 0.5, 0.98])
def test_truncated_or_empty_file_raises_value_error(cube_file, tmp_path, cut):
    with open(cube_file, "rb") as f:
        data = f.read()
    path = str(tmp_path / "cut.npz")
    with open(path, "wb") as f:
        f.write(data[: int(cut * len(data)) if isinstance(cut, float) else cut])
    with pytest.raises(ValueError, match=r"Dataset file .*cut\.npz is truncated or corrupt"):
        make_env_and_datasets(CUBE_ENV, dataset_path=path)


def test_corrupt_member_raises_value_error(cube_file, tmp_path):
    path = str(tmp_path / "corrupt.npz")
    with zipfile.ZipFile(cube_file) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            payload = src.read(item)
            if item.filename == "observations.npy":
                payload = payload[: len(payload) // 2]  # a valid zip whose array is cut short
            dst.writestr(item.filename, payload)
    with pytest.raises(ValueError, match=r"corrupt\.npz is truncated or corrupt: reading 'observations'") as e:
        ogb.load_ogbench_dataset(path, CUBE_ENV)
    # How to get a good file, written only for the error: delete it (its record says it is this dataset's), download
    # or generate it again; the generate command writes beside it, never over it.
    assert "Delete it and get it again.\n" in str(e.value)
    generate = "python -m envs.generate_dataset --env_name=cube-single-play-v0 --num_episodes=1000 --seed=0"
    fresh = tmp_path / "cube-single-play-v0.npz"
    assert f"{generate} --save_path={fresh}  (then --dataset_path={fresh})" in str(e.value)


def test_unknown_env_name_lists_supported_patterns():
    pattern = r"Unknown environment 'halfcheetah-medium-v2'.*-singletask-task\{1\.\.5\}-v0"
    with pytest.raises(ValueError, match=pattern):
        make_env_and_datasets("halfcheetah-medium-v2")
    with pytest.raises(ValueError, match="Unknown environment"):
        make_env_and_datasets("cube-single-play-v0")  # a dataset name, not a training env


def test_sparse_reward_transform_values():
    r = np.array([0.0, -1.0, -3.0, -0.5, 2.0, -0.0], dtype=np.float32)
    out = sparse_reward_transform(r)
    np.testing.assert_array_equal(out, [0.0, -1.0, -1.0, -1.0, -1.0, 0.0])
    assert out.dtype == np.float32 and not np.signbit(out[[0, 5]]).any()
    assert sparse_reward_transform(0.0) == 0.0 and sparse_reward_transform(-4) == -1.0
    assert isinstance(sparse_reward_transform(-2.0), np.float32)
    np.testing.assert_array_equal(sparse_reward_transform(np.zeros((2, 3))), np.zeros((2, 3)))
    assert common.sparse_reward_transform is sparse_reward_transform


def test_generating_onto_an_existing_file_is_one_line_before_any_episode(tmp_path):
    target = tmp_path / "cube-single-play-v0.npz"
    target.write_bytes(b"a dataset a run trained on")
    command = [sys.executable, "-m", "envs.generate_dataset", "--env_name=cube-single-play-v0", "--num_episodes=1",
               f"--save_path={target}"]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "exists; pass --overwrite" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert target.read_bytes() == b"a dataset a run trained on"
    # A bad count is the same one line, not a traceback.
    command = command[:-2] + ["--num_episodes=0", f"--save_path={target}.new.npz"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip() == "error: --num_episodes=0 must be >= 1.", result.stderr


def test_if_missing_generates_once_then_leaves_the_file_alone(cube_file, tmp_path):
    """`--if_missing` (the README's first command): a missing training file is generated as without the flag; run
    again, the command leaves the file as it is, says so in one line and exits 0."""
    target = tmp_path / "cube-single-play-v0.npz"
    command = [sys.executable, "-m", "envs.generate_dataset", "--env_name=cube-single-play-v0", "--num_episodes=2",
               "--seed=0", f"--max_episode_steps={STEPS}", f"--save_path={target}", "--if_missing"]  # fmt: skip
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    made = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"Wrote {target} (2 episodes"), made.stdout
    assert _files_equal(str(target), cube_file)  # the module fixture: the same settings in this process
    target.write_bytes(b"a dataset a run trained on")  # what a second generation would replace
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{target} is there already: nothing generated (--if_missing).\n"
    assert target.read_bytes() == b"a dataset a run trained on"


def test_every_shard_is_checked_before_the_first_loads(cube_file, tmp_path):
    """Issue 29: a later shard of another domain, without `qpos`, or not an npz at all, is named at start-up (not a
    traceback at the first switch, hours in); a text file never gets numpy's allow_pickle advice."""
    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copy(cube_file, shards / "cube-single-play-v0-000.npz")
    second = shards / "cube-single-play-v0-001.npz"
    with np.load(cube_file) as npz:
        arrays = dict(npz)
    other = {**arrays, "observations": np.zeros((len(arrays["observations"]), 7), np.float32)}
    cases = [
        (other, "'observations' is float32 of shape (rows, 7), the first shard"),
        ({k: v for k, v in arrays.items() if k != "qpos"}, "lacks key(s) ['qpos'] that the first shard"),
        ({**arrays, "actions": arrays["actions"].astype(np.float64)}, "'actions' is float64 of shape"),
    ]
    for content, message in cases:
        np.savez(second, **content)
        with pytest.raises(ValueError) as e:
            make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards))
        assert f"Dataset shard {second}: " in str(e.value) or f"Dataset shard {second} " in str(e.value)
        assert message in str(e.value) and "allow_pickle" not in str(e.value)
    second.write_text("observations,actions\n0,1\n")
    with pytest.raises(ValueError, match=f"Dataset file {second} is not an npz archive"):
        make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards))
    np.savez(second, **arrays)  # the same layout: accepted
    assert make_env_and_datasets(CUBE_ENV, dataset_dir=str(shards)).next_shard is not None
    # The first (or only) file in text: one line naming it, no pickle advice.
    text = tmp_path / "cube-single-play-v0.npz"
    text.write_text("not data\n")
    with pytest.raises(ValueError) as e:
        make_env_and_datasets(CUBE_ENV, dataset_path=str(text))
    assert f"Dataset file {text} is not an npz archive" in str(e.value) and "allow_pickle" not in str(e.value)


def test_a_stopped_generation_resumes_to_the_same_bytes(tmp_path):
    """kill -9 mid-way, one episode file damaged, the same command again: the files of a run never stopped. A
    folder left by other settings is refused, naming what differs, and discarded by --overwrite."""
    settings = dict(num_episodes=12, max_episode_steps=4 * STEPS, progress=False)
    twin = str(tmp_path / "twin.npz")
    generate_dataset("cube-single-play-v0", seed=0, save_path=twin, **settings)
    path, parts = str(tmp_path / "stopped.npz"), str(tmp_path / "stopped.npz.parts")
    args = ["--env_name=cube-single-play-v0", "--num_episodes=12", f"--max_episode_steps={4 * STEPS}"]
    cmd = [sys.executable, "-m", "envs.generate_dataset", *args, f"--save_path={path}"]
    proc = subprocess.Popen([*cmd, "--seed=0"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def made():
        return sorted(n for n in os.listdir(parts) if n.endswith(".npz")) if os.path.isdir(parts) else []

    deadline = time.monotonic() + 120
    while len(made()) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    kept = made()
    assert 3 <= len(kept) < 13 and not os.path.exists(path), kept  # stopped mid-way: 12 + 1 val episodes
    with open(os.path.join(parts, "settings.json")) as f:
        record = json.load(f)
    assert record["seed"] == 0 and record["generator_version"] == gd.GENERATOR_VERSION
    assert isinstance(record["numpy_cpu_loops"], list)
    with open(os.path.join(parts, kept[1]), "wb") as f:  # a damaged episode file is made again
        f.write(b"not an npz")
    shutil.copytree(parts, str(tmp_path / "other.npz.parts"))

    other = subprocess.run([*cmd, "--seed=1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert f"error: {parts} holds episodes another generation made (seed 0 -> 1)" in other.stderr, other.stderr
    assert made() == kept and not os.path.exists(path)

    again = subprocess.run([*cmd, "--seed=0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{parts}: {len(kept) - 1} of 13 episodes made before; making the other {14 - len(kept)}." in again.stdout
    assert _files_equal(path, twin)  # and the val files
    assert not os.path.exists(parts)

    small = {**settings, "num_episodes": 2}  # the counts are not part of what makes an episode
    with pytest.raises(gd.PartsMismatch, match="seed 0 -> 1"):
        generate_dataset("cube-single-play-v0", seed=1, save_path=str(tmp_path / "other.npz"), **small)
    generate_dataset("cube-single-play-v0", seed=1, save_path=str(tmp_path / "other.npz"), overwrite=True, **small)
    generate_dataset("cube-single-play-v0", seed=1, save_path=str(tmp_path / "fresh.npz"), **small)
    assert _files_equal(str(tmp_path / "other.npz"), str(tmp_path / "fresh.npz"))
    assert not os.path.exists(str(tmp_path / "other.npz.parts"))
