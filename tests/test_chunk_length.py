"""The loop executes the prefix of a chunk that the agent picks (issue: adaptive chunk length).

An agent's `sample_actions` may return `(chunk (h * A,), length)` with `length` in `1..h`: the action queue
executes exactly `length` actions and calls again; evaluation (sequential and batched, which stay equal episode
by episode) and online collection log the executed lengths (`executed_length.mean`, `.share_<k>`); an agent
that returns whole chunks gets no such columns and runs as before.
"""

import math

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evaluation import ActionQueue, evaluate, evaluate_batched
from runner.collector import OnlineCollector, episode_stats
from tests.test_evaluation_batched import NoisyAgent, assert_same_results, make_target_env, target_vector_env  # noqa: F401
from utils import seeding, vector_eval
from utils.datasets import ReplayBuffer


class PrefixAgent(flax.struct.PyTreeNode):
    """`NoisyAgent`'s chunks of `h` actions, with a length drawn from the key: `(chunk (h * A,), length ())`."""

    gain: jax.Array
    h: int = flax.struct.field(pytree_node=False, default=4)

    @jax.jit
    def sample_actions(self, observations, rng):
        chunk_key, length_key = jax.random.split(rng)
        toward = jnp.clip(self.gain * (observations[1] - observations[0]), -1, 1)
        chunk = jnp.clip(toward + 0.8 * jax.random.normal(chunk_key, (self.h, 2)), -1, 1).reshape(-1)
        return chunk, jax.random.randint(length_key, (), 1, self.h + 1, dtype=jnp.int32)


# ---------------------------------------------------------------- the action queue


def test_split_chunk_keeps_the_chosen_prefix():
    chunk = np.arange(8.0)  # h = 4 actions of A = 2
    assert [a.tolist() for a in vector_eval.split_chunk(chunk, 2, length=3)] == [[0, 1], [2, 3], [4, 5]]
    assert [a.tolist() for a in vector_eval.split_chunk(chunk, 2, max_actions=2, length=3)] == [[0, 1], [2, 3]]
    assert len(vector_eval.split_chunk(chunk, 2, max_actions=3, length=1)) == 1
    for bad in (0, 5):
        with pytest.raises(ValueError, match=f"execute {bad} actions of a chunk of 4"):
            vector_eval.split_chunk(chunk, 2, length=bad)


def test_queue_executes_exactly_the_chosen_length_then_calls_again():
    lengths, calls = iter([2, 3, 1, 4]), []

    def policy(observation):
        calls.append(int(observation))
        base = 10.0 * len(calls)
        return np.arange(base, base + 4), np.int32(next(lengths))  # h = 4 actions of A = 1

    queue = ActionQueue(policy, action_dim=1)
    executed = [float(queue(np.float32(t))[0]) for t in range(10)]
    assert calls == [0, 2, 5, 6]  # a new chunk after 2, 3, 1 actions
    assert executed == [10, 11, 20, 21, 22, 30, 40, 41, 42, 43]
    assert queue.lengths == [2, 3, 1, 4] and queue.horizon == 4 and queue.num_policy_calls == 4


def test_whole_chunks_record_no_lengths():
    queue = ActionQueue(lambda o: np.arange(6.0), action_dim=2, max_actions=2)
    assert [queue(None).tolist() for _ in range(3)] == [[0, 1], [2, 3], [0, 1]]
    assert queue.lengths == [] and queue.num_policy_calls == 2


# ---------------------------------------------------------------- evaluation


def _hand_length_stats(trajs_lengths, h):
    lengths = np.concatenate(trajs_lengths)
    return {
        "executed_length.mean": lengths.mean(),
        **{f"executed_length.share_{k}": np.mean(lengths == k) for k in range(1, h + 1)},
    }


def _replayed_lengths(agent, seed, step, episodes, episode_steps, max_actions=None):
    """Each episode's executed lengths, recomputed from the agent's own draws on its own key stream."""
    key, _ = seeding.evaluation_streams(seed, step, episodes)
    out = []
    for i, steps in enumerate(episode_steps):
        rng, done, lengths = vector_eval.episode_key(key, i), 0, []
        while done < steps:
            rng, k = jax.random.split(rng)
            length = int(jax.random.randint(jax.random.split(k)[1], (), 1, agent.h + 1, dtype=jnp.int32))
            length = min(length, max_actions or length)
            lengths.append(length)
            done += length
        out.append(lengths)
    return out


@pytest.mark.parametrize("max_actions", [None, 2])
def test_evaluation_logs_the_executed_lengths_and_batched_equals_sequential(max_actions, target_vector_env):  # noqa: F811
    agent, episodes = PrefixAgent(gain=jnp.float32(0.5)), 7
    kwargs = dict(seed=3, step=40, progress=False, action_chunk_eval_size=max_actions)
    sequential = evaluate(agent, make_target_env(), episodes, **kwargs)
    batched = evaluate_batched(agent, target_vector_env(3), episodes, **kwargs)
    assert_same_results(sequential, batched, check_lengths_vary=True)
    steps = [len(t["done"]) for t in sequential[1]]
    lengths = _replayed_lengths(agent, 3, 40, episodes, steps, max_actions)
    expected = _hand_length_stats(lengths, agent.h)
    for k, v in expected.items():
        assert sequential[0][k] == pytest.approx(v, abs=1e-12), k
    assert sequential[0]["policy_calls_per_episode"] == np.mean([len(x) for x in lengths])
    assert len(set(np.concatenate(lengths))) > 1  # the lengths do vary
    if max_actions:
        assert sequential[0]["executed_length.share_3"] == sequential[0]["executed_length.share_4"] == 0


def test_whole_chunk_agents_log_no_lengths():
    stats, _, _ = evaluate(NoisyAgent(gain=jnp.float32(0.5)), make_target_env(), 3, seed=0, progress=False)
    assert not [k for k in stats if k.startswith("executed_length")]
    assert stats["policy_calls_per_episode"] > 0


# ---------------------------------------------------------------- online collection


def _collect(collector, agent, buffer, steps):
    infos = []
    for _ in range(steps):
        info = collector.step(agent, buffer)
        if info is not None:
            infos.append({k: v for k, v in episode_stats(info).items() if k != "episode.duration"})  # wall clock
    return infos


def _collector(seed=0):
    return OnlineCollector(make_target_env(max_steps=9), 2, lambda r: r, jax.random.PRNGKey(seed), reset_seed=5)


def _buffer():
    example = dict(
        observations=np.zeros(3, np.float32), actions=np.zeros(2, np.float32), rewards=np.float32(0),
        terminals=np.float32(0), masks=np.float32(0), next_observations=np.zeros(3, np.float32),
    )  # fmt: skip
    return ReplayBuffer.create(example, size=100)


def test_collection_logs_each_episodes_lengths_and_resumes_exactly():
    agent = PrefixAgent(gain=jnp.float32(0.5))
    collector, buffer = _collector(), _buffer()
    infos = _collect(collector, agent, buffer, 40)
    assert infos and all("executed_length.mean" in i and "executed_length.share_4" in i for i in infos)
    for info in infos:  # an episode's chunks cover its steps: mean * chunks >= length, shares sum to 1
        assert sum(info[f"executed_length.share_{k}"] for k in range(1, 5)) == pytest.approx(1)
        assert 1 <= info["executed_length.mean"] <= 4

    # Kill in the middle of an episode (inside a chunk), restore into a fresh collector: the same episodes.
    first, buffer = _collector(), _buffer()
    before = _collect(first, agent, buffer, 13)
    state = first.state()
    assert state["episode"] is not None and state["episode"]["executed_lengths"]["lengths"]
    second = _collector(seed=99)
    second.restore(state)
    after = _collect(second, agent, buffer, 27)
    assert before + after == infos


def test_collection_of_whole_chunks_is_unchanged():
    collector, buffer = _collector(), _buffer()
    infos = _collect(collector, NoisyAgent(gain=jnp.float32(0.5)), buffer, 30)
    assert infos and not [k for i in infos for k in i if k.startswith("executed_length")]
    assert "executed_lengths" not in (collector.state()["episode"] or {})
    assert math.isfinite(infos[0]["episode.length"])
