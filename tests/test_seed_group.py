"""Several seeds in one process (`--num_seeds`), k updates per dispatch, mid-episode run states, time split.

Fast tests check the pieces (stacking, the vmapped update against separate updates, dispatch sizes,
the collector's mid-episode state, the time split). The slow tests run the drivers: each seed of a
group must match the single-seed run of that seed, a killed group must resume exactly, and the
offline dispatch must give the batches its sampler promises.
"""

import json
import math
import os
import time
import types

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.acfql import ACFQLAgent, get_config
from evaluation import evaluate
from log_utils import TIME_SECTIONS, TimeSplit
from runner import cli, dispatch, resume, seed_group, setup
from runner.collector import OnlineCollector
from tests.driver_runs import assert_same_run, assert_warm_compiles, csv_rows, run_driver, tiny_dataset
from tests.test_cli import parse
from utils.datasets import ReplayBuffer

# ---------------------------------------------------------------- pieces


def _tiny_agent(seed, horizon=2):
    config = get_config()
    config.update(
        dict(horizon_length=horizon, actor_hidden_dims=(8, 8), value_hidden_dims=(8, 8), batch_size=4, flow_steps=2)
    )
    config["actor_num_samples"] = 3
    return ACFQLAgent.create(seed, np.zeros((1, 3), np.float32), np.zeros((1, 2), np.float32), dict(config))


def _batch(rng, h=2, b=4):
    return {
        "observations": rng.normal(size=(b, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(b, h, 2)).astype(np.float32),
        "next_observations": rng.normal(size=(b, h, 3)).astype(np.float32),
        "rewards": rng.normal(size=(b, h)).astype(np.float32),
        "masks": np.ones((b, h), np.float32),
        "valid": np.ones((b, h), np.float32),
    }


@pytest.mark.parametrize("mode", ["vmap", "map"])
def test_group_update_equals_separate_updates(mode):
    """Both ways of covering the seeds in one call give each seed its own update (map: bit for bit on CPU)."""
    agents = [_tiny_agent(seed) for seed in (0, 1, 2)]
    cfg = types.SimpleNamespace(seed_batching=mode, donate_agent="true")  # auto donates on accelerators only
    group = seed_group.SeedGroup([types.SimpleNamespace(agent=a, cfg=cfg) for a in agents])
    rtol = 0 if mode == "map" else 1e-5
    rng = np.random.default_rng(0)
    singles = [_tiny_agent(seed) for seed in (0, 1, 2)]  # the group's own agents are donated to its updates
    update, stacked = group.update_fn(), group.agent
    for step in range(5):
        batches = [_batch(rng) for _ in agents]
        before = stacked
        stacked, info = update(stacked, {k: np.stack([b[k] for b in batches]) for k in batches[0]})
        if step == 0:  # the update wrote into the agent's buffers (one copy on a device, not two)
            assert all(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(before) if isinstance(leaf, jax.Array))
        for s, batch in enumerate(batches):
            singles[s], single_info = singles[s].update(batch)
            np.testing.assert_allclose(np.asarray(info["critic/critic_loss"])[s], single_info["critic/critic_loss"],
                                       rtol=rtol)  # fmt: skip
    for s in range(3):
        sliced = jax.tree_util.tree_leaves(group.agent_for(stacked, s))
        for a, b in zip(sliced, jax.tree_util.tree_leaves(singles[s]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=0 if mode == "map" else 1e-6)
    # UTD batches (main_online.py's and the online phase's batch_update): map is exact there too.
    batch_update, utd = group.batch_update_fn(), [[_batch(rng) for _ in range(3)] for _ in agents]
    stacked, info = batch_update(stacked, {k: np.stack([np.stack([b[k] for b in u]) for u in utd]) for k in utd[0][0]})
    for s, u in enumerate(utd):
        singles[s], single_info = singles[s].batch_update({k: np.stack([b[k] for b in u]) for k in u[0]})
        np.testing.assert_allclose(np.asarray(info["critic/critic_loss"])[s], single_info["critic/critic_loss"],
                                   rtol=rtol)  # fmt: skip
        for a, b in zip(jax.tree_util.tree_leaves(group.agent_for(stacked, s)),
                        jax.tree_util.tree_leaves(singles[s]), strict=True):  # fmt: skip
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=0 if mode == "map" else 1e-6)
    # The per-seed policy acts like the seed's own agent.
    obs, key = rng.normal(size=(3,)).astype(np.float32), jax.random.PRNGKey(3)
    np.testing.assert_allclose(
        np.asarray(group.policy_for(stacked, 1).sample_actions(obs, key)),
        np.asarray(group.agent_for(stacked, 1).sample_actions(obs, key)),
        rtol=1e-6,
    )


class _Explorer(flax.struct.PyTreeNode):
    """A toy agent that acts deterministically when evaluated and explores with noise online."""

    w: jax.Array

    @jax.jit
    def sample_actions(self, observations, rng):
        return jnp.tanh(self.w * observations)  # (2,): one action of 2 numbers per call

    @jax.jit
    def collect_actions(self, observations, rng):
        return jnp.clip(self.sample_actions(observations, rng) + jax.random.normal(rng, (2,)), -1, 1)


@pytest.mark.parametrize("mode", ["one seed", "vmap", "map"])
def test_online_collection_prefers_collect_actions_and_evaluation_keeps_sample_actions(mode):
    """The explore hook: collection acts with `collect_actions` (each seed its own), evaluation with sample_actions."""
    from tests.test_drivers import CountingEnv

    explorers = [_Explorer(w=jnp.float32(0.1 * (s + 1))) for s in range(1 if mode == "one seed" else 2)]
    cfg = types.SimpleNamespace(seed_batching="map" if mode == "one seed" else mode)
    group = seed_group.SeedGroup([types.SimpleNamespace(agent=a, cfg=cfg) for a in explorers])
    example = {k: np.zeros(2, np.float32) for k in ("observations", "actions", "next_observations")}
    example.update(rewards=np.float32(0), terminals=np.float32(0), masks=np.float32(1))
    for s, explorer in enumerate(explorers):
        buffer, env = ReplayBuffer.create(example, size=10), CountingEnv(T=4, action_dim=2)
        collector = OnlineCollector(env, 2, lambda r: r, jax.random.PRNGKey(s), reset_seed=0)
        for _ in range(3):
            collector.step(group.policy_for(group.agent, s), buffer)
        rng, want, noiseless = jax.random.PRNGKey(s), [], []
        for observation in buffer["observations"][:3]:
            rng, key = jax.random.split(rng)
            want.append(explorer.collect_actions(observation, key))
            noiseless.append(explorer.sample_actions(observation, key))
        np.testing.assert_allclose(buffer["actions"][:3], np.stack(want), rtol=1e-6)
        assert np.abs(buffer["actions"][:3] - np.stack(noiseless)).max() > 0.1  # it explored
        env = CountingEnv(T=4, action_dim=2)
        evaluate(explorer, env, num_eval_episodes=1, action_dim=2, progress=False)
        steps = np.array([[t, 0] for t in range(4)], np.float32)  # CountingEnv's observations
        np.testing.assert_allclose(np.stack(env.actions), np.tanh(explorer.w * steps), rtol=1e-6)


def test_stack_then_slice_gives_back_each_agent():
    agents = [_tiny_agent(seed) for seed in (4, 5)]
    stacked = seed_group.stack_agents(agents)
    assert jax.tree_util.tree_leaves(stacked)[0].shape[0] == 2
    for s, agent in enumerate(agents):
        for a, b in zip(jax.tree_util.tree_leaves(seed_group.agent_slice(stacked, s)),
                        jax.tree_util.tree_leaves(agent), strict=True):  # fmt: skip
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _cfg(**overrides):
    values = dict(
        updates_per_dispatch=10,
        offline_steps=95,
        log_interval=25,
        eval_interval=40,
        save_interval=-1,
        state_interval=0,
        dataset_replace_interval=0,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.mark.parametrize(
    "overrides, expected_ends",
    [
        ({}, [10, 20, 25, 35, 40, 50, 60, 70, 75, 80, 90, 95]),
        ({"updates_per_dispatch": 100, "eval_interval": 0}, [25, 50, 75, 95]),
        ({"updates_per_dispatch": 100, "log_interval": 1000, "eval_interval": 0}, [95]),
        # A shard switch before step 31 and 61: a dispatch starts there, none runs across it.
        (
            {"updates_per_dispatch": 100, "log_interval": 1000, "eval_interval": 0, "dataset_replace_interval": 30},
            [29, 59, 89, 95],
        ),  # fmt: skip
        (
            {"updates_per_dispatch": 7, "log_interval": 1000, "eval_interval": 0, "state_interval": 20},
            [7, 14, 20, 27, 34, 40, 47, 54, 60, 67, 74, 80, 87, 94, 95],
        ),  # fmt: skip
    ],
)
def test_dispatches_stop_where_something_happens(overrides, expected_ends):
    cfg, done, ends = _cfg(**overrides), 0, []
    while done < cfg.offline_steps:
        done += dispatch.dispatch_size(done, cfg)
        ends.append(done)
    assert ends == expected_ends


def test_time_split_sections():
    split = TimeSplit()
    with split("updates"):
        time.sleep(0.02)
    with split("sampling"):
        time.sleep(0.01)
    metrics = split.metrics()
    assert metrics["time/updates_s"] >= 0.02 and metrics["time/sampling_s"] >= 0.01
    assert metrics["time/evaluation_s"] == 0.0
    fracs = sum(metrics[f"time/{name}_frac"] for name in TIME_SECTIONS) + metrics["time/other_frac"]
    assert math.isclose(fracs, 1.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match="unknown time section"):
        with split("coffee"):
            pass


def test_seed_configs_name_each_seed(monkeypatch):
    cfg = parse(monkeypatch, "main", "--num_seeds=3", "--seed=5", "--run_name=x")
    configs = setup.seed_configs(cfg)
    assert [(c.seed, c.run_name) for c in configs] == [(5, "x_sd5"), (6, "x_sd6"), (7, "x_sd7")]
    assert all(c.num_seeds == 3 for c in configs)
    one = parse(monkeypatch, "main", "--run_name=x")
    assert setup.seed_configs(one) == [one]
    unnamed = cfg.replace(run_name=None)
    assert [c.run_name for c in setup.seed_configs(unnamed)] == [None, None, None]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num_seeds=0"], "--num_seeds=0 must be >= 1"),
        (["--seed=4294967295", "--num_seeds=2"], "the last seed, 4294967296, is outside"),
        (["--updates_per_dispatch=0"], "--updates_per_dispatch=0 must be >= 1"),
        (["--offline_sampler=device"], "needs --updates_per_dispatch > 1"),  # k = 1 would silently ignore it
    ],
)
def test_bad_group_flags(monkeypatch, argv, message):
    with pytest.raises(cli.InputError, match=message):
        parse(monkeypatch, "main", *argv)


def test_collector_state_mid_episode_replays_exactly():
    """A state taken in the middle of an episode and of a chunk continues with identical transitions."""
    from envs.common import EpisodeMonitor
    from envs.ogbench import make_env

    def make():
        env = EpisodeMonitor(make_env("cube-single-play-singletask-task1-v0"))
        env.reset(seed=11)
        return env

    class Agent:  # noise-driven chunks of h = 3 actions
        def sample_actions(self, observations, rng):
            return jax.random.uniform(rng, (3 * 5,), minval=-1, maxval=1)

    def new_buffer():
        example = dict(observations=np.zeros(28, np.float32), actions=np.zeros(5, np.float32),
                       rewards=np.float32(0), terminals=np.float32(0), masks=np.float32(1),
                       next_observations=np.zeros(28, np.float32))  # fmt: skip
        return ReplayBuffer.create(example, size=200)

    agent = Agent()
    a = OnlineCollector(make(), 5, lambda r: r, jax.random.PRNGKey(0))
    buffer_a = new_buffer()
    for _ in range(37):
        a.step(agent, buffer_a)
    state = json.loads(json.dumps(a.state()))  # as it goes through state.json
    assert len(state["episode"]["actions"]) == 37 and len(state["episode"]["queue"]) == 2
    b = OnlineCollector(make(), 5, lambda r: r, jax.random.PRNGKey(99))
    b.env.reset(seed=12345)  # another generator state: restore must set it
    b.restore(state)
    buffer_b = new_buffer()
    for _ in range(30):
        a.step(agent, buffer_a)
        b.step(agent, buffer_b)
    for k in buffer_b:
        np.testing.assert_array_equal(buffer_a[k][37:67], buffer_b[k][:30])
    # A state whose observation does not match the replay is refused.
    state["episode"]["observation"][0] += 1e-3
    c = OnlineCollector(make(), 5, lambda r: r, jax.random.PRNGKey(0))
    with pytest.raises(RuntimeError, match="did not reproduce"):
        c.restore(state)


# ---------------------------------------------------------------- the drivers (slow)

TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--eval_episodes=2",
    "--buffer_size=2000",
    "--progress=False",
    "--horizon_length=3",
    "--start_training=2",
]
MAIN = ["--agent.actor_num_samples=4", "--agent.flow_steps=2"]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


def _run(script, save_dir, name, dataset_path, *extra, fault=None, expect=0, compiles=False):
    return run_driver(script, save_dir, name, dataset_path, [*TINY, *extra], fault=fault, expect=expect,
                      compiles=compiles)  # fmt: skip


def _rows(path):
    return csv_rows(path, drop_time=False)


def _numbers(rows, skip=("time", "episode.duration")):
    return [{k: float(v) for k, v in r.items() if v != "" and not k.startswith(skip)} for r in rows]


def _assert_close_rows(a, b, rtol, other_rtol=None):
    """Rows equal in keys; values within `rtol` (keys with `loss`: within `rtol` and the others within
    `other_rtol` when it is given: statistics of near-zero values such as `critic/q_max` amplify float noise)."""
    assert len(a) == len(b) and a
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            tol = rtol if other_rtol is None or "loss" in k else other_rtol
            assert math.isclose(x[k], y[k], rel_tol=tol, abs_tol=1e-6), (k, x[k], y[k])


@pytest.mark.slow
@pytest.mark.parametrize("script", ["main.py", "main_online.py"])
def test_each_seed_of_a_group_matches_its_single_seed_run(tmp_path, dataset_path, script):
    """`--num_seeds=2 --seed_batching=vmap` vs separate runs of seeds 3 and 4: losses of the first 100 steps
    within 1e-4 relative, evaluation success (and returns) equal, and flags.json as a single-seed run's."""
    extra = [*MAIN, "--offline_steps=100", "--online_steps=60"] if script == "main.py" else ["--online_steps=120"]
    extra += ["--log_interval=1", "--eval_interval=100"]  # evaluations at 100 and at the end
    save = str(tmp_path)
    for seed in (3, 4):
        _run(script, save, f"single{seed}", dataset_path, *extra, f"--seed={seed}")
    _, result = _run(script, save, "group", dataset_path, *extra, "--seed=3", "--num_seeds=2", "--seed_batching=vmap",
                     compiles=True)  # fmt: skip
    assert assert_warm_compiles(result.stderr) >= 100  # a log row at every step: nothing compiles after the warm-up
    # Each seed's evaluation line names its seed.
    assert "step 100: eval success" in result.stderr and "(seed 3)" in result.stderr and "(seed 4)" in result.stderr
    group_dir = os.path.join(save, "g")
    for seed in (3, 4):
        single, member = os.path.join(group_dir, f"single{seed}"), os.path.join(group_dir, f"group_sd{seed}")
        losses = "offline_agent.csv" if script == "main.py" else "online_agent.csv"
        _assert_close_rows(_numbers(_rows(os.path.join(single, losses)))[:100],
                           _numbers(_rows(os.path.join(member, losses)))[:100], rtol=1e-4, other_rtol=1e-2)  # fmt: skip
        evals_single, evals_member = (
            _numbers(_rows(os.path.join(single, "eval.csv"))),
            _numbers(_rows(os.path.join(member, "eval.csv"))),
        )
        assert [r["success"] for r in evals_single] == [r["success"] for r in evals_member]
        _assert_close_rows(evals_single, evals_member, rtol=1e-4)
        with open(os.path.join(single, "flags.json")) as f:
            flags_single = json.load(f)
        with open(os.path.join(member, "flags.json")) as f:
            flags_member = json.load(f)
        assert flags_member["flags"]["seed"] == seed
        assert flags_member["seed_group"]["run_names"] == ["group_sd3", "group_sd4"]
        ignore = ("run_name", "num_seeds", "seed_batching")
        assert {k: v for k, v in flags_single["flags"].items() if k not in ignore} == {
            k: v for k, v in flags_member["flags"].items() if k not in ignore
        }
        assert os.path.isfile(os.path.join(member, "DONE.json"))
    # --seed_batching=map: each seed is its single-seed run, row for row and bit for bit (both drivers).
    _, mapped = _run(script, save, "mapped", dataset_path, *extra, "--seed=3", "--num_seeds=2", "--seed_batching=map",
                     compiles=True)  # fmt: skip
    assert assert_warm_compiles(mapped.stderr) >= 100
    final = 160 if script == "main.py" else 120
    for seed in (3, 4):
        assert_same_run(os.path.join(group_dir, f"single{seed}"), os.path.join(group_dir, f"mapped_sd{seed}"), final)


DEVICE_VMAP = ["--offline_sampler=device", "--seed_batching=vmap"]  # what a GPU runs


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_at, extra, final",
    [
        ("online:100", ["--online_steps=250"], 290),  # mid-episode in the online phase (episodes are 200 steps)
        # between two dispatches of the device sampler (sizes 3, 1 and 2: --state_interval=3, --log_interval=10)
        ("offline:30", ["--online_steps=0", "--updates_per_dispatch=10", *DEVICE_VMAP], 40),
    ],
)
def test_killed_group_resumes_exactly(tmp_path, dataset_path, kill_at, extra, final):
    """Also: none of the three processes compiles after its warm-up (logs, run states, evaluations, the
    dispatch sizes), and the resumed one compiles nothing the fresh one did not (`assert_warm_compiles`)."""
    args = [*MAIN, "--offline_steps=40", "--log_interval=10", "--eval_interval=100", "--state_interval=3",
            "--num_seeds=2", "--donate_agent=true", *extra]  # fmt: skip
    save = str(tmp_path)
    _, ref = _run("main.py", save, "ref", dataset_path, *args, compiles=True)
    _, cut = _run("main.py", save, "cut", dataset_path, *args, fault=f"kill@{kill_at}", expect=-9, compiles=True)
    group_dir = os.path.join(save, "g")
    assert resume.state_steps(os.path.join(group_dir, "cut_sd0")) == resume.state_steps(
        os.path.join(group_dir, "cut_sd1")
    )
    _, resumed = _run("main.py", save, "cut", dataset_path, *args, "--resume", compiles=True)
    assert assert_warm_compiles(ref.stderr) >= 10 and assert_warm_compiles(cut.stderr) >= 5
    assert_warm_compiles(resumed.stderr, fresh=ref.stderr)
    for seed in (0, 1):
        assert_same_run(os.path.join(group_dir, f"ref_sd{seed}"), os.path.join(group_dir, f"cut_sd{seed}"), final)
        # flags.json: what made the run, and each phase's speed from the process that finished it (a phase done
        # before the kill keeps the first process's entry through the resume).
        with open(os.path.join(group_dir, f"ref_sd{seed}", "flags.json")) as f:
            ref_record = json.load(f)
        with open(os.path.join(group_dir, f"cut_sd{seed}", "flags.json")) as f:
            cut_record = json.load(f)
        assert cut_record["made_by"]["versions"]["jax"] == jax.__version__
        phases = {"offline": 40, "online": final - 40} if final > 40 else {"offline": 40}
        for record in (ref_record, cut_record):
            speed = record["speed"]
            assert {p: e["to_step"] for p, e in speed.items()} == phases
            assert all(e["steps_per_second"] > 0 and e["seconds"] > 0 for e in speed.values())
        assert all(e["from_step"] == 0 for e in ref_record["speed"].values())
        resumed_phase = kill_at.split(":")[0]  # the one the resumed process finished from a run state
        assert 0 < cut_record["speed"][resumed_phase]["from_step"] <= int(kill_at.split(":")[1])
        assert all(e["from_step"] == 0 for p, e in cut_record["speed"].items() if p != resumed_phase)


@pytest.mark.slow
def test_offline_dispatch_samplers(tmp_path, dataset_path):
    """host sampler with k = 3 equals the one-step loop exactly; the device sampler gives the same run for k = 4
    and k = 10; a resume with the other sampler is refused. With k = 3 and 4 the dispatches before a log row
    are shorter (2 and 1 steps): they compile nothing once the first dispatch has."""
    args = [*MAIN, "--offline_steps=40", "--online_steps=0", "--log_interval=5", "--eval_interval=0"]
    save = str(tmp_path)
    _run("main.py", save, "k1", dataset_path, *args)
    _, host = _run("main.py", save, "host3", dataset_path, *args, "--updates_per_dispatch=3", "--offline_sampler=host",
                   compiles=True)  # fmt: skip
    _, device = _run("main.py", save, "dev4", dataset_path, *args, "--updates_per_dispatch=4",
                     "--offline_sampler=device", compiles=True)  # fmt: skip
    _run("main.py", save, "dev10", dataset_path, *args, "--updates_per_dispatch=10")  # auto: device (it fits)
    assert assert_warm_compiles(host.stderr, warm_steps=1) >= 10 and assert_warm_compiles(device.stderr, warm_steps=1)
    g = os.path.join(save, "g")
    assert_same_run(os.path.join(g, "k1"), os.path.join(g, "host3"), 40)
    assert_same_run(os.path.join(g, "dev4"), os.path.join(g, "dev10"), 40)
    assert _rows(os.path.join(g, "k1", "offline_agent.csv")) != _rows(os.path.join(g, "dev4", "offline_agent.csv"))
    # Every row carries the time split.
    row = _rows(os.path.join(g, "dev10", "offline_agent.csv"))[-1]
    assert {f"time/{s}_frac" for s in TIME_SECTIONS} <= row.keys()
    # A device-sampled offline phase cannot be resumed on the host sampler.
    _run("main.py", save, "mix", dataset_path, *args, "--updates_per_dispatch=10", "--offline_sampler=device",
         "--state_interval=10", fault="kill@offline:20", expect=-9)  # fmt: skip
    _run("main.py", save, "mix", dataset_path, *args, "--resume", expect=2)
