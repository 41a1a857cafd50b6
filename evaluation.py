"""Open-loop chunk execution and policy evaluation, one environment at a time or `E` in lockstep.

`ActionQueue` is the one place where chunks are executed: both the online data
collection of the drivers and `evaluate` use it. The policy is called only when the
queue is empty, so a `T`-step episode with chunks of `h` actions costs `ceil(T / h)`
policy calls (the reference evaluated the policy at every step and threw the result away
while a chunk was still queued).

Random streams of an evaluation (`utils.seeding.evaluation_streams(seed, step, n)` gives `key`
and `reset_seeds`): episode `i` is reset with `reset_seeds[i]` and draws its policy noise from
its own stream `fold_in(key, i)`, split once at each of its policy calls. No episode's noise
depends on the episodes run before it, which is what lets `evaluate_batched` run the same
episodes on `E` environments at once (`make_eval_vector_env`) and get the same per-episode
success, return and length as the sequential `evaluate`.
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
from tqdm import tqdm, trange

from utils import seeding

logger = logging.getLogger(__name__)

VECTOR_MODES = ("sync", "async", "auto")
POLICY_BATCHINGS = ("auto", "vmap", "map")
# `make_eval_vector_env(mode="auto")` runs the envs in subprocesses from this many usable CPU cores on
# (`resolve_vector_mode`: on 2 cores, subprocesses stepped cube-double slower than one process).
ASYNC_MIN_CORES = 4
# Key of `vector_env.metadata` that marks a vector env built by `make_eval_vector_env`.
_EVAL_VECTOR_ENV = "qc_eval_vector_env"


class ActionQueue:
    """Executes action chunks open-loop, asking the policy for a new chunk only when empty.

    Args:
        policy_fn: `observation -> chunk` with `chunk` of shape `(h * action_dim,)` (or
            `(action_dim,)` without chunking); values in [-1, 1].
        action_dim: size of one environment action `A`; the chunk is split into
            `chunk.size // A` actions executed in order.

    `num_policy_calls` counts the calls of `policy_fn` since construction. Call
    `reset` at every episode end so a chunk never spills into the next episode.
    Raises `ValueError` when a chunk's size is not a multiple of `action_dim`.
    """

    def __init__(self, policy_fn: Callable[[np.ndarray], np.ndarray], action_dim: int):
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
        self.policy_fn = policy_fn
        self.action_dim = action_dim
        self.num_policy_calls = 0
        self._queue: List[np.ndarray] = []

    def reset(self):
        """Drop the rest of the current chunk (call at episode ends)."""
        self._queue = []

    def __len__(self):
        return len(self._queue)

    def __call__(self, observation) -> np.ndarray:
        """The next action `(A,)` for `observation`."""
        if not self._queue:
            # Difference from the reference: the policy is called only here, when the queue is
            # empty, not at every step (which wasted compute and shifted the random stream).
            chunk = np.asarray(self.policy_fn(observation))
            self._queue = _split_chunk(chunk, self.action_dim)
            self.num_policy_calls += 1
        return self._queue.pop(0)


def _split_chunk(chunk: np.ndarray, action_dim: int) -> List[np.ndarray]:
    """`(h * A,)` -> `h` actions `(A,)`; `ValueError` when the size is not a multiple of `A`."""
    if chunk.size % action_dim != 0:
        raise ValueError(f"The policy returned {chunk.size} numbers, not a multiple of action_dim={action_dim}.")
    return list(chunk.reshape(-1, action_dim))


class Policy:
    """`observation -> np.ndarray chunk` that splits a fresh key from its own stream at each call.

    The stream starts at `rng` and is private to this object, so evaluation never consumes the
    training stream. `agent` (anything with `sample_actions(observations, rng)`) may be
    replaced between calls: the online collector sets the current agent before every step.
    At each call `rng, key = jax.random.split(rng)` and `key` goes to the agent.
    """

    def __init__(self, agent, rng: jax.Array):
        self.agent = agent
        self.rng = rng

    def __call__(self, observation) -> np.ndarray:
        self.rng, key = jax.random.split(self.rng)
        return np.asarray(self.agent.sample_actions(observation, rng=key))


def episode_key(key: jax.Array, episode: int) -> jax.Array:
    """The policy stream of evaluation episode `episode`: `jax.random.fold_in(key, episode)`."""
    return jax.random.fold_in(key, episode)


def _flatten(d: Dict, parent: str = "") -> Dict:
    out = {}
    for k, v in d.items():
        key = f"{parent}.{k}" if parent else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def _add_episode_stats(stats: Dict[str, list], final_info: Dict, policy_calls: int):
    """Append one episode's numeric flattened final info and its policy-call count to `stats`."""
    for k, v in _flatten(final_info).items():
        if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "biuf":  # bool, int or float
            stats[k].append(float(v))
    stats["policy_calls_per_episode"].append(policy_calls)


def _mean_stats(stats: Dict[str, list]) -> Dict[str, float]:
    return {k: float(np.mean(v)) for k, v in stats.items()}


def _run_episode(agent, env, key, reset_seed, action_dim, render=False, video_frame_skip=3):
    """One sequential episode: `(traj or frames, final info, policy calls)`."""
    queue = ActionQueue(Policy(agent, key), action_dim)
    traj, frames = defaultdict(list), []
    observation, info = env.reset(seed=reset_seed)
    done, t = False, 0
    while not done:
        action = queue(observation)
        next_observation, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        t += 1
        if render and (t % video_frame_skip == 0 or done):
            frames.append(np.asarray(env.render()).copy())
        if not render:
            traj["observation"].append(observation)
            traj["action"].append(action)
            traj["reward"].append(reward)
            traj["done"].append(done)
        observation = next_observation
    return (np.stack(frames) if render else dict(traj)), info, queue.num_policy_calls


def evaluate(
    agent,
    env,
    num_eval_episodes: int = 50,
    num_video_episodes: int = 0,
    video_frame_skip: int = 3,
    action_dim: Optional[int] = None,
    seed: int = 0,
    step: int = 0,
    progress: bool = True,
    vector_env=None,
    policy_batching: str = "auto",
):
    """Run episodes with open-loop chunk execution and average the final infos.

    Args:
        agent: anything with `sample_actions(observations, rng) -> (h * A,)` for one observation
            `(*ob)`; with `vector_env`, a JAX pytree whose `sample_actions` is traceable
            (see `evaluate_batched`).
        env: a gymnasium env whose final `info` carries `success` (and `episode` from
            `envs.wrappers.EpisodeMonitor`).
        num_eval_episodes: episodes whose statistics are averaged.
        num_video_episodes: further episodes whose frames are rendered (`env.render()`), always
            on `env`, one after the other.
        video_frame_skip: keep every this-many-th frame.
        action_dim: size of one environment action (default: `env.action_space.shape[-1]`).
        seed, step: the run's seed and the step of this evaluation. `utils.seeding.evaluation_streams`
            (`seed, step`) gives a key and one reset seed per episode, a stream that no other
            evaluation and no training stream shares. Episode `i` (video episodes follow the
            evaluation episodes) is reset with `reset_seeds[i]` and its policy keys come from its
            own stream `fold_in(key, i)` (`episode_key`), split once per policy call
            (`rng, key_t = split(rng)`), so an episode's noise does not depend on the episodes before it.
        progress: show a tqdm bar.
        vector_env: None (default): every episode runs on `env`, one after the other. Else a
            vector env from `make_eval_vector_env`: the evaluation episodes run on it in lockstep
            (`evaluate_batched`, the same per-episode results), the video episodes on `env`.
        policy_batching: `evaluate_batched`'s argument (only used with `vector_env`).

    Returns:
        `(stats, trajs, renders)`: `stats` maps each numeric key of the flattened final
        `info` (`success`, `episode.return`, `episode.length`, ...) to its mean over the
        evaluation episodes, plus `policy_calls_per_episode`; `trajs` is one dict of lists
        (`observation`, `action`, `reward`, `done`, one entry per step) per evaluation episode, in
        episode order; `renders` one `(T, H, W, 3)` array per video episode.

    Raises:
        ValueError: `action_dim < 1`, a chunk whose size is not a multiple of `action_dim`, and
            `evaluate_batched`'s errors with `vector_env`.
    """
    if action_dim is None:
        action_dim = int(env.action_space.shape[-1])
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
    num_episodes = num_eval_episodes + num_video_episodes
    key, reset_seeds = seeding.evaluation_streams(seed, step, num_episodes)
    stats, trajs, renders = defaultdict(list), [], []
    first_video = 0
    if vector_env is not None:
        # The batched episodes use the same streams: evaluation_streams(seed, step, n) is a prefix of
        # evaluation_streams(seed, step, n + videos), and the key does not depend on the count.
        batched_stats, trajs, _ = evaluate_batched(
            agent,
            vector_env,
            num_eval_episodes,
            seed=seed,
            step=step,
            action_dim=action_dim,
            progress=progress,
            policy_batching=policy_batching,
        )
        stats.update({k: [v] for k, v in batched_stats.items()})  # already means
        first_video = num_eval_episodes
    for i in trange(first_video, num_episodes, desc="eval", leave=False, disable=not progress):
        should_render = i >= num_eval_episodes
        result, info, calls = _run_episode(
            agent, env, episode_key(key, i), reset_seeds[i], action_dim, should_render, video_frame_skip
        )
        if should_render:
            renders.append(result)
        else:
            trajs.append(result)
            _add_episode_stats(stats, info, calls)
    return _mean_stats(stats), trajs, renders


# ---------------------------------------------------------------- vector envs


class _PausableEnv(gymnasium.Wrapper):
    """Skips a step whose action is all NaN: the env is not stepped and the last observation is returned.

    `evaluate_batched` sends NaN actions to the slots that have no episode to run, or whose next
    episode waits for the common chunk boundary, so those envs cost nothing and keep their state.
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._last_observation = None

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self._last_observation = observation
        return observation, info

    def step(self, action):
        if np.all(np.isnan(np.asarray(action, dtype=np.float64))):
            return self._last_observation, 0.0, False, False, {}
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._last_observation = observation
        return observation, reward, terminated, truncated, info


def _make_pausable(env_fn: Callable[[], gymnasium.Env]) -> gymnasium.Env:
    return _PausableEnv(env_fn())


def usable_cores() -> int:
    """CPU cores this process may run on (`os.sched_getaffinity` where available, else `os.cpu_count()`)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_vector_mode(mode: str, num_envs: int, cores: Optional[int] = None) -> str:
    """`'sync'` or `'async'` for `mode` (`'auto'`: async iff `num_envs >= 2` and `cores >= ASYNC_MIN_CORES`).

    `cores` defaults to `usable_cores()`. The policy and the envs never run at the same time, so
    subprocesses pay off only when several envs step on separate cores and that outweighs a pipe round
    trip per env and step (README, Benchmarks: the measurements behind `ASYNC_MIN_CORES`).

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
        actions (idle slots), marked in `metadata` for `evaluate_batched`. Observations are stacked
        to `(E, *ob)`, actions taken as `(E, A)`. Close it with `.close()` (async: ends the subprocesses).

    Raises:
        ValueError: `num_envs < 1` (or not an int), `mode` not in `VECTOR_MODES`, `context` not
            `'spawn'`/`'forkserver'`, `max_concurrency < 1`.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    num_envs = int(num_envs)
    resolved = resolve_vector_mode(mode, num_envs)
    env_fns = [functools.partial(_make_pausable, env_fn)] * num_envs
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
    vector_env.metadata = {**vector_env.metadata, _EVAL_VECTOR_ENV: resolved}
    return vector_env


def _check_vector_env(vector_env):
    if not getattr(vector_env, "metadata", {}).get(_EVAL_VECTOR_ENV):
        raise ValueError(
            "evaluate_batched needs a vector env built by evaluation.make_eval_vector_env (autoreset disabled, "
            f"idle slots skipped); got {type(vector_env).__name__}."
        )
    if vector_env.autoreset_mode != AutoresetMode.DISABLED:
        raise ValueError(f"the vector env must have autoreset_mode=DISABLED, got {vector_env.autoreset_mode}.")


def _slot_info(infos: Dict, slot: int) -> Dict:
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
        out[k] = _slot_info(v, slot) if isinstance(v, dict) else v[slot]
    return out


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


def _static_batching(agent, observation: np.ndarray, num_rows: int) -> str:
    """'vmap' when vmapping one row's policy over `num_rows` rows keeps every matrix product's kind, else 'map'."""
    if jax.default_backend() != "cpu":
        return "map"  # row results of a GPU/TPU matrix product may depend on the number of rows
    key = jax.random.PRNGKey(0)
    one = jax.make_jaxpr(lambda ob, k: agent.sample_actions(ob, k))(observation, key)
    rows = jax.make_jaxpr(jax.vmap(lambda ob, k: agent.sample_actions(ob, k)))(
        np.broadcast_to(observation, (num_rows, *np.shape(observation))), np.stack([key] * num_rows)
    )
    single, batched = _row_dot_kinds(one.jaxpr), _row_dot_kinds(rows.jaxpr)
    return "vmap" if single == batched else "map"


@functools.partial(jax.jit, static_argnames=("batching",))
def _policy_rows(agent, observations, streams, batching):
    """One policy call per row: `(chunks (E, h * A), next streams (E, 2), keys used (E, 2))`.

    Row `e` computes `next, key = split(streams[e])` and `agent.sample_actions(observations[e], key)`,
    exactly what `Policy` does for one observation. 'vmap' batches the rows into one computation;
    'map' loops over them (`lax.map`) with the shapes of a single call.
    """

    def row(observation, stream):
        next_stream, key = jax.random.split(stream)
        return agent.sample_actions(observation, key), next_stream, key

    if batching == "vmap":
        return jax.vmap(row)(observations, streams)
    return jax.lax.map(lambda args: row(*args), (observations, streams))


# (agent type, agent tree structure, observations' shape `(E, *ob)` and dtype, backend) -> checked batching.
_BATCHING_CACHE: Dict[tuple, str] = {}


class _BatchedPolicy:
    """The batched policy of one evaluation; resolves 'auto' once per agent structure, shapes and backend.

    'auto' takes 'vmap' unless vmapping would turn a matrix-vector product of one row into a
    matrix-matrix product (`_static_batching`), then checks the first call bitwise against one
    unbatched `agent.sample_actions` call per row and falls back to 'map' (with a warning) if any differs.
    """

    def __init__(self, agent, batching: str):
        self.agent, self.batching = agent, batching

    def __call__(self, observations: np.ndarray, streams: np.ndarray, rows: np.ndarray):
        if self.batching != "auto":
            return self._call(self.batching, observations, streams)
        cache_key = (
            type(self.agent),
            jax.tree_util.tree_structure(self.agent),
            observations.shape,
            observations.dtype.str,
            jax.default_backend(),
        )
        if cache_key in _BATCHING_CACHE:
            return self._call(_BATCHING_CACHE[cache_key], observations, streams)
        candidate = _static_batching(self.agent, observations[0], len(observations))
        for batching in dict.fromkeys([candidate, "map"]):
            chunks, next_streams, keys = self._call(batching, observations, streams)
            single = [np.asarray(self.agent.sample_actions(observations[e], keys[e])) for e in np.flatnonzero(rows)]
            if all(np.array_equal(chunks[e], s) for e, s in zip(np.flatnonzero(rows), single, strict=True)):
                _BATCHING_CACHE[cache_key] = batching
                return chunks, next_streams, keys
            logger.warning(
                "Batched policy rows (%s) differ from single calls of sample_actions on this backend.", batching
            )
        _BATCHING_CACHE[cache_key] = "map"
        return chunks, next_streams, keys

    def _call(self, batching, observations, streams):
        chunks, next_streams, keys = _policy_rows(self.agent, observations, streams, batching=batching)
        return np.asarray(chunks), np.asarray(next_streams), np.asarray(keys)


def _raw_key(key) -> np.ndarray:
    """A JAX key as its raw `(2,)` uint32 words (typed keys are unwrapped)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key, np.uint32)


def _check_agent(agent):
    leaves = jax.tree_util.tree_leaves(agent)
    if not all(isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float)) for leaf in leaves):
        raise TypeError(
            f"evaluate_batched needs the agent as a JAX pytree of arrays (e.g. a flax.struct.PyTreeNode) whose "
            f"sample_actions is traceable; got {type(agent).__name__}."
        )


def evaluate_batched(
    agent,
    vector_env,
    num_eval_episodes: int = 50,
    seed: int = 0,
    step: int = 0,
    action_dim: Optional[int] = None,
    progress: bool = True,
    policy_batching: str = "auto",
):
    """Run `num_eval_episodes` evaluation episodes on the `E` envs of `vector_env` in lockstep.

    The results equal `evaluate(agent, env, num_eval_episodes, seed=seed, step=step)` on one env of
    the same kind, episode by episode (`success`, `episode.return`, `episode.length`,
    `policy_calls_per_episode`, the trajectories; not the wall-clock `episode.duration`):

    * Episode `i` always gets reset seed `reset_seeds[i]` and key stream `fold_in(key, i)`
      (`utils.seeding.evaluation_streams(seed, step, num_eval_episodes)`), whichever slot runs it.
      Episodes are handed to slots in index order as slots free up.
    * Each slot has its own open-loop action queue, as `ActionQueue`: a new chunk only when its queue
      is empty, dropped at the episode's end.
    * At a step where some slots' queues are empty, ONE jitted policy call computes a chunk for all
      `E` rows, `agent.sample_actions(observations[e], key_e)` with `key_e` split off row `e`'s stream
      (`policy_batching`). Only the rows whose queue is empty use their chunk and advance their
      stream; the other rows (busy, waiting or idle slots) are computed and dropped. The compiled
      shape is always `(E, *ob)`, so it compiles once per agent structure.
    * A finished slot is reset right away with its next episode's seed (`reset_mask`); the new
      episode starts at the next chunk boundary (a step that is a multiple of `h`; the slot skips
      the steps until then), so the slots keep calling the policy at the same steps. Slots without
      an episode are skipped too (all-NaN actions, `_PausableEnv`); they cost neither env steps nor
      results.
    * The final info of each episode is rebuilt from the stacked vector infos (`_slot_info`) and
      aggregated exactly as in `evaluate`.

    Equality holds when each row's chunk is bitwise the chunk a single `sample_actions` call gives.
    `policy_batching`: 'vmap' computes the rows as one batch (fast; exact on XLA:CPU when one row's
    computation has no matrix-vector product, e.g. best-of-N over `N >= 2` candidates), 'map' loops
    over them with a single call's shapes (exact; the compute of `E` single calls, in one dispatch;
    what QC-FQL's one-step actor gets, whose wide layers XLA rounds differently for 1 row than for
    `E`), 'auto' (default) picks
    'vmap' when the first rule holds on CPU, checks the first call against single calls and falls
    back to 'map' with a warning (on GPU/TPU: 'map').

    Args:
        agent: a JAX pytree (e.g. `ACFQLAgent`) with a traceable `sample_actions(observation (*ob),
            rng) -> (h * A,)`; `h` must be the same at every call.
        vector_env: from `make_eval_vector_env`; observations `(E, *ob)`, actions `(E, A)`. It is reset
            here; reuse it for every evaluation and close it at the end of the run.
        num_eval_episodes: episodes to run (`>= 0`).
        seed, step: as in `evaluate`.
        action_dim: size `A` of one action (default: `vector_env.single_action_space.shape[-1]`).
        progress: show a tqdm bar of finished episodes.
        policy_batching: 'auto', 'vmap' or 'map' (above).

    Returns:
        `(stats, trajs, renders)` as `evaluate`: the means of the numeric final-info keys and
        `policy_calls_per_episode`, one trajectory dict per episode in episode order, and `[]` (video
        episodes run on a single env in `evaluate`).

    Raises:
        ValueError: a vector env not built by `make_eval_vector_env`, `num_eval_episodes < 0`,
            `action_dim < 1`, an unknown `policy_batching`, a chunk whose size is not a multiple of `A`.
        TypeError: `agent` is not a pytree of arrays.
    """
    _check_vector_env(vector_env)
    if policy_batching not in POLICY_BATCHINGS:
        raise ValueError(f"policy_batching must be one of {POLICY_BATCHINGS}, got {policy_batching!r}.")
    if num_eval_episodes < 0:
        raise ValueError(f"num_eval_episodes must be >= 0, got {num_eval_episodes}.")
    if action_dim is None:
        action_dim = int(vector_env.single_action_space.shape[-1])
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
    key, reset_seeds = seeding.evaluation_streams(seed, step, num_eval_episodes)
    if num_eval_episodes == 0:
        return {}, [], []
    _check_agent(agent)
    runner = _LockstepRunner(_BatchedPolicy(agent, policy_batching), vector_env, key, reset_seeds, action_dim)
    with tqdm(total=num_eval_episodes, desc="eval", leave=False, disable=not progress) as bar:
        results = runner.run(on_episode_end=lambda: bar.update(1))
    stats = defaultdict(list)
    for _, info, calls in results:
        _add_episode_stats(stats, info, calls)
    return _mean_stats(stats), [traj for traj, _, _ in results], []


class _LockstepRunner:
    """The slot bookkeeping of `evaluate_batched` (one instance per evaluation)."""

    def __init__(self, policy: _BatchedPolicy, vector_env, key, reset_seeds: Sequence[int], action_dim: int):
        self.policy, self.env, self.key = policy, vector_env, key
        self.reset_seeds, self.action_dim = list(reset_seeds), action_dim
        self.num_slots = vector_env.num_envs
        self.episode = np.full(self.num_slots, -1)  # episode index run by each slot, -1: idle
        self.waiting = np.zeros(self.num_slots, bool)  # reset, starts at the next chunk boundary
        self.queues: List[List[np.ndarray]] = [[] for _ in range(self.num_slots)]
        self.streams = np.zeros((self.num_slots, 2), np.uint32)  # each slot's episode key stream
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
        self.streams[slot] = _raw_key(episode_key(self.key, i))
        self.trajs[slot] = defaultdict(list)
        return self.reset_seeds[i]

    def run(self, on_episode_end: Callable[[], None]) -> List[tuple]:
        """All episodes; returns `(traj, final info, policy calls)` per episode in index order."""
        num_episodes = len(self.reset_seeds)
        results: List[Optional[tuple]] = [None] * num_episodes
        seeds = [self._assign(slot) for slot in range(self.num_slots)]
        observations, _ = self.env.reset(seed=seeds)  # every slot, so every row holds an observation
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
                chunks, next_streams, _ = self.policy(observations, self.streams, need)
                for slot in np.flatnonzero(need):
                    self.queues[slot] = _split_chunk(chunks[slot], self.action_dim)
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
                    results[self.episode[slot]] = (dict(traj), _slot_info(infos, slot), int(self.calls[slot]))
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
                observations, _ = self.env.reset(seed=seeds, options={"reset_mask": mask})
        return results


class OnlineCollector:
    """Steps the training environment with open-loop chunks and writes transitions to a buffer.

    Args:
        env: training env (gymnasium API).
        action_dim: size of one environment action.
        reward_fn: the online reward transform of the env (`envs` applies the same one to the
            offline data: sparse rewards, robomimic's -1 shift).
        rng: the collector's own JAX key stream (`collector` stream of the run's seed).
        reset_seed: seed of the first `env.reset`; None (the drivers) continues the env's own
            stream, seeded once by `envs.env_utils.make_env_and_datasets` (`env` stream).

    `step(agent, buffer)` executes one action of the current chunk (a new chunk is asked of
    `agent` when the queue is empty), adds `(observations, actions, rewards, terminals, masks,
    next_observations)` with `terminals = terminated or truncated` (trajectory end) and
    `masks = 1 - terminated` (no bootstrap only on a true termination), resets the env and the
    chunk queue at episode ends, and returns the final `info` of a finished episode (else None).

    `state()` / `restore(state)` work at any step, mid-episode too (the README's "Resume and
    preemption": the episode is replayed from its start and checked against the saved observation).
    """

    def __init__(self, env, action_dim: int, reward_fn, rng, reset_seed: Optional[int] = None):
        self.env = env
        self.reward_fn = reward_fn
        self.policy = Policy(None, rng)  # evaluation's policy wrapper; the agent is set at each step
        self.queue = ActionQueue(self.policy, action_dim)
        self.reset_seed = reset_seed
        self.observation = None  # None: the env is reset at the start of the next step
        self._episode_start = None  # (env generator state before the reset, the reset's seed)
        self._episode_actions: List[np.ndarray] = []

    def state(self) -> Dict:
        """JSON-able state at any step: policy key, env generator, and the episode in progress (if any)."""
        state = {
            "policy_key": seeding.key_to_list(self.policy.rng),
            "env_rng": seeding.generator_state(self.env.unwrapped.np_random),
            "reset_seed": self.reset_seed,
            "episode": None,
        }
        if self.observation is not None:
            start_rng, start_seed = self._episode_start
            state["episode"] = {
                "start_env_rng": start_rng,
                "reset_seed": start_seed,
                "actions": [np.asarray(a, dtype=np.float32).tolist() for a in self._episode_actions],
                "queue": [np.asarray(a, dtype=np.float32).tolist() for a in self.queue._queue],
                "observation": np.asarray(self.observation).tolist(),
                "observation_dtype": str(np.asarray(self.observation).dtype),
            }
        return state

    def restore(self, state: Dict):
        """Continue from `state`; an episode in progress is replayed. `RuntimeError` when the replay
        does not reproduce the saved observation (a simulator that is not deterministic here)."""
        self.policy.rng = seeding.key_from_list(state["policy_key"])
        self.reset_seed = state["reset_seed"]
        self.observation = None
        self._episode_start, self._episode_actions = None, []
        self.queue.reset()
        episode = state.get("episode")
        if episode is not None:
            seeding.set_generator_state(self.env.unwrapped.np_random, episode["start_env_rng"])
            self._episode_start = (episode["start_env_rng"], episode["reset_seed"])
            observation, _ = self.env.reset(seed=episode["reset_seed"])
            for action in episode["actions"]:
                action = np.asarray(action, dtype=np.float32)
                observation, _, terminated, truncated, _ = self.env.step(action)
                self._episode_actions.append(action)
                if terminated or truncated:
                    raise RuntimeError("replaying the saved episode ended it early; the simulator is not deterministic")
            saved = np.asarray(episode["observation"], dtype=episode["observation_dtype"])
            if not np.array_equal(np.asarray(observation), saved):
                raise RuntimeError(
                    "replaying the saved episode did not reproduce its observation (largest difference "
                    f"{np.max(np.abs(np.asarray(observation, dtype=np.float64) - saved)):.3g}); the simulator is not "
                    "deterministic on this machine, so this run state cannot be continued exactly."
                )
            self.observation = observation
            self.queue._queue = [np.asarray(a, dtype=np.float32) for a in episode["queue"]]
        seeding.set_generator_state(self.env.unwrapped.np_random, state["env_rng"])

    def step(self, agent, buffer) -> Optional[Dict]:
        self.policy.agent = agent
        if self.observation is None:
            self._episode_start = (seeding.generator_state(self.env.unwrapped.np_random), self.reset_seed)
            self._episode_actions = []
            self.observation, _ = self.env.reset(seed=self.reset_seed)
            self.reset_seed = None  # seeds the first reset only; later resets continue the env's stream
        action = self.queue(self.observation)
        next_observation, reward, terminated, truncated, info = self.env.step(action)
        self._episode_actions.append(np.asarray(action, dtype=np.float32))
        done = bool(terminated or truncated)
        buffer.add_transition(
            dict(
                observations=self.observation,
                actions=np.asarray(action, dtype=np.float32),
                rewards=np.float32(self.reward_fn(reward)),
                terminals=np.float32(done),
                masks=np.float32(1.0 - float(terminated)),
                next_observations=next_observation,
            )
        )
        if done:
            self.observation = None
            self.queue.reset()
            return info
        self.observation = next_observation
        return None
