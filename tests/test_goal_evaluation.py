"""Goal-conditioned evaluation (`evaluation.evaluate(..., task_names=...)`, DQC): every task, its goal from the
reset info, per-task success, one policy call per (possibly truncated) chunk, best-of-N overrides, and the
batched evaluation equal to the sequential one episode by episode.

A small deterministic goal-conditioned env (`GoalEnv`: move `x` to the task's goal, whose position depends on
the task and the reset seed), stub agents, and a tiny real `DQCAgent` on `cube-double-play-oraclerep-v0`.
"""

import functools
import math

import flax
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.dqc import DQCAgent, get_config
from envs import ogbench as ogb
from envs.common import EpisodeMonitor
from evaluation import evaluate, evaluate_batched, make_eval_vector_env
from tests.test_evaluation_batched import assert_same_results
from utils import seeding

TASKS = ("reach_near", "reach_far", "reach_left")
# Goal of each task (before the seed's noise); task 2's lies out of reach within the time limit.
GOALS = {1: 0.3, 2: 50.0, 3: -0.4}


class GoalEnv(gymnasium.Env):
    """Move `x` (from 0) to the goal of task `options['task_id']`: `GOALS[t]` plus a seed-dependent offset.

    Observation `[x, t / max_steps]` (no goal in it); `info['goal']` `(1,)` at reset (with `goal_rendered` when
    asked); action `(2,)`: `x += 0.25 * a[0] + 0.05 * a[1]`; success within `tolerance` ends the episode;
    truncated after `max_steps`. Renders a frame whose value encodes `x`.
    """

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, max_steps=11, tolerance=0.05):
        self.max_steps, self.tolerance = max_steps, tolerance

    def _observation(self):
        return np.array([self.x, self.t / self.max_steps], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        if "task_id" not in options:
            raise ValueError("GoalEnv needs options['task_id']")
        self.task = int(options["task_id"])
        self.goal = GOALS[self.task] + float(self.np_random.uniform(-0.1, 0.1))
        self.x, self.t = 0.0, 0
        info = {"goal": np.array([self.goal]), "task": self.task}
        if options.get("render_goal"):
            info["goal_rendered"] = np.full((2, 2, 3), 200, np.uint8)
        return self._observation(), info

    def step(self, action):
        action = np.asarray(action, np.float64)
        self.x += 0.25 * action[0] + 0.05 * action[1]
        self.t += 1
        success = bool(abs(self.x - self.goal) < self.tolerance)
        info = {"success": success, "distance": abs(self.x - self.goal)}
        return self._observation(), -abs(self.x - self.goal), success, not success and self.t >= self.max_steps, info

    def render(self):
        return np.full((2, 2, 3), int(100 * abs(self.x)) % 200, np.uint8)


def make_goal_env(max_steps=11):
    return EpisodeMonitor(GoalEnv(max_steps=max_steps))


class GoalAgent(flax.struct.PyTreeNode):
    """Chunks of `h` actions toward the goal plus key-dependent noise (`noise` 0: deterministic); `best_of_n`
    scales the noise down (so an override changes the episodes)."""

    gain: jax.Array
    noise: jax.Array
    h: int = flax.struct.field(pytree_node=False, default=3)

    @functools.partial(jax.jit, static_argnames=("best_of_n",))
    def sample_actions(self, observations, rng, goals=None, best_of_n=None):
        toward = jnp.clip(self.gain * (goals[0] - observations[0]), -1, 1)
        scale = self.noise / (1 if best_of_n is None else best_of_n)
        return jnp.clip(toward + scale * jax.random.normal(rng, (self.h, 2)), -1, 1).reshape(-1)  # (h * A,)


class RecordingAgent:
    """Action `j` of every chunk is `[j, call number]`; records every call (not a pytree: sequential only)."""

    def __init__(self, h=3):
        self.h, self.calls = h, []

    def sample_actions(self, observations, rng=None, goals=None, best_of_n=None):
        self.calls.append(dict(goal=np.asarray(goals).copy(), key=tuple(np.asarray(rng).tolist()), n=best_of_n))
        return np.stack([np.arange(self.h), np.full(self.h, len(self.calls))], axis=1).reshape(-1).astype(np.float32)


@pytest.fixture
def goal_vector_env():
    made = []

    def make(num_envs, max_steps=11):
        made.append(make_eval_vector_env(functools.partial(make_goal_env, max_steps), num_envs, "sync"))
        return made[-1]

    yield make
    for vector_env in made:
        vector_env.close()


# ---------------------------------------------------------------- statistics and calls


def test_per_task_success_and_its_mean():
    agent = GoalAgent(gain=jnp.float32(1.1), noise=jnp.float32(0.0))  # deterministic: reaches 1 and 3, never 2
    stats, trajs, _ = evaluate(agent, make_goal_env(), 4, seed=0, step=3, progress=False, task_names=TASKS)
    assert stats["reach_near_success"] == 1.0 and stats["reach_far_success"] == 0.0
    assert stats["reach_left_success"] == 1.0
    assert stats["success"] == pytest.approx(2 / 3)  # mean over the tasks (equal episode counts)
    assert len(trajs) == 12
    lengths = [len(t["done"]) for t in trajs]
    assert lengths[4:8] == [11] * 4  # task 2's episodes run to the time limit
    assert stats["episode.length"] == pytest.approx(np.mean(lengths))
    assert stats["policy_calls_per_episode"] == np.mean([math.ceil(n / 3) for n in lengths])


@pytest.mark.parametrize("eval_size", [None, 1, 2])
def test_each_task_and_episode_has_its_goal_seed_and_key_and_the_policy_runs_once_per_chunk(eval_size):
    agent, episodes, steps = RecordingAgent(h=3), 2, 7
    env = EpisodeMonitor(GoalEnv(max_steps=steps, tolerance=-1.0))  # never a success: every episode runs 7 steps
    _, trajs, _ = evaluate(
        agent,
        env,
        episodes,
        seed=4,
        step=9,
        progress=False,
        task_names=TASKS,
        action_chunk_eval_size=eval_size,
        best_of_n=5,
    )
    executed = 3 if eval_size is None else eval_size
    calls_per_episode = math.ceil(steps / executed)
    assert len(agent.calls) == len(TASKS) * episodes * calls_per_episode
    key, reset_seeds = seeding.evaluation_streams(4, 9, len(TASKS) * episodes)
    for i, traj in enumerate(trajs):
        task = i // episodes + 1
        _, info = GoalEnv(max_steps=steps).reset(seed=reset_seeds[i], options={"task_id": task})
        calls = agent.calls[i * calls_per_episode : (i + 1) * calls_per_episode]
        rng = jax.random.fold_in(key, i)  # episode i = (task - 1) * episodes + e
        for call in calls:
            rng, sub = jax.random.split(rng)
            assert call["key"] == tuple(np.asarray(sub).tolist()) and call["n"] == 5
            np.testing.assert_array_equal(call["goal"], info["goal"])
        actions = np.asarray(traj["action"])
        np.testing.assert_array_equal(actions[:, 0], np.arange(steps) % executed)  # only the first n actions run
        np.testing.assert_array_equal(actions[:, 1], np.arange(steps) // executed + 1 + i * calls_per_episode)


def test_best_of_n_and_truncation_change_the_episodes():
    agent = GoalAgent(gain=jnp.float32(1.0), noise=jnp.float32(1.5))
    kwargs = dict(num_eval_episodes=3, seed=1, step=2, progress=False, task_names=TASKS)
    base = evaluate(agent, make_goal_env(), **kwargs)[1]

    def differ(a, b):
        return len(a["done"]) != len(b["done"]) or not np.array_equal(a["action"], b["action"])

    assert not any(differ(a, b) for a, b in zip(base, evaluate(agent, make_goal_env(), **kwargs)[1], strict=True))
    for override in (dict(best_of_n=4), dict(action_chunk_eval_size=1)):
        other = evaluate(agent, make_goal_env(), **kwargs, **override)[1]
        assert any(differ(a, b) for a, b in zip(base, other, strict=True)), override


def test_video_episodes_per_task_show_the_goal(goal_vector_env):
    agent = GoalAgent(gain=jnp.float32(1.0), noise=jnp.float32(1.0))
    kwargs = dict(num_eval_episodes=2, num_video_episodes=1, video_frame_skip=1, seed=0, step=5, progress=False)
    sequential = evaluate(agent, make_goal_env(), task_names=TASKS, **kwargs)
    mixed = evaluate(agent, make_goal_env(), task_names=TASKS, vector_env=goal_vector_env(2), **kwargs)
    assert_same_results(sequential[:2] + ([],), mixed[:2] + ([],))
    assert len(sequential[2]) == len(mixed[2]) == len(TASKS)  # one video episode per task
    for s, m in zip(sequential[2], mixed[2], strict=True):
        np.testing.assert_array_equal(s, m)
        assert s.shape[1:] == (4, 2, 3) and np.all(s[:, :2] == 200)  # the goal frame above each frame


def test_errors():
    agent = GoalAgent(gain=jnp.float32(1.0), noise=jnp.float32(1.0))
    with pytest.raises(ValueError, match="task_names is empty"):
        evaluate(agent, make_goal_env(), 1, progress=False, task_names=())
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="action_chunk_eval_size must be None or an int >= 1"):
            evaluate(agent, make_goal_env(), 1, progress=False, task_names=TASKS, action_chunk_eval_size=bad)

    class NoGoal(GoalEnv):
        def reset(self, seed=None, options=None):
            observation, info = super().reset(seed=seed, options=options)
            del info["goal"]
            return observation, info

    with pytest.raises(ValueError, match="needs the goal in the reset info"):
        evaluate(agent, EpisodeMonitor(NoGoal()), 1, progress=False, task_names=TASKS)


# ---------------------------------------------------------------- batched == sequential


@pytest.mark.parametrize(
    "num_envs, overrides",
    [
        (2, {}),
        (5, {"action_chunk_eval_size": 2}),
        (8, {"best_of_n": 3}),  # more slots than the 6 episodes: idle slots
    ],
)
def test_batched_equals_sequential(num_envs, overrides, goal_vector_env):
    agent = GoalAgent(gain=jnp.float32(1.0), noise=jnp.float32(1.0))
    kwargs = dict(seed=3, step=40, progress=False, task_names=TASKS, **overrides)
    sequential = evaluate(agent, make_goal_env(), 2, **kwargs)
    batched = evaluate_batched(agent, goal_vector_env(num_envs), 2, **kwargs)
    assert_same_results(sequential, batched)
    assert {f"{name}_success" for name in TASKS} <= set(batched[0])
    lengths = [len(t["done"]) for t in sequential[1]]
    assert len(set(lengths)) > 1  # the slots desynchronise
    executed = overrides.get("action_chunk_eval_size", 3)
    assert sequential[0]["policy_calls_per_episode"] == np.mean([math.ceil(n / executed) for n in lengths])


def test_async_workers_take_their_slot_tasks():
    """The per-slot task ids reach every subprocess (each picks its own entry of the reset option)."""
    agent = GoalAgent(gain=jnp.float32(1.0), noise=jnp.float32(1.0))
    kwargs = dict(seed=8, step=1, progress=False, task_names=TASKS)
    sequential = evaluate(agent, make_goal_env(), 2, **kwargs)
    vector_env = make_eval_vector_env(functools.partial(make_goal_env, 11), 2, "async")
    try:
        batched = evaluate_batched(agent, vector_env, 2, **kwargs)
    finally:
        vector_env.close()
    assert_same_results(sequential, batched)


def test_dqc_on_cube_double_oraclerep_batched_equals_sequential():
    """A tiny real DQC agent (best-of-N, h_a = 2) on every task of cube-double's goal-conditioned env."""
    env_name = "cube-double-play-oraclerep-v0"
    make = functools.partial(ogb.make_eval_env, env_name, max_episode_steps=6)
    env = make()
    ob, info = env.reset(seed=0, options={"task_id": 1})
    config = get_config()
    config.actor_hidden_dims = config.value_hidden_dims = (16, 16)
    config.flow_steps, config.best_of_n, config.backup_horizon, config.policy_chunk_size = 2, 4, 4, 2
    agent = DQCAgent.create(0, ob, np.zeros(5, np.float32), config, ex_goals=info["goal"])
    task_names = ogb.task_names(env_name)
    vector_env = make_eval_vector_env(make, 3, "sync")
    try:
        for overrides in ({}, {"best_of_n": 2, "action_chunk_eval_size": 1}):
            kwargs = dict(seed=0, step=7, progress=False, task_names=task_names, **overrides)
            sequential = evaluate(agent, env, 1, **kwargs)
            batched = evaluate_batched(agent, vector_env, 1, **kwargs)
            assert_same_results(sequential, batched)
            calls = 3 if not overrides else 6  # 6 steps in chunks of 2, or of 1
            assert sequential[0]["policy_calls_per_episode"] == calls
            assert set(f"{name}_success" for name in task_names) <= set(sequential[0])
            assert {"success", "episode.return", "episode.length"} <= set(sequential[0])
    finally:
        vector_env.close()
