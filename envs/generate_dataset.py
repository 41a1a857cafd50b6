"""Generate OGBench manipulation datasets locally with the scripted oracles shipped in `ogbench`.

The official files live on a host this machine cannot reach, so we rebuild them with OGBench's
published procedure ('play' datasets; see docs/datasets.md, and OGBench's
`data_gen_scripts/generate_manipspace.py` / `commands.sh`):

- env: the goal-conditioned `<domain>-v0` made with `terminate_at_goal=False,
  mode='data_collection', max_episode_steps=1001`; every episode is therefore 1001 rows, and
  loading keeps 1000 transitions of it (the last state has no action with a next state).
- play: plan oracles (`ogbench.manipspace.oracles.plan`) with action noise 0.1 and noise smoothing
  0.5. noisy: Markov oracles (`...oracles.markov`, min_norm 0.4) with per-episode Gaussian action
  noise xi ~ U(0, 0.1), scaled (1, 1, 1, 3, 10) per action dimension, and random actions with
  probability 0.1 (cube, scene) or 0.2 (puzzle).
- whenever the oracle finishes its subtask, `env.unwrapped.set_new_target(p_stack=...)` draws the
  next one; p_stack per episode: 0 (single), U(0, 0.25) (double), U(0.05, 0.35) (triple),
  U(0.1, 0.5) (quadruple), U(0, 0.35) (octuple), 0.5 (scene; puzzle ignores it).
- domains: cube-single/double/triple/quadruple/octuple, scene, puzzle-3x3/4x4/4x5/4x6 (OGBench's
  `commands.sh` and horizon-reduction's 1B commands use this one script for all of them; published counts
  `ogbench.PUBLISHED_NUM_EPISODES`: puzzle-4x4 1000, puzzle-4x5 3000, puzzle-4x6 5000, cube-octuple none
  (only its 100M set, shards of 1000)). humanoidmaze data come from trained expert policies
  (`generate_locomaze.py` with OGBench's SAC experts), not oracles: refused with one line naming the download.
- scene episodes whose cube leaves the table area (y >= 0.29, or y <= -0.3 outside the drawer's
  height band 0.06..0.08) are discarded and redrawn.
- each row stores the observation s_t, the action a_t, `terminals` (True on the episode's last
  row) and the simulator state of s_t: `qpos`, `qvel` (float32) and, for scene and puzzle,
  `button_states` (int64) -- what `ogbench.relabel_utils.relabel_dataset` needs. No reward, success
  or task is stored: loading relabels each transition for the run's task and success timing
  (`envs.ogbench`), so one file serves every task and both timings.
- `<save_path>` gets `num_episodes` episodes, `<save_path stem>-val.npz` a further 10% (at least 1;
  training does not need it). For a single-task domain the command ends by saying how often the training file
  reaches each task's goal (`file_goal_counts`; `scripts/goal_counts.py` says it for any file).

Provenance: each file also holds the key `generator_metadata`, a JSON string (0-d unicode array, readable
with `allow_pickle=False`) with the settings that made it: `generator_version` (`GENERATOR_VERSION`), `seed`,
`num_episodes` (of this file), `num_train_episodes`, `num_val_episodes`, `split`, `dataset_name`,
`dataset_type`, `domain`, `max_episode_steps`, the noise settings, and the `ogbench`, `mujoco` and `numpy`
versions. Loaders ignore it; `envs.provenance` reads it into a run's `flags.json`.

Determinism (`GENERATOR_VERSION` 2): one `--seed` fixes everything, episode by episode. Episode `i`
(0-based: the training episodes, then the val episodes) owns the child `SeedSequence(seed).spawn(...)[i]`
(`= SeedSequence(seed, spawn_key=(i,))`, see `episode_streams`), split into three streams: the env's
reset seed (`env.reset(seed=...)`, which also resets MuJoCo with `mj_resetData`), a seed for numpy's
*global* legacy RNG, which ogbench's oracles draw from internally (reseeded when the episode starts),
and our `np.random.Generator` (p_stack, noise level, random actions, action noise). A scene redraw of
episode `i` continues episode `i`'s own three streams. Nothing else carries over from one episode to
the next, so episode `i` depends only on the settings, the seed and `i`, and the files are
byte-identical for every `--num_workers` (which is therefore not recorded in them). The caller's global
numpy state is restored afterwards. Files are written with fixed zip timestamps, so the same seed and
settings on the same software give byte-identical files. Version 1 drew all episodes in sequence from
one env generator, one Generator and one global legacy seed, so a seed gives other (equally distributed)
data under version 2; the file's `generator_version` says which procedure made it.

Worker processes: `--num_workers=W` (W > 1) starts `min(W, episodes)` 'spawn' processes (MuJoCo and JAX do
not survive `fork`), one env each, handed one episode index at a time (`_map_in_processes`: a worker's exception
or death is raised in the parent, naming the episode); the parent puts the episodes in index order and writes the
files as one process does. A script calling `generate_dataset(..., num_workers=W)` needs the
`if __name__ == "__main__":` guard ('spawn' re-imports the main module).

Command line (run from the repository root):

    python -m envs.generate_dataset --env_name=cube-single-play-v0 --num_episodes=100 --seed=0 \\
        --save_path=~/.ogbench/data/cube-single-play-v0.npz [--dataset_type=play|noisy] \\
        [--max_episode_steps=1001] [--num_workers=W] [--if_missing]

Resuming: each finished episode is kept in `<save_path>.parts/` (one `episode_<i>.npz`, written atomically,
beside a `settings.json` of what makes an episode: the settings, `GENERATOR_VERSION`, the ogbench, mujoco and
numpy versions and numpy's CPU loops in use, which change the last bits of its float math, docs/datasets.md
section 2b). The same command run again after a stop (Ctrl-C, kill -9, the end of a job) makes only the episodes
that are missing, and its files equal, byte for byte, those of a run that never stopped; an unreadable episode
file is made again. A folder made by other settings is refused (`PartsMismatch`, naming what differs) unless
`--overwrite` discards it. The folder goes once both files are written.

Cost: about 1.1-1.3 s of CPU per 1001-row episode, 1.8x with two workers on two idle cores, ~20-25 min for
1000 + 100 episodes in one process on the development machine (docs/benchmarks.md section 8).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import importlib.metadata
import json
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator

import gymnasium
import numpy as np

from envs.common import goal_counts, val_path_for
from envs.ogbench import (
    DATASET_TYPES,
    DOMAINS,
    EXPERT_DATASET_TYPES,
    NUM_TASKS,
    PUBLISHED_NUM_EPISODES,
    OGBenchName,
    default_dataset_path,
    download_command,
    load_ogbench_dataset,
    parse_ogbench_name,
)
from envs.provenance import GENERATOR_METADATA_KEY, encode_generator_metadata
from utils.files import existing_ancestor
from utils.progress import progress as progress_bar
from utils.startup import parse_absl_flags, quiet_startup

# Bump when a seed would no longer give the same draws (a change in the procedure or its defaults).
GENERATOR_VERSION = 2  # 2: per-episode random streams (`episode_streams`); 1: one sequential stream
_VERSIONED = ("ogbench", "mujoco", "numpy")  # the packages whose versions a file and a parts folder record


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


def _p_stack(domain: str, rng: np.random.Generator) -> float:
    """Per-episode probability that a new cube target is on top of another cube (published values)."""
    if domain == "cube-single":
        return 0.0
    low_high = {"cube-double": (0.0, 0.25), "cube-triple": (0.05, 0.35), "cube-quadruple": (0.1, 0.5),
                "cube-octuple": (0.0, 0.35)}  # fmt: skip
    if domain in low_high:
        return float(rng.uniform(*low_high[domain]))
    return 0.5  # scene (puzzle ignores it)


def _make_oracles(env, name: OGBenchName, noise: float, noise_smoothing: float, min_norm: float) -> dict:
    """Oracles keyed by the env's `info['privileged/target_task']`."""
    if name.dataset_type == "play":
        from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
        from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
        from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

        kw = dict(env=env, noise=noise, noise_smoothing=noise_smoothing)
        if name.domain.startswith("cube"):
            return {"cube": CubePlanOracle(**kw)}
        if name.domain == "scene":
            return {
                "cube": CubePlanOracle(**kw),
                "button": ButtonPlanOracle(**kw),
                "drawer": DrawerPlanOracle(**kw),
                "window": WindowPlanOracle(**kw),
            }
        return {"button": ButtonPlanOracle(gripper_always_closed=True, **kw)}

    from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle
    from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle
    from ogbench.manipspace.oracles.markov.drawer_markov import DrawerMarkovOracle
    from ogbench.manipspace.oracles.markov.window_markov import WindowMarkovOracle

    kw = dict(env=env, min_norm=min_norm)
    if name.domain.startswith("cube"):
        return {"cube": CubeMarkovOracle(**kw)}
    if name.domain == "scene":
        return {
            "cube": CubeMarkovOracle(max_step=100, **kw),
            "button": ButtonMarkovOracle(**kw),
            "drawer": DrawerMarkovOracle(**kw),
            "window": WindowMarkovOracle(**kw),
        }
    return {"button": ButtonMarkovOracle(gripper_always_closed=True, **kw)}


def _scene_cube_stays_on_table(qpos: np.ndarray) -> bool:
    """False if the scene cube (qpos[14:17]) went too far right, or too far left outside the drawer."""
    y, z = qpos[:, 15], qpos[:, 16]
    too_far_right = y >= 0.29
    left_outside_drawer = (y <= -0.3) & ((z < 0.06) | (z > 0.08))
    return not np.any(too_far_right | left_outside_drawer)


@contextlib.contextmanager
def _preserved_global_numpy():
    """Restore numpy's global legacy RNG state (which ogbench's oracles draw from) on exit."""
    saved = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(saved)


def episode_streams(seed: int, index: int) -> tuple[int, int, np.random.Generator]:
    """`(env_seed, legacy_seed, rng)` of episode `index` (0-based, train episodes first, then val) of `seed`:
    the child `np.random.SeedSequence(seed, spawn_key=(index,))` split by `.spawn(3)` into the first attempt's
    `env.reset(seed=...)` seed and the seed of numpy's global legacy RNG (ogbench's oracles draw from it), both
    uint32 as int, and our `np.random.Generator` (p_stack, noise level, random actions, action noise)."""
    episode = np.random.SeedSequence(seed, spawn_key=(index,))
    env_ss, legacy_ss, rng_ss = episode.spawn(3)
    return int(env_ss.generate_state(1)[0]), int(legacy_ss.generate_state(1)[0]), np.random.default_rng(rng_ss)


def _collect_episode(
    env, oracles, name: OGBenchName, rng, p_random_action: float, noise: float, reset_seed: int | None
) -> dict:
    """Roll out one episode of `max_episode_steps` rows; returns lists per stored key.

    `reset_seed` reseeds `env.np_random` (None: the env's generator continues from the last episode).
    """
    p_stack = _p_stack(name.domain, rng)
    xi = rng.uniform(0.0, noise) if name.dataset_type == "noisy" else 0.0
    noise_scale = xi * np.array([1.0, 1.0, 1.0, 3.0, 10.0])

    ob, info = env.reset(seed=reset_seed)
    oracle = oracles[info["privileged/target_task"]]
    oracle.reset(ob, info)
    rows = {k: [] for k in ("observations", "actions", "terminals", "qpos", "qvel", "button_states")}
    done = False
    while not done:
        if p_random_action > 0 and rng.uniform() < p_random_action:
            action = rng.uniform(-1.0, 1.0, size=5)
        else:
            action = np.asarray(oracle.select_action(ob, info), dtype=np.float64)
            if xi > 0:
                action = action + rng.normal(size=5) * noise_scale
        action = np.clip(action, -1.0, 1.0)
        next_ob, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated

        if oracle.done:  # subtask finished: draw the next target and hand it to the matching oracle
            target_ob, target_info = env.unwrapped.set_new_target(p_stack=p_stack)
            oracle = oracles[target_info["privileged/target_task"]]
            oracle.reset(target_ob, target_info)

        rows["observations"].append(ob)
        rows["actions"].append(action)
        rows["terminals"].append(done)
        rows["qpos"].append(info["prev_qpos"])  # state of s_t = the state `ob` was computed from
        rows["qvel"].append(info["prev_qvel"])
        if name.has_button_states:
            rows["button_states"].append(info["prev_button_states"])
        ob = next_ob
    if not name.has_button_states:
        del rows["button_states"]
    return rows


_DTYPES = {"terminals": bool, "button_states": np.int64}  # everything else float32 (OGBench's dtypes)
_MAX_ATTEMPTS = 100  # scene: draws of one episode before giving up


def _episode_arrays(rows: dict[str, list]) -> dict[str, np.ndarray]:
    """One episode's rows as arrays of the stored dtypes, each of shape `(max_episode_steps, ...)`."""
    return {k: np.asarray(v, dtype=_DTYPES.get(k, np.float32)) for k, v in rows.items()}


def _stack(episodes: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate episodes row-wise, key by key, releasing each episode's arrays as they are copied."""
    return {k: np.concatenate([ep.pop(k) for ep in episodes]) for k in list(episodes[0])}


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Everything that determines an episode besides its index (picklable; sent to every worker)."""

    name: OGBenchName
    seed: int
    max_episode_steps: int
    noise: float
    noise_smoothing: float
    min_norm: float
    p_random_action: float


class _EpisodeMaker:
    """One collection env and its oracles; `episode(i)` depends only on the settings and `i`.

    Nothing carries over between episodes: each one reseeds the env (`reset(seed=...)`, which also
    runs `mj_resetData`), numpy's global legacy RNG and a fresh Generator from `episode_streams`, and
    every oracle is reset before it acts. So a worker that made other episodes before (or none) gives
    the same episode `i` as a single process that made all of them.
    """

    def __init__(self, settings: _Settings):
        self.settings = settings
        self.env = gymnasium.make(
            settings.name.collection_env_id,
            terminate_at_goal=False,
            mode="data_collection",
            max_episode_steps=settings.max_episode_steps,
        )
        self.oracles = _make_oracles(
            self.env, settings.name, settings.noise, settings.noise_smoothing, settings.min_norm
        )

    def episode(self, index: int) -> tuple[dict[str, np.ndarray], int]:
        """Episode `index` as arrays (`_episode_arrays`) and the number of scene redraws it took.

        Sets numpy's global legacy RNG (callers restore it). A scene redraw continues episode `index`'s
        own streams (env generator, global legacy RNG, Generator), so it stays a function of `index`.

        Raises:
            RuntimeError: a scene episode failed the table check `_MAX_ATTEMPTS` (100) times in a row.
        """
        s = self.settings
        env_seed, legacy_seed, rng = episode_streams(s.seed, index)
        np.random.seed(legacy_seed)
        for attempt in range(_MAX_ATTEMPTS):
            rows = _collect_episode(
                self.env,
                self.oracles,
                s.name,
                rng,
                s.p_random_action,
                s.noise,
                reset_seed=env_seed if attempt == 0 else None,
            )
            if s.name.domain != "scene" or _scene_cube_stays_on_table(np.asarray(rows["qpos"])):
                return _episode_arrays(rows), attempt
        raise RuntimeError(
            f"Episode {index}: {_MAX_ATTEMPTS} scene episodes in a row moved the cube off the table; giving up."
        )

    def close(self) -> None:
        self.env.close()


_worker_maker: _EpisodeMaker | None = None  # a worker process's env, built on its first episode


def _worker_episode(settings: _Settings, index: int) -> tuple[dict[str, np.ndarray], int]:
    """Run in a worker process: episode `index` of `settings` (the env is built once per process)."""
    global _worker_maker
    if _worker_maker is None or _worker_maker.settings != settings:
        if _worker_maker is not None:
            _worker_maker.close()
        else:
            quiet_startup()  # this process's first env: its start-up lines would repeat the parent's
        _worker_maker = None
        _worker_maker = _EpisodeMaker(settings)
    with _preserved_global_numpy():
        return _worker_maker.episode(index)


def _map_in_processes(fn, arg, indices, num_workers: int) -> Iterator[tuple[int, object]]:
    """Yield `(i, fn(arg, i))` for every `i` in `indices`, computed in `num_workers` spawned processes.

    Results come in the order they finish (not index order). `fn` must be a module-level function
    (pickled by reference). Processes are started with the 'spawn' context (MuJoCo and JAX do not
    survive `fork` reliably) and shut down on return, on error and on KeyboardInterrupt: indices not
    yet started are cancelled, the ones running are waited for (one episode each).

    Raises:
        Exception: the worker's own exception (same type and message, the worker's traceback as its
            `__cause__`), with a note naming the index.
        concurrent.futures.process.BrokenProcessPool: a worker process died (killed, out of memory,
            crashed in C code), with a note naming an unfinished index; never a hang.
    """
    ctx = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=num_workers, mp_context=ctx)
    try:
        futures = {pool.submit(fn, arg, i): i for i in indices}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except concurrent.futures.process.BrokenProcessPool as e:
                e.add_note(f"(a generate_dataset worker process died, e.g. killed; episode index {i} was unfinished)")
                raise
            except BaseException as e:
                e.add_note(f"(raised in a generate_dataset worker process, episode index {i})")
                raise
            yield i, result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class PartsMismatch(ValueError):
    """`<save_path>.parts/` holds episodes that other settings made (module docstring, Resuming)."""


class _Parts:
    """The finished episodes of one generation on disk, `<train_path>.parts/` (module docstring, Resuming).
    Opening it for `settings` raises `PartsMismatch`, naming what differs, where another generation left it,
    unless `discard_other` (`--overwrite`), which empties it."""

    def __init__(self, train_path: str, settings: _Settings, discard_other: bool):
        self.folder = f"{train_path}.parts"
        path = os.path.join(self.folder, "settings.json")
        try:  # numpy's vector loops for this CPU (private; np.show_runtime only prints them): episodes made under
            # others (AVX-512 or not) differ in the last bits (docs/datasets.md 2b); mixed, no command makes the file
            from numpy._core import _multiarray_umath as umath

            loops = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
        except (ImportError, AttributeError):
            loops = None
        record = {**dataclasses.asdict(settings), "name": settings.name.dataset_name, "numpy_cpu_loops": loops}
        record |= {f"{p}_version": importlib.metadata.version(p) for p in _VERSIONED}
        self.record = json.loads(json.dumps({"generator_version": GENERATOR_VERSION, **record}))
        if os.path.isdir(self.folder) and any(n.startswith("episode_") for n in os.listdir(self.folder)):
            try:
                with open(path) as f:
                    old = json.load(f)
            except (OSError, ValueError):
                old = {}
            differ = [f"{k} {old.get(k)!r} -> {v!r}" for k, v in self.record.items() if old.get(k) != v]
            if differ and not discard_other:
                raise PartsMismatch(
                    f"{self.folder} holds episodes another generation made ({'; '.join(differ)}): run that "
                    "command again to finish it, remove the folder, or pass --overwrite to discard it."
                )
            if differ:
                shutil.rmtree(self.folder)
        os.makedirs(self.folder, exist_ok=True)
        with open(f"{path}.tmp", "w") as f:
            json.dump(self.record, f, indent=1, sort_keys=True)
        os.replace(f"{path}.tmp", path)

    def path(self, index: int) -> str:
        return os.path.join(self.folder, f"episode_{index:06d}.npz")

    def finished(self, count: int) -> dict[int, tuple[dict[str, np.ndarray], int]]:
        """`{i: (episode, redraws)}` of the episodes `i < count` on disk; an unreadable file is removed."""
        done = {}
        for i in filter(lambda i: os.path.exists(self.path(i)), range(count)):
            try:
                with np.load(self.path(i), allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
                done[i] = (arrays, int(arrays.pop("redrawn")))
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
                os.remove(self.path(i))
        return done

    def save(self, index: int, episode: dict[str, np.ndarray], redrawn: int) -> None:
        write_npz(self.path(index), {**episode, "redrawn": np.asarray(redrawn)})


def _generate_episodes(
    settings: _Settings, count: int, num_workers: int, progress: bool, parts: _Parts
) -> tuple[list[dict[str, np.ndarray]], int]:
    """Episodes `0..count-1` in index order, and the total number of scene redraws.

    The episodes `parts` holds are read, the others made and saved there as they finish. `num_workers == 1`
    runs in this process; more run in worker processes (`_map_in_processes`). Either way episode `i` is
    `_EpisodeMaker(settings).episode(i)`, so the result does not depend on `num_workers` or on how often the
    generation was stopped. Numpy's global legacy RNG is left as the caller had it.
    """
    done = parts.finished(count)
    episodes = [done[i][0] if i in done else None for i in range(count)]
    num_redrawn = sum(redrawn for _, redrawn in done.values())
    todo = [i for i in range(count) if i not in done]
    if done and progress:
        print(f"{parts.folder}: {len(done)} of {count} episodes made before; making the other {len(todo)}.")
    bar = progress_bar(
        total=count, initial=len(done), desc=settings.name.dataset_name, unit="episodes", disable=not progress
    )
    try:
        if todo and num_workers == 1:  # (nothing to make: no env is built)
            maker = _EpisodeMaker(settings)
            try:
                with _preserved_global_numpy():
                    for i in todo:
                        episodes[i], redrawn = maker.episode(i)
                        parts.save(i, episodes[i], redrawn)
                        num_redrawn += redrawn
                        bar.update()
            finally:
                maker.close()
        elif todo:
            for i, (episode, redrawn) in _map_in_processes(_worker_episode, settings, todo, num_workers):
                episodes[i] = episode
                parts.save(i, episode, redrawn)
                num_redrawn += redrawn
                bar.update()
    finally:
        bar.close()
    return episodes, num_redrawn


def generator_metadata(name: OGBenchName, split: str, num_episodes: int, **settings) -> dict:
    """The settings stored in a file under `GENERATOR_METADATA_KEY` (no path, no time: same seed, same bytes)."""
    versions = {f"{p}_version": importlib.metadata.version(p) for p in _VERSIONED}
    return {
        "generator": "envs.generate_dataset",
        "generator_version": GENERATOR_VERSION,
        "dataset_name": name.dataset_name,
        "domain": name.domain,
        "dataset_type": name.dataset_type,
        "split": split,
        "num_episodes": int(num_episodes),
        **settings,
        **versions,
    }


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an `np.load`-compatible compressed npz atomically, with fixed timestamps (reproducible bytes)."""
    tmp = f"{path}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                array = np.asarray(arrays[key])  # (np.ascontiguousarray would turn a 0-d array into 1-d)
                array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
                np.lib.format.write_array(f, array, allow_pickle=False)
    os.replace(tmp, path)


def train_path_of(name: OGBenchName, save_path: str | None) -> str:
    """The training file to write: `save_path` (`~` expanded), else `~/.ogbench/data/<dataset>.npz`."""
    return os.path.expanduser(save_path or default_dataset_path(name.dataset_name))


def check_targets(env_name: str, save_path: str | None, dataset_type: str | None, overwrite: bool):
    """`(train_path, val_path)` to write; `ValueError` for a path not ending in .npz or where no file can be
    written, `FileExistsError` for an existing file without `overwrite` (checked before any episode is generated)."""
    train_path = train_path_of(resolve_dataset_name(env_name, dataset_type), save_path)
    if not train_path.endswith(".npz"):
        raise ValueError(f"save_path must end in .npz, got {train_path!r}.")
    val_path = val_path_for(train_path)
    for p in (train_path, val_path):
        if os.path.isdir(p):
            raise ValueError(f"{p} is a directory; save_path must name the .npz file to write.")
        if os.path.exists(p) and not overwrite:
            raise FileExistsError(f"{p} exists; pass --overwrite to replace it (runs trained on it would then refuse "
                                  "to resume: their recorded sha256 would no longer match).")  # fmt: skip
    # The directory must take files now: finding out after the episodes are generated loses them.
    folder = existing_ancestor(os.path.dirname(os.path.abspath(train_path)))
    if not os.path.isdir(folder):
        raise ValueError(f"cannot write {train_path}: {folder} is a file, not a directory.")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ValueError(f"cannot write {train_path}: {folder} does not take files ({e.strerror}).") from None
    return train_path, val_path


def check_settings(
    name, num_episodes, num_val_episodes, max_episode_steps, seed, num_workers, noise, p_random_action,
    noise_smoothing=0.5, min_norm=0.4,
):  # fmt: skip
    """`(num_episodes, num_val_episodes)` with their defaults filled in; `ValueError` naming the first bad value
    (a count out of range, a noise setting that is negative or not finite: NaN actions would be written)."""
    num_episodes = PUBLISHED_NUM_EPISODES[name.domain] if num_episodes is None else num_episodes
    num_val_episodes = max(1, num_episodes // 10) if num_val_episodes is None else num_val_episodes
    checks = [
        ("num_episodes", num_episodes, num_episodes >= 1, ">= 1"),
        ("num_val_episodes", num_val_episodes, num_val_episodes >= 1, ">= 1"),
        ("max_episode_steps", max_episode_steps, max_episode_steps >= 2, ">= 2 (one transition)"),
        ("seed", seed, 0 <= seed < 2**32, "in [0, 2**32)"),
        ("noise", noise, 0 <= noise < math.inf, "a finite number >= 0"),
        ("noise_smoothing", noise_smoothing, 0 <= noise_smoothing < math.inf, "a finite number >= 0 (steps)"),
        ("min_norm", min_norm, 0 <= min_norm < math.inf, "a finite number >= 0"),
        ("p_random_action", p_random_action, p_random_action is None or 0 <= p_random_action <= 1, "in [0, 1]"),
    ]
    for flag, value, ok, want in checks:
        if not ok:
            raise ValueError(f"--{flag}={value} must be {want}.")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"--num_workers={num_workers!r} must be an integer >= 1.")
    return num_episodes, num_val_episodes


def generate_dataset(
    env_name: str,
    num_episodes: int | None = None,
    seed: int = 0,
    save_path: str | None = None,
    dataset_type: str | None = None,
    max_episode_steps: int = 1001,
    num_val_episodes: int | None = None,
    noise: float = 0.1,
    noise_smoothing: float = 0.5,
    min_norm: float = 0.4,
    p_random_action: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
    num_workers: int = 1,
) -> dict:
    """Generate `<save_path>` and `<save_path stem>-val.npz` with OGBench's oracles (module docstring).

    Args:
        env_name: dataset name ('cube-single-play-v0'), training env name
            ('cube-single-play-singletask-task1-v0') or `<domain>-v0` with `dataset_type`.
        num_episodes: training episodes; default the published count (1000/3000/5000).
        seed: the only source of randomness (see module docstring).
        save_path: training file (must end in .npz); default `~/.ogbench/data/<dataset>.npz`.
        dataset_type: 'play' or 'noisy'; default from the name, else 'play'.
        max_episode_steps: rows per episode (1001 published; tests use ~50).
        num_val_episodes: default max(1, num_episodes // 10).
        noise, noise_smoothing: plan-oracle action noise and its smoothing (play); `noise` is also the
            upper bound of the per-episode Gaussian noise level (noisy).
        min_norm: Markov-oracle minimum action norm (noisy).
        p_random_action: probability of a uniform random action; default 0 (play), 0.1 (noisy cube,
            scene), 0.2 (noisy puzzle).
        overwrite: replace existing files.
        progress: show a tqdm bar over finished episodes (train and val together).
        num_workers: processes that generate episodes; 1 (default) runs in this process, more start
            `min(num_workers, episodes)` 'spawn' worker processes with one env each. The files are
            byte-identical for every value (it is not recorded in them). A script calling this with
            `num_workers > 1` needs the `if __name__ == "__main__":` guard ('spawn' re-imports it).

    Returns:
        {'train_path', 'val_path', 'num_train_episodes', 'num_val_episodes', 'num_train_rows',
         'num_val_rows', 'num_redrawn', 'num_workers', 'seconds'}; `seconds` is the wall time of the
        episodes (worker start-up included), not of writing the files.

    Raises:
        ValueError: unknown name/type, bad counts, `num_workers < 1`, a save path not ending in .npz or in a
            directory that does not take files (read-only, a file on the way).
        FileExistsError: a target file exists and `overwrite` is False.
        RuntimeError: a scene episode failed the table check 100 times in a row.
        Exception: whatever a worker process raised (same type and message, the worker's traceback as
            `__cause__`); `BrokenProcessPool` if a worker process died. No file is written then.
    """
    name = resolve_dataset_name(env_name, dataset_type)
    num_episodes, num_val_episodes = check_settings(
        name, num_episodes, num_val_episodes, max_episode_steps, seed, num_workers, noise, p_random_action,
        noise_smoothing, min_norm,
    )  # fmt: skip
    if p_random_action is None:
        noisy_p = 0.2 if name.domain.startswith("puzzle") else 0.1
        p_random_action = 0.0 if name.dataset_type == "play" else noisy_p
    train_path, val_path = check_targets(env_name, save_path, dataset_type, overwrite)

    episode_settings = _Settings(
        name=name,
        seed=int(seed),
        max_episode_steps=int(max_episode_steps),
        noise=float(noise),
        noise_smoothing=float(noise_smoothing),
        min_norm=float(min_norm),
        p_random_action=float(p_random_action),
    )
    total = num_episodes + num_val_episodes
    num_workers = min(int(num_workers), total)
    start = time.perf_counter()
    parts = _Parts(train_path, episode_settings, discard_other=overwrite)
    episodes, num_redrawn = _generate_episodes(episode_settings, total, num_workers, progress, parts)

    os.makedirs(os.path.dirname(os.path.abspath(train_path)), exist_ok=True)
    train, val = _stack(episodes[:num_episodes]), _stack(episodes[num_episodes:])
    settings = dict(
        seed=int(seed),
        num_train_episodes=int(num_episodes),
        num_val_episodes=int(num_val_episodes),
        max_episode_steps=int(max_episode_steps),
        noise=float(noise),
        noise_smoothing=float(noise_smoothing),
        min_norm=float(min_norm),
        p_random_action=float(p_random_action),
    )
    for arrays, split, count in ((train, "train", num_episodes), (val, "val", num_val_episodes)):
        arrays[GENERATOR_METADATA_KEY] = encode_generator_metadata(generator_metadata(name, split, count, **settings))
    write_npz(val_path, val)
    write_npz(train_path, train)
    shutil.rmtree(parts.folder, ignore_errors=True)
    return {
        "train_path": train_path,
        "val_path": val_path,
        "num_train_episodes": num_episodes,
        "num_val_episodes": num_val_episodes,
        "num_train_rows": len(train["terminals"]),
        "num_val_rows": len(val["terminals"]),
        "num_redrawn": num_redrawn,
        "num_workers": num_workers,
        "seconds": time.perf_counter() - start,
    }


def goal_counts_text(task: int | None, counts: dict) -> str:
    """`task 1: goal in 2114 of 999000 rows (0.212%), 64 entries` (`goal_counts`'s; task None: the default)."""
    share = 100.0 * counts["goal_rows"] / max(counts["rows"], 1)
    return (
        f"task {task or 'default'}: goal in {counts['goal_rows']} of {counts['rows']} rows ({share:.3g}%), "
        f"{counts['goal_entries']} entries"
    )


def file_goal_counts(path: str, dataset_name: str, tasks=range(1, NUM_TASKS + 1)) -> dict[int, dict[str, int]]:
    """`{task: goal_counts}` of one file of a single-task domain's dataset (`cube-single-play-v0`) for each of
    `tasks`, relabelled as a run of that task loads it (the 'pre' timing, as the paper's data). `ValueError`
    for a dataset of no single-task domain, or a file that does not fit it."""
    parsed = parse_ogbench_name(dataset_name)
    if parsed is None or parsed.domain not in DOMAINS or parsed.dataset_type not in DATASET_TYPES:
        raise ValueError(f"{dataset_name!r} is no dataset of a single-task OGBench domain ({', '.join(DOMAINS)})")
    counts = {}
    for task in tasks:
        env_name = OGBenchName(parsed.domain, parsed.dataset_type, task).env_name
        data = load_ogbench_dataset(path, env_name, action_clip_eps=None, success_timing="pre")
        counts[task] = goal_counts(data["masks"], data["terminals"])
    return counts


def main(_):
    from absl import flags

    quiet_startup()
    f = flags.FLAGS
    try:
        name = resolve_dataset_name(f.env_name, f.dataset_type)  # e.g. humanoidmaze: one line naming the download
        check_settings(name, f.num_episodes, f.num_val_episodes, f.max_episode_steps, f.seed, f.num_workers, f.noise,
                       f.p_random_action, f.noise_smoothing, f.min_norm)  # fmt: skip
        train_path = train_path_of(name, f.save_path)
        if f.if_missing and os.path.isfile(train_path):
            print(f"{train_path} is there already: nothing generated (--if_missing).")
            return
        check_targets(f.env_name, f.save_path, f.dataset_type, f.overwrite)
    except (ValueError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        summary = generate_dataset(
            f.env_name,
            num_episodes=f.num_episodes,
            seed=f.seed,
            save_path=f.save_path,
            dataset_type=f.dataset_type,
            max_episode_steps=f.max_episode_steps,
            num_val_episodes=f.num_val_episodes,
            noise=f.noise,
            noise_smoothing=f.noise_smoothing,
            min_norm=f.min_norm,
            p_random_action=f.p_random_action,
            overwrite=f.overwrite,
            num_workers=f.num_workers,
        )
    except PartsMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    s = summary
    print(
        f"Wrote {s['train_path']} ({s['num_train_episodes']} episodes, {s['num_train_rows']} rows) and "
        f"{s['val_path']} ({s['num_val_episodes']} episodes, {s['num_val_rows']} rows) in "
        f"{s['seconds']:.1f} s ({s['num_workers']} worker(s)); {s['num_redrawn']} scene episode(s) redrawn."
    )
    if name.domain in DOMAINS:  # how often the training file reaches each task's goal (the rows a run relabels)
        print(f"Goals of {s['train_path']}, relabelled as each task's runs load it:")
        for task, counts in file_goal_counts(s["train_path"], name.dataset_name).items():
            print(f"  {goal_counts_text(task, counts)}")


def _define_flags():
    from absl import flags

    flags.DEFINE_string("env_name", None, "Dataset name, e.g. cube-single-play-v0 (or a training env name).")
    flags.DEFINE_integer("num_episodes", None, "Training episodes; default: the published count.")
    flags.DEFINE_integer("num_val_episodes", None, "Validation episodes; default max(1, num_episodes // 10).")
    flags.DEFINE_integer("seed", 0, "Seed of everything random in the generation.")
    flags.DEFINE_string("save_path", None, "Training .npz file; default ~/.ogbench/data/<dataset>.npz.")
    flags.DEFINE_enum("dataset_type", None, list(DATASET_TYPES), "play: plan oracles; noisy: Markov oracles.")
    flags.DEFINE_integer("max_episode_steps", 1001, "Rows per episode (published: 1001 = 1000 transitions).")
    flags.DEFINE_float("noise", 0.1, "Plan-oracle action noise (play); max per-episode noise level (noisy).")
    flags.DEFINE_float("noise_smoothing", 0.5, "Gaussian smoothing (in steps) of the plan-oracle noise.")
    flags.DEFINE_float("min_norm", 0.4, "Markov-oracle minimum action norm (noisy).")
    flags.DEFINE_float("p_random_action", None, "Random-action probability; default 0 play, 0.1/0.2 noisy.")
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.")
    flags.DEFINE_bool(
        "if_missing", False, "Generate only when the training file is not there yet; else say so and exit 0."
    )
    flags.DEFINE_integer(
        "num_workers",
        1,
        "Processes generating episodes (1: this process; W > 1: W spawned workers, at most one per "
        "episode). The output files are byte-identical for every value; use about one per CPU core.",
        lower_bound=1,
    )
    flags.mark_flag_as_required("env_name")


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main, flags_parser=parse_absl_flags)
