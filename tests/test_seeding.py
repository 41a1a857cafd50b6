"""utils/seeding.py: the seed range, one distinct stream per (seed, stream, step), and evaluate's use of it.

Earlier versions aliased streams: `--seed=0` and `--seed=2**32` built the same networks, the
collector used `PRNGKey(seed + 1)` (the agent key of `seed + 1`), the evaluation seed
`seed * 1000003 + step` wrapped, and the replay buffer was seeded like the dataset sampler.
"""

import itertools

import gymnasium as gym
import jax
import numpy as np
import pytest

from evaluation import evaluate
from utils import seeding

SEEDS = (0, 1, 2, 4295, 2**32 - 1)
STEPS = (0, 1, 100000)


def key_tuple(key):
    """A JAX key (raw uint32 or typed) as a hashable tuple of its uint32 words."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return tuple(int(x) for x in np.asarray(key, np.uint32).ravel())


def first_draws(rng, n=4):
    return tuple(int(x) for x in rng.integers(0, 2**63, size=n))


# ---------------------------------------------------------------- the seed range


@pytest.mark.parametrize("seed", [0, 2**32 - 1, np.int64(7), np.uint32(2**32 - 1)])
def test_check_seed_accepts_the_range(seed):
    assert seeding.check_seed(seed) == int(seed)
    assert type(seeding.check_seed(seed)) is int


@pytest.mark.parametrize("seed", [-1, 2**32, 2**32 + 5, 1.5, 3.0, True, False, "3", None])
def test_check_seed_rejects_outside_the_range(seed):
    with pytest.raises(ValueError, match="--seed"):
        seeding.check_seed(seed)
    # Every stream goes through the check: no stream exists for a seed outside the range.
    with pytest.raises(ValueError, match="--seed"):
        seeding.jax_key(seed, "agent")
    with pytest.raises(ValueError, match="--seed"):
        seeding.numpy_rng(seed, "dataset")
    with pytest.raises(ValueError, match="--seed"):
        seeding.evaluation_streams(seed, 0, 2)


def test_unknown_stream_and_negative_step_raise():
    with pytest.raises(ValueError, match="Unknown random stream"):
        seeding.jax_key(0, "critic")
    with pytest.raises(ValueError, match="step"):
        seeding.evaluation_streams(0, -1, 2)


# ---------------------------------------------------------------- distinct streams


def test_every_jax_stream_key_is_distinct():
    keys = {}
    for seed in SEEDS:
        keys[(seed, "agent")] = key_tuple(seeding.jax_key(seed, "agent"))
        keys[(seed, "collector")] = key_tuple(seeding.jax_key(seed, "collector"))
        for step in STEPS:
            keys[(seed, "evaluation", step)] = key_tuple(seeding.evaluation_streams(seed, step, 1)[0])
    assert len(keys) == len(SEEDS) * (2 + len(STEPS))
    assert len(set(keys.values())) == len(keys), "two (seed, stream, step) triples share a JAX key"
    # The documented derivation, for one case of each kind.
    root = jax.random.PRNGKey(4295)
    assert keys[(4295, "collector")] == key_tuple(jax.random.fold_in(root, seeding.STREAMS.index("collector")))
    evaluation = jax.random.fold_in(jax.random.fold_in(root, seeding.STREAMS.index("evaluation")), 100000)
    assert keys[(4295, "evaluation", 100000)] == key_tuple(evaluation)


def test_every_numpy_stream_is_distinct():
    draws = {}
    for seed in SEEDS:
        for stream in ("dataset", "replay_buffer"):
            draws[(seed, stream)] = first_draws(seeding.numpy_rng(seed, stream))
        for stream in ("env", "eval_env"):
            draws[(seed, stream)] = seeding.env_seed(seed, stream)
        for step in STEPS:
            draws[(seed, "evaluation", step)] = tuple(seeding.evaluation_streams(seed, step, 4)[1])
    assert len(set(draws.values())) == len(draws), "two (seed, stream, step) triples share numpy draws"
    for seed in SEEDS[:-1]:  # the pairs the old seeding mixed up, spelled out
        assert draws[(seed, "dataset")] != draws[(seed, "replay_buffer")]
        assert first_draws(seeding.numpy_rng(seed, "dataset")) != first_draws(seeding.numpy_rng(seed + 1, "dataset"))
        assert first_draws(seeding.numpy_rng(seed, "replay_buffer")) != first_draws(
            seeding.numpy_rng(seed + 1, "replay_buffer")
        )
    # Deterministic: the same (seed, stream) gives the same draws.
    assert first_draws(seeding.numpy_rng(4295, "replay_buffer")) == draws[(4295, "replay_buffer")]
    for seed, stream in itertools.product(SEEDS, ("env", "eval_env")):
        assert 0 <= draws[(seed, stream)] < 2**32


@pytest.mark.parametrize("seed", [0, 1, 4295, 2**32 - 2])
def test_old_aliasing_examples_now_differ(seed):
    # The collector used PRNGKey(seed + 1), which is the agent key of seed + 1.
    assert key_tuple(seeding.jax_key(seed, "collector")) != key_tuple(seeding.jax_key(seed + 1, "agent"))


def test_evaluation_seed_arithmetic_no_longer_collides():
    # seed * 1000003 + step: (0, 1000003) and (1, 0) gave one evaluation stream.
    key_a, seeds_a = seeding.evaluation_streams(0, 1000003, 5)
    key_b, seeds_b = seeding.evaluation_streams(1, 0, 5)
    assert key_tuple(key_a) != key_tuple(key_b)
    assert seeds_a != seeds_b and not set(seeds_a) & set(seeds_b)


# ---------------------------------------------------------------- evaluation_streams


@pytest.mark.parametrize("k", [0, 1, 4])
def test_evaluation_streams_reset_seeds(k):
    key, seeds = seeding.evaluation_streams(7, 300, k)
    again_key, again = seeding.evaluation_streams(7, 300, k)
    more_key, more = seeding.evaluation_streams(7, 300, k + 3)
    assert len(seeds) == k and len(more) == k + 3
    assert all(type(s) is int and 0 <= s < 2**32 for s in more)
    assert len(set(more)) == k + 3
    assert again == seeds and key_tuple(again_key) == key_tuple(key)  # deterministic
    assert more[:k] == seeds  # more episodes extend the list, they do not reshuffle it
    assert key_tuple(more_key) == key_tuple(key)  # the policy key does not depend on the episode count
    assert more != list(seeding.evaluation_streams(7, 301, k + 3)[1])


class SeedRecordingEnv(gym.Env):
    """Episodes of `T` steps that record the `seed=` of every reset."""

    def __init__(self, T=3, action_dim=2):
        self.T = T
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (action_dim,), np.float32)
        self.reset_seeds = []

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.reset_seeds.append(seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t == self.T
        return np.zeros(1, np.float32), 0.0, False, done, {"success": float(done)}

    def render(self):
        return np.zeros((2, 2, 3), np.uint8)


class KeyRecordingAgent:
    """Returns a zero chunk of `h` actions and records the key of every call."""

    def __init__(self, h=2, action_dim=2):
        self.h, self.action_dim, self.keys = h, action_dim, []

    def sample_actions(self, observations, rng=None):
        self.keys.append(key_tuple(rng))
        return np.zeros(self.h * self.action_dim, np.float32)


@pytest.mark.parametrize("seed, step, episodes, videos", [(0, 0, 3, 0), (4295, 100000, 2, 2)])
def test_evaluate_resets_with_the_evaluation_streams(seed, step, episodes, videos):
    env, agent = SeedRecordingEnv(), KeyRecordingAgent()
    evaluate(
        agent,
        env,
        num_eval_episodes=episodes,
        num_video_episodes=videos,
        video_frame_skip=1,
        action_dim=2,
        seed=seed,
        step=step,
        progress=False,
    )
    key, reset_seeds = seeding.evaluation_streams(seed, step, episodes + videos)
    assert env.reset_seeds == reset_seeds  # one fresh seed per episode, video episodes included
    assert len(set(env.reset_seeds)) == episodes + videos
    # Episode i has its own stream fold_in(key, i); its policy keys are split off it, one per chunk:
    # ceil(T / h) = 2 per episode.
    expected = []
    for i in range(episodes + videos):
        rng = jax.random.fold_in(key, i)
        for _ in range(2):
            rng, sub = jax.random.split(rng)
            expected.append(key_tuple(sub))
    assert agent.keys == expected
