"""robomimic low-dim tasks: offline data from local v1.5 hdf5 files, online envs built with robosuite.

Names: `<task>-<type>-low_dim` with <task> in `EPISODE_CAPS` (lift, can, square, transport, tool_hang) and
<type> in `DATASET_TYPES` (mh: multi-human, ph: proficient-human); the paper uses lift/can/square-mh.

Files: `<dataset_dir or ~/.robomimic>/<task>/<type>/low_dim_v15.hdf5` (robomimic's v1.5 release, published in
the Hugging Face dataset `robomimic/robomimic_datasets` as `v1.5/<task>/<type>/low_dim_v15.hdf5`; fetched by
`python -m envs.download_datasets --env_names=lift-mh-low_dim,...`), or one explicit `dataset_path`. Before
training, `check_dataset_file` refuses a wrong or damaged file: not readable as hdf5 (e.g. truncated), another
task's env, a robosuite version other than 1.5, or a demo count other than the release's (`OFFICIAL_NUM_DEMOS`:
300 for MH, 200 for PH). Layout read (h5py only, no simulator needed):

    data.attrs['env_args']      JSON {'env_name': 'Lift', 'env_version': '1.5.1', 'env_kwargs': {...}}
    data/demo_<i>/actions       (T, A)  in [-1, 1]
    data/demo_<i>/rewards       (T,)    r(s_{t+1}): 1 if the task is solved after the action, else 0
    data/demo_<i>/dones         (T,)    1 at success states and at the demo's last step
    data/demo_<i>/obs/<key>     (T, d)  for <key> in OBS_KEYS (and others, ignored)
    data/demo_<i>/next_obs/<key>

Demos are read in numeric order (demo_0, demo_1, demo_2, ..., demo_10) and concatenated. Observations are
the four `OBS_KEYS` concatenated in that order (lift: 3 + 4 + 2 + 10 = 19 numbers). For one demo of
3 steps that reaches success on its last step:

    stored  rewards     [ 0,  0,  1]     dones [0, 0, 1]
    loaded  rewards     [-1, -1,  0]     reward_transform: r - 1 (the same function is applied online)
            masks       [ 1,  1,  0]     1 - dones: no bootstrap from a success state
            terminals   [ 0,  0,  1]     dones, and always 1 on a demo's last step (trajectory end)
            actions     clipped to [-1 + eps, 1 - eps] like the OGBench data

Online envs (`RobomimicLowDimEnv`) are robosuite environments created from that `env_args` (the
simulator extra, `pip install -r requirements-robomimic.txt`, is imported only here, when a robomimic
env is made). An episode ends (terminated) at the first success (`info['success'] = 1`), else it is
truncated at the task's cap `EPISODE_CAPS` with `info['success'] = 0`. The env returns robosuite's own
reward (1 on success, else 0 with the stored `reward_shaping=False`); the driver applies `reward_transform`
to it (`EnvAndDatasets.reward_fn`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.metadata
import json
import logging
import os
import re
import shlex

import gymnasium
import numpy as np

from envs import provenance
from envs.common import (
    DataOptions,
    EnvAndDatasets,
    EnvName,
    EpisodeMonitor,
    Family,
    cut_and_sparsify,
    never_sparse,
    no_numbered_tasks,
    sparse_reward_transform,
)
from utils import seeding
from utils.files import non_file_kind

logger = logging.getLogger(__name__)

# Per-task episode cap of the online envs (the reference's values).
EPISODE_CAPS = {"lift": 300, "can": 300, "square": 400, "transport": 800, "tool_hang": 1000}
DATASET_TYPES = ("mh", "ph")
# Low-dim observation keys, concatenated in this order offline and online. For the two-arm transport
# task these are robot0's keys only, as in the reference.
OBS_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "object")
DEFAULT_DATASET_DIR = "~/.robomimic"
DATASET_FILE = "low_dim_v15.hdf5"
REQUIREMENTS_FILE = "requirements-robomimic.txt"
SUPPORTED_PATTERN = f"{{{','.join(EPISODE_CAPS)}}}-{{{','.join(DATASET_TYPES)}}}-low_dim"

# robosuite env of each task, as stored in `env_args['env_name']` of robomimic's files.
ROBOSUITE_ENV_NAMES = {
    "lift": "Lift",
    "can": "PickPlaceCan",
    "square": "NutAssemblySquare",
    "transport": "TwoArmTransport",
    "tool_hang": "ToolHang",
}
# Demos in robomimic's v1.5 low-dim files: MH 6 operators x 50 (no tool_hang MH exists), PH 200.
OFFICIAL_NUM_DEMOS = {
    **{(task, "mh"): 300 for task in ("lift", "can", "square", "transport")},
    **{(task, "ph"): 200 for task in EPISODE_CAPS},
}
# robosuite version (major.minor) the v1.5 files were recorded with (`env_args['env_version']`, e.g. '1.5.1').
DATASET_ROBOSUITE_VERSION = "1.5"
# Where robomimic publishes its v1.5 datasets (a Hugging Face dataset repository; `robomimic.DATASET_REGISTRY`).
DOWNLOAD_BASE_URL = "https://huggingface.co/datasets/robomimic/robomimic_datasets/resolve/main"

_NAME_RE = re.compile(rf"^(?P<task>{'|'.join(EPISODE_CAPS)})-(?P<type>{'|'.join(DATASET_TYPES)})-low_dim\Z")
_DEMO_RE = re.compile(r"^demo_(\d+)$")


def is_robomimic_env(env_name: str) -> bool:
    """True for `{lift,can,square,transport,tool_hang}-{mh,ph}-low_dim`; imports no simulator."""
    return _NAME_RE.match(env_name) is not None


def parse_robomimic_name(env_name: str) -> tuple[str, str]:
    """`'lift-mh-low_dim' -> ('lift', 'mh')`.

    Raises:
        ValueError: not a supported name (the message gives `SUPPORTED_PATTERN`).
    """
    m = _NAME_RE.match(env_name)
    if m is None:
        raise ValueError(f"Not a supported robomimic env name: {env_name!r}. Supported: {SUPPORTED_PATTERN}")
    return m["task"], m["type"]


def episode_cap(env_name: str) -> int:
    """Online episode cap of the task: lift/can 300, square 400, transport 800, tool_hang 1000."""
    return EPISODE_CAPS[parse_robomimic_name(env_name)[0]]


def reward_transform(rewards):
    """`r -> r - 1` as float32: 0 at a success, -1 elsewhere. Applied to offline and online rewards alike.

    Returns:
        np.float32 for a scalar, else a float32 array of the same shape.
    """
    out = np.asarray(rewards, dtype=np.float32) - np.float32(1.0)
    return out[()] if out.ndim == 0 else out


def default_dataset_path(env_name: str, dataset_dir: str | None = None) -> str:
    """`<dataset_dir or ~/.robomimic>/<task>/<type>/low_dim_v15.hdf5`, user-expanded."""
    task, dataset_type = parse_robomimic_name(env_name)
    root = os.path.expanduser(dataset_dir or DEFAULT_DATASET_DIR)
    return os.path.join(root, task, dataset_type, DATASET_FILE)


def download_url(env_name: str, base_url: str = DOWNLOAD_BASE_URL) -> str:
    """`<base_url>/v1.5/<task>/<type>/low_dim_v15.hdf5`, the official file of `env_name`."""
    task, dataset_type = parse_robomimic_name(env_name)
    return f"{base_url.rstrip('/')}/v1.5/{task}/{dataset_type}/{DATASET_FILE}"


def _how_to_get(env_name: str, path: str) -> str:
    task, dataset_type = parse_robomimic_name(env_name)
    default = os.path.join(DEFAULT_DATASET_DIR, task, dataset_type, DATASET_FILE)
    command, target = f"python -m envs.download_datasets --env_names={env_name}", default
    suffix = os.path.join("", task, dataset_type, DATASET_FILE)
    path = os.path.abspath(os.path.expanduser(path))
    if path.endswith(os.sep + suffix) and path != default_dataset_path(env_name):
        root = path[: -len(suffix) - 1]
        command, target = f"{command} --robomimic_dir={shlex.quote(root)}", path
    return (
        f"Download it with\n  {command}\n"
        f"(it writes {target}), or on a machine with network access from\n  {download_url(env_name)}\n"
        f"(robomimic's dataset v1.5/{task}/{dataset_type}/{DATASET_FILE}) and put it at {default}, or pass "
        f"--dataset_path=/path/to/{DATASET_FILE} (or a directory laid out as <dir>/{task}/{dataset_type}/"
        f"{DATASET_FILE}). These are human demonstrations: there is no local generator."
    )


def _missing_file_error(path: str, env_name: str) -> FileNotFoundError:
    task, dataset_type = parse_robomimic_name(env_name)
    return FileNotFoundError(
        f"robomimic dataset file not found: {path}\n"
        f"{env_name} needs robomimic's v1.5 {dataset_type.upper()} low-dim dataset of the {task!r} task. "
        f"{_how_to_get(env_name, path)}"
    )


def resolve_dataset_path(env_name: str, dataset_path: str | None = None, dataset_dir: str | None = None) -> str:
    """The hdf5 file of `env_name`: `dataset_path`, else `default_dataset_path(env_name, dataset_dir)`;
    `FileNotFoundError` saying where to get it, `ValueError` for a bad name or a path that is no regular file."""
    path = os.path.expanduser(dataset_path) if dataset_path else default_dataset_path(env_name, dataset_dir)
    kind = non_file_kind(path)
    if kind is not None:
        raise ValueError(f"--dataset_path={path} is {kind}, not a data file; pass robomimic's {DATASET_FILE}.")
    if not os.path.isfile(path):
        raise _missing_file_error(path, env_name)
    return path


def _sorted_demos(data, path: str) -> list[str]:
    demos = [k for k in data.keys() if _DEMO_RE.match(k)]
    if not demos:
        raise ValueError(f"robomimic file {path}: the data group holds no demo_<i> groups (keys: {list(data)[:5]}).")
    return sorted(demos, key=lambda k: int(_DEMO_RE.match(k)[1]))  # numeric: demo_2 before demo_10


def _read_env_meta(data, path: str) -> dict:
    if "env_args" not in data.attrs:
        raise ValueError(f'robomimic file {path}: data.attrs has no "env_args" (the env metadata).')
    raw = data.attrs["env_args"]
    meta = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
    if not isinstance(meta, dict) or "env_name" not in meta or "env_kwargs" not in meta:
        raise ValueError(f'robomimic file {path}: env_args must hold "env_name" and "env_kwargs", got {meta!r}.')
    return meta


def _get_again(env_name: str | None) -> str:
    if env_name is None:
        return (
            f"Delete it and download it again: python -m envs.download_datasets --env_names=<task>-<mh|ph>-low_dim, "
            f"or {DOWNLOAD_BASE_URL}/v1.5/<task>/<mh|ph>/{DATASET_FILE}."
        )
    return (
        f"Delete it and download it again: python -m envs.download_datasets --env_names={env_name}, "
        f"or {download_url(env_name)}."
    )


def _open_data(path: str, env_name: str | None = None):
    import h5py  # noqa: PLC0415  (h5py is a base requirement; imported here to keep module import light)

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(
            f"robomimic file {path} cannot be read as hdf5: it is truncated (e.g. an interrupted download) or not "
            f"an hdf5 file ({e}). {_get_again(env_name)}"
        ) from e
    if "data" not in f:
        f.close()
        raise ValueError(f'robomimic file {path} has no "data" group; it is not a robomimic dataset.')
    return f


def check_dataset_file(path: str, env_name: str) -> dict:
    """Check, from metadata only, that `path` is robomimic's complete v1.5 low-dim file of `env_name`: returns
    `{'robosuite_env', 'env_version', 'num_demos', 'num_samples'}`. `FileNotFoundError` for no file;
    `ValueError` naming the file, the finding and how to get the right file for an unreadable or truncated
    file, another task's `env_args`, a robosuite version other than 1.5, a demo count other than
    `OFFICIAL_NUM_DEMOS`, or a `total` that disagrees with the demos."""
    if not os.path.isfile(path):
        raise _missing_file_error(path, env_name)
    with _open_data(path, env_name) as f:
        return _check_data(f["data"], path, env_name)[0]


def _check_data(data, path: str, env_name: str) -> tuple[dict, dict]:
    """`(check_dataset_file's findings, the env metadata)` of the open `data` group of `path`."""
    task, dataset_type = parse_robomimic_name(env_name)
    fix = (
        f"Use robomimic's v1.5 file {download_url(env_name)} (python -m envs.download_datasets --env_names={env_name})."
    )
    meta = _read_env_meta(data, path)
    expected_env = ROBOSUITE_ENV_NAMES[task]
    if meta["env_name"] != expected_env:
        raise ValueError(
            f"robomimic file {path} holds {meta['env_name']!r} demos, but {env_name} needs {expected_env!r}: "
            f"a file of another task. {fix}"
        )
    version = meta.get("env_version")
    if version is None or str(version).split(".")[:2] != DATASET_ROBOSUITE_VERSION.split("."):
        raise ValueError(
            f"robomimic file {path} was recorded with robosuite {version} (env_args['env_version']), not "
            f"{DATASET_ROBOSUITE_VERSION}.x: not the v1.5 release ({DATASET_FILE}). {fix}"
        )
    demos = _sorted_demos(data, path)
    expected = OFFICIAL_NUM_DEMOS.get((task, dataset_type))
    if expected is not None and len(demos) != expected:
        raise ValueError(
            f"robomimic file {path} holds {len(demos)} demos; robomimic's v1.5 {dataset_type.upper()} file of "
            f"{task!r} has {expected}. It is another dataset type or a filtered/partial copy. {fix}"
        )
    try:
        lengths = {demo: data[demo]["actions"].shape[0] for demo in demos if "actions" in data[demo]}
        stored = {demo: data[demo].attrs.get("num_samples") for demo in demos}
        total = data.attrs.get("total")
    except (OSError, KeyError) as e:
        raise ValueError(f"robomimic file {path} is damaged: reading its demo metadata failed ({e}). {fix}") from e
    wrong = [d for d, n in stored.items() if n is not None and d in lengths and int(n) != lengths[d]]
    if wrong:
        raise ValueError(
            f"robomimic file {path}: {wrong[0]} stores num_samples={stored[wrong[0]]} but has "
            f"{lengths[wrong[0]]} actions ({len(wrong)} such demo(s)); the file is damaged. {fix}"
        )
    num_samples = int(sum(lengths.values()))
    if total is not None and int(total) != num_samples:
        raise ValueError(
            f"robomimic file {path}: data.attrs['total'] = {int(total)} but its demos hold {num_samples} "
            f"samples; the file is damaged or was edited. {fix}"
        )
    facts = {"robosuite_env": meta["env_name"], "env_version": str(version), "num_demos": len(demos)}
    return {**facts, "num_samples": num_samples}, meta


def dataset_provenance(path: str, facts: dict, compute_hash: bool = True) -> dict:
    """The provenance record of a robomimic file (`envs.provenance`): source 'official' (robomimic's release).

    Adds `facts`, `check_dataset_file`'s findings on the file; `verified` is True when
    `download_manifest.json` next to the file (written by `envs.download_datasets`) records the same sha256, else
    None (no record) or False (differs).
    """
    record = provenance.file_record(path, "train", compute_hash)
    record["source"] = "official"
    entry = provenance.read_manifest(os.path.dirname(record["path"])).get(os.path.basename(record["path"]))
    verified = None if entry is None or record["sha256"] is None else entry.get("sha256") == record["sha256"]
    record["verified"] = verified
    record["evidence"] = {
        True: f"sha256 matches {provenance.MANIFEST_NAME} (downloaded from {entry and entry.get('url')})",
        False: f"sha256 differs from the one {provenance.MANIFEST_NAME} recorded at download",
        None: "robomimic's v1.5 layout, task, robosuite version and demo count (check_dataset_file)",
    }[verified]
    if entry is not None:
        record["url"] = entry.get("url")
    record.update(facts)
    return record


def load_env_meta(path: str) -> dict:
    """`json.loads(data.attrs['env_args'])` of a robomimic hdf5 file; `FileNotFoundError`, or `ValueError` for no
    readable robomimic file or no usable `env_args`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"robomimic dataset file not found: {path}")
    with _open_data(path) as f:
        return _read_env_meta(f["data"], path)


def _read_demo(group) -> dict[str, np.ndarray]:
    obs = np.concatenate([np.asarray(group[f"obs/{k}"], dtype=np.float32) for k in OBS_KEYS], axis=-1)
    next_obs = np.concatenate([np.asarray(group[f"next_obs/{k}"], dtype=np.float32) for k in OBS_KEYS], axis=-1)
    return {
        "observations": obs,  # (T, ob_dim)
        "next_observations": next_obs,
        "actions": np.asarray(group["actions"], dtype=np.float32),
        "rewards": np.asarray(group["rewards"], dtype=np.float32).reshape(-1),
        "dones": np.asarray(group["dones"], dtype=np.float32).reshape(-1),
    }


def load_robomimic_dataset(path: str, action_clip_eps: float | None = 1e-5) -> dict[str, np.ndarray]:
    """Every demo of a robomimic low-dim file, in numeric order, as float32 transitions (the module docstring's
    table): `observations`, `next_observations (N, ob)` (`OBS_KEYS` concatenated), `actions (N, A)` clipped to
    `[-1 + eps, 1 - eps]` (None: as stored), `rewards` (`reward_transform`: 0 at success, else -1), `masks`
    (1 - dones), `terminals (N,)` (dones, and 1 on each demo's last step). `FileNotFoundError`; `ValueError`
    for an unreadable file, no demos, or a demo with a missing key, lengths that disagree, or NaN/inf."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"robomimic dataset file not found: {path}")
    with _open_data(path) as f:
        return _read_demos(f["data"], path, action_clip_eps)


def _read_demos(data, path: str, action_clip_eps: float | None) -> dict[str, np.ndarray]:
    """`load_robomimic_dataset` of the open `data` group of `path`."""
    parts = {k: [] for k in ("observations", "actions", "rewards", "dones", "next_observations")}
    for demo in _sorted_demos(data, path):
        group = data[demo]
        needed = ["actions", "rewards", "dones"] + [f"{o}/{k}" for o in ("obs", "next_obs") for k in OBS_KEYS]
        missing = [k for k in needed if k not in group]
        if missing:
            raise ValueError(f"robomimic file {path}: {demo} lacks {missing}.")
        try:
            arrays = _read_demo(group)
        except OSError as e:  # h5py's error for data past the end of a truncated file, or a bad chunk
            raise ValueError(
                f"robomimic file {path}: reading {demo} failed ({e}); the file is truncated or damaged. "
                f"{_get_again(None)}"
            ) from e
        lengths = {k: len(v) for k, v in arrays.items()}
        if len(set(lengths.values())) != 1 or lengths["actions"] == 0:
            raise ValueError(f"robomimic file {path}: {demo} has mismatched or zero lengths {lengths}.")
        bad = [k for k, v in arrays.items() if not np.isfinite(v).all()]
        if bad:
            raise ValueError(f"robomimic file {path}: {demo} has NaN/inf in {bad}.")
        for k, v in arrays.items():
            parts[k].append(v)

    dones = np.concatenate(parts.pop("dones"))
    terminals = dones.copy()
    # The last step of every demo ends a trajectory even where `dones` is 0 there, so a sampled window
    # never runs into the next demo. Masks stay 1 - dones (such an end is a cut, not a success).
    terminals[np.cumsum([len(a) for a in parts["actions"]]) - 1] = 1.0
    dataset = {k: np.concatenate(v, axis=0) for k, v in parts.items()}
    dataset["rewards"] = reward_transform(dataset["rewards"])
    dataset["masks"] = (1.0 - dones).astype(np.float32)
    dataset["terminals"] = terminals
    if action_clip_eps is not None:
        dataset["actions"] = np.clip(dataset["actions"], -1 + action_clip_eps, 1 - action_clip_eps)
    return dataset


# ---- simulator (optional extra) -----------------------------------------------------------------


def import_robosuite():
    """Import robosuite (the optional extra), its per-reset controller warnings quieted; `ImportError` saying
    how to install the extra."""
    try:
        import robosuite  # noqa: PLC0415  (optional extra, imported only when a robomimic env is made)
    except ImportError as e:
        raise ImportError(
            f"robomimic envs need the optional simulator extra (robosuite 1.5.1 on mujoco 3.8.1), which cannot "
            f"be imported here: {e}\n"
            f"Install it into its own venv (its mujoco/dm_control pins differ from requirements.txt):\n"
            f"  python3.11 -m venv ~/.venvs/qc-robomimic && . ~/.venvs/qc-robomimic/bin/activate\n"
            f"  grep -vE '^(mujoco|dm_control)==' requirements.txt > /tmp/requirements-base.txt\n"
            f"  pip install -r /tmp/requirements-base.txt -r {REQUIREMENTS_FILE}"
        ) from e
    # robosuite logs several "controller config for <part> skipped" warnings at every reset.
    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    return robosuite


def robosuite_kwargs(env_meta: dict) -> dict:
    """The stored `env_kwargs` adapted for low-dim use without rendering (what robomimic's EnvRobosuite does).

    Raises:
        ValueError: the controller config is not in robosuite 1.5's composite format (not a v1.5 file).
    """
    kwargs = copy.deepcopy(env_meta["env_kwargs"])
    controller = kwargs.get("controller_configs")
    if isinstance(controller, dict) and "body_parts" not in controller:
        raise ValueError(
            f"env_args of {env_meta.get('env_name')!r} has a pre-1.5 controller config ({controller.get('type')}); "
            f"use robomimic's v1.5 files ({DATASET_FILE})."
        )
    kwargs.update(
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        camera_depths=False,
        ignore_done=True,  # the wrapper owns episode ends
        use_object_obs=True,
    )
    return kwargs


class RobomimicLowDimEnv(gymnasium.Env):
    """A robosuite env as a gymnasium env: `OBS_KEYS` concatenated (float32), actions in `[-1, 1]^A` (clipped),
    robosuite's reward untransformed; terminated at the first success (`info['success'] = 1`), else truncated
    at `max_episode_steps`. robosuite 1.5.1 draws placements and joint noise from the global `np.random`: each
    env swaps its own `RandomState` (seeded by `seed` and `reset(seed=...)`) in around robosuite calls only,
    so envs share no stream and the caller's global state is left as it was."""

    metadata = {"render_modes": []}

    def __init__(self, robosuite_env, max_episode_steps: int, seed: int | None = None):
        self._env = robosuite_env
        self.max_episode_steps = int(max_episode_steps)
        self._sim_rng = np.random.RandomState(seed)
        self._t = 0
        low, _ = robosuite_env.action_spec
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=np.shape(low), dtype=np.float32)
        ob = self._flatten(self._call(robosuite_env.reset))
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=ob.shape, dtype=np.float32)

    @property
    def robosuite_env(self):
        return self._env

    def _call(self, fn, *args):
        outer = np.random.get_state()
        np.random.set_state(self._sim_rng.get_state())
        try:
            return fn(*args)
        finally:
            self._sim_rng.set_state(np.random.get_state())
            np.random.set_state(outer)

    @staticmethod
    def _flatten(raw: dict) -> np.ndarray:
        parts = [raw["object-state"] if k == "object" else raw[k] for k in OBS_KEYS]
        return np.concatenate([np.asarray(p, dtype=np.float32).reshape(-1) for p in parts])  # (ob_dim,)

    def is_success(self) -> bool:
        # robosuite's task-success test (what robomimic's EnvRobosuite.is_success reports as 'task').
        return bool(self._env._check_success())

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._sim_rng = np.random.RandomState(seed)
        self._t = 0
        return self._flatten(self._call(self._env.reset)), {}

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action has shape {action.shape}, expected {self.action_space.shape}.")
        raw, reward, _, info = self._call(self._env.step, np.clip(action, -1.0, 1.0))
        self._t += 1
        success = self.is_success()
        info = dict(info, success=int(success))
        terminated = success
        truncated = not terminated and self._t >= self.max_episode_steps
        return self._flatten(raw), float(reward), terminated, truncated, info

    def render(self):
        raise NotImplementedError("robomimic envs are created without a renderer; run with --video_episodes=0.")

    def close(self):
        self._env.close()


def make_robomimic_env(env_name: str, env_meta: dict, seed: int | None = None) -> RobomimicLowDimEnv:
    """The online env of `env_name` from a dataset's env metadata (`load_env_meta`); `ImportError` without the
    simulator extra, `ValueError` for a bad name or pre-1.5 metadata."""
    cap = episode_cap(env_name)
    robosuite = import_robosuite()
    stored = env_meta.get("env_version")
    if stored is not None and str(stored).split(".")[:2] != robosuite.__version__.split(".")[:2]:
        logger.warning(
            "%s: the dataset was recorded with robosuite %s, this is robosuite %s.",
            env_name,
            stored,
            robosuite.__version__,
        )
    raw_env = robosuite.make(env_meta["env_name"], **robosuite_kwargs(env_meta))
    return RobomimicLowDimEnv(raw_env, max_episode_steps=cap, seed=seed)


def run_metadata(env_name: str) -> dict:
    """Facts to store with a run: robosuite/mujoco versions, episode cap, reward transform (imports no simulator)."""
    versions = {}
    for package in ("robosuite", "mujoco"):
        try:
            versions[f"{package}_version"] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[f"{package}_version"] = None
    return {
        **versions,
        "robomimic_dataset": DATASET_FILE,
        "episode_cap": episode_cap(env_name),
        "reward_transform": "r - 1 (offline and online)",
    }


# ---- the family -----------------------------------------------------------------------------------------------

# Memory of one robosuite env (its MuJoCo model), an upper bound of what was measured here.
ENV_BYTES = 170 * 2**20


def make_eval_env(env_name: str, env_meta: dict, seed: int | None = None) -> EpisodeMonitor:
    """One monitored env of `env_name` from a dataset's env metadata (`load_env_meta`), its simulator seeded from
    `seed`, not reset; `ImportError` without the simulator extra."""
    return EpisodeMonitor(make_robomimic_env(env_name, env_meta, seed=seed))


def _envs(name: EnvName, env_meta: dict, seed: int, build_eval_env: bool) -> dict:
    """The `EnvAndDatasets` fields of `seed`'s envs: the training env (reset once), the evaluation env's maker and,
    with `build_eval_env`, the evaluation env itself (reset once)."""
    env = make_eval_env(name.name, env_meta, seed=seeding.env_seed(seed, "env"))
    env.reset(seed=seeding.env_seed(seed, "env"))
    eval_seed = seeding.env_seed(seed, "eval_env")
    make = functools.partial(make_eval_env, name.name, env_meta, eval_seed)
    eval_env = make() if build_eval_env else None
    if eval_env is not None:
        eval_env.reset(seed=eval_seed)
    return {"env": env, "make_eval_env": make, "eval_env_seed": eval_seed, "built_eval_env": eval_env}


def load(name: EnvName, options: DataOptions) -> EnvAndDatasets:
    """The envs and offline data of a robomimic task: the hdf5 file of `options.dataset_path` (else under
    `options.dataset_dir` or `~/.robomimic`), checked and recorded once, rewards `reward_transform`ed offline and
    online (then `--sparse`, if asked). `ValueError` for a bad file or one that does not fit the env;
    `FileNotFoundError` (where to get it); `ImportError` (how to install the simulator extra)."""
    path = resolve_dataset_path(name.name, options.dataset_path, options.dataset_dir)
    with _open_data(path, name.name) as f:  # opened once: checked (check_dataset_file), then read
        facts, env_meta = _check_data(f["data"], path, name.name)
        train = _read_demos(f["data"], path, options.action_clip_eps)
    record = dataset_provenance(path, facts, options.hash_datasets)
    train = cut_and_sparsify(train, options.dataset_proportion, options.sparse)
    envs = _envs(name, env_meta, options.seed, build_eval_env=True)
    for field, space in (("actions", envs["env"].action_space), ("observations", envs["env"].observation_space)):
        if space.shape[-1] != train[field].shape[-1]:
            raise ValueError(f"{path}: {field} have {train[field].shape[-1]} dims, the env has {space.shape[-1]}.")
    reward_fn = (lambda r: sparse_reward_transform(reward_transform(r))) if options.sparse else reward_transform
    return EnvAndDatasets(
        train_dataset=train,
        val_dataset=None,
        reward_fn=reward_fn,
        metadata={**run_metadata(name.name), "env": name.record(), "datasets": [record]},
        **envs,
    )


def envs_for_seed(env_data: EnvAndDatasets, name: EnvName, seed: int) -> EnvAndDatasets:
    """`env_data` with the envs of `seed` (datasets shared), as `load` builds them for `options.seed = seed`."""
    env_meta = load_env_meta(env_data.metadata["datasets"][0]["path"])
    return dataclasses.replace(env_data, **_envs(name, env_meta, seed, build_eval_env=False))


def parse_env_name(env_name: str) -> EnvName | None:
    """`Family.parse`: `<task>-<mh|ph>-low_dim`, else None. The papers ran the multi-human data: its curves are
    named by the task alone (`lift`), others keep their type (`lift-ph`)."""
    m = _NAME_RE.match(env_name)
    if m is None:
        return None
    label = m["task"] if m["type"] == "mh" else f"{m['task']}-{m['type']}"
    return EnvName("robomimic", env_name, m["task"], m["type"], None, False, label, label, env_name)


FAMILY = Family(
    name="robomimic",
    patterns=(SUPPORTED_PATTERN,),
    parse=parse_env_name,
    load=load,
    envs_for_seed=envs_for_seed,
    renders=False,
    env_bytes=ENV_BYTES,
    sparse_default=never_sparse,
    with_task=no_numbered_tasks,
)
