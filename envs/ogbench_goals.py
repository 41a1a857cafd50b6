"""OGBench goal-conditioned environments with oracle goal representations, and their offline datasets: what
DQC trains and evaluates on. Names, the env's tasks, goals and success timing, its reset randomness and the
data: docs/datasets.md, section 10.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the locomotion envs with gymnasium)
import ogbench.manipspace  # noqa: F401  (registers the manipulation envs with gymnasium)
from ogbench.relabel_utils import add_oracle_reps

from envs.ogbench_utils import check_success_timing, parse_oraclerep_name, read_trajectories, task_env, timing_metadata


def make_oraclerep_env(env_name: str, success_timing: str = "post", **env_kwargs) -> gymnasium.Env:
    """`gymnasium.make('<domain>-v0', use_oracle_rep=True, success_timing=..., **env_kwargs)` for `env_name`, not
    wrapped (`envs.env_utils.make_eval_env` adds the wrappers); `ValueError` for a bad name or timing."""
    name = parse_oraclerep_name(env_name)
    timing = check_success_timing(success_timing)
    return gymnasium.make(name.env_id, use_oracle_rep=True, success_timing=timing, **env_kwargs)


@functools.lru_cache(maxsize=None)
def _private_env(env_id: str) -> gymnasium.Env:
    # A private env per domain: `add_oracle_reps` reads the number of cubes from it, `task_names` its tasks.
    # Never a driver's env (nothing here resets or steps it).
    return gymnasium.make(env_id, use_oracle_rep=True)


def task_names(env_name: str, env=None) -> tuple[str, ...]:
    """The env's evaluation tasks, task id `i` at position `i - 1`, e.g. ('task1_horizontal', ...) for
    cube-single, ('task1', ..., 'task5') for puzzle and humanoidmaze; `env` as `load_oraclerep_dataset`'s.
    `ValueError` for an unsupported name."""
    env = task_env(env, _private_env, parse_oraclerep_name(env_name).env_id)
    return tuple(str(info["task_name"]) for info in env.unwrapped.task_infos)


def goal_metadata(env_name: str, success_timing: str = "post", env=None) -> dict:
    """`flags.json`'s env facts of a goal-conditioned run: `timing_metadata`, `goal_conditioned`, `task_id` None
    (every task is evaluated), `task_names`, `dataset_success_timing` None (the goal windows make the rewards)."""
    return {
        **timing_metadata(success_timing),
        "goal_conditioned": True,
        "task_id": None,
        "task_names": list(task_names(env_name, env)),
        "dataset_success_timing": None,
    }


def load_oraclerep_dataset(
    path: str, env_name: str, action_clip_eps: float | None = 1e-5, keep_info: bool = False, env=None
) -> dict[str, np.ndarray]:
    """One OGBench npz file (a dataset or a shard) for the goal-conditioned env `env_name`: the single-task
    loader's rows and checks (float32 `observations`, `next_observations (T, D)`, `actions (T, A)`, clipped to
    `[-1 + eps, 1 - eps]`, `terminals (T,)`), `oracle_reps (T, G)` of each row's state, `rewards` zeros and
    `masks` ones (DQC's come from its windows); `keep_info` keeps `qpos`, `qvel` (, `button_states`).
    `env`: the goal-conditioned env of `env_name` (`make_oraclerep_env`) or a function returning it, read, not
    reset; None: a private one per domain. `FileNotFoundError` with the download (and generator) command;
    `ValueError` for a bad name, a bad file or one of another domain."""
    name = parse_oraclerep_name(env_name)
    arrays = read_trajectories(path, name.dataset_name, name.has_button_states, goal_conditioned=True)
    env = task_env(env, _private_env, name.env_id)
    ob_dim = env.observation_space.shape[-1]
    if arrays["observations"].shape[-1] != ob_dim:
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: its observations have {arrays['observations'].shape[-1]} "
            f"columns, the env's {ob_dim}. Is it the dataset of another domain (expected {name.dataset_name})?"
        )

    ends = arrays["terminals"].astype(bool)
    starts = np.flatnonzero(~ends)  # rows that have a next state in the same trajectory
    info_keys = ("qpos", "qvel") + (("button_states",) if name.has_button_states else ())
    info = {k: arrays[k][starts] for k in info_keys}
    try:
        add_oracle_reps(name.env_id, env, info)  # adds 'oracle_reps' (float32)
    except (ValueError, IndexError) as e:  # e.g. the qpos of fewer cubes
        raise ValueError(
            f"Dataset file {path} does not fit {env_name}: computing the oracle goal representations failed "
            f"({type(e).__name__}: {e}). Is it the dataset of another domain (expected {name.dataset_name})?"
        ) from e
    n = len(starts)
    dataset = {
        "observations": arrays["observations"][starts].astype(np.float32),
        "actions": arrays["actions"][starts].astype(np.float32),
        "next_observations": arrays["observations"][starts + 1].astype(np.float32),
        "terminals": ends[starts + 1].astype(np.float32),
        "rewards": np.zeros(n, np.float32),
        "masks": np.ones(n, np.float32),
        "oracle_reps": np.asarray(info.pop("oracle_reps"), np.float32),
    }
    if action_clip_eps is not None:
        dataset["actions"] = np.clip(dataset["actions"], -1 + action_clip_eps, 1 - action_clip_eps)
    if keep_info:
        dataset.update(info)
    return dataset
