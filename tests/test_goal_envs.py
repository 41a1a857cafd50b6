"""Goal-conditioned OGBench envs and data (`<domain>-<type>-oraclerep-v0`, DQC): names, envs, the loader with
`oracle_reps`, shards, errors, the generator's new domains and the downloader's names and large sets.

Tiny generated files (a few episodes of a few dozen rows); the downloads run against a server on 127.0.0.1.
"""

import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
from ogbench.relabel_utils import add_oracle_reps

import envs
from envs import download_datasets as dl
from envs import ogbench as ogb
from envs import provenance
from envs.common import EpisodeMonitor, GlobalNumpySeeding
from envs.generate_dataset import generate_dataset
from envs.ogbench import OGBenchName, parse_ogbench_name
from runner.config import warn_if_dense_on_sparse_domain
from tests.test_datasets_provenance import _Server, write_official_like

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 30
GOAL_ENV = "cube-double-play-oraclerep-v0"
SINGLE_TASK_ENV = "cube-double-play-singletask-task2-v0"


def _generate(path, name, num_episodes=2, seed=0, steps=STEPS):
    generate_dataset(
        name, num_episodes=num_episodes, seed=seed, save_path=str(path), max_episode_steps=steps, progress=False
    )
    return str(path)


@pytest.fixture(scope="module")
def cube_file(tmp_path_factory):
    return _generate(tmp_path_factory.mktemp("cube") / "cube-double-play-v0.npz", "cube-double-play-v0")


@pytest.fixture(scope="module")
def puzzle_file(tmp_path_factory):
    return _generate(tmp_path_factory.mktemp("puzzle") / "puzzle-4x5-play-v0.npz", "puzzle-4x5-play-v0", steps=20)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("domain", ogb.GOAL_DOMAINS)
def test_oraclerep_names_of_every_goal_domain(domain):
    dataset_type = "navigate" if domain == "humanoidmaze-giant" else "play"
    name = f"{domain}-{dataset_type}-oraclerep-v0"
    parsed = parse_ogbench_name(name)
    assert parsed == OGBenchName(domain, dataset_type, oraclerep=True)
    assert parsed.env_name == name and parsed.dataset_name == f"{domain}-{dataset_type}-v0"
    assert parsed.env_id == f"{domain}-v0" and gymnasium.spec(parsed.env_id) is not None
    assert ogb.training_name(name, goal_conditioned=True) == parsed and envs.parse(name).goal_conditioned
    with pytest.raises(ValueError, match="single-task env name"):  # single-task code paths stay single-task
        ogb.training_name(name, goal_conditioned=False)
    assert parsed.expert_data == (domain == "humanoidmaze-giant")
    assert parsed.has_button_states == (domain == "scene" or domain.startswith("puzzle"))


def test_names_that_are_refused():
    for bad, message in [
        ("humanoidmaze-giant-play-oraclerep-v0", "humanoidmaze-giant datasets are of type navigate"),
        ("cube-double-navigate-v0", "cube-double datasets are of type play or noisy"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_ogbench_name(bad)
    with pytest.raises(ValueError, match="humanoidmaze-giant datasets are of type navigate"):
        ogb.training_name("humanoidmaze-giant-play-oraclerep-v0", goal_conditioned=True)
    assert parse_ogbench_name("antmaze-large-navigate-oraclerep-v0") is None
    with pytest.raises(ValueError, match="Not a supported OGBench single-task env name"):  # not a tested domain
        ogb.training_name("puzzle-4x5-play-singletask-v0", goal_conditioned=False)
    with pytest.raises(ValueError, match="Not a supported OGBench goal-conditioned env name"):
        ogb.load_oraclerep_dataset("unused.npz", "cube-double-play-singletask-task2-v0")
    assert any("oraclerep" in p for p in envs.patterns())


# ---------------------------------------------------------------- envs


def test_eval_env_resets_to_a_task_with_its_oracle_goal():
    env = ogb.make_eval_env(GOAL_ENV, max_episode_steps=5)
    assert type(env) is EpisodeMonitor and type(env.env) is GlobalNumpySeeding
    assert env.unwrapped._use_oracle_rep and env.unwrapped._success_timing == "post"
    assert ogb.task_names(GOAL_ENV)[3] == "task4_swap"
    ob, info = env.reset(seed=3, options=dict(task_id=4))
    assert env.unwrapped.cur_task_id == 4 and info["goal"].shape == (6,)  # two cubes' positions
    goal_xyz = env.unwrapped.cur_task_info["goal_xyzs"]  # the cubes' goals, up to ogbench's cube permutation
    expected = (goal_xyz - [0.425, 0, 0]) * 10
    np.testing.assert_allclose(np.sort(info["goal"].reshape(2, 3), 0), np.sort(expected, 0), atol=1e-2)
    again, _ = env.reset(seed=3, options=dict(task_id=4))
    np.testing.assert_array_equal(again, ob)
    for _ in range(5):
        *_, terminated, truncated, step_info = env.step(np.zeros(5))
    assert truncated and not terminated and step_info["episode"]["length"] == 5 and "success" in step_info
    assert not any(k.startswith(("privileged", "proprio")) for k in step_info)
    env.close()


def test_humanoidmaze_resets_depend_on_the_seed_only():
    """ogbench draws humanoidmaze's start and goal noise from numpy's global RNG: the wrapper seeds it from the
    reset seed and gives the caller's state back."""
    env = ogb.make_eval_env("humanoidmaze-giant-navigate-oraclerep-v0")
    np.random.seed(1)
    state = np.random.get_state()[1].copy()
    a = env.reset(seed=5, options=dict(task_id=2))
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # the caller's global state is untouched
    np.random.seed(2)  # another global state before the second reset
    b = env.reset(seed=5, options=dict(task_id=2))
    c = env.reset(seed=6, options=dict(task_id=2))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1]["goal"], b[1]["goal"])
    assert a[1]["goal"].shape == (2,) and not np.array_equal(a[1]["goal"], c[1]["goal"])
    raw = ogb.make_env("humanoidmaze-giant-navigate-oraclerep-v0")
    np.random.seed(2)
    d = raw.reset(seed=5, options=dict(task_id=2))  # without the wrapper: the global state decides
    assert not np.array_equal(a[1]["goal"], d[1]["goal"])
    env.close()
    raw.close()


@pytest.mark.parametrize("timing", ["post", "pre"])
def test_goal_metadata(timing):
    meta = ogb.run_metadata(GOAL_ENV, timing, "pre")
    assert meta["success_timing"] == timing and meta["reward_timing"] == f"{timing}-step"
    assert meta["goal_conditioned"] is True and meta["task_id"] is None and meta["dataset_success_timing"] is None
    assert meta["task_names"] == list(ogb.task_names(GOAL_ENV))
    assert ogb.make_env(GOAL_ENV, timing).unwrapped._success_timing == timing


# ---------------------------------------------------------------- data


def test_loader_keeps_the_single_task_rows_and_adds_oracle_reps(cube_file, monkeypatch):
    names = ogb.task_names(GOAL_ENV)  # from a private env, the loaders' default

    def refuse(env_id):
        raise AssertionError(f"a private env was built for {env_id}")

    for module, private in ((ogb, "_private_goal_env"), (ogb, "_relabel_env")):
        monkeypatch.setattr(module, private, refuse)  # a run's loader reads its task from the training env
    goal = envs.make_env_and_datasets(GOAL_ENV, dataset_path=cube_file, hash_datasets=False)
    single = envs.make_env_and_datasets(SINGLE_TASK_ENV, dataset_path=cube_file, hash_datasets=False)
    data, reference = goal.train_dataset, single.train_dataset
    for key in ("observations", "actions", "next_observations", "terminals"):
        np.testing.assert_array_equal(data[key], reference[key], err_msg=key)
    n = 2 * (STEPS - 1)
    assert data["oracle_reps"].shape == (n, 6) and data["oracle_reps"].dtype == np.float32
    np.testing.assert_array_equal(data["rewards"], np.zeros(n, np.float32))
    np.testing.assert_array_equal(data["masks"], np.ones(n, np.float32))
    with np.load(cube_file) as f:
        rows = np.flatnonzero(~f["terminals"].astype(bool))
        expected = {"qpos": f["qpos"][rows]}
    add_oracle_reps("cube-double-v0", gymnasium.make("cube-double-v0"), expected)
    np.testing.assert_array_equal(data["oracle_reps"], expected["oracle_reps"])
    cubes = expected["qpos"][:, 14:28].reshape(n, 2, 7)[..., :3]  # the two cubes' xyz of each row
    np.testing.assert_allclose(data["oracle_reps"], ((cubes - [0.425, 0, 0]) * 10).reshape(n, 6), rtol=1e-6)
    assert goal.goal_conditioned and goal.num_tasks == 5 and goal.task_names == names
    assert goal.metadata["task_names"] == list(names)
    assert not single.goal_conditioned and single.task_names == () and single.num_tasks == 0
    assert goal.metadata["datasets"][0]["source"] == "generated"
    out = envs.make_env_and_datasets(GOAL_ENV, dataset_path=cube_file, dataset_proportion=0.5)
    assert len(out.train_dataset["oracle_reps"]) == n // 2 and out.train_dataset["terminals"][-1] == 1


def test_puzzle_oracle_reps_are_the_button_states(puzzle_file):
    data = ogb.load_oraclerep_dataset(puzzle_file, "puzzle-4x5-play-oraclerep-v0", keep_info=True)
    assert data["oracle_reps"].shape == (2 * 19, 20)
    np.testing.assert_array_equal(data["oracle_reps"], data["button_states"].astype(np.float32))
    env = ogb.make_eval_env("puzzle-4x5-play-oraclerep-v0")
    _, info = env.reset(seed=0, options=dict(task_id=1))
    assert info["goal"].shape == data["oracle_reps"].shape[1:]  # the env's goals look like the data's


def test_every_shard_gets_its_oracle_reps(cube_file, tmp_path):
    directory = tmp_path / "cube-double-play-100m-v0"
    directory.mkdir()
    for i in range(2):
        _generate(directory / f"cube-double-play-v0-00{i}.npz", "cube-double-play-v0", num_episodes=1, seed=10 + i)
    out = envs.make_env_and_datasets(GOAL_ENV, dataset_dir=str(directory), hash_datasets=False)
    first = out.train_dataset
    second = out.next_shard()
    assert out.next_shard.index == 1 and set(second) == set(first)
    reference = ogb.load_oraclerep_dataset(str(directory / "cube-double-play-v0-001.npz"), GOAL_ENV)
    for key in reference:
        np.testing.assert_array_equal(second[key], reference[key], err_msg=key)
    assert not np.array_equal(first["oracle_reps"], second["oracle_reps"])
    assert [d["path"] for d in out.metadata["datasets"]] == out.next_shard.paths
    assert ogb.load_file(out.next_shard.paths[0], GOAL_ENV, envs.DataOptions()).keys() == first.keys()


def test_data_errors(cube_file, tmp_path):
    with pytest.raises(ValueError, match="--sparse does not apply to the goal-conditioned"):
        envs.make_env_and_datasets(GOAL_ENV, dataset_path=cube_file, sparse=True)
    with pytest.raises(ValueError, match="observations have 37 columns, the env's 28"):
        ogb.load_oraclerep_dataset(cube_file, "cube-single-play-oraclerep-v0")
    with pytest.raises(FileNotFoundError) as e:
        envs.make_env_and_datasets("cube-triple-play-oraclerep-v0", dataset_dir=str(tmp_path))
    message = str(e.value)
    assert "python -m envs.download_datasets --env_names=cube-triple-play-v0" in message
    assert "large set cube-triple-play-100m-v0" in message  # the data of the DQC paper's cube-triple runs
    assert "python -m envs.generate_dataset --env_name=cube-triple-play-v0 --num_episodes=3000 --seed=0 " in message
    with pytest.raises(FileNotFoundError) as e:
        envs.make_env_and_datasets("humanoidmaze-giant-navigate-oraclerep-v0", dataset_dir=str(tmp_path))
    message = str(e.value)
    assert "--env_names=humanoidmaze-giant-navigate-v0" in message and "cannot be generated here" in message
    assert "envs.generate_dataset" not in message
    with pytest.raises(FileNotFoundError) as e:
        envs.make_env_and_datasets("cube-octuple-play-oraclerep-v0", dataset_dir=str(tmp_path))
    message = str(e.value)
    assert "publishes no default cube-octuple dataset" in message and "cube-octuple-play-100m-v0" in message
    assert "cube-octuple-play-1b-v0" in message and "$(seq 0 999)" in message  # the paper's 1B set
    shard = tmp_path / "puzzle-4x6-play-1b-v0" / "puzzle-4x6-play-v0-004.npz"
    shard.parent.mkdir()
    shard.write_bytes(b"")
    with pytest.raises(ValueError) as e:
        envs.make_env_and_datasets("puzzle-4x6-play-oraclerep-v0", dataset_dir=str(shard.parent))
    message = str(e.value)
    assert "puzzle-4x6-play-1b-v0 is not hosted" in message and "--env_names=puzzle-4x6-play-100m-v0" in message
    # The shard is there (empty): no command that would write over it, but how to get its own command.
    assert f"move {shard} away first: a run then gives the command that generates it" in message
    assert "envs.generate_dataset" not in message.split("is not hosted")[1]


def test_dense_reward_warning_skips_goal_conditioned_envs(caplog):
    assert not warn_if_dense_on_sparse_domain("puzzle-4x5-play-oraclerep-v0", sparse=False)
    assert warn_if_dense_on_sparse_domain("puzzle-3x3-play-singletask-v0", sparse=False)


# ---------------------------------------------------------------- generator


@pytest.mark.parametrize("name, buttons", [("cube-octuple-play-v0", None), ("puzzle-4x6-noisy-v0", 24)])
def test_generator_makes_the_new_domains_reproducibly(name, buttons, tmp_path):
    a = _generate(tmp_path / "a" / f"{name}.npz", name, num_episodes=1, steps=12)
    b = _generate(tmp_path / "b" / f"{name}.npz", name, num_episodes=1, steps=12)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()
    with np.load(a) as f:
        assert f["observations"].shape[0] == 12 and f["terminals"][-1]
        assert ("button_states" in f.files) == (buttons is not None)
        if buttons:
            assert f["button_states"].shape == (12, buttons)
    assert provenance.npz_provenance(a)["domain"] == name.rsplit("-", 2)[0]


def test_octuple_stacking_probability_is_the_published_one():
    from envs.generate_dataset import _p_stack

    draws = [_p_stack("cube-octuple", np.random.default_rng(i)) for i in range(200)]
    assert 0.0 <= min(draws) and max(draws) <= 0.35 and max(draws) > 0.3


def test_generator_refuses_humanoidmaze_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="trained expert policies .* cannot be generated here; download it"):
        generate_dataset("humanoidmaze-giant-navigate-v0", num_episodes=1, save_path=str(tmp_path / "h.npz"))
    cmd = [sys.executable, "-m", "envs.generate_dataset", "--env_name=humanoidmaze-giant-navigate-oraclerep-v0"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: humanoidmaze-giant-navigate")
    assert lines[0].endswith("python -m envs.download_datasets --env_names=humanoidmaze-giant-navigate-v0")


# ---------------------------------------------------------------- downloader


def test_download_names_of_goal_conditioned_runs():
    requests = dl.parse_names(
        "cube-triple-play-oraclerep-v0,cube-triple-play-v0,humanoidmaze-giant-navigate-oraclerep-v0,"
        "puzzle-4x6-play-100m-v0,cube-octuple-play-100m-v0"
    )
    assert requests == [
        dl.Request("ogbench", "cube-triple-play-v0"),
        dl.Request("ogbench", "humanoidmaze-giant-navigate-v0"),
        dl.Request("shards", "puzzle-4x6-play-100m-v0"),
        dl.Request("shards", "cube-octuple-play-100m-v0"),
    ]
    with pytest.raises(dl.DownloadError, match=r"1B sets are not hosted.*cube-octuple-play-100m-v0.*seq 0 999"):
        dl.parse_names("cube-octuple-play-1b-v0")
    with pytest.raises(dl.DownloadError, match="expert policies"):
        dl.parse_names("humanoidmaze-giant-navigate-1b-v0")
    with pytest.raises(dl.DownloadError, match="no default cube-octuple dataset"):
        dl.parse_names("cube-octuple-play-oraclerep-v0")
    assert [r.name for r in dl.parse_names(list(dl.DQC_PAPER_DOWNLOADS))] == list(dl.DQC_PAPER_DOWNLOADS)
    message = dl.offline_alternatives(dl.parse_names("humanoidmaze-giant-navigate-v0,puzzle-4x5-play-v0"), "/d", "/r")
    assert "humanoidmaze-giant-navigate-v0: humanoidmaze data come from trained expert policies" in message
    assert "--env_name=puzzle-4x5-play-v0 --num_episodes=3000" in message
    assert "--env_name=humanoidmaze" not in message


def test_downloaded_shards_of_a_new_set_train_a_goal_conditioned_run(cube_file, tmp_path):
    """A 100M set from a server on 127.0.0.1 (two small shards and a -val file): fetched, recorded, listed as
    the shards of the goal-conditioned run, loaded with oracle reps, and verified official."""
    body = open(write_official_like(tmp_path / "src.npz", cube_file), "rb").read()
    names = ["cube-double-play-v0-000.npz", "cube-double-play-v0-001.npz", "cube-double-play-v0-000-val.npz"]
    server = _Server()
    try:
        index = "".join(f'<a href="{n}">{n}</a>' for n in names)
        server.files = {"/cube-double-play-100m-v0/": index.encode()}
        server.files.update({f"/cube-double-play-100m-v0/{n}": body for n in names})
        (line,) = dl.download(dl.parse_names("cube-double-play-100m-v0"), str(tmp_path), ogbench_url=server.url)
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    directory = tmp_path / "cube-double-play-100m-v0"
    assert line.endswith(f"--dataset_dir={directory}")
    out = envs.make_env_and_datasets(GOAL_ENV, dataset_dir=str(directory))
    assert len(out.next_shard.paths) == 2 and out.train_dataset["oracle_reps"].shape[1] == 6
    assert all(d["source"] == "official" and d["verified"] for d in out.metadata["datasets"])
