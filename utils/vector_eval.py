"""Evaluation episodes on `E` environments in lockstep, behind `evaluation.evaluate_batched` (which states the
contract: every episode equals the sequential `evaluation.evaluate`'s): the vector env (`make_eval_vector_env`),
the slot bookkeeping (`LockstepRunner`), the batched policy (`BatchedPolicy`), and the pieces both evaluations
share (`split_chunk`, `episode_key`, `policy_kwargs`).
"""

import functools
import os
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium
import jax
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

VECTOR_MODES = ("sync", "async", "auto")
# `make_eval_vector_env(mode="auto")` runs the envs in subprocesses from this many usable CPU cores on
# (`resolve_vector_mode`: on 2 cores, subprocesses stepped cube-double slower than one process).
ASYNC_MIN_CORES = 4
# Key of `vector_env.metadata` that marks a vector env built by `make_eval_vector_env`.
EVAL_VECTOR_ENV = "qc_eval_vector_env"
# Reset option of a vector env from `make_eval_vector_env`: one task id per slot (goal-conditioned envs).
SLOT_TASK_IDS = "slot_task_ids"


# ---------------------------------------------------------------- shared with the sequential evaluation


def chunk_and_length(out) -> Tuple[np.ndarray, Optional[int]]:
    """A policy's output as `(chunk (h * A,), length)`: an agent that picks how many actions of its chunk to
    execute returns `(chunk, length)` with `length` in `1..h` (ACSAC); any other returns the chunk alone
    (length None: the whole chunk)."""
    if isinstance(out, (tuple, list)):
        chunk, length = out
        return np.asarray(chunk), int(np.asarray(length))
    return np.asarray(out), None


def split_chunk(
    chunk: np.ndarray, action_dim: int, max_actions: Optional[int] = None, length: Optional[int] = None
) -> List[np.ndarray]:
    """`(h * A,)` -> its first `min(h, length, max_actions)` actions `(A,)` (all `h` without either).

    Raises:
        ValueError: the size is not a multiple of `A`, or `length` is not in `1..h`.
    """
    if chunk.size % action_dim != 0:
        raise ValueError(f"The policy returned {chunk.size} numbers, not a multiple of action_dim={action_dim}.")
    actions = list(chunk.reshape(-1, action_dim))
    if length is not None:
        if not 1 <= length <= len(actions):
            raise ValueError(f"The policy chose to execute {length} actions of a chunk of {len(actions)}.")
        actions = actions[:length]
    return actions if max_actions is None else actions[:max_actions]


def executed_length_stats(lengths: Sequence[int], horizon: int) -> Dict[str, float]:
    """`executed_length.mean` and `executed_length.share_<k>` for `k = 1..horizon`: the actions executed of each
    chunk (the agent's chosen length, cut by `action_chunk_eval_size`), over the chunks of `lengths`."""
    lengths = np.asarray(lengths, float)
    stats = {"executed_length.mean": float(lengths.mean()) if lengths.size else float("nan")}
    for k in range(1, horizon + 1):
        stats[f"executed_length.share_{k}"] = float(np.mean(lengths == k)) if lengths.size else float("nan")
    return stats


def episode_key(key: jax.Array, episode: int) -> jax.Array:
    """The policy stream of evaluation episode `episode`: `jax.random.fold_in(key, episode)`."""
    return jax.random.fold_in(key, episode)


def policy_kwargs(goal=None, best_of_n: Optional[int] = None, temperature: Optional[float] = None) -> Dict:
    """The keyword arguments of `agent.sample_actions` beside the observation and key: `goals` for a
    goal-conditioned evaluation, `best_of_n` and `temperature` when the evaluation overrides them (none of them
    otherwise, so agents without them keep working)."""
    kwargs = {}
    if goal is not None:
        kwargs["goals"] = goal
    if best_of_n is not None:
        kwargs["best_of_n"] = best_of_n
    if temperature is not None:
        kwargs["temperature"] = temperature
    return kwargs


def slot_info(infos: Dict, slot: int) -> Dict:
    """The info dict env `slot` returned, rebuilt from a vector env's stacked `infos` (gymnasium stacks key `k`
    over the envs with a mask `_k` of those that reported it, recursively for dicts)."""
    out = {}
    for k, v in infos.items():
        mask = infos.get(f"_{k}")
        if mask is None or not mask[slot]:  # `k` is a mask itself, or env `slot` did not report it
            continue
        out[k] = slot_info(v, slot) if isinstance(v, dict) else v[slot]
    return out


# ---------------------------------------------------------------- vector envs


class PausableEnv(gymnasium.Wrapper):
    """Skips a step whose action is all NaN (a slot with no episode, or waiting for the chunk boundary): the
    last observation is returned. The reset option `slot_task_ids` (one task id per slot) becomes this env's
    own `task_id`, `slot` being its index in the vector env."""

    def __init__(self, env: gymnasium.Env, slot: int = 0):
        super().__init__(env)
        self.slot = slot
        self._last_observation = None

    def reset(self, **kwargs):
        options = kwargs.get("options")
        if options and SLOT_TASK_IDS in options:
            options = {k: v for k, v in options.items() if k != SLOT_TASK_IDS}
            kwargs["options"] = {**options, "task_id": int(kwargs["options"][SLOT_TASK_IDS][self.slot])}
        observation, info = self.env.reset(**kwargs)
        self._last_observation = observation
        return observation, info

    def step(self, action):
        if np.all(np.isnan(np.asarray(action, dtype=np.float64))):
            return self._last_observation, 0.0, False, False, {}
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._last_observation = observation
        return observation, reward, terminated, truncated, info


def _make_pausable(env_fn: Callable[[], gymnasium.Env], slot: int = 0) -> gymnasium.Env:
    return PausableEnv(env_fn(), slot)


def usable_cores() -> int:
    """CPU cores this process may run on (`os.sched_getaffinity` where available, else `os.cpu_count()`)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_vector_mode(mode: str, num_envs: int, cores: Optional[int] = None) -> str:
    """`'sync'` or `'async'` for `mode`; `'auto'`: async iff `num_envs >= 2` and `cores` (default
    `usable_cores()`) `>= ASYNC_MIN_CORES` (docs/benchmarks.md, "Evaluation environments": the measurements
    behind it). `ValueError` for another mode."""
    if mode not in VECTOR_MODES:
        raise ValueError(f"mode must be one of {VECTOR_MODES}, got {mode!r}.")
    if mode != "auto":
        return mode
    cores = usable_cores() if cores is None else cores
    return "async" if num_envs >= 2 and cores >= ASYNC_MIN_CORES else "sync"


def make_eval_vector_env(
    env_fn: Callable[[], gymnasium.Env],
    num_envs: int,
    mode: str = "auto",
    context: str = "spawn",
    max_concurrency: Optional[int] = None,
):
    """`num_envs` copies of `env_fn()` (picklable for async: each subprocess builds its own) as a gymnasium
    vector env for `evaluate_batched`: autoreset disabled (a finished env is reset with its next episode's
    seed), idle slots skipped, per-slot task ids. `mode`: `sync` (one process), `async` (one subprocess per env,
    started by `context`, `spawn` or `forkserver`: forking MuJoCo/OpenGL or JAX threads can deadlock) or `auto`
    (`resolve_vector_mode`); `max_concurrency` bounds the async workers stepping at once (default: the usable
    cores when there are more envs). `ValueError` for a bad `num_envs`, `mode`, `context` or `max_concurrency`.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    num_envs = int(num_envs)
    resolved = resolve_vector_mode(mode, num_envs)
    env_fns = [functools.partial(_make_pausable, env_fn, slot) for slot in range(num_envs)]
    if resolved == "sync":
        vector_env = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.DISABLED)
    else:
        if context not in ("spawn", "forkserver"):
            raise ValueError(f"context must be 'spawn' or 'forkserver' (MuJoCo is not fork-safe), got {context!r}.")
        if max_concurrency is None:
            cores = usable_cores()
            max_concurrency = cores if num_envs > cores else None
        elif max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
        vector_env = AsyncVectorEnv(
            env_fns,
            context=context,
            autoreset_mode=AutoresetMode.DISABLED,
            max_concurrency=max_concurrency,
        )
    # A new dict: SyncVectorEnv shares the sub-env class's own metadata dict.
    vector_env.metadata = {**vector_env.metadata, EVAL_VECTOR_ENV: resolved}
    return vector_env


def check_vector_env(vector_env):
    """`ValueError` unless `vector_env` was built by `make_eval_vector_env` (autoreset disabled)."""
    if not getattr(vector_env, "metadata", {}).get(EVAL_VECTOR_ENV):
        raise ValueError(
            "evaluate_batched needs a vector env built by evaluation.make_eval_vector_env (autoreset disabled, "
            f"idle slots skipped); got {type(vector_env).__name__}."
        )
    if vector_env.autoreset_mode != AutoresetMode.DISABLED:
        raise ValueError(f"the vector env must have autoreset_mode=DISABLED, got {vector_env.autoreset_mode}.")


# ---------------------------------------------------------------- batched policy


@functools.partial(jax.jit, static_argnames="best_of_n")
def _policy_rows(agent, observations, goals, streams, temperature=None, best_of_n=None):
    """One policy call per row: `(chunks (E, h * A), next streams (E, 2), keys used (E, 2))`; `chunks` is
    `(chunks, lengths (E,))` for an agent that picks how many actions to execute.

    Row `e` computes `next, key = split(streams[e])` and `agent.sample_actions(observations[e], key,
    goals=goals[e])` (`goals` None: no goal), exactly what `evaluation.Policy` does for one observation. The
    rows are looped over (`lax.map`) with the shapes of a single call, so each row's chunk is bitwise a single
    call's (a `vmap` over rows changes XLA's kernels and rounding, and on CPU it was no faster:
    docs/benchmarks.md).
    """

    def row(observation, goal, stream):
        next_stream, key = jax.random.split(stream)
        return agent.sample_actions(observation, key, **policy_kwargs(goal, best_of_n, temperature)), next_stream, key

    return jax.lax.map(lambda args: row(*args), (observations, goals, streams))


class BatchedPolicy:
    """The batched policy of one evaluation: `(observations, goals, streams, rows) -> (chunks, next streams,
    keys)` as numpy arrays, one `sample_actions` call per row (`_policy_rows`); only the `rows` the runner
    marks use their chunk. `best_of_n` overrides the agent's number of candidates, `temperature` the scale of its
    noise (None: its own)."""

    def __init__(self, agent, best_of_n: Optional[int] = None, temperature: Optional[float] = None):
        self.agent, self.best_of_n, self.temperature = agent, best_of_n, temperature

    def __call__(self, observations: np.ndarray, goals: Optional[np.ndarray], streams: np.ndarray, rows: np.ndarray):
        # The temperature is traced, as in a single jitted call (a constant one could fuse differently).
        out = _policy_rows(self.agent, observations, goals, streams, self.temperature, best_of_n=self.best_of_n)
        return jax.tree_util.tree_map(np.asarray, out)


def raw_key(key) -> np.ndarray:
    """A JAX key as its raw `(2,)` uint32 words (typed keys are unwrapped)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key, np.uint32)


def check_agent(agent):
    """`TypeError` unless `agent` is a pytree of arrays (its `sample_actions` is traced by `BatchedPolicy`)."""
    leaves = jax.tree_util.tree_leaves(agent)
    if not all(isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float)) for leaf in leaves):
        raise TypeError(
            f"evaluate_batched needs the agent as a JAX pytree of arrays (e.g. a flax.struct.PyTreeNode) whose "
            f"sample_actions is traceable; got {type(agent).__name__}."
        )


# ---------------------------------------------------------------- lockstep episodes


class LockstepRunner:
    """The slot bookkeeping of `evaluate_batched` (one instance per evaluation).

    Args:
        policy: a `BatchedPolicy`.
        vector_env: from `make_eval_vector_env`.
        key: the evaluation key; episode `i` draws from `episode_key(key, i)`.
        reset_seeds: one reset seed per episode (their number is the number of episodes).
        action_dim: `A`.
        task_ids: goal-conditioned: the task id of each episode (reset with `options={'task_id': ...}`, the
            goal read from the reset's `info['goal']` and passed to the policy); None: no goals.
        max_actions: run only the first `max_actions` actions of each chunk (None: all of them).
    """

    def __init__(
        self,
        policy: BatchedPolicy,
        vector_env,
        key,
        reset_seeds: Sequence[int],
        action_dim: int,
        task_ids: Optional[Sequence[int]] = None,
        max_actions: Optional[int] = None,
    ):
        self.policy, self.env, self.key = policy, vector_env, key
        self.reset_seeds, self.action_dim = list(reset_seeds), action_dim
        self.task_ids = None if task_ids is None else [int(t) for t in task_ids]
        self.max_actions = max_actions
        self.num_slots = vector_env.num_envs
        self.episode = np.full(self.num_slots, -1)  # episode index run by each slot, -1: idle
        self.waiting = np.zeros(self.num_slots, bool)  # reset, starts at the next chunk boundary
        self.queues: List[List[np.ndarray]] = [[] for _ in range(self.num_slots)]
        self.streams = np.zeros((self.num_slots, 2), np.uint32)  # each slot's episode key stream
        self.goals: Optional[np.ndarray] = None  # (E, G) each slot's goal (goal-conditioned)
        self.calls = np.zeros(self.num_slots, int)
        self.lengths: List[List[int]] = [[] for _ in range(self.num_slots)]  # actions executed of each chunk
        self.horizon: Optional[int] = None  # actions per chunk
        self.trajs: List[Optional[Dict[str, list]]] = [None] * self.num_slots
        self.next_episode = 0
        self.t = 0

    def _assign(self, slot: int) -> Optional[int]:
        """Give `slot` the next episode (or none); returns that episode's reset seed, else None."""
        self.queues[slot] = []
        if self.next_episode >= len(self.reset_seeds):
            self.episode[slot] = -1
            return None
        i = self.next_episode
        self.next_episode += 1
        self.episode[slot], self.calls[slot], self.lengths[slot] = i, 0, []
        self.streams[slot] = raw_key(episode_key(self.key, i))
        self.trajs[slot] = defaultdict(list)
        return self.reset_seeds[i]

    def _reset(self, seeds: List[Optional[int]], mask: Optional[np.ndarray] = None):
        """Reset the slots of `mask` (all without one): each with its episode's seed and, goal-conditioned, task
        (idle slots take the first task); store their goals. Returns the observations."""
        options = {} if mask is None else {"reset_mask": mask}
        if self.task_ids is not None:
            slot_tasks = [self.task_ids[i] if i >= 0 else self.task_ids[0] for i in self.episode]
            options[SLOT_TASK_IDS] = np.asarray(slot_tasks)
        observations, infos = self.env.reset(seed=seeds, options=options or None)
        if self.task_ids is not None:
            for slot in range(self.num_slots) if mask is None else np.flatnonzero(mask):
                goal = np.asarray(slot_info(infos, slot).get("goal"))
                if goal.ndim == 0:
                    raise ValueError("A goal-conditioned evaluation needs the goal in the reset info['goal'].")
                if self.goals is None:
                    self.goals = np.zeros((self.num_slots, *goal.shape), goal.dtype)
                self.goals[slot] = goal
        return observations

    def run(self, on_episode_end: Callable[[], None]) -> List[tuple]:
        """All episodes; returns `(traj, final info, policy calls, executed lengths, horizon)` per episode in index
        order (lengths empty for whole chunks)."""
        num_episodes = len(self.reset_seeds)
        results: List[Optional[tuple]] = [None] * num_episodes
        seeds = [self._assign(slot) for slot in range(self.num_slots)]
        observations = self._reset(seeds)  # every slot, so every row holds an observation
        horizon, finished, dtype = None, 0, np.float32
        self.t = 0  # lockstep step counter (steps skipped while every running slot waits count too)
        while finished < num_episodes:
            # A chunk boundary: waiting episodes start now (at every step when the agent picks its chunks' lengths).
            if horizon is None or self.t % horizon == 0:
                self.waiting[:] = False
            active = (self.episode >= 0) & ~self.waiting
            if not active.any():  # every running slot waits for the next boundary: nothing to step
                self.t += 1
                continue
            need = active & np.array([not q for q in self.queues])
            if need.any():
                chunks, next_streams, _ = self.policy(observations, self.goals, self.streams, need)
                chunks, lengths = chunks if isinstance(chunks, tuple) else (chunks, None)
                for slot in np.flatnonzero(need):
                    length = None if lengths is None else int(lengths[slot])
                    self.queues[slot] = split_chunk(chunks[slot], self.action_dim, self.max_actions, length)
                    if length is not None:
                        self.lengths[slot].append(len(self.queues[slot]))
                    self.streams[slot] = next_streams[slot]
                    self.calls[slot] += 1
                self.horizon = chunks.shape[-1] // self.action_dim
                horizon = 1 if lengths is not None else horizon or len(self.queues[np.flatnonzero(need)[0]])
                dtype = np.result_type(chunks.dtype, np.float32)  # the actions' own dtype, as in `evaluate`
            actions = np.full((self.num_slots, self.action_dim), np.nan, dtype)
            for slot in np.flatnonzero(active):
                actions[slot] = self.queues[slot].pop(0)
            next_observations, rewards, terminated, truncated, infos = self.env.step(actions)
            self.t += 1
            done_slots = []
            for slot in np.flatnonzero(active):
                done = bool(terminated[slot] or truncated[slot])
                traj = self.trajs[slot]
                traj["observation"].append(np.array(observations[slot]))
                traj["action"].append(actions[slot].copy())
                traj["reward"].append(rewards[slot])
                traj["done"].append(done)
                if done:
                    info, calls = slot_info(infos, slot), int(self.calls[slot])
                    results[self.episode[slot]] = (dict(traj), info, calls, self.lengths[slot], self.horizon)
                    finished += 1
                    on_episode_end()
                    done_slots.append(slot)
            observations = next_observations
            if done_slots and finished < num_episodes:
                mask = np.zeros(self.num_slots, bool)
                mask[done_slots] = True
                seeds = [None] * self.num_slots
                for slot in done_slots:
                    seeds[slot] = self._assign(slot)
                    self.waiting[slot] = True
                observations = self._reset(seeds, mask)
        return results
