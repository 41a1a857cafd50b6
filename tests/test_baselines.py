"""IFQL's chunked and n-step variants (no release exists), per-observation best-of-N, and scanned updates of the
IQL, ReBRAC and IFQL baselines. The release's one-step updates are guarded by tests/test_golden_baselines.py.

Tiny networks on CPU; every test asserts a value that a wrong implementation would get wrong.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.ifql as ifql
import agents.iql as iql
import agents.rebrac as rebrac

OB_DIM, ACTION_DIM, BATCH = 6, 2, 8
TINY = dict(actor_hidden_dims=(16, 16), value_hidden_dims=(16, 16))


def make_agent(module, seed=0, **overrides):
    config = module.get_config()
    for key, value in {**TINY, **overrides}.items():
        config[key] = value
    ex_obs, ex_act = np.zeros(OB_DIM, np.float32), np.zeros(ACTION_DIM, np.float32)
    return module.SPEC.agent_class.create(seed, ex_obs, ex_act, config)


def make_batch(seed, h, batch_size=BATCH):
    """A batch with the sample_sequence layout (docs/batch_contract.md)."""
    rng = np.random.default_rng(seed)
    return dict(
        observations=rng.normal(size=(batch_size, OB_DIM)).astype(np.float32),
        actions=rng.uniform(-1, 1, (batch_size, h, ACTION_DIM)).astype(np.float32),
        next_actions=rng.uniform(-1, 1, (batch_size, h, ACTION_DIM)).astype(np.float32),
        next_observations=rng.normal(size=(batch_size, h, OB_DIM)).astype(np.float32),
        rewards=np.cumsum(rng.normal(size=(batch_size, h)), axis=1).astype(np.float32),
        masks=np.ones((batch_size, h), np.float32),
        valid=np.ones((batch_size, h), np.float32),
    )


def with_params(agent, name, fn):
    params = dict(agent.network.params)
    params[name] = jax.tree_util.tree_map(fn, params[name])
    return agent.replace(network=agent.network.replace(params=params))


# ---------------------------------------------------------------- IFQL: the h-step target by hand


@pytest.mark.parametrize("h, chunking", [(1, True), (3, True), (3, False)])
def test_ifql_critic_and_value_losses_by_hand(h, chunking):
    agent = make_agent(ifql, horizon_length=h, action_chunking=chunking, num_samples=4, flow_steps=2)
    agent = with_params(agent, "modules_target_critic", lambda x: 1.5 * x + 0.01)  # target != critic
    batch = make_batch(1, h)
    batch["masks"][0, -1] = 0.0  # row 0 ends inside the window: no bootstrap
    batch["valid"][1, -1] = 0.0  # row 1 runs past a trajectory end: left out of the losses
    params = agent.network.params
    critic_loss, info = jax.jit(agent.critic_loss)(batch, params)
    value_loss, _ = jax.jit(agent.value_loss)(batch, params)

    select = agent.network.select
    next_v = select("value")(batch["next_observations"][:, -1])  # V(s_{t+h})
    target = batch["rewards"][:, -1] + 0.99**h * batch["masks"][:, -1] * next_v
    actions = batch["actions"].reshape(BATCH, -1) if chunking else batch["actions"][:, 0]
    q = select("critic")(batch["observations"], actions)  # (2, B)
    valid = batch["valid"][:, -1]
    np.testing.assert_allclose(critic_loss, np.mean(valid * ((q - target) ** 2).sum(0)), rtol=1e-5)
    np.testing.assert_allclose(info["critic/q_mean"], target.mean(), rtol=1e-5, atol=1e-6)
    diff = select("target_critic")(batch["observations"], actions).min(0) - select("value")(batch["observations"])
    expected_value = np.mean(valid * np.where(diff >= 0, 0.9, 0.1) * diff**2)
    np.testing.assert_allclose(value_loss, expected_value, rtol=1e-5)

    changed = {k: v.copy() for k, v in batch.items()}
    changed["next_observations"][0] += 3.0  # masked bootstrap
    changed["rewards"][1] += 100.0  # invalid window
    np.testing.assert_allclose(jax.jit(agent.critic_loss)(changed, params)[0], critic_loss, rtol=1e-6)
    changed["rewards"][2] += 1.0  # a valid row does count
    assert abs(float(jax.jit(agent.critic_loss)(changed, params)[0]) - float(critic_loss)) > 1e-3


def test_ifql_flow_loss_by_hand_with_valid_weights():
    # The chunked flow-matching loss: mean over (b, k, j) of valid[b, k] * squared velocity error.
    agent = make_agent(ifql, horizon_length=3, num_samples=4, flow_steps=2)
    batch = make_batch(2, 3)
    batch["valid"][0, 1:] = 0.0  # row 0's window leaves its trajectory after one step
    rng = jax.random.PRNGKey(5)
    loss = agent.actor_loss(batch, agent.network.params, rng)[0]

    x_rng, t_rng = jax.random.split(rng)
    x_1 = batch["actions"].reshape(BATCH, -1)
    x_0 = jax.random.normal(x_rng, x_1.shape)
    t = jax.random.uniform(t_rng, (BATCH, 1))
    pred = agent.network.select("actor_flow")(batch["observations"], (1 - t) * x_0 + t * x_1, t)
    error = ((pred - (x_1 - x_0)) ** 2).reshape(BATCH, 3, ACTION_DIM)
    np.testing.assert_allclose(loss, np.mean(error * batch["valid"][:, :, None]), rtol=1e-5)
    assert abs(float(loss) - float(np.mean(error))) > 1e-4  # the weights matter here


def test_ifql_chunking_switch_is_nothing_at_h1():
    # QC-IFQL at h = 1 is IFQL, value for value: the same parameters, infos and actions after two updates.
    agents_ = [
        make_agent(ifql, horizon_length=1, action_chunking=c, num_samples=4, flow_steps=2) for c in (True, False)
    ]
    infos = [[], []]
    for seed in (3, 4):
        batch = make_batch(seed, 1)
        for i, agent in enumerate(agents_):
            agents_[i], info = agent.update(batch)
            infos[i].append(info)
    jax.tree_util.tree_map(np.testing.assert_array_equal, agents_[0].network.params, agents_[1].network.params)
    for a, b in zip(*infos, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    obs, key = make_batch(9, 1)["observations"], jax.random.PRNGKey(1)
    np.testing.assert_array_equal(agents_[0].sample_actions(obs, key), agents_[1].sample_actions(obs, key))


# ---------------------------------------------------------------- IFQL: acting


@pytest.mark.parametrize("h, chunking", [(1, True), (3, True), (3, False)])
def test_ifql_best_of_n_is_chosen_per_observation(h, chunking, monkeypatch):
    """The release's `actions[argmax(q)]` is right for one observation; a batch must pick in each row.

    Eager (`jax.disable_jit`): each call must see the noise patched for it, not one cached in a compiled call.
    """
    with jax.disable_jit():
        _check_per_observation(h, chunking, monkeypatch)


def _check_per_observation(h, chunking, monkeypatch):
    agent = make_agent(ifql, horizon_length=h, action_chunking=chunking, num_samples=5, flow_steps=2)
    width = ACTION_DIM * (h if chunking else 1)
    obs = make_batch(3, h)["observations"][:4]  # (4, ob)
    noises = np.random.default_rng(0).normal(size=(4, 5, width)).astype(np.float32)
    monkeypatch.setattr(ifql.jax.random, "normal", lambda key, shape: jnp.asarray(noises).reshape(shape))
    batched = np.asarray(agent.sample_actions(obs, jax.random.PRNGKey(0)))  # (4, width)
    assert batched.shape == (4, width)

    for row in range(4):
        monkeypatch.setattr(ifql.jax.random, "normal", lambda key, shape, r=row: jnp.asarray(noises[r]))
        single = np.asarray(agent.sample_actions(obs[row], jax.random.PRNGKey(0)))  # (width,)
        np.testing.assert_allclose(batched[row], single, rtol=1e-6, atol=1e-6)
        # ... and it is the row's own best candidate by min_k Q_k.
        candidates = jnp.clip(_euler(agent, obs[row], noises[row]), -1, 1)
        q = agent.network.select("critic")(jnp.repeat(obs[row][None], 5, 0), candidates).min(0)
        np.testing.assert_allclose(single, candidates[int(jnp.argmax(q))], rtol=1e-5, atol=1e-6)
    # Leading batch axes of any rank: (2, 2, ob) gives the same rows.
    monkeypatch.setattr(ifql.jax.random, "normal", lambda key, shape: jnp.asarray(noises).reshape(shape))
    grid = np.asarray(agent.sample_actions(obs.reshape(2, 2, OB_DIM), jax.random.PRNGKey(0)))
    np.testing.assert_allclose(grid.reshape(4, width), batched, rtol=1e-6, atol=1e-6)


def _euler(agent, observation, noises):
    actions, steps = jnp.asarray(noises), agent.config["flow_steps"]
    repeated = jnp.repeat(observation[None], len(noises), 0)
    for i in range(steps):
        t = jnp.full((len(noises), 1), i / steps)
        actions = actions + agent.network.select("actor_flow")(repeated, actions, t) / steps
    return actions


# ---------------------------------------------------------------- scanned updates, ReBRAC's schedule


CASES = [
    (iql, dict(horizon_length=1)),
    (iql, dict(horizon_length=2, actor_loss="ddpgbc", const_std=False)),
    (rebrac, dict(horizon_length=1, alpha_actor=0.1, alpha_critic=0.05)),
    (ifql, dict(horizon_length=3, num_samples=4, flow_steps=2)),
]


@pytest.mark.parametrize("module, overrides", CASES, ids=[f"{m.__name__}-{i}" for i, (m, _) in enumerate(CASES)])
def test_batch_update_equals_sequential_updates(module, overrides):
    agent = make_agent(module, **overrides)
    h = overrides["horizon_length"]
    batches = [make_batch(10 + i, h) for i in range(3)]
    sequential, infos = agent, []
    for batch in batches:
        sequential, info = sequential.update(batch)
        infos.append(info)
    stacked = jax.tree_util.tree_map(lambda *x: np.stack(x), *batches)
    scanned, scan_info = agent.batch_update(stacked)
    assert int(scanned.network.step) == int(agent.network.step) + 3
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), sequential, scanned)
    np.testing.assert_allclose(
        scan_info["critic/critic_loss"], np.mean([i["critic/critic_loss"] for i in infos]), rtol=1e-5
    )


def test_a_vmapped_seed_group_of_rebrac_equals_separate_agents():
    """`--num_seeds=2 --seed_batching=vmap` (the GPU default; the driver runs of tests/test_baselines_workflow.py
    take `map`, the CPU's, which calls each seed's own `update`): the stacked agents' update gives each seed its
    own agent's, ReBRAC's actor and target steps included (they follow the step count, traced per seed here)."""
    import types

    from runner import seed_group

    module, overrides = CASES[2]  # the config of test_batch_update_equals_sequential_updates: compiled once
    assert module is rebrac
    singles = [make_agent(rebrac, seed=s, **overrides) for s in (0, 1)]
    cfg = types.SimpleNamespace(seed_batching="vmap")
    group = seed_group.SeedGroup([types.SimpleNamespace(agent=a, cfg=cfg) for a in singles])
    stacked, update = group.agent, group.update_fn()
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    for step in range(3):  # a critic-only, a full and a critic-only update
        batches = [make_batch(20 + 2 * step + s, 1) for s in (0, 1)]
        stacked, info = update(stacked, jax.tree_util.tree_map(lambda *x: np.stack(x), *batches))
        for s in (0, 1):
            singles[s], single_info = singles[s].update(batches[s])
            close(info["critic/critic_loss"][s], single_info["critic/critic_loss"])
            assert float(info["actor/full_update"][s]) == float(single_info["actor/full_update"]) == (step == 1)
    for s in (0, 1):
        mine = group.agent_for(stacked, s)
        assert int(mine.network.step) == 4
        jax.tree_util.tree_map(close, mine.network.params, singles[s].network.params)
    # The two seeds learned different agents (a group that ran one seed twice would pass the checks above).
    leaves = [jax.tree_util.tree_leaves(a.network.params) for a in singles]
    assert any(not np.allclose(a, b) for a, b in zip(*leaves, strict=True))


def test_rebrac_trains_actor_and_targets_on_every_second_update():
    agent = make_agent(rebrac, horizon_length=1, alpha_actor=0.1)
    params = [agent.network.params]
    flags, actor_losses = [], []
    for seed in range(4):
        agent, info = agent.update(make_batch(seed, 1))
        params.append(agent.network.params)
        flags.append(float(info["actor/full_update"]))
        actor_losses.append(float(info["actor/actor_loss"]))
    assert flags == [0.0, 1.0, 0.0, 1.0]
    # A critic-only update does not compute the actor's loss (the release's work): its actor info is NaN.
    assert np.isnan(actor_losses[0]) and np.isnan(actor_losses[2]) and np.isfinite(actor_losses[1::2]).all()

    def same(name, k):
        leaves = zip(*(jax.tree_util.tree_leaves(p[name]) for p in (params[k], params[k + 1])), strict=True)
        return all(np.array_equal(a, b) for a, b in leaves)

    for k in range(4):
        full = flags[k] == 1.0
        assert same("modules_target_actor", k) != full and same("modules_target_critic", k) != full
    assert same("modules_actor", 0)  # no gradient yet, and Adam's moments are zero: the actor stays
    assert not same("modules_actor", 1)


def test_sample_actions_shapes():
    obs = make_batch(0, 1)["observations"]
    for module, overrides, width in [
        (iql, dict(horizon_length=3), ACTION_DIM),
        (rebrac, dict(horizon_length=3), ACTION_DIM),
        (ifql, dict(horizon_length=3, num_samples=2, flow_steps=1), 3 * ACTION_DIM),
        (ifql, dict(horizon_length=3, action_chunking=False, num_samples=2, flow_steps=1), ACTION_DIM),
    ]:
        agent = make_agent(module, **overrides)
        actions = np.asarray(agent.sample_actions(obs, jax.random.PRNGKey(0)))
        assert actions.shape == (BATCH, width) and np.all(np.abs(actions) <= 1)
        assert np.asarray(agent.sample_actions(obs[0], jax.random.PRNGKey(0))).shape == (width,)
        assert module.SPEC.chunk_length(agent.config) == width // ACTION_DIM


def test_ifql_best_of_n_override(monkeypatch):
    # sample_actions(..., best_of_n=N) draws N candidates (--best_of_n_eval_values); without it, num_samples.
    agent = make_agent(ifql, horizon_length=2, num_samples=3, flow_steps=1)
    shapes = []
    normal = ifql.jax.random.normal
    monkeypatch.setattr(ifql.jax.random, "normal", lambda key, shape: shapes.append(shape) or normal(key, shape))
    obs = make_batch(0, 2)["observations"]
    with jax.disable_jit():
        agent.sample_actions(obs, jax.random.PRNGKey(0))
        actions = agent.sample_actions(obs, jax.random.PRNGKey(0), best_of_n=7)
    assert [tuple(s) for s in shapes] == [(BATCH, 3, 2 * ACTION_DIM), (BATCH, 7, 2 * ACTION_DIM)]
    assert actions.shape == (BATCH, 2 * ACTION_DIM)


# ---------------------------------------------------------------- the driver keeps h = 1 unless told


@pytest.mark.parametrize("agent_file", ["iql", "rebrac", "ifql"])
def test_driver_keeps_the_baselines_h1_unless_horizon_length_is_passed(monkeypatch, agent_file):
    """The paper's IQL, ReBRAC and IFQL are single-step: `--agent=agents/iql.py` alone must not train a 5-step one."""
    import os

    from runner.cli import InputError
    from tests.test_cli import ROOT, parse

    agent = f"--agent={os.path.join(ROOT, 'agents', agent_file + '.py')}"
    assert parse(monkeypatch, "main", agent).horizon_length == 1
    assert parse(monkeypatch, "main", agent, "--horizon_length=5").horizon_length == 5  # the flag wins
    assert parse(monkeypatch, "main", agent, "--agent.horizon_length=3").horizon_length == 3
    assert parse(monkeypatch, "main", agent, "--agent.horizon_length=3", "--horizon_length=3").horizon_length == 3
    with pytest.raises(InputError, match="--agent.horizon_length=3 disagrees with --horizon_length=5"):
        parse(monkeypatch, "main", agent, "--agent.horizon_length=3", "--horizon_length=5")


def test_placeholder_agents_still_take_the_flags_default(monkeypatch):
    from tests.test_cli import parse

    assert parse(monkeypatch, "main").horizon_length == 5  # ACFQL (placeholder): --horizon_length's default
    assert parse(monkeypatch, "main_online").horizon_length == 5  # ACRLPD
    assert parse(monkeypatch, "main", "--horizon_length=1").horizon_length == 1


# ---------------------------------------------------------------- the evaluation temperature (release: 0)


def test_iql_and_rebrac_temperature_scales_the_noise():
    """The FQL release evaluates at temperature 0 (the mean action) and collects online data at temperature 1:
    noise `t * n` with the same `n` for every `t`, clipped as the release clips."""
    obs, key = make_batch(0, 1)["observations"], jax.random.PRNGKey(3)
    iql_agent = make_agent(iql)
    mean = np.clip(np.asarray(iql_agent.network.select("actor")(obs).mode()), -1, 1)
    noise = np.asarray(jax.random.normal(key, mean.shape))  # const_std: std 1
    np.testing.assert_allclose(iql_agent.sample_actions(obs, key, temperature=0.0), mean, atol=1e-6)
    np.testing.assert_allclose(iql_agent.sample_actions(obs, key, temperature=0.5), np.clip(mean + 0.5 * noise, -1, 1),
                               atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(iql_agent.sample_actions(obs, key), iql_agent.sample_actions(obs, key, temperature=1))

    rebrac_agent = make_agent(rebrac, actor_noise=0.2, actor_noise_clip=0.3)
    mu = np.asarray(rebrac_agent.policy_actions(obs))
    np.testing.assert_allclose(rebrac_agent.sample_actions(obs, key, temperature=0.0), np.clip(mu, -1, 1), atol=1e-6)
    for t in (0.5, 1.0):
        want = np.clip(mu + np.clip(t * 0.2 * noise, -0.3, 0.3), -1, 1)
        np.testing.assert_allclose(rebrac_agent.sample_actions(obs, key, temperature=t), want, atol=1e-6)
    np.testing.assert_array_equal(rebrac_agent.sample_actions(obs, key), rebrac_agent.sample_actions(obs, key, 1.0))


def test_eval_temperature_flag(monkeypatch, capsys):
    import os

    from tests.test_cli import ROOT, error_of, parse

    agent = f"--agent={os.path.join(ROOT, 'agents', 'iql.py')}"
    assert parse(monkeypatch, "main", agent).eval_temperature == 0.0  # the release's evaluation
    assert parse(monkeypatch, "main", "--method=rebrac", "--eval_temperature=1").eval_temperature == 1.0
    assert "must be >= 0" in error_of(monkeypatch, capsys, "main", agent, "--eval_temperature=-0.5")
    err = error_of(monkeypatch, capsys, "main", "--eval_temperature=1")  # ACFQL has no temperature
    assert "sample_actions takes no temperature" in err


def test_evaluation_acts_with_eval_temperature(tmp_path):
    """`evaluate_and_log` passes `--eval_temperature` to an agent whose `sample_actions` takes one (and nothing
    to one that does not); the sequential and the lockstep evaluations pass the same value."""
    from types import SimpleNamespace

    from envs.ogbench import make_eval_env
    from evaluation import evaluate, make_eval_vector_env
    from log_utils import Logger
    from runner.seed_group import evaluate_and_log

    seen = []

    class Recording:
        config = {"horizon_length": 1}

        def sample_actions(self, observations, rng, temperature=1.0):
            seen.append(temperature)
            return np.zeros(5, np.float32)

    name = "cube-single-play-singletask-task1-v0"
    env = make_eval_env(name, max_episode_steps=4)
    cfg = SimpleNamespace(eval_episodes=1, video_episodes=0, video_frame_skip=3, seed=0, progress=False,
                          action_chunk_eval_sizes="0", best_of_n_eval_values="0", eval_temperature=0.25)  # fmt: skip
    evaluate_and_log(Recording(), env, cfg, Logger(str(tmp_path), None), step=1, action_dim=5, chunk=1)
    assert seen == [0.25] * 4

    config = iql.get_config()
    config.actor_hidden_dims, config.value_hidden_dims = (8,), (8,)
    ex_obs = np.zeros(env.observation_space.shape, np.float32)
    agent = iql.SPEC.agent_class.create(0, ex_obs, np.zeros(5, np.float32), config)
    vector_env = make_eval_vector_env(lambda: make_eval_env(name, max_episode_steps=4), 2, "sync")
    try:
        for t in (0.0, 1.0):
            one, trajs, _ = evaluate(agent, env, 2, seed=1, step=2, progress=False, temperature=t)
            batched, btrajs, _ = evaluate(agent, env, 2, seed=1, step=2, progress=False, vector_env=vector_env,
                                          temperature=t)  # fmt: skip
            for a, b in zip(trajs, btrajs, strict=True):
                # (within one float32 ulp: the lockstep call fuses `mean + t * std * n` its own way)
                np.testing.assert_allclose(np.stack(a["action"]), np.stack(b["action"]), rtol=0, atol=1e-6)
        zero = np.stack(evaluate(agent, env, 1, seed=1, step=2, progress=False, temperature=0.0)[1][0]["action"])
        noisy = np.stack(evaluate(agent, env, 1, seed=1, step=2, progress=False, temperature=1.0)[1][0]["action"])
        assert not np.allclose(zero, noisy)
    finally:
        vector_env.close()
