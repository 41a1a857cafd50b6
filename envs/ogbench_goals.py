"""OGBench goal-conditioned environments with oracle goal representations, and their offline datasets.

What DQC (Decoupled Q-chunking; Li, Park, Levine, ICLR 2026) trains and evaluates on. Names
(`ogbench_utils.parse_oraclerep_name`):

    training env   <domain>-<type>-oraclerep-v0   e.g. cube-triple-play-oraclerep-v0
    dataset        <domain>-<type>-v0             e.g. cube-triple-play-v0 (the file the single-task envs read)
    gym env id     <domain>-v0                    made with `use_oracle_rep=True`

<domain> in `ogbench_utils.GOAL_DOMAINS` (cube-single .. cube-octuple, scene, puzzle-3x3 .. puzzle-4x6 with
type play or noisy; humanoidmaze-giant with type navigate).

The env (`make_oraclerep_env`): `reset(seed=s, options=dict(task_id=i))`, `i` in `1..num_tasks` (5 in every
domain; `task_names`), starts evaluation task `i` and returns the goal's oracle representation in
`info['goal']` (cubes: each cube's `(xyz - (0.425, 0, 0)) * 10`; puzzle: the button states; scene: cube, buttons,
drawer and window; humanoidmaze: the goal's x-y). The episode terminates when the goal is reached (the
registered `terminate_at_goal=True`) and `info['success']` is the success of the state after the action:
ogbench's goal-conditioned envs score s_{t+1} in every version (its README, "Caveats"; only the single-task
registrations changed to 'pre' in 1.2), which is `success_timing='post'`, the default here and what the DQC
release ran. `success_timing='pre'` is passed through when asked, and recorded (`goal_metadata`).

Reset randomness: ogbench draws the humanoidmaze start and goal noise from numpy's *global* legacy RNG, so
`env.reset(seed=s)` alone does not fix them; `envs.wrappers.GlobalNumpySeeding` (in every env built here) runs
each seeded reset with the global RNG seeded from `s` and restores the caller's state afterwards. The cube
envs compute the goal after two arm steps drawn from a fresh, unseeded action space (`action_space.sample()` in
`cube_env.py`), so a cube goal can differ between two resets with the same seed; measured here: by at most
2e-8 in the oracle representation (cube-octuple, cube-quadruple; <= 1e-16 for cube-single .. triple; never in
puzzle), below float32 resolution at those magnitudes, while the observations are identical. We leave that
as ogbench has it.

The dataset (`load_oraclerep_dataset`): the stored trajectories (`ogbench_utils.read_trajectories`, the same
checks as the single-task loader) as the rows of transitions that have a successor, exactly the rows the
single-task loader keeps (its docstring's table): `observations, actions, next_observations, terminals`
(1 on each trajectory's last transition), plus `oracle_reps` `(N, G)` float32 computed by
`ogbench.relabel_utils.add_oracle_reps` from the stored `qpos` (and `button_states`) of the same rows, and
`rewards` zeros, `masks` ones so that `utils.datasets.Dataset` accepts the dict (goal-conditioned rewards and
masks come from the goal windows, `utils.goal_windows`, not from the file). Actions are clipped to
[-1 + eps, 1 - eps] as in the release. (The release loads the compact layout: every row, with `valids` 0 on
each trajectory's last row and the last two rows marked terminal; its windows and goals are the same,
`utils/goal_windows.py`.)
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the locomotion envs with gymnasium)
import ogbench.manipspace  # noqa: F401  (registers the manipulation envs with gymnasium)
from ogbench.relabel_utils import add_oracle_reps

from envs.ogbench_utils import check_success_timing, parse_oraclerep_name, read_trajectories, timing_metadata


def make_oraclerep_env(env_name: str, success_timing: str = "post", **env_kwargs) -> gymnasium.Env:
    """The goal-conditioned env of `env_name`: `gymnasium.make('<domain>-v0', use_oracle_rep=True, ...)`.

    Not wrapped: `envs.env_utils.make_eval_env` adds `GlobalNumpySeeding` and `EpisodeMonitor`.

    Args:
        env_name: e.g. 'cube-triple-play-oraclerep-v0'.
        success_timing: 'post' (success and termination of the state after the action, ogbench's and the
            release's goal-conditioned behaviour) or 'pre'.
        **env_kwargs: passed to `gymnasium.make` (e.g. `max_episode_steps`).

    Raises:
        ValueError: unsupported name or timing.
    """
    name = parse_oraclerep_name(env_name)
    timing = check_success_timing(success_timing)
    return gymnasium.make(name.env_id, use_oracle_rep=True, success_timing=timing, **env_kwargs)


@functools.lru_cache(maxsize=None)
def _private_env(env_id: str) -> gymnasium.Env:
    # A private env per domain: `add_oracle_reps` reads the number of cubes from it, `task_names` its tasks.
    # Never a driver's env (nothing here resets or steps it).
    return gymnasium.make(env_id, use_oracle_rep=True)


def task_names(env_name: str) -> tuple[str, ...]:
    """The env's evaluation tasks, task id `i` at position `i - 1`, e.g. ('task1_horizontal', ...) for
    cube-single, ('task1', ..., 'task5') for puzzle and humanoidmaze. `ValueError` for an unsupported name."""
    env = _private_env(parse_oraclerep_name(env_name).env_id)
    return tuple(str(info["task_name"]) for info in env.unwrapped.task_infos)


def goal_metadata(env_name: str, success_timing: str = "post") -> dict:
    """Facts to store with a goal-conditioned run.

    Returns:
        {'ogbench_version', 'success_timing', 'reward_timing' ('post-step' or 'pre-step'), 'goal_conditioned':
        True, 'task_id': None (every task is evaluated), 'task_names': list, 'dataset_success_timing': None
        (no offline rewards are relabelled: the goal windows make them)}.

    Raises:
        ValueError: unsupported name or timing.
    """
    return {
        **timing_metadata(success_timing),
        "goal_conditioned": True,
        "task_id": None,
        "task_names": list(task_names(env_name)),
        "dataset_success_timing": None,
    }


def load_oraclerep_dataset(
    path: str, env_name: str, action_clip_eps: float | None = 1e-5, keep_info: bool = False
) -> dict[str, np.ndarray]:
    """Load one OGBench npz file (a whole dataset or one shard) for the goal-conditioned env `env_name`.

    Args:
        path: the npz file, e.g. `~/.ogbench/data/cube-triple-play-v0.npz`.
        env_name: e.g. 'cube-triple-play-oraclerep-v0' (chooses the domain of the oracle representations).
        action_clip_eps: actions are clipped to [-1 + eps, 1 - eps]; None keeps them as stored.
        keep_info: keep the simulator-state keys `qpos`, `qvel` (and `button_states`) of each row.

    Returns:
        dict of float32 arrays with T = stored rows - number of trajectories: observations (T, D),
        actions (T, A), next_observations (T, D), terminals (T,) (1 on the last transition of each
        trajectory), rewards (T,) zeros, masks (T,) ones, oracle_reps (T, G) (the goal representation of each
        row's state, what `info['goal']` holds for a goal in that state); with keep_info also qpos, qvel
        [, button_states].

    Raises:
        FileNotFoundError: no file at `path` (the message gives the download command and, where the data can
            be generated, the generator command).
        ValueError: unsupported env name; the single-task loader's file checks (truncated, missing key, NaN,
            ...); a file of another domain (observation width or oracle representation does not fit).
    """
    name = parse_oraclerep_name(env_name)
    arrays = read_trajectories(path, name.dataset_name, name.has_button_states, goal_conditioned=True)
    env = _private_env(name.env_id)
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
