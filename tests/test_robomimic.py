"""robomimic backend: names, the hdf5 loader's conventions, error messages, the env wrapper, and (with the
simulator extra installed) the real Lift env built from a file's metadata."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import envs
from envs import robomimic as ru
from envs.common import EpisodeMonitor

KEY_DIMS = {"robot0_eef_pos": 3, "robot0_eef_quat": 4, "robot0_gripper_qpos": 2, "object": 10}  # Lift: 19

# robomimic v1.5 env metadata of Lift (robosuite 1.5.1's composite controller format).
LIFT_ENV_ARGS = {
    "env_name": "Lift",
    "env_version": "1.5.1",
    "type": 1,
    "env_kwargs": {
        "has_renderer": False,
        "has_offscreen_renderer": True,
        "ignore_done": True,
        "use_object_obs": True,
        "use_camera_obs": True,
        "control_freq": 20,
        "controller_configs": {
            "type": "BASIC",
            "body_parts": {
                "right": {
                    "type": "OSC_POSE",
                    "input_max": 1,
                    "input_min": -1,
                    "output_max": [0.05, 0.05, 0.05, 0.5, 0.5, 0.5],
                    "output_min": [-0.05, -0.05, -0.05, -0.5, -0.5, -0.5],
                    "kp": 150,
                    "damping": 1,
                    "impedance_mode": "fixed",
                    "kp_limits": [0, 300],
                    "damping_limits": [0, 10],
                    "position_limits": None,
                    "orientation_limits": None,
                    "uncouple_pos_ori": True,
                    "control_delta": True,
                    "interpolation": None,
                    "ramp_ratio": 0.2,
                    "input_ref_frame": "world",
                    "gripper": {"type": "GRIP"},
                },
            },
        },
        "robots": ["Panda"],
        "camera_depths": False,
        "camera_heights": 84,
        "camera_widths": 84,
        "lite_physics": False,
        "reward_shaping": False,
        "camera_names": ["agentview", "robot0_eye_in_hand"],
    },
}

CAN_ENV_ARGS = {**LIFT_ENV_ARGS, "env_name": "PickPlaceCan"}
NO_VERSION_ENV_ARGS = {k: v for k, v in LIFT_ENV_ARGS.items() if k != "env_version"}

# Demos as stored: {demo id: (rewards, dones)}. demo_2 ends without success and with dones 0 (its last
# step must still end the trajectory); demo_10 keeps going one step after its first success.
DEMOS = {0: ([0, 0, 1], [0, 0, 1]), 1: ([0, 1], [0, 1]), 2: ([0, 0], [0, 0]), 10: ([0, 1, 1], [0, 1, 1])}


def _obs_value(demo, t, key_index):
    return 1000 * demo + 10 * t + key_index  # every dim of key `key_index` holds this value


def _action(demo, t):
    if demo == 0 and t == 0:
        return [1.0, -1.0, 0.5, -0.5, 0.0, 0.25, 2.0]  # 1, -1 and 2 get clipped
    return [0.01 * demo + 0.001 * t] * 7


def write_robomimic_file(path, demos=DEMOS, env_args=LIFT_ENV_ARGS):
    """A small file in robomimic's layout (groups written in a scrambled order; one extra obs key)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps(env_args)
        f.create_group("mask").create_dataset("train", data=np.array([b"demo_0"]))  # not under data/
        for demo in sorted(demos, key=str, reverse=True):
            rewards, dones = demos[demo]
            n = len(rewards)
            group = data.create_group(f"demo_{demo}")
            group.create_dataset("actions", data=np.array([_action(demo, t) for t in range(n)], dtype=np.float64))
            group.create_dataset("rewards", data=np.array(rewards, dtype=np.float64))
            group.create_dataset("dones", data=np.array(dones, dtype=np.int64))
            group.create_dataset("states", data=np.zeros((n, 5)))
            for prefix, shift in (("obs", 0), ("next_obs", 1)):
                obs = group.create_group(prefix)
                obs.create_dataset("robot0_joint_pos", data=np.full((n, 7), -5.0))  # not an OBS_KEY
                for j, (key, dim) in reversed(list(enumerate(KEY_DIMS.items()))):
                    values = [[_obs_value(demo, t + shift, j)] * dim for t in range(n)]
                    obs.create_dataset(key, data=np.array(values, dtype=np.float64))
    return str(path)


@pytest.fixture
def lift_file(tmp_path):
    return write_robomimic_file(tmp_path / "lift" / "mh" / "low_dim_v15.hdf5")


@pytest.fixture
def small_lift_mh(monkeypatch):
    """Let the 4-demo synthetic file pass the demo-count check of a run (the release has 300)."""
    monkeypatch.setitem(ru.OFFICIAL_NUM_DEMOS, ("lift", "mh"), len(DEMOS))


def write_release_like_file(path, num_demos=300, env_args=LIFT_ENV_ARGS, lengths=(3, 2), total=None):
    """robomimic's release layout as far as `check_dataset_file` reads it: env_args, `total`, demos with
    `num_samples` and `actions` (lengths cycle through `lengths`)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    demo_lengths = [lengths[i % len(lengths)] for i in range(num_demos)]
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps(env_args)
        data.attrs["total"] = sum(demo_lengths) if total is None else total
        for i, n in enumerate(demo_lengths):
            group = data.create_group(f"demo_{i}")
            group.attrs["num_samples"] = n
            group.create_dataset("actions", data=np.zeros((n, 7)))
    return str(path)


def _expand(rows):
    """Per-row key values (4 per row) -> full (N, 19) observation rows."""
    return np.repeat(np.array(rows, dtype=np.float32), list(KEY_DIMS.values()), axis=1)


# ---- names ------------------------------------------------------------------------------------


def test_which_names_are_robomimic():
    for task in ("lift", "can", "square", "transport", "tool_hang"):
        for kind in ("mh", "ph"):
            assert ru.is_robomimic_env(f"{task}-{kind}-low_dim")
            assert envs.parse(f"{task}-{kind}-low_dim").family == "robomimic"
    for name in [
        "lift-mh-image",
        "lift-mg-low_dim",
        "lift-mh-low_dim-v0",
        "Lift-mh-low_dim",
        "lift-mh",
        "pusht-mh-low_dim",
        "cube-double-play-singletask-task2-v0",
        "xlift-mh-low_dim",
    ]:
        assert not ru.is_robomimic_env(name), name
    assert [ru.episode_cap(f"{t}-mh-low_dim") for t in ("lift", "can", "square", "transport", "tool_hang")] == [
        300,
        300,
        400,
        800,
        1000,
    ]
    assert "robomimic: {lift,can,square,transport,tool_hang}-{mh,ph}-low_dim" in envs.patterns()
    with pytest.raises(ValueError, match="Supported: {lift,can"):
        ru.parse_robomimic_name("lift-mg-low_dim")


def test_import_does_not_load_the_simulator():
    code = (
        "import sys; import envs; "
        'assert envs.parse("lift-mh-low_dim").family == "robomimic"; '
        'assert "robosuite" not in sys.modules and "robomimic" not in sys.modules, "imported"'
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


# ---- offline data -------------------------------------------------------------------------------


def test_loader_order_rewards_masks_terminals_and_clipping(lift_file):
    ds = ru.load_robomimic_dataset(lift_file)
    assert set(ds) == {"observations", "actions", "rewards", "terminals", "masks", "next_observations"}
    assert all(v.dtype == np.float32 for v in ds.values())
    # Numeric demo order 0, 1, 2, 10 (lexicographic would put demo_10 before demo_2).
    obs_rows = [
        [0, 1, 2, 3],
        [10, 11, 12, 13],
        [20, 21, 22, 23],
        [1000, 1001, 1002, 1003],
        [1010, 1011, 1012, 1013],
        [2000, 2001, 2002, 2003],
        [2010, 2011, 2012, 2013],
        [10000, 10001, 10002, 10003],
        [10010, 10011, 10012, 10013],
        [10020, 10021, 10022, 10023],
    ]
    np.testing.assert_array_equal(ds["observations"], _expand(obs_rows))
    np.testing.assert_array_equal(ds["next_observations"], _expand([[v + 10 for v in r] for r in obs_rows]))
    np.testing.assert_array_equal(ds["rewards"], [-1, -1, 0, -1, 0, -1, -1, -1, 0, 0])
    np.testing.assert_array_equal(ds["masks"], [1, 1, 0, 1, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(ds["terminals"], [0, 0, 1, 0, 1, 0, 1, 0, 1, 1])
    hi = np.float32(1 - 1e-5)
    np.testing.assert_array_equal(ds["actions"][0], np.array([hi, -hi, 0.5, -0.5, 0.0, 0.25, hi], np.float32))
    np.testing.assert_allclose(
        ds["actions"][1:, 0], [0.001, 0.002, 0.01, 0.011, 0.02, 0.021, 0.1, 0.101, 0.102], rtol=1e-6
    )
    raw = ru.load_robomimic_dataset(lift_file, action_clip_eps=None)
    np.testing.assert_array_equal(raw["actions"][0], [1.0, -1.0, 0.5, -0.5, 0.0, 0.25, 2.0])


def test_one_reward_transform():
    assert ru.reward_transform(1.0) == 0.0 and ru.reward_transform(0) == -1.0
    assert isinstance(ru.reward_transform(1.0), np.float32)
    np.testing.assert_array_equal(ru.reward_transform(np.array([0.0, 1.0])), np.array([-1.0, 0.0], np.float32))


def test_env_metadata_and_paths(lift_file, tmp_path, monkeypatch):
    assert ru.load_env_meta(lift_file) == LIFT_ENV_ARGS
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ru.default_dataset_path("can-mh-low_dim") == str(tmp_path / "home/.robomimic/can/mh/low_dim_v15.hdf5")
    assert ru.resolve_dataset_path("lift-mh-low_dim", dataset_dir=str(tmp_path)) == lift_file
    assert ru.resolve_dataset_path("square-ph-low_dim", dataset_path=lift_file) == lift_file  # explicit wins
    for path, kind in [("/dev/null", "a character device"), (str(tmp_path), "a directory")]:
        with pytest.raises(ValueError, match=rf"--dataset_path={path} is {kind}, not a data file"):
            ru.resolve_dataset_path("lift-mh-low_dim", dataset_path=path)


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ru.resolve_dataset_path("square-mh-low_dim", dataset_dir=str(tmp_path))
    message = str(e.value)
    assert str(tmp_path / "square" / "mh" / "low_dim_v15.hdf5") in message
    assert "~/.robomimic/square/mh/low_dim_v15.hdf5" in message
    assert "robomimic_datasets/resolve/main/v1.5/square/mh/low_dim_v15.hdf5" in message
    assert "--dataset_path" in message
    download = f"python -m envs.download_datasets --env_names=square-mh-low_dim --robomimic_dir={tmp_path}\n"
    assert message.index(download) < message.index("robomimic_datasets/resolve/main")  # the command first
    with pytest.raises(FileNotFoundError, match="robomimic dataset file not found"):
        envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=str(tmp_path / "nope.hdf5"))


def test_bad_files_are_named(tmp_path):
    path = write_robomimic_file(tmp_path / "a.hdf5")
    with h5py.File(path, "a") as f:
        del f["data/demo_2/next_obs/object"]
    with pytest.raises(ValueError, match=r"demo_2 lacks \['next_obs/object'\]"):
        ru.load_robomimic_dataset(path)
    path = write_robomimic_file(tmp_path / "nan.hdf5")
    with h5py.File(path, "a") as f:
        f["data/demo_10/actions"][1, 3] = np.nan
    with pytest.raises(ValueError, match=r"demo_10 has NaN/inf in \['actions'\]"):
        ru.load_robomimic_dataset(path)
    path = write_robomimic_file(tmp_path / "b.hdf5")
    with h5py.File(path, "a") as f:
        del f["data"].attrs["env_args"]
    with pytest.raises(ValueError, match='no "env_args"'):
        ru.load_env_meta(path)
    with open(tmp_path / "c.hdf5", "w") as f:
        f.write("not hdf5")
    with pytest.raises(ValueError, match="cannot be read as hdf5"):
        ru.load_robomimic_dataset(str(tmp_path / "c.hdf5"))
    old = {**LIFT_ENV_ARGS, "env_kwargs": {**LIFT_ENV_ARGS["env_kwargs"], "controller_configs": {"type": "OSC_POSE"}}}
    with pytest.raises(ValueError, match="pre-1.5 controller config"):
        ru.robosuite_kwargs(old)


# ---- the file check before training (version, task, demo count, truncation) ------------------------


def test_release_like_file_passes_the_check(tmp_path):
    path = write_release_like_file(tmp_path / "lift" / "mh" / "low_dim_v15.hdf5")
    info = ru.check_dataset_file(path, "lift-mh-low_dim")
    assert info == {"robosuite_env": "Lift", "env_version": "1.5.1", "num_demos": 300, "num_samples": 750}
    ph = write_release_like_file(tmp_path / "can" / "ph" / "low_dim_v15.hdf5", num_demos=200, env_args=CAN_ENV_ARGS)
    assert ru.check_dataset_file(ph, "can-ph-low_dim")["num_demos"] == 200
    assert ru.OFFICIAL_NUM_DEMOS[("square", "mh")] == 300 and ("tool_hang", "mh") not in ru.OFFICIAL_NUM_DEMOS


@pytest.mark.parametrize(
    "kwargs, env_name, message",
    [
        ({"env_args": CAN_ENV_ARGS}, "lift-mh-low_dim", "holds 'PickPlaceCan' demos, but lift-mh-low_dim needs 'Lift'"),
        ({"env_args": {**LIFT_ENV_ARGS, "env_version": "1.4.1"}}, "lift-mh-low_dim", "robosuite 1.4.1 .* not 1.5.x"),
        ({"env_args": NO_VERSION_ENV_ARGS}, "lift-mh-low_dim", "robosuite None"),
        ({"num_demos": 200}, "lift-mh-low_dim", "holds 200 demos; robomimic's v1.5 MH file of 'lift' has 300"),
        ({"num_demos": 299}, "lift-mh-low_dim", "holds 299 demos"),
        ({"total": 749}, "lift-mh-low_dim", r"data.attrs\['total'\] = 749 but its demos hold 750"),
        ({"num_demos": 300}, "lift-ph-low_dim", "holds 300 demos; robomimic's v1.5 PH file of 'lift' has 200"),
    ],
)
def test_wrong_files_are_refused_before_training(tmp_path, kwargs, env_name, message):
    path = write_release_like_file(tmp_path / "x.hdf5", **kwargs)
    with pytest.raises(ValueError, match=message) as e:
        ru.check_dataset_file(path, env_name)
    text = str(e.value)
    assert path in text and f"python -m envs.download_datasets --env_names={env_name}" in text
    assert ru.download_url(env_name) in text


def test_num_samples_that_disagree_with_the_data_are_refused(tmp_path):
    path = write_release_like_file(tmp_path / "x.hdf5")
    with h5py.File(path, "a") as f:
        f["data/demo_7"].attrs["num_samples"] = 9
    with pytest.raises(ValueError, match="demo_7 stores num_samples=9 but has 2 actions"):
        ru.check_dataset_file(path, "lift-mh-low_dim")


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.0])
def test_truncated_file_is_a_value_error_naming_file_and_fix(tmp_path, fraction):
    full = write_release_like_file(tmp_path / "full.hdf5")
    with open(full, "rb") as f:
        payload = f.read()
    path = str(tmp_path / "lift" / "mh" / "low_dim_v15.hdf5")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(payload[: int(len(payload) * fraction)])
    with pytest.raises(ValueError, match="cannot be read as hdf5: it is truncated") as e:
        ru.check_dataset_file(path, "lift-mh-low_dim")
    assert path in str(e.value) and "python -m envs.download_datasets --env_names=lift-mh-low_dim" in str(e.value)
    with pytest.raises(ValueError, match="truncated"):  # and a run stops before loading anything
        envs.make_env_and_datasets("lift-mh-low_dim", dataset_dir=str(tmp_path))


def test_a_run_checks_the_file_first(lift_file):
    with pytest.raises(ValueError, match="holds 4 demos; robomimic's v1.5 MH file of 'lift' has 300"):
        envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=lift_file)


def test_missing_simulator_says_how_to_install(lift_file, small_lift_mh, monkeypatch):
    monkeypatch.setitem(sys.modules, "robosuite", None)  # `import robosuite` now raises ImportError
    with pytest.raises(ImportError) as e:
        envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=lift_file)
    message = str(e.value)
    assert "pip install -r /tmp/requirements-base.txt -r requirements-robomimic.txt" in message
    assert "robosuite 1.5.1" in message and "python3.11 -m venv" in message


def test_robosuite_kwargs_turn_rendering_off():
    kwargs = ru.robosuite_kwargs(LIFT_ENV_ARGS)
    assert kwargs["has_offscreen_renderer"] is False and kwargs["use_camera_obs"] is False
    assert kwargs["has_renderer"] is False and kwargs["ignore_done"] is True and kwargs["use_object_obs"] is True
    assert kwargs["controller_configs"] == LIFT_ENV_ARGS["env_kwargs"]["controller_configs"]
    assert LIFT_ENV_ARGS["env_kwargs"]["has_offscreen_renderer"] is True  # the metadata is not mutated


# ---- the wrapper, on a stand-in for a robosuite env (runs without the extra) ---------------------


class FakeRobosuiteEnv:
    """robosuite's env API: reset/step on dicts, action_spec, _check_success; global np.random at reset."""

    def __init__(self, success_at=None):
        self.success_at, self.actions, self.t = success_at, [], 0
        self.action_spec = (-np.ones(7), np.ones(7))

    def _obs(self):
        obs = {k: np.full(d, self.t + 0.5 * j) for j, (k, d) in enumerate(KEY_DIMS.items()) if k != "object"}
        obs["object-state"] = np.concatenate([self.cube, np.full(7, float(self.t))])
        obs["robot0_joint_pos"] = np.zeros(7)
        return obs

    def reset(self):
        self.t, self.cube = 0, np.random.uniform(-1, 1, size=3)  # robosuite 1.5.1 uses the global stream
        return self._obs()

    def _check_success(self):
        return self.success_at is not None and self.t >= self.success_at

    def step(self, action):
        self.actions.append(np.array(action))
        self.t += 1
        return self._obs(), float(self._check_success()), False, {}

    def close(self):
        pass


def test_wrapper_observation_action_and_episode_ends():
    env = ru.RobomimicLowDimEnv(FakeRobosuiteEnv(success_at=3), max_episode_steps=5, seed=0)
    assert env.observation_space.shape == (19,) and env.observation_space.dtype == np.float32
    assert env.action_space.shape == (7,) and env.action_space.low.min() == -1 and env.action_space.high.max() == 1
    ob, info = env.reset(seed=1)
    assert ob.dtype == np.float32 and ob.shape == (19,) and info == {}
    np.testing.assert_array_equal(ob[:9], [0, 0, 0, 0.5, 0.5, 0.5, 0.5, 1, 1])  # eef_pos, eef_quat, gripper
    results = [env.step(np.array([2.0, -3.0, 0, 0, 0, 0, 0.5])) for _ in range(3)]
    np.testing.assert_array_equal(env.robosuite_env.actions[0], [1.0, -1.0, 0, 0, 0, 0, 0.5])  # clipped
    assert [r[1:5] for r in results] == [
        (0.0, False, False, {"success": 0}),
        (0.0, False, False, {"success": 0}),
        (1.0, True, False, {"success": 1}),
    ]
    assert ru.reward_transform(results[-1][1]) == 0.0 and ru.reward_transform(results[0][1]) == -1.0
    with pytest.raises(ValueError, match="expected"):
        env.step(np.zeros(6))

    never = ru.RobomimicLowDimEnv(FakeRobosuiteEnv(), max_episode_steps=4, seed=0)
    never.reset(seed=0)
    ends = [never.step(np.zeros(7))[2:5] for _ in range(4)]
    assert ends == [(False, False, {"success": 0})] * 3 + [(False, True, {"success": 0})]
    at_cap = ru.RobomimicLowDimEnv(FakeRobosuiteEnv(success_at=2), max_episode_steps=2, seed=0)
    at_cap.reset(seed=0)
    at_cap.step(np.zeros(7))
    assert at_cap.step(np.zeros(7))[2:4] == (True, False)  # success on the cap step: terminated, not truncated


def test_wrapper_owns_its_random_stream():
    env = ru.RobomimicLowDimEnv(FakeRobosuiteEnv(), max_episode_steps=5, seed=0)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    c, _ = env.reset(seed=8)
    d, _ = env.reset()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[9:12], c[9:12]) and not np.array_equal(c[9:12], d[9:12])
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # the caller's global stream is untouched


def test_the_family_load_with_a_stand_in_env(lift_file, small_lift_mh, tmp_path, monkeypatch):
    made = []

    def fake_make(env_name, env_meta, seed=None):
        made.append((env_name, env_meta["env_name"], seed))
        return ru.RobomimicLowDimEnv(FakeRobosuiteEnv(success_at=2), ru.episode_cap(env_name), seed=seed)

    monkeypatch.setattr(ru, "make_robomimic_env", fake_make)
    opened = []
    real_file = h5py.File
    monkeypatch.setattr(h5py, "File", lambda path, *a, **k: opened.append(path) or real_file(path, *a, **k))
    out = envs.make_env_and_datasets("lift-mh-low_dim", dataset_dir=str(tmp_path), seed=3)
    assert len(opened) == 1  # checked, its env metadata and demos read, from one opening of the file
    monkeypatch.setattr(h5py, "File", real_file)
    assert isinstance(out.env, EpisodeMonitor) and isinstance(out.eval_env, EpisodeMonitor)
    assert [m[:2] for m in made] == [("lift-mh-low_dim", "Lift")] * 2 and made[0][2] != made[1][2]
    assert out.val_dataset is None and out.next_shard is None
    for k, v in ru.load_robomimic_dataset(lift_file).items():
        np.testing.assert_array_equal(out.train_dataset[k], v)
    assert out.reward_fn(1.0) == 0.0 and out.reward_fn(0.0) == -1.0
    assert out.metadata["episode_cap"] == 300 and out.metadata["reward_transform"] == "r - 1 (offline and online)"
    out.env.reset(seed=0)
    out.env.step(np.zeros(7))
    *_, info = out.env.step(np.zeros(7))
    assert info["success"] == 1 and info["episode"]["length"] == 2

    sparse = envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=lift_file, sparse=True, dataset_proportion=0.5)
    assert sparse.reward_fn(1.0) == 0.0 and sparse.reward_fn(0.0) == -1.0
    np.testing.assert_array_equal(sparse.train_dataset["terminals"], [0, 0, 1, 0, 1])


# ---- the real simulator (optional extra) ----------------------------------------------------------


@pytest.fixture(scope="module")
def lift_env(tmp_path_factory):
    pytest.importorskip(
        "robosuite",
        reason="the robomimic simulator extra is not installed "
        "(pip install -r requirements-robomimic.txt in its own venv; see docs/robomimic.md)",
    )
    path = write_robomimic_file(tmp_path_factory.mktemp("rm") / "low_dim_v15.hdf5")
    env = ru.make_robomimic_env("lift-mh-low_dim", ru.load_env_meta(path), seed=0)
    yield env
    env.close()


def test_lift_env_from_file_metadata(lift_env):
    env = EpisodeMonitor(lift_env)
    assert env.observation_space.shape == (19,) and env.action_space.shape == (7,)
    np.testing.assert_array_equal(env.action_space.low, -np.ones(7))
    np.testing.assert_array_equal(env.action_space.high, np.ones(7))
    assert lift_env.max_episode_steps == 300
    before = np.random.get_state()[1].copy()
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=1)
    c, _ = env.reset(seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[9:12], c[9:12])  # the cube starts elsewhere
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    ob, info = env.reset(seed=0)
    assert ob.dtype == np.float32 and 0.7 < ob[11] < 0.9  # the cube rests on the table
    n, done = 0, False
    while not done:
        ob, reward, terminated, truncated, info = env.step(np.zeros(7))
        n, done = n + 1, terminated or truncated
        assert reward == 0.0 and info["success"] == 0 and ru.reward_transform(reward) == -1.0
    assert (n, terminated, truncated, info["episode"]["length"]) == (300, False, True, 300)


def test_lift_env_scripted_grasp_succeeds(lift_env):
    """Move to the cube, close the gripper, lift: the episode ends at the first success with reward 1."""
    ob, _ = lift_env.reset(seed=3)
    for t in range(150):
        action = np.zeros(7)
        if t < 60:
            action[:3], action[6] = np.clip((ob[9:12] - ob[:3]) * 10, -1, 1), -1.0  # reach, gripper open
        elif t < 80:
            action[6] = 1.0  # close
        else:
            action[2], action[6] = 1.0, 1.0  # lift
        ob, reward, terminated, truncated, info = lift_env.step(action)
        if terminated or truncated:
            break
    assert (terminated, truncated, info["success"], reward) == (True, False, 1, 1.0)
    assert ru.reward_transform(reward) == 0.0 and t < 150
