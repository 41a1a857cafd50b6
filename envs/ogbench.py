"""OGBench environment and dataset names, single-task environments and their offline datasets, from local files.

Names, files, the loading steps and the success timing: docs/datasets.md, sections 1-5. Nothing here
downloads: a missing file's `FileNotFoundError` gives the `envs.download_datasets` and `envs.generate_dataset`
commands. Loading (`load_ogbench_dataset`) turns stored trajectories into transitions as
`ogbench.utils.load_dataset(compact_dataset=False)` does, then relabels rewards and masks from the stored
simulator state of the row the success timing names:

                          |<--- traj 1 --->|  |<--- traj 2 --->|
    stored  observations  [s0, s1, s2, s3, s4, s0, s1, s2, s3, s4]
            terminals     [ 0,  0,  0,  0,  1,  0,  0,  0,  0,  1]
    loaded  observations      [s0, s1, s2, s3,     s0, s1, s2, s3]
            next_obs          [s1, s2, s3, s4,     s1, s2, s3, s4]
            terminals         [ 0,  0,  0,  1,      0,  0,  0,  1]
            rewards/masks of  [s1, s2, s3, s4,     s1, s2, s3, s4]   success_timing='post'
                              [s0, s1, s2, s3,     s0, s1, s2, s3]   success_timing='pre'
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import os
import re
import shlex
from typing import Callable

import gymnasium
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the locomotion envs with gymnasium)
import ogbench.manipspace  # noqa: F401  (registers the manipulation envs with gymnasium)

from envs import provenance
from envs.common import (
    DataOptions,
    EnvAndDatasets,
    EnvName,
    EpisodeMonitor,
    Family,
    GlobalNumpySeeding,
    ShardCycler,
    check_shards,
    cut_and_sparsify,
    dense_reward,
    existing_val_path,
    goal_counts,
    list_dataset_shards,
    read_npz,
    sparse_reward_transform,
    val_path_for,
)
from utils import seeding
from utils.files import non_file_kind
from utils.startup import quiet_dm_control

DEFAULT_DATASET_DIR = "~/.ogbench/data"

# Single-task domains: the QC paper's (plus cube-single). ogbench ships more single-task envs (puzzle-4x4,
# cube-octuple, ...); add them here once they are tested.
DOMAINS = ("cube-single", "cube-double", "cube-triple", "cube-quadruple", "scene", "puzzle-3x3")
DATASET_TYPES = ("play", "noisy")
NUM_TASKS = 5
# Goal-conditioned domains (`<domain>-<type>-oraclerep-v0`, offline goal-conditioned RL such as DQC): the DQC
# paper's cube-triple, cube-quadruple, cube-octuple, puzzle-4x5, puzzle-4x6 and humanoidmaze-giant, plus
# smaller ones.
GOAL_DOMAINS = (
    "cube-single",
    "cube-double",
    "cube-triple",
    "cube-quadruple",
    "cube-octuple",
    "scene",
    "puzzle-3x3",
    "puzzle-4x4",
    "puzzle-4x5",
    "puzzle-4x6",
    "humanoidmaze-giant",
)
# Domains whose data come from trained expert policies (OGBench's generate_locomaze.py with its SAC experts),
# not from the scripted oracles: download only. Their dataset type is 'navigate'.
EXPERT_DOMAINS = ("humanoidmaze-giant",)
EXPERT_DATASET_TYPES = ("navigate",)
ALL_DOMAINS = tuple(dict.fromkeys(DOMAINS + GOAL_DOMAINS))

# Stored trajectory keys; scene and puzzle files also store `button_states` (`OGBenchName.has_button_states`).
TRAJECTORY_KEYS = ("observations", "actions", "terminals", "qpos", "qvel")
# When env.step(a_t) computes reward/success/terminated: of s_{t+1} ('post', ogbench 1.1.2 and the paper)
# or of s_t ('pre', ogbench >= 1.2.0's singletask registrations). See the module docstring.
SUCCESS_TIMINGS = ("post", "pre")
# Published episode counts of the OGBench 'play'/'noisy' datasets (train file; val adds 10%; OGBench's
# data_gen_scripts/commands.sh). cube-octuple has no published default file (only the 100M shards, 1000
# episodes each): 1000 is one shard's count.
PUBLISHED_NUM_EPISODES = {
    "cube-single": 1000,
    "cube-double": 1000,
    "cube-triple": 3000,
    "cube-quadruple": 5000,
    "cube-octuple": 1000,
    "scene": 1000,
    "puzzle-3x3": 1000,
    "puzzle-4x4": 1000,
    "puzzle-4x5": 3000,
    "puzzle-4x6": 5000,
}
# Episodes per shard of OGBench's large sets (100 shards x 1000 episodes of 1000 transitions = 100M; the
# DQC paper's 1B sets: 1000 such shards).
SHARD_EPISODES = 1000

_DOMAIN_RE = "|".join(re.escape(d) for d in DOMAINS)
_ALL_DOMAIN_RE = "|".join(re.escape(d) for d in ALL_DOMAINS)
_GOAL_DOMAIN_RE = "|".join(re.escape(d) for d in GOAL_DOMAINS)
_TYPE_RE = "|".join(DATASET_TYPES)
_ANY_TYPE_RE = "|".join(DATASET_TYPES + EXPERT_DATASET_TYPES)
_ENV_RE = re.compile(rf"^(?P<domain>{_DOMAIN_RE})-(?P<type>{_TYPE_RE})-singletask(?:-task(?P<task>[0-9]+))?-v0\Z")
_ORACLEREP_RE = re.compile(rf"^(?P<domain>{_GOAL_DOMAIN_RE})-(?P<type>{_ANY_TYPE_RE})-oraclerep-v0\Z")
_DATASET_RE = re.compile(rf"^(?P<domain>{_ALL_DOMAIN_RE})-(?P<type>{_ANY_TYPE_RE})-v0\Z")
_COLLECTION_RE = re.compile(rf"^(?P<domain>{_ALL_DOMAIN_RE})-v0\Z")

_MANIPULATION_GOAL_DOMAINS = [d for d in GOAL_DOMAINS if d not in EXPERT_DOMAINS]
SUPPORTED_PATTERNS = (
    f"{{{','.join(DOMAINS)}}}-{{{','.join(DATASET_TYPES)}}}-singletask-task{{1..{NUM_TASKS}}}-v0",
    f"{{{','.join(DOMAINS)}}}-{{{','.join(DATASET_TYPES)}}}-singletask-v0 (default task)",
    f"{{{','.join(_MANIPULATION_GOAL_DOMAINS)}}}-{{{','.join(DATASET_TYPES)}}}-oraclerep-v0 (goal-conditioned)",
    f"{{{','.join(EXPERT_DOMAINS)}}}-{{{','.join(EXPERT_DATASET_TYPES)}}}-oraclerep-v0 (goal-conditioned)",
)


def dataset_types(domain: str) -> tuple[str, ...]:
    """The dataset types OGBench publishes for `domain`: ('navigate',) for humanoidmaze, else ('play', 'noisy')."""
    return EXPERT_DATASET_TYPES if domain in EXPERT_DOMAINS else DATASET_TYPES


@dataclasses.dataclass(frozen=True)
class OGBenchName:
    """The parts of an OGBench name. `task_id` is None for a dataset name or the default task; `oraclerep` is
    True for a goal-conditioned env name (`<domain>-<type>-oraclerep-v0`)."""

    domain: str
    dataset_type: str | None
    task_id: int | None = None
    oraclerep: bool = False

    @property
    def dataset_name(self) -> str:
        """e.g. 'cube-double-play-v0'."""
        return f"{self.domain}-{self.dataset_type}-v0"

    @property
    def env_id(self) -> str:
        """The gymnasium id the env is made from: the single-task id, e.g. 'cube-double-singletask-task2-v0',
        or for an oraclerep name the goal-conditioned id, e.g. 'cube-double-v0'."""
        if self.oraclerep:
            return self.collection_env_id
        task = "" if self.task_id is None else f"-task{self.task_id}"
        return f"{self.domain}-singletask{task}-v0"

    @property
    def env_name(self) -> str:
        """Training env name, e.g. 'cube-double-play-singletask-task2-v0' or 'cube-double-play-oraclerep-v0'."""
        if self.oraclerep:
            return f"{self.domain}-{self.dataset_type}-oraclerep-v0"
        task = "" if self.task_id is None else f"-task{self.task_id}"
        return f"{self.domain}-{self.dataset_type}-singletask{task}-v0"

    @property
    def collection_env_id(self) -> str:
        """Goal-conditioned gymnasium id (the env the data generator drives), e.g. 'cube-double-v0'."""
        return f"{self.domain}-v0"

    @property
    def has_button_states(self) -> bool:
        """Scene and puzzle files store `button_states` (relabelling and oracle representations need them)."""
        return self.domain == "scene" or self.domain.startswith("puzzle")

    @property
    def expert_data(self) -> bool:
        """The data come from trained expert policies (humanoidmaze): download only."""
        return self.domain in EXPERT_DOMAINS


def _check_type(name: str, domain: str, dataset_type: str) -> None:
    if dataset_type not in dataset_types(domain):
        raise ValueError(f"{name!r}: {domain} datasets are of type {' or '.join(dataset_types(domain))}.")


def parse_ogbench_name(name: str) -> OGBenchName | None:
    """Parse a training env name (single-task or oraclerep), a dataset name or a collection env id; None if it
    is none of them. `ValueError` for a task id outside 1..5 or a type the domain does not have."""
    m = _ENV_RE.match(name)
    if m is not None:
        task_id = None if m["task"] is None else int(m["task"])
        if task_id is not None and not 1 <= task_id <= NUM_TASKS:
            raise ValueError(f"{name!r}: task id must be in 1..{NUM_TASKS}, got {task_id}.")
        return OGBenchName(m["domain"], m["type"], task_id)
    m = _ORACLEREP_RE.match(name)
    if m is not None:
        _check_type(name, m["domain"], m["type"])
        return OGBenchName(m["domain"], m["type"], oraclerep=True)
    m = _DATASET_RE.match(name)
    if m is not None:
        _check_type(name, m["domain"], m["type"])
        return OGBenchName(m["domain"], m["type"])
    m = _COLLECTION_RE.match(name)
    if m is not None:
        return OGBenchName(m["domain"], None)
    return None


def training_name(env_name: str, goal_conditioned: bool | None = None) -> OGBenchName:
    """The parts of a training env name: single-task (`goal_conditioned=False`), goal-conditioned
    (`<domain>-<type>-oraclerep-v0`, True) or either (None). Any other name (a dataset name, another domain, a type
    the domain does not have): `ValueError` 'Not a supported OGBench single-task env name' (goal-conditioned when
    `goal_conditioned`) with the supported names."""
    single = goal_conditioned is not True and _ENV_RE.match(env_name) is not None
    goal = goal_conditioned is not False and _ORACLEREP_RE.match(env_name) is not None
    parsed = parse_ogbench_name(env_name) if single or goal else None
    if parsed is None:
        kind, supported = (
            ("goal-conditioned", SUPPORTED_PATTERNS[2:]) if goal_conditioned else ("single-task", SUPPORTED_PATTERNS)
        )
        raise ValueError(f"Not a supported OGBench {kind} env name: {env_name!r}. Supported: " + "; ".join(supported))
    return parsed


def generator_command(
    env_name: str, save_path: str | None = None, num_episodes: int | None = None, seed: int | str = 0
) -> str:
    """The shell command that generates the dataset of `env_name` (default `save_path`: the default data
    directory, quoted unless it holds a shell loop's `$(`; default `num_episodes`: the published count).
    `env_name`: a dataset or training env name (its dataset)."""
    parsed = parse_ogbench_name(env_name)
    name = OGBenchName(parsed.domain, parsed.dataset_type or "play")
    num_episodes = num_episodes or PUBLISHED_NUM_EPISODES[name.domain]
    save_path = save_path or default_dataset_path(name.dataset_name)
    return (
        f"python -m envs.generate_dataset --env_name={name.dataset_name} "
        f"--num_episodes={num_episodes} --seed={seed} "
        f"--save_path={save_path if '$(' in save_path else shlex.quote(save_path)}"
    )


def download_command(env_names: str | list[str], dataset_dir: str | None = None) -> str:
    """The `envs.download_datasets` command for `env_names` (one or several; `dataset_dir` omitted when default)."""
    names = [env_names] if isinstance(env_names, str) else list(env_names)
    command = f"python -m envs.download_datasets --env_names={','.join(names)}"
    if dataset_dir is not None:
        dataset_dir = os.path.abspath(os.path.expanduser(dataset_dir))
        if dataset_dir != os.path.abspath(os.path.expanduser(DEFAULT_DATASET_DIR)):
            command += f" --dataset_dir={shlex.quote(dataset_dir)}"
    return command


def default_dataset_path(dataset_name: str, dataset_dir: str | None = None) -> str:
    """`<dataset_dir or ~/.ogbench/data>/<dataset_name>.npz`, user-expanded."""
    return os.path.join(os.path.expanduser(dataset_dir or DEFAULT_DATASET_DIR), f"{dataset_name}.npz")


def check_success_timing(success_timing: str) -> str:
    """Return `success_timing` if it is 'post' or 'pre'.

    Raises:
        ValueError: any other value (the message names `--success_timing` and the accepted values).
    """
    if success_timing not in SUCCESS_TIMINGS:
        raise ValueError(
            f"--success_timing must be one of {', '.join(repr(t) for t in SUCCESS_TIMINGS)}, got {success_timing!r}."
        )
    return success_timing


def run_metadata(env_name: str, success_timing: str = "post", dataset_success_timing: str = "pre", env=None) -> dict:
    """`flags.json`'s env facts (docs/datasets.md, section 5): `ogbench_version`, `success_timing`, `reward_timing`,
    then for a single-task env `task_id` (N of `...-taskN-v0`, else ogbench's default task, read from `env` as
    `load_ogbench_dataset`'s) and `dataset_success_timing`; for a goal-conditioned env `goal_conditioned` True,
    `task_id` None (every task is evaluated), `task_names` and `dataset_success_timing` None (the goal windows make
    the rewards). `ValueError` for a bad name or timing."""
    name = training_name(env_name)
    check_success_timing(dataset_success_timing)
    facts = {
        "ogbench_version": importlib.metadata.version("ogbench"),
        "success_timing": check_success_timing(success_timing),
        "reward_timing": f"{success_timing}-step",
    }
    if name.oraclerep:
        names = list(task_names(env_name, env))
        return {**facts, "goal_conditioned": True, "task_id": None, "task_names": names, "dataset_success_timing": None}
    task_id = name.task_id or int(task_env(env, _relabel_env, name.env_id).unwrapped._reward_task_id)
    return {**facts, "task_id": task_id, "dataset_success_timing": dataset_success_timing}


def make_env(env_name: str, success_timing: str = "post", **env_kwargs) -> gymnasium.Env:
    """The env of a training env name, not wrapped (`make_eval_env` adds the wrappers), with the success timing
    passed explicitly (docs/datasets.md, section 5): the single-task env (ogbench's `env_only=True`), or the
    goal-conditioned one with `use_oracle_rep=True`. `env_kwargs` go to `gymnasium.make`; `ValueError` for an
    unsupported name or timing."""
    name = training_name(env_name)
    goal = {"use_oracle_rep": True} if name.oraclerep else {}
    return _make(name.env_id, success_timing=check_success_timing(success_timing), **goal, **env_kwargs)


def _make(env_id: str, **kwargs) -> gymnasium.Env:
    """`gymnasium.make(env_id, **kwargs)`, dm_control imported quietly first (OGBench's envs use it; no other
    family imports it): `ValueError` for a `MUJOCO_GL` that cannot start."""
    quiet_dm_control()
    return gymnasium.make(env_id, **kwargs)


def task_env(env, private: Callable[[str], gymnasium.Env], env_id: str) -> gymnasium.Env:
    """The env a loader reads its task from: `env`, or what `env()` returns when it is a function (called once the
    file is read, so that an env built on a thread overlaps the reading), or `private(env_id)` when None."""
    if env is None:
        return private(env_id)
    return env() if callable(env) else env


@functools.lru_cache(maxsize=None)
def _relabel_env(env_id: str) -> gymnasium.Env:
    # A private env per task for relabelling: `relabel_dataset` resets the env it is given, which must
    # never be the env a driver is in the middle of an episode with (e.g. when swapping shards). It only
    # supplies the task's targets, so its success timing does not matter.
    return _make(env_id)


# The data the DQC paper's runs used per domain (release experiments/reproduce.py, `sizes`): a large shard set, or
# None for the standard file. OGBench hosts the 100M sets; the 1B sets are not hosted (too large: the authors
# generate them, 1000 shards of 1000 episodes; horizon-reduction's README) and its 100M set is a tenth of one.
DQC_PAPER_DATA = {
    "cube-triple": "cube-triple-play-100m-v0",
    "cube-quadruple": "cube-quadruple-play-100m-v0",
    "cube-octuple": "cube-octuple-play-1b-v0",
    "puzzle-4x5": None,
    "puzzle-4x6": "puzzle-4x6-play-1b-v0",
    "humanoidmaze-giant": None,
}
NUM_SHARDS = {"100m": 100, "1b": 1000}  # shards per large set (humanoidmaze's 100M set: 25 longer ones)
_SHARD_SET_RE = re.compile(r"^(?P<stem>.+)-(?P<size>100m|1b)-v0$")


def parse_shard_set(set_name: str) -> tuple[str, str] | None:
    """`'cube-octuple-play-1b-v0'` -> `('cube-octuple-play-v0', '1b')`; None for another name."""
    m = _SHARD_SET_RE.match(set_name)
    return None if m is None else (f"{m['stem']}-v0", m["size"])


def shard_generator_command(set_name: str, dataset_dir: str = DEFAULT_DATASET_DIR) -> str:
    """A one-line shell loop that generates a large set's shards (`<set_name>`, e.g. 'cube-quadruple-play-100m-v0',
    shard `i` with `--seed=$i`) under `dataset_dir`; `ValueError` for another name or humanoidmaze."""
    parsed = parse_shard_set(set_name)
    if parsed is None:
        raise ValueError(f"{set_name!r} is not a large set name (<dataset stem>-100m-v0 or -1b-v0).")
    dataset, size = parsed
    directory = os.path.join(os.path.expanduser(dataset_dir), set_name)
    save_path = f"{shlex.quote(directory)}/{dataset}-$(printf %03d $i).npz"
    command = generator_command(dataset, save_path, SHARD_EPISODES, "$i")
    return f"for i in $(seq 0 {NUM_SHARDS[size] - 1}); do {command}; done"


def _ways_to_get(path: str, dataset_name: str, goal_conditioned: bool = False) -> str:
    """Every way to get the file at `path`: the official download first, then the local generator (where the
    data can be generated: not humanoidmaze's, which come from expert policies). `goal_conditioned` adds the
    data the DQC paper used for the domain."""
    directory = os.path.dirname(os.path.abspath(path))
    shard_set = os.path.basename(directory)
    parsed = parse_ogbench_name(dataset_name)
    domain, expert = parsed.domain, parsed.expert_data
    stem = dataset_name[: -len("-v0")]
    shard = re.fullmatch(rf"{re.escape(stem)}-(?P<size>\d+[mb])-v0", shard_set)
    index = re.search(r"-(\d+)\.npz$", path)
    lines = []
    if shard:
        # A shard of a large set, e.g. .../cube-quadruple-play-100m-v0/cube-quadruple-play-v0-003.npz.
        parent = os.path.dirname(directory)
        if shard["size"] == "1b":
            hosted = f"{stem}-100m-v0"
            lines += [
                f"{shard_set} is not hosted (the authors generate the 1B sets: {NUM_SHARDS['1b']} shards of "
                f"{SHARD_EPISODES} episodes). Download the hosted 100M set ({hosted}, a tenth of it) instead:",
                f"  {download_command(hosted, parent)}, then --dataset_dir={os.path.join(parent, hosted)}",
            ]
        else:
            lines += [
                "To reproduce the paper, download the official shards (network access to rail.eecs.berkeley.edu):",
                f"  {download_command(shard_set, parent)}  (fetches the shards not present)",
            ]
        if not expert and os.path.lexists(path):  # a shard keeps its name: never a command that writes over it
            lines += [f"Without network, move {path} away first: a run then gives the command that generates it."]
        elif not expert:
            generate = generator_command(dataset_name, path, SHARD_EPISODES, int(index[1]) if index else 0)
            lines += [
                "Without network, generate this shard locally with OGBench's oracles (same procedure, different "
                "random draws):",
                f"  {generate}",
            ]
            if parse_shard_set(shard_set) is not None:
                lines += ["or every shard of the set:", f"  {shard_generator_command(shard_set, parent)}"]
    else:
        if domain == "cube-octuple":
            hosted = f"{stem}-100m-v0"
            shards = os.path.join(directory, hosted)
            lines += [
                "OGBench publishes no default cube-octuple dataset; download its 100M shards (needs network access "
                "to rail.eecs.berkeley.edu):",
                f"  {download_command(hosted, directory)}, then --dataset_dir={shards}",
            ]
        else:
            download = download_command(dataset_name, directory)
            saved_as = os.path.join(directory, f"{dataset_name}.npz")
            if os.path.abspath(path) != saved_as:
                download += f"  (it writes {saved_as}; pass --dataset_path={shlex.quote(saved_as)})"
            lines += [
                "To reproduce the paper, download the official file (needs network access to rail.eecs.berkeley.edu):",
                f"  {download}",
            ]
        paper_set = DQC_PAPER_DATA.get(domain) if goal_conditioned else None
        if dataset_name == "cube-quadruple-play-v0" and not goal_conditioned:
            paper_set = "cube-quadruple-play-100m-v0"
        if paper_set is not None and paper_set.startswith(stem):
            shards = os.path.join(os.path.expanduser(DEFAULT_DATASET_DIR), paper_set)
            if paper_set.endswith("-100m-v0"):
                how = f"{download_command(paper_set)}, then --dataset_dir={shards}"
            else:
                generate = shard_generator_command(paper_set)
                how = f"not hosted, generate it: {generate}; then --dataset_dir={shards}"
            lines += [f"(the paper's {domain} runs use the large set {paper_set} instead:", f"  {how})"]
        save_path = _free_save_path(path, dataset_name)
        if not expert and save_path is None:
            lines += [f"Without network, move {path} away first: a run then gives the command that generates it."]
        elif not expert:
            then = "" if save_path == path else f"  (then --dataset_path={shlex.quote(save_path)})"
            lines += [
                "Without network, generate it locally with OGBench's oracles (same procedure, different random draws):",
                f"  {generator_command(dataset_name, save_path=save_path)}{then}",
            ]
    if expert:
        lines.append(
            f"{dataset_name} comes from trained expert policies (OGBench's generate_locomaze.py with its SAC "
            "experts), not from scripted oracles: it cannot be generated here."
        )
    return "\n".join(lines)


def _free_save_path(path: str, dataset_name: str) -> str | None:
    """Where a suggested generate command may write the file `path` stands for, never over a file: `path` when
    missing, else `<its folder>/<dataset_name>.npz` when it and its `-val` file are free, else None."""
    own = os.path.join(os.path.dirname(os.path.abspath(path)), f"{dataset_name}.npz")
    if not os.path.lexists(path):
        return path
    return own if not os.path.lexists(own) and not os.path.lexists(val_path_for(own)) else None


def _fix_for(path: str, dataset_name: str) -> str:
    """What to do with a file that failed a check: one of `dataset_name` (so says its generator's record, else its
    name, as a shard's) is damaged: delete it (a download skips a file that exists); any other may be a good file
    of another env, left alone."""
    metadata = None
    with contextlib.suppress(Exception):  # a file too damaged to read its record: its name decides
        metadata = provenance.read_generator_metadata(path)
    held, where = (metadata and provenance.named_dataset({**metadata, "source": "generated"})) or (None, None)
    if held == dataset_name or (held is None and os.path.basename(path).startswith(dataset_name[: -len("-v0")])):
        return "Delete it and get it again."
    what = f"It holds {held} ({where}): use a" if held else "Use a good"
    return f"{what} {dataset_name} file instead."


def _missing_file_error(path: str, dataset_name: str, goal_conditioned: bool = False) -> FileNotFoundError:
    return FileNotFoundError(
        f"OGBench dataset file not found: {path}\n{_ways_to_get(path, dataset_name, goal_conditioned)}"
    )


def read_trajectories(
    path: str, dataset_name: str, needs_buttons: bool, goal_conditioned: bool = False
) -> dict[str, np.ndarray]:
    """Read and check the stored trajectory arrays of one npz file (see the module docstring; `read_npz`)."""
    if not os.path.isfile(path):
        raise _missing_file_error(path, dataset_name, goal_conditioned)

    def regenerate():
        return f"{_fix_for(path, dataset_name)}\n{_ways_to_get(path, dataset_name, goal_conditioned)}"

    keys = TRAJECTORY_KEYS + (("button_states",) if needs_buttons else ())
    return read_npz(path, keys, ("observations", "actions", "qpos", "qvel"), regenerate)


def load_ogbench_dataset(
    path: str,
    env_name: str,
    action_clip_eps: float | None = 1e-5,
    keep_info: bool = False,
    success_timing: str = "pre",
    env=None,
) -> dict[str, np.ndarray]:
    """One OGBench npz file (a single file, a `-val` file or a shard) as relabelled transitions for the task
    of `env_name`, in `env` or a private env (docs/datasets.md, section 4; `--sparse` is `load_file`'s business).

    `success_timing`: rewards and masks of transition t from s_t ('pre', ogbench's loader in every version, so
    the paper's data) or s_{t+1} ('post'). Actions are clipped to `[-1 + eps, 1 - eps]` (None: as stored);
    `keep_info` keeps `qpos`, `qvel` (and `button_states`) of s_t. `env`: the single-task env of `env_name`
    whose task relabels the rows, or a function returning it; relabelling resets it, so pass a driver's env
    only before its first seeded reset; None: a private env per task. Returns float32 `observations`,
    `next_observations (T, ob)`, `actions (T, A)`, `rewards (T,)` (minus the unmet task conditions),
    `masks (T,)` (0 where solved), `terminals (T,)`, T = stored rows - trajectories. `FileNotFoundError`
    (with the generator command) for a missing file; `ValueError` for a bad name, timing or file.
    """
    name = training_name(env_name, goal_conditioned=False)
    check_success_timing(success_timing)
    arrays = read_trajectories(path, name.dataset_name, name.has_button_states)
    dataset, starts, info = _transitions(arrays, name, action_clip_eps)
    # The state whose reward/success step(a_t) returns: s_{t+1} (post) or s_t (pre). `starts + 1` stays in
    # the trajectory, since a start row is never a trajectory's last row.
    rows = starts + 1 if success_timing == "post" else starts
    states = {k: arrays[k][rows] for k in info}
    try:
        from ogbench.relabel_utils import relabel_dataset

        relabel_dataset(name.env_id, task_env(env, _relabel_env, name.env_id), states)  # adds 'rewards', 'masks'
    except (ValueError, IndexError) as e:  # e.g. the qpos of another domain's objects
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: relabelling its states for the task failed "
            f"({type(e).__name__}: {e}). Is it the dataset of another domain (expected {name.dataset_name})?"
        ) from e
    dataset["rewards"], dataset["masks"] = states["rewards"], states["masks"]
    return {**dataset, **info} if keep_info else dataset


def _transitions(arrays: dict, name: OGBenchName, action_clip_eps: float | None) -> tuple[dict, np.ndarray, dict]:
    """`(dataset, starts, info)`: the stored rows as float32 transitions (`observations`, `next_observations`,
    `actions` clipped to `[-1 + eps, 1 - eps]` (None: as stored), `terminals`), the stored rows they start at, and
    `qpos`, `qvel` (, `button_states`) of those rows."""
    ends = arrays["terminals"].astype(bool)
    starts = np.flatnonzero(~ends)  # rows that have a next state in the same trajectory
    actions = arrays["actions"][starts].astype(np.float32)
    if action_clip_eps is not None:
        actions = np.clip(actions, -1 + action_clip_eps, 1 - action_clip_eps)
    dataset = {
        "observations": arrays["observations"][starts].astype(np.float32),
        "actions": actions,
        "next_observations": arrays["observations"][starts + 1].astype(np.float32),
        "terminals": ends[starts + 1].astype(np.float32),
    }
    info_keys = ("qpos", "qvel") + (("button_states",) if name.has_button_states else ())
    return dataset, starts, {k: arrays[k][starts] for k in info_keys}


def resolve_dataset_paths(env_name: str, dataset_path: str | None = None, dataset_dir: str | None = None) -> list[str]:
    """The training file(s) of an env, one path or every shard in cycling order: `dataset_path`; else
    `<dataset_dir>/<dataset>.npz`; else the shards in `dataset_dir`; else the default directory's file (the
    `-val` file is never required). `FileNotFoundError` naming the file and the generator command;
    `ValueError` for an unsupported name or a `dataset_path` that is no regular file."""
    name = training_name(env_name)
    dataset_name, goal_conditioned = name.dataset_name, name.oraclerep
    if dataset_path is not None:
        paths = [os.path.expanduser(dataset_path)]
    else:
        path = default_dataset_path(dataset_name, dataset_dir)
        paths = [path]
        if dataset_dir is not None and os.path.isdir(os.path.expanduser(dataset_dir)) and not os.path.isfile(path):
            try:
                paths = list_dataset_shards(dataset_dir, dataset_name)
            except FileNotFoundError:
                raise _missing_file_error(path, dataset_name, goal_conditioned) from None
    kind = non_file_kind(paths[0])
    if kind == "a directory":
        raise ValueError(
            f"--dataset_path={paths[0]} is a directory; pass one npz file, or the directory as --dataset_dir."
        )
    if kind is not None:
        raise ValueError(f"--dataset_path={paths[0]} is {kind}, not a data file; pass one npz file.")
    if not os.path.isfile(paths[0]):
        raise _missing_file_error(paths[0], dataset_name, goal_conditioned)
    return paths


# ---- goal-conditioned envs with oracle goal representations (DQC; docs/datasets.md, section 10) ---------------


@functools.lru_cache(maxsize=None)
def _private_goal_env(env_id: str) -> gymnasium.Env:
    # A private env per domain: `add_oracle_reps` reads the number of cubes from it, `task_names` its tasks.
    # Never a driver's env (nothing here resets or steps it).
    return _make(env_id, use_oracle_rep=True)


def task_names(env_name: str, env=None) -> tuple[str, ...]:
    """The goal-conditioned env's evaluation tasks, task id `i` at position `i - 1`, e.g. ('task1_horizontal', ...)
    for cube-single, ('task1', ..., 'task5') for puzzle and humanoidmaze; `env` as `load_oraclerep_dataset`'s.
    `ValueError` for an unsupported name."""
    env = task_env(env, _private_goal_env, training_name(env_name, goal_conditioned=True).env_id)
    return tuple(str(info["task_name"]) for info in env.unwrapped.task_infos)


def load_oraclerep_dataset(
    path: str, env_name: str, action_clip_eps: float | None = 1e-5, keep_info: bool = False, env=None
) -> dict[str, np.ndarray]:
    """One OGBench npz file (a dataset or a shard) for the goal-conditioned env `env_name`: the single-task
    loader's rows and checks (float32 `observations`, `next_observations (T, D)`, `actions (T, A)`, clipped to
    `[-1 + eps, 1 - eps]`, `terminals (T,)`), `oracle_reps (T, G)` of each row's state, `rewards` zeros and
    `masks` ones (DQC's come from its windows); `keep_info` keeps `qpos`, `qvel` (, `button_states`).
    `env`: the goal-conditioned env of `env_name` (`make_env`) or a function returning it, read, not
    reset; None: a private one per domain. `FileNotFoundError` with the download (and generator) command;
    `ValueError` for a bad name, a bad file or one of another domain."""
    from ogbench.relabel_utils import add_oracle_reps

    name = training_name(env_name, goal_conditioned=True)
    arrays = read_trajectories(path, name.dataset_name, name.has_button_states, goal_conditioned=True)
    env = task_env(env, _private_goal_env, name.env_id)
    ob_dim = env.observation_space.shape[-1]
    if arrays["observations"].shape[-1] != ob_dim:
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: its observations have {arrays['observations'].shape[-1]} "
            f"columns, the env's {ob_dim}. Is it the dataset of another domain (expected {name.dataset_name})?"
        )
    dataset, _, info = _transitions(arrays, name, action_clip_eps)
    try:
        add_oracle_reps(name.env_id, env, info)  # adds 'oracle_reps' (float32)
    except (ValueError, IndexError) as e:  # e.g. the qpos of fewer cubes
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: computing the oracle goal representations failed "
            f"({type(e).__name__}: {e}). Is it the dataset of another domain (expected {name.dataset_name})?"
        ) from e
    n = len(dataset["terminals"])
    dataset.update(rewards=np.zeros(n, np.float32), masks=np.ones(n, np.float32))
    dataset["oracle_reps"] = np.asarray(info.pop("oracle_reps"), np.float32)
    return {**dataset, **info} if keep_info else dataset


# ---- the family: single-task and goal-conditioned OGBench -----------------------------------------------------

# Info keys the reference drops from OGBench infos (large per-step privileged/proprioceptive state).
OGBENCH_INFO_FILTERS = (".*privileged.*", ".*proprio.*")
# Domains whose paper runs use --sparse (docs/settings.md, per-domain table): scene and every puzzle.
SPARSE_DOMAINS = ("scene", "puzzle")
# Memory of one OGBench manipulation env (MuJoCo model with meshes and textures, its IK model), measured here.
ENV_BYTES = 170 * 2**20


def make_eval_env(env_name: str, success_timing: str = "post", **env_kwargs) -> EpisodeMonitor:
    """One monitored env of `env_name` (single-task or goal-conditioned), not reset: a run's evaluation env (and,
    reset once, its training env). Goal-conditioned envs reset through `GlobalNumpySeeding`. `env_kwargs` go to
    `gymnasium.make`; `ValueError` for a bad name or timing."""
    env = make_env(env_name, success_timing, **env_kwargs)
    if training_name(env_name).oraclerep:
        env = GlobalNumpySeeding(env)
    return EpisodeMonitor(env, filter_regexes=OGBENCH_INFO_FILTERS)


def load_file(path: str, env_name: str, options: DataOptions, env=None) -> dict:
    """One file (the training file, a shard, the val file) of `env_name` with every step a run's load applies but
    the cut (`dataset_proportion`): `load_ogbench_dataset` (`load_oraclerep_dataset`), then `--sparse`."""
    if training_name(env_name).oraclerep:
        dataset = load_oraclerep_dataset(path, env_name, options.action_clip_eps, env=env)
    else:
        dataset = load_ogbench_dataset(
            path, env_name, options.action_clip_eps, success_timing=options.dataset_success_timing, env=env
        )
    return cut_and_sparsify(dataset, 1.0, options.sparse)


def _train_env(env_name: str, success_timing: str, seed: int | None) -> EpisodeMonitor:
    """The monitored training env, reset once from `seed`'s `env` stream (None: not reset)."""
    env = make_eval_env(env_name, success_timing)
    if seed is not None:
        env.reset(seed=seeding.env_seed(seed, "env"))
    return env


def load(name: EnvName, options: DataOptions) -> EnvAndDatasets:
    """The envs and offline data of an OGBench env (docs/datasets.md). The training file, or every shard of
    `dataset_dir` (cycled by `next_shard`); the val file with `load_val`. The training env is built on a thread
    while the file is read, then lends its task to the loader (relabelling, oracle representations) before its
    first seeded reset. `ValueError` for a bad timing, proportion, `sparse` with goals, or data;
    `FileNotFoundError` with the commands that make the file."""
    import concurrent.futures

    env_name, goal_conditioned = name.name, name.goal_conditioned
    quiet_dm_control()  # here, not on the thread that builds the env
    check_success_timing(options.success_timing)
    check_success_timing(options.dataset_success_timing)
    if goal_conditioned and options.sparse:
        raise ValueError(
            f"--sparse does not apply to the goal-conditioned {env_name}: it has no task reward to transform "
            "(the goal windows make the rewards); leave --sparse=False."
        )
    train_paths = resolve_dataset_paths(env_name, options.dataset_path, options.dataset_dir)
    next_shard = None
    if len(train_paths) > 1:
        if options.dataset_proportion < 1.0:
            raise ValueError("dataset_proportion < 1 is not supported with a sharded dataset.")
        check_shards(train_paths)  # every shard, before the first loads and any run folder exists
        next_shard = ShardCycler(train_paths, functools.partial(load_file, env_name=env_name, options=options))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="train-env")
    env_future = pool.submit(_train_env, env_name, options.success_timing, None)
    pool.shutdown(wait=False)

    def task_env_():
        return env_future.result().unwrapped

    first = load_file(train_paths[0], env_name, options, task_env_)
    train = cut_and_sparsify(first, options.dataset_proportion, False)
    val_path = existing_val_path(train_paths) if options.load_val else None
    val = None if val_path is None else load_file(val_path, env_name, options, task_env_)
    metadata = run_metadata(env_name, options.success_timing, options.dataset_success_timing, env=task_env_)
    env = env_future.result()
    env.reset(seed=seeding.env_seed(options.seed, "env"))
    used = [(p, "train") for p in train_paths] + ([] if val is None else [(val_path, "val")])
    datasets = [provenance.npz_provenance(p, role, options.hash_datasets) for p, role in used]
    check_recorded_datasets(datasets, env_name)
    if not goal_conditioned:  # how often the (first) training file reaches the task's goal (issue 58)
        goal = goal_counts(first["masks"], first["terminals"])
        datasets[0]["goal"] = {"task": name.task, "success_timing": options.dataset_success_timing, **goal}
    return EnvAndDatasets(
        env=env,
        eval_env_seed=seeding.env_seed(options.seed, "eval_env"),
        train_dataset=train,
        val_dataset=val,
        reward_fn=sparse_reward_transform if options.sparse else dense_reward,
        next_shard=next_shard,
        metadata={**metadata, "env": name.record(), "datasets": datasets},
        make_eval_env=functools.partial(make_eval_env, env_name, options.success_timing),
        goal_conditioned=goal_conditioned,
        task_names=tuple(metadata.get("task_names", ())),
    )


def check_recorded_datasets(records: list[dict], env_name: str) -> None:
    """Each file's record (`provenance.npz_provenance`) names the dataset of `env_name`, where it names one
    (`provenance.named_dataset`); `ValueError` naming the first file whose record names another (e.g. play data
    under a `noisy` name, which relabelling does not notice) and the env of the same kind on its data."""
    name = training_name(env_name)
    for record in records:
        held, where = provenance.named_dataset(record) or (name.dataset_name, None)
        if held == name.dataset_name:
            continue
        parsed = None
        with contextlib.suppress(ValueError):  # a dataset type its domain does not have
            parsed = parse_ogbench_name(held)
        # The env of the same task (or goal-conditioned) on the file's data, where there is one.
        other = parsed and OGBenchName(parsed.domain, parsed.dataset_type, name.task_id, name.oraclerep).env_name
        train_on_it = f", or --env_name={other} to train on this file" if other and parse_env_name(other) else ""
        raise ValueError(
            f"Dataset file {record['path']} holds {held} ({where}), not {name.dataset_name}, the data of "
            f"{env_name}: pass a {name.dataset_name} file{train_on_it}."
        )


def envs_for_seed(env_data: EnvAndDatasets, name: EnvName, seed: int) -> EnvAndDatasets:
    """`env_data` with the training and evaluation envs of `seed` (datasets shared, not copied), built and seeded
    as `load` builds them for `options.seed = seed`."""
    timing = env_data.metadata["success_timing"]
    return dataclasses.replace(
        env_data,
        env=_train_env(name.name, timing, seed),
        built_eval_env=None,  # built when first used, as in load
        eval_env_seed=seeding.env_seed(seed, "eval_env"),
        make_eval_env=functools.partial(make_eval_env, name.name, timing),
    )


def parse_env_name(env_name: str) -> EnvName | None:
    """`Family.parse`: a single-task or goal-conditioned training env name (`SUPPORTED_PATTERNS`), else None;
    `ValueError` for a task outside 1..5 or a dataset type the domain does not have."""
    if _ENV_RE.match(env_name) is None and _ORACLEREP_RE.match(env_name) is None:
        return None
    parsed = parse_ogbench_name(env_name)
    domain, dataset_type = parsed.domain, parsed.dataset_type
    if parsed.oraclerep:  # the task: all of the env's evaluation goals
        paper_domain, paper_task, short = domain, env_name, env_name.removesuffix("-v0")
    else:
        paper_domain = domain if dataset_type == "play" else f"{domain}-{dataset_type}"
        task = "default" if parsed.task_id is None else f"task{parsed.task_id}"
        paper_task = f"{domain}-{dataset_type}-{task}"
        short = paper_domain + ("" if parsed.task_id is None else f"-t{parsed.task_id}")  # task01: t1, as task1
    goal = parsed.oraclerep
    return EnvName("ogbench", env_name, domain, dataset_type, parsed.task_id, goal, paper_domain, paper_task, short)


def with_task(name: EnvName, task: int) -> str:
    """`Family.with_task`: `cube-double-play-singletask[-taskN]-v0` -> `cube-double-play-singletask-task{task}-v0`."""
    if name.goal_conditioned:
        raise ValueError(
            f"--tasks needs an OGBench single-task --env_name (<domain>-play-singletask[-taskN]-v0), got {name.name}"
        )
    if not 1 <= task <= NUM_TASKS:
        raise ValueError(f"task {task} of {name.domain}: OGBench tasks are 1..{NUM_TASKS}.")
    return OGBenchName(name.domain, name.dataset_type, task).env_name


FAMILY = Family(
    name="ogbench",
    patterns=SUPPORTED_PATTERNS,
    parse=parse_env_name,
    load=load,
    envs_for_seed=envs_for_seed,
    renders=True,
    env_bytes=ENV_BYTES,
    sparse_default=lambda name: not name.goal_conditioned and name.domain.split("-")[0] in SPARSE_DOMAINS,
    with_task=with_task,
)
