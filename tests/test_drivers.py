"""Action queue, evaluation, online collection, schedules and CSV logging (no simulator needed)."""

import csv
import math

import gymnasium as gym
import jax
import numpy as np
import pytest

from evaluation import ActionQueue, evaluate
from log_utils import CsvLogger
from runner.collector import OnlineCollector
from runner.seed_group import mixed_batch_sizes, sample_mixed_batch, should_evaluate, should_save, stack_for_utd
from utils.datasets import Dataset, ReplayBuffer


class CountingEnv(gym.Env):
    """Episodes of exactly `T` steps; observation = [step index, episode index]; success at the end.

    Reward is `-1` on every step but the last, where it is `0`; the env records every action.
    """

    def __init__(self, T=7, action_dim=2):
        self.T = T
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (action_dim,), np.float32)
        self.episode = -1
        self.actions = []

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return np.array([self.t, self.episode], np.float32), {}

    def step(self, action):
        self.actions.append(np.array(action))
        self.t += 1
        done = self.t == self.T
        info = {"success": float(done)}
        if done:
            info["episode"] = {"return": -(self.T - 1.0), "length": self.T}
        return np.array([self.t, self.episode], np.float32), 0.0 if done else -1.0, False, done, info


class ChunkAgent:
    """`sample_actions` returns the chunk [c, c+1, ..., c+h-1] (each repeated over A), c = call count."""

    def __init__(self, h, action_dim):
        self.h, self.action_dim, self.calls = h, action_dim, 0

    def sample_actions(self, observations, rng=None):
        base = self.calls * 100.0
        self.calls += 1
        return np.repeat(base + np.arange(self.h, dtype=np.float32), self.action_dim)  # (h * A,)


@pytest.mark.parametrize("T,h", [(7, 1), (7, 3), (7, 7), (6, 3), (5, 8)])
def test_evaluate_calls_policy_once_per_chunk(T, h):
    env, agent = CountingEnv(T=T), ChunkAgent(h, 2)
    stats, trajs, _ = evaluate(agent, env, num_eval_episodes=3, action_dim=2, progress=False)
    assert agent.calls == 3 * math.ceil(T / h)
    assert stats["policy_calls_per_episode"] == math.ceil(T / h)
    assert stats["success"] == 1.0
    assert stats["episode.length"] == T
    # The first action of every episode is the first action of a fresh chunk (queue cleared).
    for traj in trajs:
        assert traj["action"][0][0] % 100 == 0
        np.testing.assert_array_equal([a[0] % 100 for a in traj["action"]], [t % h for t in range(T)])


def test_action_queue_rejects_bad_chunk():
    queue = ActionQueue(lambda ob: np.zeros(5), action_dim=2)
    with pytest.raises(ValueError, match="multiple of action_dim=2"):
        queue(np.zeros(2))


@pytest.mark.parametrize("h", [1, 3, 4])
def test_online_collector_queue_and_transitions(h):
    T, A, steps = 7, 2, 21
    env, agent = CountingEnv(T=T, action_dim=A), ChunkAgent(h, A)
    example = dict(
        observations=np.zeros(2, np.float32),
        actions=np.zeros(A, np.float32),
        rewards=np.float32(0),
        terminals=np.float32(0),
        masks=np.float32(1),
        next_observations=np.zeros(2, np.float32),
    )
    buffer = ReplayBuffer.create(example, size=100)
    sparse = lambda r: -(np.asarray(r) != 0).astype(np.float32) * 2.0  # marks that the transform ran
    collector = OnlineCollector(env, A, sparse, rng=jax.random.PRNGKey(0), reset_seed=0)
    finished = [collector.step(agent, buffer) for _ in range(steps)]
    assert sum(f is not None for f in finished) == steps // T
    assert agent.calls == (steps // T) * math.ceil(T / h)
    assert buffer.size == steps
    rows = {k: buffer[k][:steps] for k in example}
    np.testing.assert_array_equal(rows["terminals"], [float((t + 1) % T == 0) for t in range(steps)])
    np.testing.assert_array_equal(rows["masks"], np.ones(steps))  # time-limit ends are not terminations
    np.testing.assert_array_equal(rows["rewards"], [0.0 if (t + 1) % T == 0 else -2.0 for t in range(steps)])
    np.testing.assert_array_equal(
        rows["next_observations"][:-1][rows["terminals"][:-1] == 0],
        rows["observations"][1:][rows["terminals"][:-1] == 0],
    )
    # Executed actions follow the chunk order and restart with each episode.
    np.testing.assert_array_equal(rows["actions"][:, 0] % 100, [(t % T) % h for t in range(steps)])


def test_schedules_fire_exactly_once():
    evals = [i for i in range(1, 26) if should_evaluate(i, 25, 10)]
    assert evals == [10, 20, 25]
    assert [i for i in range(1, 21) if should_evaluate(i, 20, 10)] == [10, 20]
    assert [i for i in range(1, 8) if should_evaluate(i, 7, 0)] == [7]
    assert [i for i in range(1, 8) if should_save(i, 7, -1)] == [7]
    assert [i for i in range(1, 8) if should_save(i, 7, 3)] == [3, 6, 7]


def test_stack_for_utd():
    batch = {"a": np.arange(12).reshape(6, 2)}
    out = stack_for_utd(batch, 3)
    assert out["a"].shape == (3, 2, 2)
    np.testing.assert_array_equal(out["a"][1], [[4, 5], [6, 7]])


def test_csv_logger_widens_header(tmp_path):
    path = tmp_path / "eval.csv"
    logger = CsvLogger(str(path))
    logger.log({"success": 0.5}, step=10)
    logger.log({"success": 1.0, "episode.return": -3.0}, step=20)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert rows == [
        {"step": "10", "success": "0.5", "episode.return": ""},
        {"step": "20", "success": "1.0", "episode.return": "-3.0"},
    ]
    with pytest.raises(ValueError, match="Only scalars"):
        logger.log({"x": np.zeros(3)}, step=30)


def _constant_dataset(value, n=50):
    return Dataset.create(
        observations=np.full((n, 3), value, np.float32),
        actions=np.zeros((n, 2), np.float32),
        rewards=np.zeros(n, np.float32),
        terminals=np.zeros(n, np.float32),
        masks=np.ones(n, np.float32),
        next_observations=np.full((n, 3), value, np.float32),
    )


@pytest.mark.parametrize("ratio,expected", [(0.25, (63, 192)), (0.5, (127, 128)), (0.0, (0, 255)), (1.0, (255, 0))])
def test_mixed_batch_composition(ratio, expected):
    assert mixed_batch_sizes(255, ratio) == expected
    config = {"batch_size": 255, "horizon_length": 4, "discount": 0.99}
    batch = sample_mixed_batch(
        _constant_dataset(1.0), _constant_dataset(-1.0), config, utd_ratio=3, offline_ratio=ratio
    )
    assert batch["observations"].shape == (3, 255, 3)
    assert batch["actions"].shape == (3, 255, 4, 2)
    for u in range(3):  # every UTD slice has the exact split, offline rows first
        np.testing.assert_array_equal(batch["observations"][u, :, 0], [1.0] * expected[0] + [-1.0] * expected[1])


def test_mixed_batch_rejects_bad_ratio():
    with pytest.raises(ValueError, match="offline_ratio"):
        mixed_batch_sizes(256, 1.5)
