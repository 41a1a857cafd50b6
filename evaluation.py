"""Open-loop chunk execution and policy evaluation.

`ActionQueue` is the one place where chunks are executed: both the online data
collection of the drivers and `evaluate` use it. The policy is called only when the
queue is empty, so a `T`-step episode with chunks of `h` actions costs `ceil(T / h)`
policy calls (the reference evaluated the policy at every step and threw the result away
while a chunk was still queued).
"""

from collections import defaultdict
from typing import Callable, Dict, List, Optional

import jax
import numpy as np
from tqdm import trange

from utils import seeding


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
            if chunk.size % self.action_dim != 0:
                raise ValueError(
                    f"The policy returned {chunk.size} numbers, not a multiple of action_dim={self.action_dim}."
                )
            self._queue = list(chunk.reshape(-1, self.action_dim))  # h actions of shape (A,)
            self.num_policy_calls += 1
        return self._queue.pop(0)


class Policy:
    """`observation -> np.ndarray chunk` that splits a fresh key from its own stream at each call.

    The stream starts at `rng` and is private to this object, so evaluation never consumes the
    training stream. `agent` (anything with `sample_actions(observations, rng)`) may be
    replaced between calls: the online collector sets the current agent before every step.
    """

    def __init__(self, agent, rng: jax.Array):
        self.agent = agent
        self.rng = rng

    def __call__(self, observation) -> np.ndarray:
        self.rng, key = jax.random.split(self.rng)
        return np.asarray(self.agent.sample_actions(observation, rng=key))


def _flatten(d: Dict, parent: str = "") -> Dict:
    out = {}
    for k, v in d.items():
        key = f"{parent}.{k}" if parent else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


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
):
    """Run episodes with open-loop chunk execution and average the final infos.

    Args:
        agent: anything with `sample_actions(observations, rng) -> (h * A,)`.
        env: a gymnasium env whose final `info` carries `success` (and `episode` from
            `envs.wrappers.EpisodeMonitor`).
        num_eval_episodes: episodes whose statistics are averaged.
        num_video_episodes: further episodes whose frames are rendered (`env.render()`).
        video_frame_skip: keep every this-many-th frame.
        action_dim: size of one environment action (default: `env.action_space.shape[-1]`).
        seed, step: the run's seed and the step of this evaluation; the policy key and one reset
            seed per episode come from `utils.seeding.evaluation_streams` (`seed, step`), a
            stream that no other evaluation and no training stream shares.
        progress: show a tqdm bar.

    Returns:
        `(stats, trajs, renders)`: `stats` maps each numeric key of the flattened final
        `info` (`success`, `episode.return`, `episode.length`, ...) to its mean over the
        evaluation episodes, plus `policy_calls_per_episode`; `trajs` is one dict of lists per
        evaluation episode; `renders` one `(T, H, W, 3)` array per video episode.
    """
    if action_dim is None:
        action_dim = int(env.action_space.shape[-1])
    num_episodes = num_eval_episodes + num_video_episodes
    key, reset_seeds = seeding.evaluation_streams(seed, step, num_episodes)
    queue = ActionQueue(Policy(agent, key), action_dim)
    stats, trajs, renders = defaultdict(list), [], []
    iterator = trange(num_episodes, desc="eval", leave=False, disable=not progress)
    for i in iterator:
        should_render = i >= num_eval_episodes
        traj, frames = defaultdict(list), []
        observation, info = env.reset(seed=reset_seeds[i])
        queue.reset()
        calls_before = queue.num_policy_calls
        done, step = False, 0
        while not done:
            action = queue(observation)
            next_observation, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            step += 1
            if should_render and (step % video_frame_skip == 0 or done):
                frames.append(np.asarray(env.render()).copy())
            if not should_render:
                traj["observation"].append(observation)
                traj["action"].append(action)
                traj["reward"].append(reward)
                traj["done"].append(done)
            observation = next_observation
        if should_render:
            renders.append(np.stack(frames))
        else:
            trajs.append(dict(traj))
            for k, v in _flatten(info).items():
                if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "biuf":  # bool, int or float
                    stats[k].append(float(v))
            stats["policy_calls_per_episode"].append(queue.num_policy_calls - calls_before)
    return {k: float(np.mean(v)) for k, v in stats.items()}, trajs, renders
