"""Evaluation episodes on `E` environments in lockstep: the vector env, the slot bookkeeping and the batched policy.

The machinery behind `evaluation.evaluate_batched` (which aggregates the episodes this module runs; the
contract, that every episode equals the sequential `evaluation.evaluate`'s, is stated there). A leaf module:
jax, numpy, gymnasium and `utils` only.

* `make_eval_vector_env`: `E` copies of one evaluation env, autoreset disabled, idle slots skipped
  (`PausableEnv`), and per-slot task ids for goal-conditioned envs (reset option `slot_task_ids`).
* `LockstepRunner`: hands episodes to slots in index order, keeps one open-loop action queue per slot, and
  calls the policy for every slot at once at chunk boundaries.
* `BatchedPolicy`: one jitted call computes a chunk per row, each row exactly as one `sample_actions` call
  (`policy_batching`: 'vmap', 'map' or 'auto').
* `split_chunk`, `episode_key`, `policy_kwargs`: the pieces the sequential evaluation shares, so both
  evaluations split chunks, derive keys and call the policy the same way.
"""

import functools
import logging
import math
import os
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence

import gymnasium
import jax
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

logger = logging.getLogger(__name__)

VECTOR_MODES = ("sync", "async", "auto")
POLICY_BATCHINGS = ("auto", "vmap", "map")
# `make_eval_vector_env(mode="auto")` runs the envs in subprocesses from this many usable CPU cores on
# (`resolve_vector_mode`: on 2 cores, subprocesses stepped cube-double slower than one process).
ASYNC_MIN_CORES = 4
# Key of `vector_env.metadata` that marks a vector env built by `make_eval_vector_env`.
EVAL_VECTOR_ENV = "qc_eval_vector_env"
# Reset option of a vector env from `make_eval_vector_env`: one task id per slot (goal-conditioned envs).
SLOT_TASK_IDS = "slot_task_ids"


# ---------------------------------------------------------------- shared with the sequential evaluation


def split_chunk(chunk: np.ndarray, action_dim: int, max_actions: Optional[int] = None) -> List[np.ndarray]:
    """`(h * A,)` -> the first `min(h, max_actions)` of its `h` actions `(A,)` (all without `max_actions`).

    Raises:
        ValueError: the size is not a multiple of `A`.
    """
    if chunk.size % action_dim != 0:
        raise ValueError(f"The policy returned {chunk.size} numbers, not a multiple of action_dim={action_dim}.")
    actions = list(chunk.reshape(-1, action_dim))
    return actions if max_actions is None else actions[:max_actions]


def episode_key(key: jax.Array, episode: int) -> jax.Array:
    """The policy stream of evaluation episode `episode`: `jax.random.fold_in(key, episode)`."""
    return jax.random.fold_in(key, episode)


def policy_kwargs(goal=None, best_of_n: Optional[int] = None) -> Dict:
    """The keyword arguments of `agent.sample_actions` beside the observation and key: `goals` for a
    goal-conditioned evaluation, `best_of_n` when the evaluation overrides it (neither otherwise, so agents
    without them keep working)."""
    kwargs = {}
    if goal is not None:
        kwargs["goals"] = goal
    if best_of_n is not None:
        kwargs["best_of_n"] = best_of_n
    return kwargs


def slot_info(infos: Dict, slot: int) -> Dict:
    """The info dict env `slot` returned, rebuilt from a vector env's stacked `infos`.

    Gymnasium stacks each key `k` into an array over the envs with a boolean mask `_k` (which envs
    reported it), recursively for dict values; an array's dtype comes from the first env that
    reported the key in that step (copies of one env report the same types).
    """
    out = {}
    for k, v in infos.items():
        mask = infos.get(f"_{k}")
        if mask is None or not mask[slot]:  # `k` is a mask itself, or env `slot` did not report it
            continue
        out[k] = slot_info(v, slot) if isinstance(v, dict) else v[slot]
    return out


# ---------------------------------------------------------------- vector envs


class PausableEnv(gymnasium.Wrapper):
    """Skips a step whose action is all NaN: the env is not stepped and the last observation is returned.

    `evaluate_batched` sends NaN actions to the slots that have no episode to run, or whose next
    episode waits for the common chunk boundary, so those envs cost nothing and keep their state.
    `slot` is this env's index in the vector env: a reset option `slot_task_ids` (one task id per slot, the
    same dict reaches every slot) becomes this env's own `task_id` option.
    """

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
    """`'sync'` or `'async'` for `mode` (`'auto'`: async iff `num_envs >= 2` and `cores >= ASYNC_MIN_CORES`).

    `cores` defaults to `usable_cores()`. The policy and the envs never run at the same time, so
    subprocesses pay off only when several envs step on separate cores and that outweighs a pipe round
    trip per env and step (docs/benchmarks.md, "Evaluation environments": the measurements behind `ASYNC_MIN_CORES`).

    Raises:
        ValueError: `mode` not in `VECTOR_MODES`.
    """
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
    """`num_envs` copies of `env_fn()` as a gymnasium vector env for `evaluate_batched`.

    Args:
        env_fn: zero-argument callable returning one evaluation env (e.g.
            `EnvAndDatasets.make_eval_env`); for `'async'` it must be picklable (a module-level
            function or a `functools.partial` of one), since each subprocess builds its own env.
        num_envs: `E`, the number of env slots (`>= 1`).
        mode: `'sync'` (`SyncVectorEnv`, all envs in this process), `'async'` (`AsyncVectorEnv`, one
            subprocess per env) or `'auto'` (`resolve_vector_mode`: async from `ASYNC_MIN_CORES` usable
            cores on, else sync).
        context: multiprocessing start method of the async workers: `'spawn'` (default) or
            `'forkserver'`. `'fork'` is refused: forking a process that holds MuJoCo/OpenGL or JAX
            threads can deadlock or crash.
        max_concurrency: async only: at most this many workers step or reset at the same time
            (gymnasium's semaphore). Default: `usable_cores()` when `num_envs` is larger (the policy
            waits while the envs step, so every core can step one), else no limit.

    Returns:
        A vector env with `autoreset_mode=DISABLED` (a finished env is reset only when
        `evaluate_batched` resets it, with its next episode's seed) whose sub-envs skip all-NaN
        actions (idle slots) and take per-slot task ids, marked in `metadata` for `evaluate_batched`.
        Observations are stacked to `(E, *ob)`, actions taken as `(E, A)`. Close it with `.close()` (async:
        ends the subprocesses).

    Raises:
        ValueError: `num_envs < 1` (or not an int), `mode` not in `VECTOR_MODES`, `context` not
            `'spawn'`/`'forkserver'`, `max_concurrency < 1`.
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


def _row_dot_kinds(jaxpr) -> List[str]:
    """Kind of every `dot_general` in `jaxpr` and its sub-jaxprs, in order: 'dot', 'gemv' or 'gemm'.

    XLA picks a different kernel (and summation order) for a product whose free size is 1 on one
    side (matrix-vector) than for a matrix-matrix product.
    """
    kinds = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
            lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
            m = math.prod(d for i, d in enumerate(lhs) if i not in lhs_contract and i not in lhs_batch)
            n = math.prod(d for i, d in enumerate(rhs) if i not in rhs_contract and i not in rhs_batch)
            kinds.append("dot" if m == n == 1 else "gemv" if min(m, n) == 1 else "gemm")
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                kinds.extend(_row_dot_kinds(sub))
    return kinds


def _sub_jaxprs(value):
    if hasattr(value, "eqns"):  # Jaxpr
        yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):  # ClosedJaxpr
        yield value.jaxpr
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _sub_jaxprs(item)


def static_batching(agent, observation: np.ndarray, num_rows: int, goal=None, best_of_n=None) -> str:
    """'vmap' when vmapping one row's policy over `num_rows` rows keeps every matrix product's kind, else 'map'."""
    if jax.default_backend() != "cpu":
        return "map"  # row results of a GPU/TPU matrix product may depend on the number of rows
    key = jax.random.PRNGKey(0)

    def one(ob, g, k):
        return agent.sample_actions(ob, k, **policy_kwargs(g, best_of_n))

    single = jax.make_jaxpr(one)(observation, goal, key)
    stack = lambda x: None if x is None else np.broadcast_to(x, (num_rows, *np.shape(x)))  # noqa: E731
    rows = jax.make_jaxpr(jax.vmap(one))(stack(observation), stack(goal), np.stack([key] * num_rows))
    return "vmap" if _row_dot_kinds(single.jaxpr) == _row_dot_kinds(rows.jaxpr) else "map"


@functools.partial(jax.jit, static_argnames=("batching", "best_of_n"))
def _policy_rows(agent, observations, goals, streams, batching, best_of_n=None):
    """One policy call per row: `(chunks (E, h * A), next streams (E, 2), keys used (E, 2))`.

    Row `e` computes `next, key = split(streams[e])` and `agent.sample_actions(observations[e], key,
    goals=goals[e])` (`goals` None: no goal), exactly what `evaluation.Policy` does for one observation.
    'vmap' batches the rows into one computation; 'map' loops over them (`lax.map`) with the shapes of a
    single call.
    """

    def row(observation, goal, stream):
        next_stream, key = jax.random.split(stream)
        return agent.sample_actions(observation, key, **policy_kwargs(goal, best_of_n)), next_stream, key

    if batching == "vmap":
        return jax.vmap(row)(observations, goals, streams)
    return jax.lax.map(lambda args: row(*args), (observations, goals, streams))


# (agent type, agent tree structure, observations' and goals' shapes and dtypes, best_of_n, backend) -> batching.
BATCHING_CACHE: Dict[tuple, str] = {}


class BatchedPolicy:
    """The batched policy of one evaluation; resolves 'auto' once per agent structure, shapes and backend.

    'auto' takes 'vmap' unless vmapping would turn a matrix-vector product of one row into a
    matrix-matrix product (`static_batching`), then checks the first call bitwise against one
    unbatched `agent.sample_actions` call per row and falls back to 'map' (with a warning) if any differs.
    `best_of_n` overrides the agent's number of candidates (None: the agent's own).
    """

    def __init__(self, agent, batching: str, best_of_n: Optional[int] = None):
        self.agent, self.batching, self.best_of_n = agent, batching, best_of_n

    def __call__(self, observations: np.ndarray, goals: Optional[np.ndarray], streams: np.ndarray, rows: np.ndarray):
        if self.batching != "auto":
            return self._call(self.batching, observations, goals, streams)
        cache_key = (
            type(self.agent),
            jax.tree_util.tree_structure(self.agent),
            observations.shape,
            observations.dtype.str,
            None if goals is None else (goals.shape, goals.dtype.str),
            self.best_of_n,
            jax.default_backend(),
        )
        if cache_key in BATCHING_CACHE:
            return self._call(BATCHING_CACHE[cache_key], observations, goals, streams)
        goal = None if goals is None else goals[0]
        candidate = static_batching(self.agent, observations[0], len(observations), goal, self.best_of_n)
        for batching in dict.fromkeys([candidate, "map"]):
            chunks, next_streams, keys = self._call(batching, observations, goals, streams)
            single = [
                np.asarray(
                    self.agent.sample_actions(
                        observations[e], keys[e], **policy_kwargs(None if goals is None else goals[e], self.best_of_n)
                    )
                )
                for e in np.flatnonzero(rows)
            ]
            if all(np.array_equal(chunks[e], s) for e, s in zip(np.flatnonzero(rows), single, strict=True)):
                BATCHING_CACHE[cache_key] = batching
                return chunks, next_streams, keys
            logger.warning(
                "Batched policy rows (%s) differ from single calls of sample_actions on this backend.", batching
            )
        BATCHING_CACHE[cache_key] = "map"
        return chunks, next_streams, keys

    def _call(self, batching, observations, goals, streams):
        chunks, next_streams, keys = _policy_rows(
            self.agent, observations, goals, streams, batching=batching, best_of_n=self.best_of_n
        )
        return np.asarray(chunks), np.asarray(next_streams), np.asarray(keys)


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
        self.episode[slot], self.calls[slot] = i, 0
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
        """All episodes; returns `(traj, final info, policy calls)` per episode in index order."""
        num_episodes = len(self.reset_seeds)
        results: List[Optional[tuple]] = [None] * num_episodes
        seeds = [self._assign(slot) for slot in range(self.num_slots)]
        observations = self._reset(seeds)  # every slot, so every row holds an observation
        horizon, finished, dtype = None, 0, np.float32
        self.t = 0  # lockstep step counter (steps skipped while every running slot waits count too)
        while finished < num_episodes:
            if horizon is None or self.t % horizon == 0:  # a chunk boundary: waiting episodes start now
                self.waiting[:] = False
            active = (self.episode >= 0) & ~self.waiting
            if not active.any():  # every running slot waits for the next boundary: nothing to step
                self.t += 1
                continue
            need = active & np.array([not q for q in self.queues])
            if need.any():
                chunks, next_streams, _ = self.policy(observations, self.goals, self.streams, need)
                for slot in np.flatnonzero(need):
                    self.queues[slot] = split_chunk(chunks[slot], self.action_dim, self.max_actions)
                    self.streams[slot] = next_streams[slot]
                    self.calls[slot] += 1
                horizon = horizon or len(self.queues[np.flatnonzero(need)[0]])
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
                    results[self.episode[slot]] = (dict(traj), slot_info(infos, slot), int(self.calls[slot]))
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
