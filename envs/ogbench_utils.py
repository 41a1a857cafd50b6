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

import dataclasses
import functools
import glob
import importlib.metadata
import os
import re
import shlex
import zipfile
import zlib
from typing import Callable

import gymnasium
import numpy as np
import ogbench.manipspace  # noqa: F401  (registers the manipulation envs with gymnasium)
from ogbench.relabel_utils import relabel_dataset

from utils.files import non_file_kind

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
# Keys checked for NaN/inf when a file is read.
FINITE_KEYS = ("observations", "actions", "qpos", "qvel")
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
_ENV_RE = re.compile(rf"^(?P<domain>{_DOMAIN_RE})-(?P<type>{_TYPE_RE})-singletask(?:-task(?P<task>\d+))?-v0$")
_ORACLEREP_RE = re.compile(rf"^(?P<domain>{_GOAL_DOMAIN_RE})-(?P<type>{_ANY_TYPE_RE})-oraclerep-v0$")
_DATASET_RE = re.compile(rf"^(?P<domain>{_ALL_DOMAIN_RE})-(?P<type>{_ANY_TYPE_RE})-v0$")
_COLLECTION_RE = re.compile(rf"^(?P<domain>{_ALL_DOMAIN_RE})-v0$")

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


def is_ogbench_env(env_name: str) -> bool:
    """True for a supported single-task training env name (see `SUPPORTED_PATTERNS`)."""
    return _ENV_RE.match(env_name) is not None


def is_oraclerep_env(env_name: str) -> bool:
    """True for a supported goal-conditioned env name `<domain>-<type>-oraclerep-v0` (see `SUPPORTED_PATTERNS`)."""
    m = _ORACLEREP_RE.match(env_name)
    return m is not None and m["type"] in dataset_types(m["domain"])


def _parse_env_name(env_name: str) -> OGBenchName:
    parsed = parse_ogbench_name(env_name) if is_ogbench_env(env_name) else None
    if parsed is None:
        raise ValueError(
            f"Not a supported OGBench single-task env name: {env_name!r}. Supported: " + "; ".join(SUPPORTED_PATTERNS)
        )
    return parsed


def parse_oraclerep_name(env_name: str) -> OGBenchName:
    """The parts of a goal-conditioned env name; `ValueError` (listing the supported names) for anything else."""
    parsed = parse_ogbench_name(env_name) if _ORACLEREP_RE.match(env_name) else None
    if parsed is None:
        raise ValueError(
            f"Not a supported OGBench goal-conditioned env name: {env_name!r}. Supported: "
            + "; ".join(SUPPORTED_PATTERNS[2:])
        )
    return parsed


def expert_data_error(dataset_name: str) -> str:
    """One line: why an expert-policy dataset (humanoidmaze) cannot be generated, and the download command."""
    return (
        f"{dataset_name} is collected by trained expert policies (OGBench's generate_locomaze.py with its SAC "
        f"experts), not by scripted oracles, so it cannot be generated here; download it: "
        f"{download_command(dataset_name)}"
    )


def resolve_dataset_name(env_name: str, dataset_type: str | None = None) -> OGBenchName:
    """The dataset to generate (`OGBenchName`, `domain` and `dataset_type` set) for a dataset name, a training
    env name or `<domain>-v0`; `dataset_type` ('play' or 'noisy') defaults to the name's, else 'play'.
    `ValueError` for an unknown name or type, a type that contradicts the name, or expert data (humanoidmaze:
    the download command)."""
    name = parse_ogbench_name(env_name)
    if name is None:
        raise ValueError(
            f"Cannot generate a dataset for {env_name!r}: expected <domain>-<type>-v0 (e.g. "
            f"cube-single-play-v0), a training env name, or <domain>-v0 with --dataset_type; "
            f"domains {sorted(PUBLISHED_NUM_EPISODES)}, types {DATASET_TYPES}."
        )
    if name.expert_data:
        raise ValueError(expert_data_error(OGBenchName(name.domain, EXPERT_DATASET_TYPES[0]).dataset_name))
    if dataset_type is not None and dataset_type not in DATASET_TYPES:
        raise ValueError(f"dataset_type must be one of {DATASET_TYPES}, got {dataset_type!r}.")
    if name.dataset_type is not None and dataset_type is not None and dataset_type != name.dataset_type:
        raise ValueError(f"{env_name!r} names a {name.dataset_type!r} dataset but dataset_type={dataset_type!r}.")
    return OGBenchName(name.domain, name.dataset_type or dataset_type or "play")


def generator_command(
    env_name: str, save_path: str | None = None, num_episodes: int | None = None, seed: int | str = 0
) -> str:
    """The shell command that generates the dataset of `env_name` (default `save_path`: the default data
    directory, quoted unless it holds a shell loop's `$(`; default `num_episodes`: the published count)."""
    name = resolve_dataset_name(env_name)
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


def val_path_for(path: str) -> str:
    """`a/b.npz` -> `a/b-val.npz` (the companion validation file)."""
    root, ext = os.path.splitext(path)
    return f"{root}-val{ext or '.npz'}"


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


def effective_task_id(env_name: str, env=None) -> int:
    """The task a training env runs: N for `...-singletask-taskN-v0`, else ogbench's default (its `set_tasks`,
    read from `env`, as `load_ogbench_dataset`'s); `ValueError` for an unsupported name."""
    name = _parse_env_name(env_name)
    if name.task_id is not None:
        return name.task_id
    return int(task_env(env, _relabel_env, name.env_id).unwrapped._reward_task_id)


def ogbench_metadata(env_name: str, success_timing: str = "post", env=None) -> dict:
    """`flags.json`'s env facts: `timing_metadata(success_timing)` plus the `task_id` (docs/datasets.md, section 5);
    `env` as `load_ogbench_dataset`'s."""
    return {**timing_metadata(success_timing), "task_id": effective_task_id(env_name, env)}


def timing_metadata(success_timing: str) -> dict:
    """`{'ogbench_version', 'success_timing', 'reward_timing'}`: the part of a run's env facts every OGBench
    env shares (`ogbench_metadata`, `envs.ogbench_goals.goal_metadata`). Raises ValueError: unknown timing."""
    check_success_timing(success_timing)
    return {
        "ogbench_version": importlib.metadata.version("ogbench"),
        "success_timing": success_timing,
        "reward_timing": f"{success_timing}-step",
    }


def make_ogbench_env(env_name: str, success_timing: str = "post", **env_kwargs) -> gymnasium.Env:
    """The single-task env of a training env name (ogbench's `env_only=True`) with the success timing passed
    explicitly (docs/datasets.md, section 5); `env_kwargs` go to `gymnasium.make`. `ValueError` for an
    unsupported name or timing."""
    env_id = _parse_env_name(env_name).env_id
    return gymnasium.make(env_id, success_timing=check_success_timing(success_timing), **env_kwargs)


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
    return gymnasium.make(env_id)


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
                f"  {download_command(hosted, parent)}, then --ogbench_dataset_dir={os.path.join(parent, hosted)}",
            ]
        else:
            lines += [
                "To reproduce the paper, download the official shards (network access to rail.eecs.berkeley.edu):",
                f"  {download_command(shard_set, parent)}  (fetches the shards not present)",
            ]
        if not expert:
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
                f"  {download_command(hosted, directory)}, then --ogbench_dataset_dir={shards}",
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
                how = f"{download_command(paper_set)}, then --ogbench_dataset_dir={shards}"
            else:
                generate = shard_generator_command(paper_set)
                how = f"not hosted, generate it: {generate}; then --ogbench_dataset_dir={shards}"
            lines += [f"(the paper's {domain} runs use the large set {paper_set} instead:", f"  {how})"]
        if not expert:
            lines += [
                "Without network, generate it locally with OGBench's oracles (same procedure, different random draws):",
                f"  {generator_command(dataset_name, save_path=path)}",
            ]
    if expert:
        lines.append(
            f"{dataset_name} comes from trained expert policies (OGBench's generate_locomaze.py with its SAC "
            "experts), not from scripted oracles: it cannot be generated here."
        )
    return "\n".join(lines)


def _missing_file_error(path: str, dataset_name: str, goal_conditioned: bool = False) -> FileNotFoundError:
    return FileNotFoundError(
        f"OGBench dataset file not found: {path}\n{_ways_to_get(path, dataset_name, goal_conditioned)}"
    )


def _looks_like_npz(path: str) -> bool:
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
    if not _looks_like_npz(path):
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


def first_transition(path: str, action_clip_eps: float | None = 1e-5) -> dict[str, np.ndarray]:
    """`observations (1, ob)` and `actions (1, A)` of `load_ogbench_dataset(path, ...)`'s row 0, read from the head
    of the file only (a trajectory's first row is never its last, so row 0 is the file's row 0): a run creates its
    agent from them while the rest loads. `ValueError` for a file that is not an npz archive of such arrays."""
    rows = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for key in ("observations", "actions"):
                with archive.open(f"{key}.npy") as f:
                    shape, fortran_order, dtype = _read_npy_header(f)
                    if fortran_order or len(shape) < 2 or shape[0] < 1 or dtype.hasobject:
                        raise ValueError(f"{key} has no C-ordered rows")
                    count = int(np.prod(shape[1:]))
                    rows[key] = np.frombuffer(f.read(count * dtype.itemsize), dtype, count).reshape(1, *shape[1:])
    except (KeyError, zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as e:
        raise ValueError(f"Dataset file {path}: no first row to read ({type(e).__name__}: {e}).") from None
    actions = rows["actions"].astype(np.float32)
    if action_clip_eps is not None:
        actions = np.clip(actions, -1 + action_clip_eps, 1 - action_clip_eps)
    return {"observations": rows["observations"].astype(np.float32), "actions": actions}


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


def read_trajectories(
    path: str, dataset_name: str, needs_buttons: bool, goal_conditioned: bool = False
) -> dict[str, np.ndarray]:
    """Read and check the stored trajectory arrays of one npz file (see the module docstring)."""
    if not os.path.isfile(path):
        raise _missing_file_error(path, dataset_name, goal_conditioned)
    regenerate = f"Delete it and get it again.\n{_ways_to_get(path, dataset_name, goal_conditioned)}"
    if not _looks_like_npz(path):  # numpy would try it as a pickle, and advise allow_pickle
        raise ValueError(f"Dataset file {path} is not an npz archive (its bytes are not a zip file's). {regenerate}")
    keys = TRAJECTORY_KEYS + (("button_states",) if needs_buttons else ())
    read_errors = (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error, KeyError)
    try:
        npz = np.load(path, allow_pickle=False)
    except read_errors as e:
        raise ValueError(
            f"Dataset file {path} is truncated or corrupt: cannot open it ({type(e).__name__}: {e}). {regenerate}"
        ) from e
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"Dataset file {path} is a single .npy array, not an npz archive. {regenerate}")
    with npz:
        missing = [k for k in keys if k not in npz.files]
        if missing:
            raise ValueError(f"Dataset file {path} lacks key(s) {missing} (it has {sorted(npz.files)}). {regenerate}")
        arrays = {}
        for k in keys:
            try:
                arrays[k] = npz[k]
            except read_errors as e:
                raise ValueError(
                    f"Dataset file {path} is truncated or corrupt: reading {k!r} failed "
                    f"({type(e).__name__}: {e}). {regenerate}"
                ) from e

    n = len(arrays["observations"])
    lengths = {k: (len(v) if v.ndim else None) for k, v in arrays.items()}
    if any(length != n for length in lengths.values()):
        raise ValueError(f"Dataset file {path} has mismatched lengths {lengths}. {regenerate}")
    for k in ("observations", "actions", "qpos", "qvel"):
        if arrays[k].ndim != 2:
            raise ValueError(f"Dataset file {path}: {k!r} must be 2-D (rows, dim), got {arrays[k].shape}.")
    if n < 2:
        raise ValueError(f"Dataset file {path} holds {n} row(s); at least one transition needs 2.")
    for k in FINITE_KEYS:
        finite = np.isfinite(arrays[k]).all(axis=tuple(range(1, arrays[k].ndim)))
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(
                f"Dataset file {path}: {k!r} has non-finite values (NaN/inf) in {len(bad)} row(s), "
                f"first at row {bad[0]}. {regenerate}"
            )
    terminals = arrays["terminals"]
    if not np.isin(terminals, (0, 1)).all():
        raise ValueError(f"Dataset file {path}: terminals must be 0/1, got {np.unique(terminals)[:5]}.")
    if not terminals[-1]:
        raise ValueError(
            f"Dataset file {path}: the last row is not a trajectory end (terminals[-1] == 0); "
            f"the file is incomplete. {regenerate}"
        )
    return arrays


def load_ogbench_dataset(
    path: str,
    env_name: str,
    action_clip_eps: float | None = 1e-5,
    keep_info: bool = False,
    success_timing: str = "pre",
    env=None,
) -> dict[str, np.ndarray]:
    """One OGBench npz file (a single file, a `-val` file or a shard) as relabelled transitions for the task
    of `env_name`, in `env` or a private env (docs/datasets.md, section 4; `--sparse` is `envs.env_utils`' business).

    `success_timing`: rewards and masks of transition t from s_t ('pre', ogbench's loader in every version, so
    the paper's data) or s_{t+1} ('post'). Actions are clipped to `[-1 + eps, 1 - eps]` (None: as stored);
    `keep_info` keeps `qpos`, `qvel` (and `button_states`) of s_t. `env`: the single-task env of `env_name`
    whose task relabels the rows, or a function returning it; relabelling resets it, so pass a driver's env
    only before its first seeded reset; None: a private env per task. Returns float32 `observations`,
    `next_observations (T, ob)`, `actions (T, A)`, `rewards (T,)` (minus the unmet task conditions),
    `masks (T,)` (0 where solved), `terminals (T,)`, T = stored rows - trajectories. `FileNotFoundError`
    (with the generator command) for a missing file; `ValueError` for a bad name, timing or file.
    """
    name = _parse_env_name(env_name)
    check_success_timing(success_timing)
    arrays = read_trajectories(path, name.dataset_name, name.has_button_states)

    ends = arrays["terminals"].astype(bool)
    starts = np.flatnonzero(~ends)  # rows that have a next state in the same trajectory
    dataset = {
        "observations": arrays["observations"][starts].astype(np.float32),
        "actions": arrays["actions"][starts].astype(np.float32),
        "next_observations": arrays["observations"][starts + 1].astype(np.float32),
        "terminals": ends[starts + 1].astype(np.float32),
    }
    info_keys = ("qpos", "qvel") + (("button_states",) if name.has_button_states else ())
    for k in info_keys:
        dataset[k] = arrays[k][starts]

    # The state whose reward/success step(a_t) returns: s_{t+1} (post) or s_t (pre). `starts + 1` stays in
    # the trajectory, since a start row is never a trajectory's last row.
    rows = starts + 1 if success_timing == "post" else starts
    states = {k: arrays[k][rows] for k in info_keys}
    try:
        relabel_dataset(name.env_id, task_env(env, _relabel_env, name.env_id), states)  # adds 'rewards', 'masks'
    except (ValueError, IndexError) as e:  # e.g. the qpos of another domain's objects
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: relabelling its states for the task failed "
            f"({type(e).__name__}: {e}). Is it the dataset of another domain (expected {name.dataset_name})?"
        ) from e
    dataset["rewards"], dataset["masks"] = states["rewards"], states["masks"]

    if action_clip_eps is not None:
        dataset["actions"] = np.clip(dataset["actions"], -1 + action_clip_eps, 1 - action_clip_eps)
    if not keep_info:
        for k in info_keys:
            del dataset[k]
    return dataset


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


def resolve_dataset_paths(env_name: str, dataset_path: str | None = None, dataset_dir: str | None = None) -> list[str]:
    """The training file(s) of an env, one path or every shard in cycling order: `dataset_path`; else
    `<dataset_dir>/<dataset>.npz`; else the shards in `dataset_dir`; else the default directory's file (the
    `-val` file is never required). `FileNotFoundError` naming the file and the generator command;
    `ValueError` for an unsupported name or a `dataset_path` that is no regular file."""
    goal_conditioned = is_oraclerep_env(env_name)
    name = parse_oraclerep_name(env_name) if goal_conditioned else _parse_env_name(env_name)
    dataset_name = name.dataset_name
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
            f"--dataset_path={paths[0]} is a directory; pass one npz file, or the directory as --ogbench_dataset_dir."
        )
    if kind is not None:
        raise ValueError(f"--dataset_path={paths[0]} is {kind}, not a data file; pass one npz file.")
    if not os.path.isfile(paths[0]):
        raise _missing_file_error(paths[0], dataset_name, goal_conditioned)
    return paths


def existing_val_path(train_paths: list[str]) -> str | None:
    """The validation file `<stem>-val.npz` of the (first) training file if it exists, else None."""
    val = val_path_for(train_paths[0])
    return val if os.path.isfile(val) else None
