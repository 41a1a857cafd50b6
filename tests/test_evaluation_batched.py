"""Batched evaluation (`evaluation.evaluate_batched`) gives the sequential `evaluate`'s results, episode by episode.

A small deterministic env (`TargetEnv`: success depends on the actions and on the target drawn from the
reset seed, so episodes end at different steps and the slots desynchronise), a stub agent whose chunks
depend on its key, tiny real ACFQL agents, and real OGBench envs with a short time limit (sync, and one
async case). Equality is exact: trajectories value for value, and every mean of `stats` except the
wall-clock `episode.duration`.
"""

import functools
import math
import multiprocessing
import pickle

import flax
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import evaluation
from agents.acfql import ACFQLAgent, get_config
from envs import ogbench as ogb
from envs.common import EpisodeMonitor
from envs.ogbench import OGBENCH_INFO_FILTERS
from evaluation import evaluate, evaluate_batched, make_eval_vector_env
from utils import seeding, vector_eval

OGBENCH_ENV = "cube-double-play-singletask-task2-v0"


class TargetEnv(gymnasium.Env):
    """Move `x` (from 0) to a target drawn from the reset seed; success within `tolerance` ends the episode.

    Observation `[x, target, t / max_steps]`; action `(2,)`: `x += scale * (0.25 * a[0] + 0.05 * a[1])`; reward
    `-|x - target|`; truncated after `max_steps`. Infos: `success` (bool), `distance` (float), `nested.t` (int).
    """

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, max_steps=13, tolerance=0.05, scale=1.0):
        self.max_steps, self.tolerance, self.scale = max_steps, tolerance, scale

    def _observation(self):
        return np.array([self.x, self.target, self.t / self.max_steps], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.target, self.x, self.t = float(self.np_random.uniform(-1, 1)), 0.0, 0
        return self._observation(), {"target": self.target}

    def step(self, action):
        action = np.asarray(action, np.float64)
        self.x += self.scale * (0.25 * action[0] + 0.05 * action[1])
        self.t += 1
        distance = abs(self.x - self.target)
        success = bool(distance < self.tolerance)
        info = {"success": success, "distance": distance, "nested": {"t": self.t}}
        return self._observation(), -distance, success, not success and self.t >= self.max_steps, info


def make_target_env(max_steps=13, scale=1.0):
    return EpisodeMonitor(TargetEnv(max_steps=max_steps, scale=scale))


class NoisyAgent(flax.struct.PyTreeNode):
    """Chunks of `h` actions toward the target plus key-dependent noise (the noise decides the episode)."""

    gain: jax.Array
    h: int = flax.struct.field(pytree_node=False, default=3)

    @jax.jit
    def sample_actions(self, observations, rng):
        toward = jnp.clip(self.gain * (observations[1] - observations[0]), -1, 1)
        noise = jax.random.normal(rng, (self.h, 2))
        return jnp.clip(toward + 0.8 * noise, -1, 1).reshape(-1)  # (h * A,)


def acfql_agent(ob_dim, action_dim, actor_type, seed=0, h=3, actor_width=16):
    config = get_config()
    config.actor_hidden_dims = (actor_width, actor_width)
    config.value_hidden_dims = (16, 16)
    config.actor_num_samples = 4
    config.flow_steps = 2
    config.horizon_length = h
    config.actor_type = actor_type
    ex_obs, ex_actions = np.zeros(ob_dim, np.float32), np.zeros(action_dim, np.float32)
    return ACFQLAgent.create(seed, ex_obs, ex_actions, config)


def assert_same_results(sequential, batched, check_lengths_vary=False):
    """Equal stats (but wall-clock time) and equal trajectories, episode by episode."""
    (s_stats, s_trajs, _), (b_stats, b_trajs, b_renders) = sequential, batched
    assert b_renders == []
    assert set(s_stats) == set(b_stats)
    for k in s_stats:
        if k != "episode.duration":
            assert b_stats[k] == s_stats[k], k
    assert len(b_trajs) == len(s_trajs)
    for i, (s, b) in enumerate(zip(s_trajs, b_trajs, strict=True)):
        assert set(s) == set(b) == {"observation", "action", "reward", "done"}
        for k in s:
            np.testing.assert_array_equal(np.asarray(b[k]), np.asarray(s[k]), err_msg=f"episode {i}: {k}")
    if check_lengths_vary:
        lengths = [len(t["done"]) for t in s_trajs]
        assert len(set(lengths)) > 1, lengths  # the slots desynchronise
        assert 0 < s_stats["success"] < 1, s_stats["success"]


@pytest.fixture
def target_vector_env():
    made = []

    def make(num_envs, max_steps=13, scale=1.0):
        made.append(make_eval_vector_env(functools.partial(make_target_env, max_steps, scale), num_envs, "sync"))
        return made[-1]

    yield make
    for vector_env in made:
        vector_env.close()


# ---------------------------------------------------------------- equality with the sequential evaluation


@pytest.mark.parametrize("num_envs", [3, 7, 10])  # fewer slots than episodes, as many, more
def test_batched_equals_sequential_with_a_noisy_agent(num_envs, target_vector_env):
    agent, episodes = NoisyAgent(gain=jnp.float32(0.5)), 7
    sequential = evaluate(agent, make_target_env(), episodes, seed=3, step=40, progress=False)
    batched = evaluate_batched(agent, target_vector_env(num_envs), episodes, seed=3, step=40, progress=False)
    assert_same_results(sequential, batched, check_lengths_vary=True)
    lengths = [len(t["done"]) for t in sequential[1]]
    assert sequential[0]["policy_calls_per_episode"] == np.mean([math.ceil(n / agent.h) for n in lengths])
    assert {"success", "distance", "nested.t", "episode.return", "episode.length"} <= set(sequential[0])


def test_another_step_gives_other_episodes(target_vector_env):
    agent, vector_env = NoisyAgent(gain=jnp.float32(0.5)), target_vector_env(3)
    a = evaluate_batched(agent, vector_env, 5, seed=3, step=40, progress=False)
    b = evaluate_batched(agent, vector_env, 5, seed=3, step=41, progress=False)
    again = evaluate_batched(agent, vector_env, 5, seed=3, step=40, progress=False)  # the env is reused
    assert [len(t["done"]) for t in a[1]] != [len(t["done"]) for t in b[1]]
    assert_same_results(a, again)


@pytest.fixture(scope="module")
def acfql_agents():
    """Best-of-N (QC) with tiny networks; the one-step actor (QC-FQL) with 512-wide layers: its products of
    one row are matrix-vector products, which XLA:CPU rounds differently from a batch at that width."""
    return {
        "best-of-n": acfql_agent(3, 2, "best-of-n", seed=1),
        "distill-ddpg": acfql_agent(3, 2, "distill-ddpg", seed=2, actor_width=512),
    }


@pytest.mark.parametrize("actor_type, step, scale", [("best-of-n", 7, 1.0), ("distill-ddpg", 9, 5.0)])
def test_batched_equals_sequential_with_acfql(actor_type, step, scale, acfql_agents, target_vector_env):
    """Both actors, the one-step actor's wide layers included, give each row a single call's chunk bit for bit."""
    agent, episodes = acfql_agents[actor_type], 6
    vector_env = target_vector_env(4, scale=scale)
    sequential = evaluate(agent, make_target_env(scale=scale), episodes, seed=1, step=step, progress=False)
    batched = evaluate_batched(agent, vector_env, episodes, seed=1, step=step, progress=False)
    assert_same_results(sequential, batched, check_lengths_vary=True)


def test_evaluate_with_vector_env_keeps_video_episodes_sequential(target_vector_env):
    class RenderingTargetEnv(TargetEnv):
        def render(self):
            return np.full((2, 2, 3), int(100 * abs(self.x)) % 255, np.uint8)

    agent, env = NoisyAgent(gain=jnp.float32(0.5)), EpisodeMonitor(RenderingTargetEnv())
    kwargs = dict(num_eval_episodes=4, num_video_episodes=2, video_frame_skip=1, seed=0, step=5, progress=False)
    sequential = evaluate(agent, env, **kwargs)
    mixed = evaluate(agent, env, vector_env=target_vector_env(3), **kwargs)
    assert_same_results(sequential[:2] + ([],), mixed[:2] + ([],))
    assert len(mixed[2]) == 2
    for s, m in zip(sequential[2], mixed[2], strict=True):
        np.testing.assert_array_equal(s, m)


def test_slots_call_the_policy_together_at_chunk_boundaries(target_vector_env, monkeypatch):
    """A slot whose episode ended mid-chunk starts its next episode at the next multiple of `h`, so one
    batched call serves every running slot, only at steps that are multiples of `h`."""
    agent, vector_env, h = NoisyAgent(gain=jnp.float32(0.5), h=4), target_vector_env(3), 4
    runners, calls = [], []
    init, policy_call = vector_eval.LockstepRunner.__init__, vector_eval.BatchedPolicy.__call__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        runners.append(self)

    def recording_call(self, observations, goals, streams, rows):
        runner = runners[-1]
        running = (runner.episode >= 0) & ~runner.waiting
        calls.append((runner.t, rows.copy(), running))
        return policy_call(self, observations, goals, streams, rows)

    monkeypatch.setattr(vector_eval.LockstepRunner, "__init__", recording_init)
    monkeypatch.setattr(vector_eval.BatchedPolicy, "__call__", recording_call)
    _, trajs, _ = evaluate_batched(agent, vector_env, 8, seed=2, step=0, progress=False)
    lengths = [len(t["done"]) for t in trajs]
    assert len({n % h for n in lengths}) > 1  # episodes do end mid-chunk
    assert sum(rows.sum() for _, rows, _ in calls) == sum(math.ceil(n / h) for n in lengths)
    for t, rows, running in calls:
        assert t % h == 0
        np.testing.assert_array_equal(rows, running)  # every running slot needs a chunk at the same step
    assert len(calls) < sum(math.ceil(n / h) for n in lengths) / 2


# ---------------------------------------------------------------- real OGBench envs


@pytest.fixture(scope="module")
def ogbench_agent():
    """QC (best-of-N, h = 5) with tiny networks for cube-double (the distill actor is covered on `TargetEnv`)."""
    env = ogb.make_eval_env(OGBENCH_ENV, max_episode_steps=12)
    ob, _ = env.reset(seed=0)
    return acfql_agent(ob.shape[0], env.action_space.shape[0], "best-of-n", h=5)


def test_batched_equals_sequential_on_ogbench(ogbench_agent):
    make = functools.partial(ogb.make_eval_env, OGBENCH_ENV, max_episode_steps=12)
    vector_env = make_eval_vector_env(make, 2, "sync")
    try:
        agent = ogbench_agent
        sequential = evaluate(agent, make(), 3, seed=0, step=100, progress=False)
        batched = evaluate_batched(agent, vector_env, 3, seed=0, step=100, progress=False)
    finally:
        vector_env.close()
    assert_same_results(sequential, batched)
    assert sequential[0]["policy_calls_per_episode"] == 3  # ceil(12 / 5)
    assert {"success", "episode.return", "episode.length"} <= set(sequential[0])
    assert not any(k.startswith(("privileged", "proprio")) for k in sequential[0])  # the eval env's filters


def test_async_equals_sync_and_closes(ogbench_agent):
    make = functools.partial(ogb.make_eval_env, OGBENCH_ENV, max_episode_steps=8)
    agent = ogbench_agent
    sync = make_eval_vector_env(make, 2, "sync")
    try:
        expected = evaluate_batched(agent, sync, 3, seed=5, step=1, progress=False)
    finally:
        sync.close()
    before = set(multiprocessing.active_children())
    vector_env = make_eval_vector_env(make, 2, "async")
    try:
        assert isinstance(vector_env, gymnasium.vector.AsyncVectorEnv)
        workers = set(multiprocessing.active_children()) - before
        assert len(workers) == 2
        result = evaluate_batched(agent, vector_env, 3, seed=5, step=1, progress=False)
    finally:
        vector_env.close()
    assert_same_results(expected, result)
    assert not any(p.is_alive() for p in workers)


# ---------------------------------------------------------------- streams, infos, factory, errors


class KeyRecordingAgent:
    """Zero chunks of `h` actions; records the key of every call (not a pytree: sequential only)."""

    def __init__(self, h=2):
        self.h, self.keys = h, []

    def sample_actions(self, observations, rng=None):
        self.keys.append(tuple(np.asarray(rng, np.uint32).tolist()))
        return np.zeros(self.h * 2, np.float32)


def test_sequential_episodes_use_their_own_streams():
    agent = KeyRecordingAgent()
    env = EpisodeMonitor(TargetEnv(max_steps=3, tolerance=-1.0))  # never a success: 3 steps, 2 calls per episode
    evaluate(agent, env, num_eval_episodes=2, num_video_episodes=0, seed=9, step=4, progress=False)
    key, _ = seeding.evaluation_streams(9, 4, 2)
    expected = []
    for i in range(2):
        rng = jax.random.fold_in(key, i)
        for _ in range(2):
            rng, sub = jax.random.split(rng)
            expected.append(tuple(np.asarray(sub).tolist()))
    assert agent.keys == expected


class InfoEnv(gymnasium.Env):
    """Ends after `index + 1` steps; infos with nested dicts, an underscore key and per-env key sets."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, index):
        self.index = index

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def info(self):
        info = {"success": self.index % 2 == 0, "_private": self.index, "arr": np.arange(2) + self.index}
        if self.index == 1:
            info["only_one"] = 1.5
        if self.t == self.index + 1:
            info["episode"] = {"return": -float(self.index), "length": self.t, "inner": {"x": self.index}}
        return info

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 0.0, self.t == self.index + 1, False, self.info()


def test_slot_info_rebuilds_each_envs_info():
    envs = [InfoEnv(i) for i in range(3)]
    vector_env = gymnasium.vector.SyncVectorEnv(
        [lambda e=e: e for e in envs], autoreset_mode=gymnasium.vector.AutoresetMode.DISABLED
    )
    vector_env.reset()
    *_, infos = vector_env.step(np.zeros((3, 1), np.float32))
    for slot, env in enumerate(envs):
        rebuilt, original = vector_eval.slot_info(infos, slot), env.info()
        assert set(rebuilt) == set(original)
        for k, v in original.items():
            if isinstance(v, dict):
                assert evaluation._flatten(rebuilt[k]) == evaluation._flatten(v)
            else:
                np.testing.assert_array_equal(rebuilt[k], v)
    vector_env.close()


def _write_tiny_ogbench_file(path):
    """A 3-row cube-single trajectory in the stored layout (enough for make_env_and_datasets)."""
    env = ogb.make_eval_env("cube-single-play-singletask-task1-v0")
    ob, _ = env.reset(seed=0)
    rows = {k: [] for k in ("observations", "actions", "terminals", "qpos", "qvel")}
    for t in range(3):
        action = np.zeros(5)
        next_ob, _, _, _, info = env.step(action)
        for k, v in zip(rows, (ob, action, t == 2, info["prev_qpos"], info["prev_qvel"]), strict=True):
            rows[k].append(v)
        ob = next_ob
    np.savez(path, **{k: np.asarray(v, dtype=bool if k == "terminals" else np.float32) for k, v in rows.items()})


def test_make_eval_env_builds_the_eval_env_again(tmp_path):
    timing = "pre"  # not the default: the factory must carry the run's timing
    path = str(tmp_path / "cube-single-play-v0.npz")
    _write_tiny_ogbench_file(path)
    out = envs.make_env_and_datasets(
        "cube-single-play-singletask-task1-v0", dataset_path=path, success_timing=timing, hash_datasets=False
    )
    factory = pickle.loads(pickle.dumps(out.make_eval_env))  # what a spawned worker receives
    env = factory()
    assert type(env) is type(out.eval_env) is EpisodeMonitor
    assert [f.pattern for f in env._filters] == [f.pattern for f in out.eval_env._filters] == list(OGBENCH_INFO_FILTERS)
    assert env.unwrapped._success_timing == out.eval_env.unwrapped._success_timing == timing
    a, b = env.reset(seed=11)[0], out.eval_env.reset(seed=11)[0]
    np.testing.assert_array_equal(a, b)
    for _ in range(3):
        action = np.full(5, 0.3, np.float32)
        np.testing.assert_array_equal(env.step(action)[0], out.eval_env.step(action)[0])


def test_make_eval_env_for_robomimic_with_a_stand_in(tmp_path, monkeypatch):
    from envs import robomimic as ru
    from tests.test_robomimic import DEMOS, FakeRobosuiteEnv, write_robomimic_file

    monkeypatch.setitem(ru.OFFICIAL_NUM_DEMOS, ("lift", "mh"), len(DEMOS))
    made = []

    def fake_make(env_name, env_meta, seed=None):
        made.append(seed)
        return ru.RobomimicLowDimEnv(FakeRobosuiteEnv(success_at=2), ru.episode_cap(env_name), seed=seed)

    monkeypatch.setattr(ru, "make_robomimic_env", fake_make)
    path = write_robomimic_file(tmp_path / "low_dim_v15.hdf5")
    out = envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=str(path), seed=3, hash_datasets=False)
    assert len(made) == 2  # env and eval_env; the factory builds nothing until called
    factory = pickle.loads(pickle.dumps(out.make_eval_env))
    env = factory()
    assert made[2] == made[1] == seeding.env_seed(3, "eval_env")
    assert type(env) is type(out.eval_env) is EpisodeMonitor and env._filters == []
    assert isinstance(env.env, ru.RobomimicLowDimEnv)
    with pytest.raises(ValueError, match="Not a supported OGBench single-task env name"):
        ogb.make_eval_env("lift-mh-low_dim")  # each family builds its own envs


def test_vector_env_mode_rule_and_errors():
    assert evaluation.resolve_vector_mode("auto", 16, cores=2) == "sync"
    assert evaluation.resolve_vector_mode("auto", 16, cores=evaluation.ASYNC_MIN_CORES) == "async"
    assert evaluation.resolve_vector_mode("auto", 1, cores=64) == "sync"
    assert evaluation.resolve_vector_mode("async", 1, cores=1) == "async"
    make = functools.partial(make_target_env, 5)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
            make_eval_vector_env(make, bad, "sync")
    with pytest.raises(ValueError, match="mode must be one of"):
        make_eval_vector_env(make, 2, "threads")
    with pytest.raises(ValueError, match="context must be 'spawn' or 'forkserver'"):
        make_eval_vector_env(make, 2, "async", context="fork")


def test_evaluate_batched_errors(target_vector_env):
    agent, vector_env = NoisyAgent(gain=jnp.float32(1.0)), target_vector_env(2)
    plain = gymnasium.vector.SyncVectorEnv([make_target_env] * 2)
    with pytest.raises(ValueError, match="make_eval_vector_env"):
        evaluate_batched(agent, plain, 2, progress=False)
    plain.close()
    with pytest.raises(ValueError, match="num_eval_episodes"):
        evaluate_batched(agent, vector_env, -1, progress=False)
    with pytest.raises(TypeError, match="pytree"):
        evaluate_batched(KeyRecordingAgent(), vector_env, 2, progress=False)
    with pytest.raises(ValueError, match="6 numbers, not a multiple of action_dim=4"):
        evaluate_batched(NoisyAgent(gain=jnp.float32(1.0)), vector_env, 2, action_dim=4, progress=False)  # 6 numbers
    assert evaluate_batched(agent, vector_env, 0, progress=False) == ({}, [], [])
