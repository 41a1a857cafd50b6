"""Open-loop chunk execution and policy evaluation, one environment at a time or `E` in lockstep.

`ActionQueue` is the one place where chunks are executed: both the online data
collection of the drivers (`runner.collector`) and `evaluate` use it. The policy is called only when the
queue is empty, so a `T`-step episode with chunks of `h` actions costs `ceil(T / h)`
policy calls (the reference evaluated the policy at every step and threw the result away
while a chunk was still queued).

Random streams of an evaluation (`utils.seeding.evaluation_streams(seed, step, n)` gives `key`
and `reset_seeds`): episode `i` is reset with `reset_seeds[i]` and draws its policy noise from
its own stream `fold_in(key, i)`, split once at each of its policy calls. No episode's noise
depends on the episodes run before it, which is what lets `evaluate_batched` run the same
episodes on `E` environments at once (`make_eval_vector_env`) and get the same per-episode
success, return and length as the sequential `evaluate`.

Goal-conditioned evaluation (`task_names`, e.g. `EnvAndDatasets.task_names`; DQC), as the DQC release does it:
for each task id `t = 1..T`, `num_eval_episodes` episodes reset with `options={'task_id': t}`, the goal taken from
the reset's `info['goal']` and passed to the policy (`agent.sample_actions(observation, rng, goals=goal)`).
Episode `(t, e)` is episode number `i = (t - 1) * num_eval_episodes + e` of the streams above (the video
episodes, `num_video_episodes` per task, follow all of them), so every (task, episode) has its own reset seed
and key. Stats: every key averaged over all episodes as usual (`success` is then the mean over tasks of each
task's success rate: every task has the same number of episodes) plus `<task name>_success` per task (the
release logs `evaluation/<task_name>_success` and `overall_success`). The release's evaluation overrides:
`action_chunk_eval_size=n` runs only the first `n` actions of each chunk ("DQC-naive"; the policy is called
every `n` steps), `best_of_n=N` calls `sample_actions(..., best_of_n=N)`. Both work without goals too. So does
`temperature=t`, which calls `sample_actions(..., temperature=t)` (the FQL release's `eval_temperature`: IQL, ReBRAC).

The vector env, the lockstep slots and the batched policy live in `utils/vector_eval.py`.
"""

import logging
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from utils import seeding
from utils.progress import progress as progress_bar
from utils.vector_eval import (  # noqa: F401  (re-exported: the drivers and tests import them from here)
    ASYNC_MIN_CORES,
    VECTOR_MODES,
    BatchedPolicy,
    LockstepRunner,
    check_agent,
    check_vector_env,
    chunk_and_length,
    episode_key,
    executed_length_stats,
    make_eval_vector_env,
    policy_kwargs,
    resolve_vector_mode,
    split_chunk,
    usable_cores,
)

logger = logging.getLogger(__name__)


class ActionQueue:
    """Executes action chunks open-loop, asking the policy for a new chunk only when empty.

    Args:
        policy_fn: `observation -> chunk` with `chunk` of shape `(h * A,)` (or `(A,)` without chunking);
            values in [-1, 1]. An agent that picks how many actions to execute returns `(chunk, length)`,
            `length` in `1..h`: the queue executes exactly the first `length` actions, then calls again.
        action_dim: size of one environment action `A`; the chunk is split into
            `chunk.size // A` actions executed in order.
        max_actions: execute at most the first `max_actions` actions of each chunk (the release's
            `action_chunk_eval_size`); None: all of them (or `length`).

    `num_policy_calls` counts the calls of `policy_fn` since construction; `lengths` holds the actions taken
    from each chunk whose policy chose a length (empty for whole chunks), `horizon` the actions per chunk. Call
    `reset` at every episode end so a chunk never spills into the next episode.
    Raises `ValueError` when a chunk's size is not a multiple of `action_dim`, or a length is not in `1..h`.
    """

    def __init__(
        self, policy_fn: Callable[[np.ndarray], np.ndarray], action_dim: int, max_actions: Optional[int] = None
    ):
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
        self.policy_fn = policy_fn
        self.action_dim = action_dim
        self.max_actions = _check_max_actions(max_actions)
        self.num_policy_calls = 0
        self.lengths: List[int] = []
        self.horizon: Optional[int] = None
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
            chunk, length = chunk_and_length(self.policy_fn(observation))
            self._queue = split_chunk(chunk, self.action_dim, self.max_actions, length)
            self.horizon = chunk.size // self.action_dim
            if length is not None:
                self.lengths.append(len(self._queue))
            self.num_policy_calls += 1
        return self._queue.pop(0)


def _check_max_actions(max_actions) -> Optional[int]:
    if max_actions is None:
        return None
    if isinstance(max_actions, bool) or not isinstance(max_actions, (int, np.integer)) or max_actions < 1:
        raise ValueError(f"action_chunk_eval_size must be None or an int >= 1, got {max_actions!r}.")
    return int(max_actions)


class Policy:
    """`observation -> the agent's output` (a chunk, or `(chunk, length)`), a fresh key from its own stream per call.

    The stream starts at `rng` and is private to this object, so evaluation never consumes the
    training stream. At each call `rng, key = jax.random.split(rng)` and `key` goes to the agent, with `goals=goal`
    (goal-conditioned evaluation), `best_of_n` and `temperature` when they are set.
    """

    def __init__(
        self, agent, rng: jax.Array, goal=None, best_of_n: Optional[int] = None, temperature: Optional[float] = None
    ):
        self.agent = agent
        self.rng = rng
        self.kwargs = policy_kwargs(goal, best_of_n, temperature)

    def __call__(self, observation):
        self.rng, key = jax.random.split(self.rng)
        return self.agent.sample_actions(observation, rng=key, **self.kwargs)


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


def _episode_plan(num_eval_episodes: int, num_video_episodes: int, task_names: Optional[Sequence[str]]):
    """The task id of every episode index (None without goals): evaluation episodes task by task, then videos."""
    if task_names is None:
        return [None] * (num_eval_episodes + num_video_episodes)
    if len(task_names) == 0:
        raise ValueError("task_names is empty: a goal-conditioned evaluation needs the env's tasks.")
    tasks = range(1, len(task_names) + 1)
    return [t for t in tasks for _ in range(num_eval_episodes)] + [t for t in tasks for _ in range(num_video_episodes)]


def _aggregate(results, task_ids, task_names) -> Dict[str, float]:
    """Means of `(final info, policy calls, lengths, horizon)` over the episodes, plus `<task name>_success` per
    task and, when the agent chose how many actions of its chunks to execute, `executed_length_stats` over every
    chunk of every episode."""
    stats, lengths, horizon = defaultdict(list), [], None
    for info, calls, episode_lengths, episode_horizon in results:
        _add_episode_stats(stats, info, calls)
        lengths += episode_lengths
        horizon = horizon or episode_horizon
    means = _mean_stats(stats)
    if task_names is not None and "success" in stats:
        success = np.asarray(stats["success"])
        for t, name in enumerate(task_names, start=1):
            means[f"{name}_success"] = float(np.mean(success[np.asarray(task_ids) == t]))
    if lengths:
        means.update(executed_length_stats(lengths, horizon))
    return means


def _run_episode(
    agent,
    env,
    key,
    reset_seed,
    action_dim,
    render=False,
    video_frame_skip=3,
    task_id=None,
    max_actions=None,
    best_of_n=None,
    temperature=None,
):
    """One sequential episode: `(traj or frames, final info, policy calls, executed lengths, horizon)`.

    With `task_id` the env is reset to that task and its goal (`info['goal']`) goes to the policy; a rendered
    goal-conditioned episode shows the goal frame above every frame, as the release's videos do.
    """
    if task_id is None:
        observation, info = env.reset(seed=reset_seed)
    else:
        options = {"task_id": int(task_id), **({"render_goal": True} if render else {})}
        observation, info = env.reset(seed=reset_seed, options=options)
        if info.get("goal") is None:
            raise ValueError("A goal-conditioned evaluation needs the goal in the reset info['goal'].")
    goal = None if task_id is None else info["goal"]
    goal_frame = info.get("goal_rendered") if render else None
    queue = ActionQueue(Policy(agent, key, goal, best_of_n, temperature), action_dim, max_actions)
    traj, frames = defaultdict(list), []
    done, t = False, 0
    while not done:
        action = queue(observation)
        next_observation, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        t += 1
        if render and (t % video_frame_skip == 0 or done):
            frame = np.asarray(env.render()).copy()
            frames.append(frame if goal_frame is None else np.concatenate([goal_frame, frame], axis=0))
        if not render:
            traj["observation"].append(observation)
            traj["action"].append(action)
            traj["reward"].append(reward)
            traj["done"].append(done)
        observation = next_observation
    result = np.stack(frames) if render else dict(traj)
    return result, info, queue.num_policy_calls, queue.lengths, queue.horizon


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
    task_names: Optional[Sequence[str]] = None,
    action_chunk_eval_size: Optional[int] = None,
    best_of_n: Optional[int] = None,
    temperature: Optional[float] = None,
):
    """Run episodes with open-loop chunk execution and average the final infos.

    Args:
        agent: anything with `sample_actions(observations, rng) -> (h * A,)` for one observation
            `(*ob)` (goal-conditioned: also `goals=`; with `best_of_n` or `temperature`: also those); with
            `vector_env`, a JAX pytree whose `sample_actions` is traceable (see `evaluate_batched`).
        env: a gymnasium env whose final `info` carries `success` (and `episode` from
            `envs.common.EpisodeMonitor`); goal-conditioned: its reset takes `options={'task_id': t}` and
            returns `info['goal']`.
        num_eval_episodes: episodes whose statistics are averaged (goal-conditioned: per task).
        num_video_episodes: further episodes whose frames are rendered (`env.render()`), always
            on `env`, one after the other (goal-conditioned: per task).
        video_frame_skip: keep every this-many-th frame.
        action_dim: size of one environment action (default: `env.action_space.shape[-1]`).
        seed, step: the run's seed and the step of this evaluation. `utils.seeding.evaluation_streams`
            (`seed, step`) gives a key and one reset seed per episode, a stream that no other
            evaluation and no training stream shares. Episode `i` (video episodes follow the
            evaluation episodes; goal-conditioned: module docstring) is reset with `reset_seeds[i]` and its
            policy keys come from its own stream `fold_in(key, i)` (`episode_key`), split once per policy
            call (`rng, key_t = split(rng)`), so an episode's noise does not depend on the episodes before it.
        progress: show a progress bar (on a terminal only: `utils.progress`).
        vector_env: None (default): every episode runs on `env`, one after the other. Else a
            vector env from `make_eval_vector_env`: the evaluation episodes run on it in lockstep
            (`evaluate_batched`, the same per-episode results), the video episodes on `env`.
        task_names: None: single-task evaluation. A sequence of the env's task names (task id `i` at
            position `i - 1`, e.g. `EnvAndDatasets.task_names`): goal-conditioned evaluation of every task.
        action_chunk_eval_size: execute only the first `n` actions of each chunk (None: all).
        best_of_n: call `agent.sample_actions(..., best_of_n=N)` (None: the agent's own N).
        temperature: call `agent.sample_actions(..., temperature=t)`, the scale of the policy's noise (None: the
            agent's default).

    Returns:
        `(stats, trajs, renders)`: `stats` maps each numeric key of the flattened final
        `info` (`success`, `episode.return`, `episode.length`, ...) to its mean over the
        evaluation episodes, plus `policy_calls_per_episode`, goal-conditioned `<task name>_success` for every
        task, and for an agent that picks how many actions of each chunk to execute `executed_length.mean` and
        `executed_length.share_<k>` (k = 1..h) over all chunks of the evaluation episodes; `trajs` is one dict
        of lists (`observation`, `action`, `reward`, `done`, one entry per step) per evaluation episode, in episode
        order; `renders` one `(T, H, W, 3)` array per video
        episode.

    Raises:
        ValueError: `action_dim < 1`, a chunk whose size is not a multiple of `action_dim`, an
            `action_chunk_eval_size` that is not an int >= 1, empty `task_names`, a goal-conditioned reset
            without `info['goal']`, and `evaluate_batched`'s errors with `vector_env`.
    """
    if action_dim is None:
        action_dim = int(env.action_space.shape[-1])
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
    max_actions = _check_max_actions(action_chunk_eval_size)
    plan = _episode_plan(num_eval_episodes, num_video_episodes, task_names)
    num_eval = len(plan) - num_video_episodes * (1 if task_names is None else len(task_names))
    key, reset_seeds = seeding.evaluation_streams(seed, step, len(plan))
    results, trajs, renders = [], [], []
    first_video = 0
    if vector_env is not None:
        # The batched episodes use the same streams: evaluation_streams(seed, step, n) is a prefix of
        # evaluation_streams(seed, step, n + videos), and the key does not depend on the count.
        stats, trajs, _ = evaluate_batched(
            agent,
            vector_env,
            num_eval_episodes,
            seed=seed,
            step=step,
            action_dim=action_dim,
            progress=progress,
            task_names=task_names,
            action_chunk_eval_size=action_chunk_eval_size,
            best_of_n=best_of_n,
            temperature=temperature,
        )
        first_video = num_eval
    # (no bar at all when every episode ran batched: an empty one would be left behind)
    episodes = range(first_video, len(plan))
    for i in progress_bar(episodes, desc="eval", leave=False, disable=not progress or not len(episodes)):
        should_render = i >= num_eval
        result, info, *policy_stats = _run_episode(
            agent,
            env,
            episode_key(key, i),
            reset_seeds[i],
            action_dim,
            should_render,
            video_frame_skip,
            plan[i],
            max_actions,
            best_of_n,
            temperature,
        )
        if should_render:
            renders.append(result)
        else:
            trajs.append(result)
            results.append((info, *policy_stats))
    if vector_env is None:
        stats = _aggregate(results, plan[:num_eval], task_names)
    return stats, trajs, renders


def evaluate_batched(
    agent,
    vector_env,
    num_eval_episodes: int = 50,
    seed: int = 0,
    step: int = 0,
    action_dim: Optional[int] = None,
    progress: bool = True,
    task_names: Optional[Sequence[str]] = None,
    action_chunk_eval_size: Optional[int] = None,
    best_of_n: Optional[int] = None,
    temperature: Optional[float] = None,
):
    """Run `num_eval_episodes` evaluation episodes (per task, goal-conditioned) on the `E` envs of `vector_env`
    in lockstep.

    The results equal `evaluate(agent, env, num_eval_episodes, seed=seed, step=step, ...)` on one env of
    the same kind with the same `task_names`, `action_chunk_eval_size`, `best_of_n` and `temperature`, episode by
    episode (`success`, `episode.return`, `episode.length`, `policy_calls_per_episode`, the per-task successes, the
    trajectories; not the wall-clock `episode.duration`):

    * Episode `i` always gets reset seed `reset_seeds[i]`, key stream `fold_in(key, i)` and (goal-conditioned)
      its task, `options={'task_id': t}` for its slot (`utils.vector_eval.SLOT_TASK_IDS`), whichever slot runs
      it; the slot's goal is its reset's `info['goal']`. Episodes are handed to slots in index order as slots
      free up.
    * Each slot has its own open-loop action queue, as `ActionQueue`: a new chunk only when its queue
      is empty (only its first `action_chunk_eval_size` actions kept), dropped at the episode's end.
    * At a step where some slots' queues are empty, ONE jitted policy call computes a chunk for all
      `E` rows, `agent.sample_actions(observations[e], key_e[, goals=goals[e]][, best_of_n=N][, temperature=t])`
      with `key_e` split off row `e`'s stream, each row looped over with a single call's shapes (`lax.map`), so its
      chunk is bitwise a single call's. Only the rows whose queue is empty use their chunk and advance their stream;
      the other rows (busy, waiting or idle slots) are computed and dropped. The compiled shape is always
      `(E, *ob)`, so it compiles once per agent structure.
    * A finished slot is reset right away with its next episode's seed (`reset_mask`); the new
      episode starts at the next chunk boundary (a step that is a multiple of the executed chunk length;
      the slot skips the steps until then), so the slots keep calling the policy at the same steps. An agent
      that picks its chunks' lengths has no common boundary: a new episode starts at the next step. Slots
      without an episode are skipped too (all-NaN actions, `PausableEnv`); they cost neither env steps nor
      results.
    * The final info of each episode is rebuilt from the stacked vector infos (`slot_info`) and
      aggregated exactly as in `evaluate`.

    Args:
        agent: a JAX pytree (e.g. `ACFQLAgent`, `DQCAgent`) with a traceable `sample_actions(observation
            (*ob), rng[, goals=][, best_of_n=][, temperature=]) -> (h * A,)`; `h` must be the same at every call.
        vector_env: from `make_eval_vector_env`; observations `(E, *ob)`, actions `(E, A)`. It is reset
            here; reuse it for every evaluation and close it at the end of the run.
        num_eval_episodes: episodes to run (`>= 0`; goal-conditioned: per task).
        seed, step: as in `evaluate`.
        action_dim: size `A` of one action (default: `vector_env.single_action_space.shape[-1]`).
        progress: show a bar of finished episodes (on a terminal only: `utils.progress`).
        task_names, action_chunk_eval_size, best_of_n, temperature: as in `evaluate`.

    Returns:
        `(stats, trajs, renders)` as `evaluate`: the means of the numeric final-info keys,
        `policy_calls_per_episode` and the per-task successes, one trajectory dict per episode in episode
        order, and `[]` (video episodes run on a single env in `evaluate`).

    Raises:
        ValueError: a vector env not built by `make_eval_vector_env`, `num_eval_episodes < 0`,
            `action_dim < 1`, a chunk whose size is not a multiple of `A`, and
            `evaluate`'s argument errors.
        TypeError: `agent` is not a pytree of arrays.
    """
    check_vector_env(vector_env)
    if num_eval_episodes < 0:
        raise ValueError(f"num_eval_episodes must be >= 0, got {num_eval_episodes}.")
    if action_dim is None:
        action_dim = int(vector_env.single_action_space.shape[-1])
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
    max_actions = _check_max_actions(action_chunk_eval_size)
    plan = _episode_plan(num_eval_episodes, 0, task_names)
    key, reset_seeds = seeding.evaluation_streams(seed, step, len(plan))
    if not plan:
        return {}, [], []
    check_agent(agent)
    policy = BatchedPolicy(agent, best_of_n, temperature)
    task_ids = None if task_names is None else plan
    runner = LockstepRunner(policy, vector_env, key, reset_seeds, action_dim, task_ids, max_actions)
    with progress_bar(total=len(plan), desc="eval", leave=False, disable=not progress) as bar:
        results = runner.run(on_episode_end=lambda: bar.update(1))
    stats = _aggregate([result[1:] for result in results], plan, task_names)
    return stats, [result[0] for result in results], []
