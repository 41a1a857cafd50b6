"""What every benchmark family shares: the parsed env name, the family record, what loading returns, the
episode monitor, the reward transforms, the dataset cut and shard cycling.

A family (`envs/<family>.py`, `FAMILY = Family(...)`) owns everything that depends on its env names: their
grammar, its envs, its data and where to get them. `envs/__init__.py` finds the families; envs/README.md says
how to add one.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence

import gymnasium
import numpy as np

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EnvName:
    """An env name parsed once by its family (`envs.parse`). `task` is the task number of a single-task env
    (None: the family's default task, or a family without numbered tasks); `paper_domain` and `paper_task` are
    the names the papers' released results use for its curve (`('cube-double', 'cube-double-play-task2')`;
    data the papers did not use keeps its type: `('cube-double-noisy', ...)`); `short` names it in sweep run
    names (`cube-double-t2`). `record()` is the `env` block a run writes into `flags.json`."""

    family: str
    name: str
    domain: str
    dataset_type: str | None
    task: int | None
    goal_conditioned: bool
    paper_domain: str
    paper_task: str
    short: str

    def record(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """How a run loads its env and data (the driver flags of the same names; docs/datasets.md). `dataset_path`:
    one file; `dataset_dir`: the family's data folder (OGBench: a folder of shards too); `dataset_proportion` in
    (0, 1] keeps the first rows; `sparse`: `sparse_reward_transform` offline and online; `seed`: the envs' seeds
    (`utils.seeding.env_seed`); `success_timing`, `dataset_success_timing`: 'post' or 'pre' (OGBench's; other
    families have no such setting and ignore them); `load_val` loads a validation file where one exists;
    `hash_datasets` records each file's sha256."""

    dataset_path: str | None = None
    dataset_dir: str | None = None
    dataset_proportion: float = 1.0
    sparse: bool = False
    action_clip_eps: float | None = 1e-5
    seed: int = 0
    success_timing: str = "post"
    dataset_success_timing: str = "pre"
    load_val: bool = False
    hash_datasets: bool = True


@dataclasses.dataclass(frozen=True)
class Family:
    """A benchmark family: what only it knows about its envs.

    `name`; `patterns`: its env names, human-readable (errors and --help); `parse(name) -> EnvName | None` (None:
    not one of its names; `ValueError` for one of its names with a bad part, e.g. task 9); `load(name: EnvName,
    options: DataOptions) -> EnvAndDatasets`, the envs seeded from `options.seed` and the data with one
    provenance record per file (`metadata['datasets']`) and the `env` block (`metadata['env']`);
    `envs_for_seed(env_data, name, seed) -> EnvAndDatasets`: the same data with the envs of another seed;
    `renders`: its envs can draw frames (`--video_episodes`); `env_bytes`: memory of one env, for the run's
    memory estimate; `sparse_default(name) -> bool`: the papers train this env with `--sparse=True`;
    `with_task(name, task) -> str`: the env name of another task of the same domain and data (`ValueError` for a
    family or env without numbered tasks).
    """

    name: str
    patterns: tuple[str, ...]
    parse: Callable[[str], EnvName | None]
    load: Callable[[EnvName, DataOptions], EnvAndDatasets]
    envs_for_seed: Callable[[EnvAndDatasets, EnvName, int], EnvAndDatasets]
    renders: bool
    env_bytes: int
    sparse_default: Callable[[EnvName], bool]
    with_task: Callable[[EnvName, int], str]


def no_numbered_tasks(name: EnvName, task: int) -> str:
    """`Family.with_task` of a family without numbered tasks: always `ValueError`."""
    raise ValueError(
        "--tasks needs an OGBench single-task --env_name (<domain>-play-singletask[-taskN]-v0) or another env with "
        f"numbered tasks; {name.name} has none"
    )


def never_sparse(name: EnvName) -> bool:
    """`Family.sparse_default` of a family whose papers never use `--sparse`."""
    return False


def dense_reward(rewards):
    """Identity online reward transform (runs without --sparse)."""
    return rewards


def sparse_reward_transform(rewards):
    """`r -> -(r != 0)` as float32: -1 for any nonzero reward (task not solved), 0 for reward 0 (solved).

    Args:
        rewards: scalar or array of rewards (OGBench: <= 0, minus the number of unsatisfied conditions).

    Returns:
        np.float32 for a scalar, else a float32 array of the same shape (zeros are +0.0, not -0.0).
    """
    out = np.where(np.asarray(rewards) != 0, np.float32(-1.0), np.float32(0.0)).astype(np.float32)
    return out[()] if out.ndim == 0 else out


def cut_and_sparsify(dataset: dict, dataset_proportion: float, sparse: bool) -> dict:
    """The first `dataset_proportion` of the rows (the last kept row then ends a trajectory), rewards through
    `sparse_reward_transform` when `sparse`. `ValueError` when the cut keeps no row."""
    if not 0.0 < dataset_proportion <= 1.0:
        raise ValueError(f"dataset_proportion must be in (0, 1], got {dataset_proportion}.")
    if dataset_proportion < 1.0:
        n = int(len(dataset["rewards"]) * dataset_proportion)
        if n < 1:
            raise ValueError(f"dataset_proportion={dataset_proportion} keeps no row of {len(dataset['rewards'])}.")
        dataset = {k: v[:n] for k, v in dataset.items()}
        # Deviation from the reference (which leaves it 0): the cut row ends a trajectory, so no
        # sampled window treats the rows after the cut (clipped to the last row) as a continuation.
        dataset["terminals"] = dataset["terminals"].copy()
        dataset["terminals"][-1] = 1.0
    if sparse:
        dataset = {**dataset, "rewards": sparse_reward_transform(dataset["rewards"])}
    return dataset


@dataclasses.dataclass
class EnvAndDatasets:
    """What `Family.load` returns: `env`, `eval_env` (`EpisodeMonitor`-wrapped); `train_dataset`,
    `val_dataset` (None unless loaded): dicts of float32 `observations, actions, rewards, terminals, masks,
    next_observations` (goal-conditioned: plus `oracle_reps`); `reward_fn`, the online reward transform;
    `next_shard`, a `ShardCycler` for sharded data (else None); `metadata`, the family's facts of the run, its
    `env` block and one provenance record per file (`datasets`); `make_eval_env`, a picklable `() -> env` built
    like `eval_env`, not reset (for `evaluation.make_eval_vector_env`); `goal_conditioned` and `task_names`
    (task id `i` at position `i - 1`; () for single-task envs).

    `eval_env` is built when first read, by `make_eval_env` then one `reset(seed=eval_env_seed)`, unless an
    env was passed as `built_eval_env`: a start pays for one env less before its first step.
    """

    train_dataset: dict
    val_dataset: dict | None
    reward_fn: Callable = dense_reward
    next_shard: Callable[[], dict] | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    make_eval_env: Callable[[], gymnasium.Env] | None = None
    goal_conditioned: bool = False
    task_names: tuple[str, ...] = ()
    eval_env_seed: int | None = None
    built_eval_env: object = None
    env: object = None

    @property
    def eval_env(self):
        if self.built_eval_env is None:
            env = self.make_eval_env()
            env.reset(seed=self.eval_env_seed)
            self.built_eval_env = env
        return self.built_eval_env

    @property
    def num_tasks(self) -> int:
        """Evaluation tasks of a goal-conditioned env (`len(task_names)`); 0 for single-task envs."""
        return len(self.task_names)


class ShardCycler:
    """`() -> dict`: loads the next training shard (wrapping around) with `load(path)`, the function that
    loaded the first one. The reference moves to the next shard every `dataset_replace_interval` offline steps;
    the driver calls this at those steps. `paths` are the shards in cycling order, `index` the one in use (0
    after creation)."""

    def __init__(self, paths: list[str], load: Callable[[str], dict]):
        self.paths, self.index, self._load = list(paths), 0, load

    def __call__(self) -> dict:
        self.index = (self.index + 1) % len(self.paths)
        logger.info("Using dataset shard %d/%d: %s", self.index + 1, len(self.paths), self.paths[self.index])
        return self._load(self.paths[self.index])


# ---- npz data files and shards (OGBench's layout; any family storing npz files may use them) --------------------


def looks_like_npz(path: str) -> bool:
    """False for a file whose first bytes are neither a zip archive's nor a `.npy` array's (a text or pickle file);
    an empty or cut file passes, to be reported as truncated when it is read."""
    with open(path, "rb") as f:
        head = f.read(6)
    return not head or head.startswith(b"PK") or head == b"\x93NUMPY"


def _read_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """`(shape, fortran_order, dtype)` of the `.npy` stream `f`, which is left at the array's first byte."""
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read(f)


def npz_layout(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """`{name: (shape, dtype)}` of every array of the npz archive at `path`, read from the array headers only
    (no data is loaded). `ValueError` naming the file when it is not an npz (zip) archive or a header is
    damaged."""
    if not looks_like_npz(path):
        raise ValueError(f"Dataset file {path} is not an npz archive (its bytes are not a zip file's).")
    layout = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as f:
                    shape, _, dtype = _read_npy_header(f)
                layout[member[: -len(".npy")]] = (shape, dtype)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as e:
        raise ValueError(f"Dataset file {path} is truncated or corrupt ({type(e).__name__}: {e}).") from None
    return layout


def check_shards(paths: list[str]) -> None:
    """Every shard after the first holds the first one's arrays, with its per-row shapes and dtypes (one domain's
    data), read from the headers before anything loads: `ValueError` naming the first shard that does not. The
    first shard is checked in full when it loads (`read_trajectories`, and its fit to the env)."""
    # The per-row arrays (numbers, one row per step); metadata (strings, 0-d) may differ between shards.
    first = {k: v for k, v in npz_layout(paths[0]).items() if len(v[0]) >= 1 and v[1].kind in "biuf"}
    for path in paths[1:]:
        layout = npz_layout(path)
        missing = sorted(set(first) - set(layout))
        if missing:
            raise ValueError(
                f"Dataset shard {path} lacks key(s) {missing} that the first shard {paths[0]} has; all shards of a "
                "run must come from one dataset."
            )
        for key, (shape, dtype) in first.items():
            if layout[key][0][1:] != shape[1:] or layout[key][1] != dtype:
                raise ValueError(
                    f"Dataset shard {path}: {key!r} is {layout[key][1]} of shape (rows, "
                    f"{', '.join(map(str, layout[key][0][1:]))}), the first shard {paths[0]} has {dtype} of "
                    f"(rows, {', '.join(map(str, shape[1:]))}); all shards of a run must come from one dataset."
                )


# The per-row fields of offline transitions (`EnvAndDatasets.train_dataset`); all of them float.
TRANSITION_KEYS = ("observations", "next_observations", "actions", "rewards", "masks", "terminals")


def check_data(arrays: dict, where: str, floats: Sequence[str] = TRANSITION_KEYS) -> None:
    """The checks every offline dataset gets, read from a file (`read_npz`: the stored arrays) or handed over by a
    family's `load` (`envs.load`: the transitions): every array numeric with one row per step, all of one length;
    `floats` (those present) floating-point (ints and bools are refused, not cast: a family's int observations
    would make an int replay buffer that truncates the online values); every float array finite; `masks` and
    `terminals` only 0 and 1, `terminals` 1 on the last row (every trajectory ends); `actions` within [-1, 1]
    (the envs' range: OGBench's files reach 1, its loader clips to 1 - 1e-5).

    Raises:
        ValueError: one line, `'{where}: {field!r} ...'` (`where` names the file), for the first finding.
    """
    for k, v in arrays.items():
        if not isinstance(v, np.ndarray) or v.ndim == 0:
            raise ValueError(f"{where}: {k!r} is {type(v).__name__} {np.shape(v)}, not an array of one row per step.")
        if v.dtype.kind not in "biuf":
            raise ValueError(f"{where}: {k!r} holds {v.dtype}, not numbers.")
        if k in floats and v.dtype.kind != "f":
            raise ValueError(
                f"{where}: {k!r} is {v.dtype}; offline data must be floats (float32): ints are refused, not cast."
            )
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{where}: mismatched lengths {lengths}.")
    for k, v in arrays.items():
        if v.dtype.kind == "f":
            finite = np.isfinite(v).reshape(len(v), -1).all(axis=1)
            if not finite.all():
                bad = np.flatnonzero(~finite)
                raise ValueError(
                    f"{where}: {k!r} has non-finite values (NaN/inf) in {len(bad)} row(s), first at row {bad[0]}."
                )
    for k in ("masks", "terminals"):
        if k in arrays and not np.isin(arrays[k], (0, 1)).all():
            raise ValueError(f"{where}: {k!r} must be 0 or 1, got {np.unique(arrays[k])[:5].tolist()}.")
    if "terminals" in arrays and len(arrays["terminals"]) and not arrays["terminals"][-1]:
        raise ValueError(
            f"{where}: 'terminals' is 0 on the last row: the last row is not a trajectory end (every trajectory "
            "ends with terminals 1)."
        )
    if "actions" in arrays:
        actions = arrays["actions"]
        outside = (np.abs(actions) > 1).reshape(len(actions), -1).any(axis=1)
        if outside.any():
            bad = np.flatnonzero(outside)
            raise ValueError(
                f"{where}: 'actions' has values outside [-1, 1] in {len(bad)} row(s), first at row {bad[0]} "
                f"(range {actions.min():.4g} .. {actions.max():.4g}); envs take actions in [-1, 1]: rescale them."
            )


def read_npz(path: str, keys: tuple, matrix_keys: tuple, regenerate: Callable[[], str]) -> dict[str, np.ndarray]:
    """The arrays `keys` of the npz file of trajectories at `path`, checked: `check_data`'s checks (numbers, one
    length, finite, `terminals` 0/1 and 1 on the last row, `actions` in [-1, 1]), `matrix_keys` 2-D
    `(rows, dim)`, at least 2 rows. `ValueError` naming the file and the finding, with `regenerate()` (how to get
    a good file, written only then) where the file itself is bad; never unpickles."""
    if not looks_like_npz(path):  # numpy would try it as a pickle, and advise allow_pickle
        raise ValueError(f"Dataset file {path} is not an npz archive (its bytes are not a zip file's). {regenerate()}")
    read_errors = (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error, KeyError)
    try:
        npz = np.load(path, allow_pickle=False)
    except read_errors as e:
        raise ValueError(
            f"Dataset file {path} is truncated or corrupt: cannot open it ({type(e).__name__}: {e}). {regenerate()}"
        ) from e
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"Dataset file {path} is a single .npy array, not an npz archive. {regenerate()}")
    with npz:
        missing = [k for k in keys if k not in npz.files]
        if missing:
            raise ValueError(f"Dataset file {path} lacks key(s) {missing} (it has {sorted(npz.files)}). {regenerate()}")
        arrays = {}
        for k in keys:
            try:
                arrays[k] = npz[k]
            except read_errors as e:
                raise ValueError(
                    f"Dataset file {path} is truncated or corrupt: reading {k!r} failed "
                    f"({type(e).__name__}: {e}). {regenerate()}"
                ) from e

    try:
        check_data(arrays, f"Dataset file {path}", floats=())
    except ValueError as e:
        raise ValueError(f"{e} {regenerate()}") from None
    for k in matrix_keys:
        if arrays[k].ndim != 2:
            raise ValueError(f"Dataset file {path}: {k!r} must be 2-D (rows, dim), got {arrays[k].shape}.")
    if len(arrays["observations"]) < 2:
        n = len(arrays["observations"])
        raise ValueError(f"Dataset file {path} holds {n} row(s); at least one transition needs 2.")
    return arrays


def list_dataset_shards(dataset_dir: str, dataset_name: str | None = None) -> list[str]:
    """Sorted training shards (`*.npz` minus `*-val.npz`) of `dataset_dir` whose name starts with `dataset_name`
    without its version (None: every npz); `FileNotFoundError` for a missing directory or no shard."""
    dataset_dir = os.path.expanduser(dataset_dir)
    if not os.path.isdir(dataset_dir):
        raise FileNotFoundError(f"Dataset directory not found: {dataset_dir}")
    prefix = re.sub(r"-v\d+$", "", dataset_name) if dataset_name else ""
    shards = sorted(
        p
        for p in glob.glob(os.path.join(glob.escape(dataset_dir), f"{glob.escape(prefix)}*.npz"))
        if not p.endswith("-val.npz")
    )
    if not shards:
        raise FileNotFoundError(f"No dataset shards {prefix}*.npz (other than -val files) in {dataset_dir}")
    return shards


def val_path_for(path: str) -> str:
    """`a/b.npz` -> `a/b-val.npz` (the companion validation file)."""
    root, ext = os.path.splitext(path)
    return f"{root}-val{ext or '.npz'}"


def existing_val_path(train_paths: list[str]) -> str | None:
    """The validation file `<stem>-val.npz` of the (first) training file if it exists, else None."""
    val = val_path_for(train_paths[0])
    return val if os.path.isfile(val) else None


class EpisodeMonitor(gymnasium.Wrapper):
    """Adds episode statistics to the info of an episode's last step, and optionally drops info keys.

    On the step that ends an episode (terminated or truncated), `info['episode']` is
    `{'return': sum of rewards, 'length': steps, 'duration': wall-clock seconds since reset}`.
    `info['success']` is passed through untouched, so the last step's value is the episode's success. Rewards
    summed here are the env's own (dense) rewards; a driver running with `--sparse` transforms them itself.
    `filter_regexes`: info keys matching any of these (`re.match`) are removed from step and reset infos
    (never 'success' or 'episode').
    """

    _PROTECTED = ("success", "episode")

    def __init__(self, env: gymnasium.Env, filter_regexes: Sequence[str] = ()):
        super().__init__(env)
        self._filters = [re.compile(r) for r in filter_regexes]
        self._reset_stats()

    def _reset_stats(self):
        self._return = 0.0
        self._length = 0
        self._start = time.perf_counter()

    def _filter(self, info: dict) -> dict:
        if not self._filters:
            return info
        return {k: v for k, v in info.items() if k in self._PROTECTED or not any(f.match(k) for f in self._filters)}

    def reset(self, **kwargs):
        self._reset_stats()
        ob, info = self.env.reset(**kwargs)
        return ob, self._filter(info)

    def step(self, action):
        ob, reward, terminated, truncated, info = self.env.step(action)
        info = self._filter(info)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            info["episode"] = {
                "return": self._return,
                "length": self._length,
                "duration": time.perf_counter() - self._start,
            }
        return ob, reward, terminated, truncated, info


class GlobalNumpySeeding(gymnasium.Wrapper):
    """Runs every seeded `reset` with numpy's global legacy RNG seeded from the reset seed, then restores it.

    ogbench's locomotion envs draw their start and goal noise from the global `np.random` (`maze.py`'s
    `add_noise`), which `reset(seed=s)` does not seed; so without this, the same `s` gives other start and
    goal positions depending on what drew from the global RNG before, in this process. Here `reset(seed=s)`
    seeds the global RNG with `SeedSequence(s, spawn_key=(GLOBAL_NUMPY_SPAWN_KEY,))` around the inner reset and
    puts the caller's global state back afterwards, so a reset depends on `s` (and the options) only, in any
    process (the workers of an async vector env too). `reset()` without a seed and `step` are left alone.
    """

    GLOBAL_NUMPY_SPAWN_KEY = 1

    def reset(self, *, seed=None, options=None):
        if seed is None:
            return self.env.reset(seed=seed, options=options)
        saved = np.random.get_state()
        sequence = np.random.SeedSequence(int(seed), spawn_key=(self.GLOBAL_NUMPY_SPAWN_KEY,))
        np.random.seed(int(sequence.generate_state(1)[0]))
        try:
            return self.env.reset(seed=seed, options=options)
        finally:
            np.random.set_state(saved)


def goal_counts(masks: np.ndarray, terminals: np.ndarray) -> dict[str, int]:
    """How often loaded rows (`(T,)` each, in file order) are in the task's goal state: `{'rows': T,
    'goal_rows': rows whose relabelled mask is 0, 'goal_entries': rows t not in the goal followed, in the same
    trajectory (terminals[t] == 0), by a row in it}`. Under OGBench's 'pre' timing a row's mask is its own state's
    success, so `goal_entries` counts the transitions into the goal that the data holds (issue 58: a critic
    learns a goal from few of them)."""
    success = np.asarray(masks) == 0
    same_trajectory = np.asarray(terminals)[:-1] == 0
    entries = ~success[:-1] & success[1:] & same_trajectory
    return {"rows": int(success.size), "goal_rows": int(success.sum()), "goal_entries": int(entries.sum())}
