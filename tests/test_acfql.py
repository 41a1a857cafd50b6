"""ACFQL agent: gradient routing, the TD target, best-of-N, configuration, scan updates, a toy bandit.

Tiny networks on CPU; every test asserts a value that a wrong implementation would get wrong.
"""

import ast
import inspect
import textwrap

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
import agents.acfql as acfql
import agents.common as common
import utils.flax_utils as flax_utils
from agents.acfql import ACFQLAgent, get_config
from utils import seeding

OB_DIM, ACTION_DIM, BATCH = 6, 2, 8


def make_config(**overrides):
    config = get_config()
    # 48 wide: XLA's CPU compiler (jaxlib 0.6.0) takes minutes on the update of 32-wide MLPs and seconds on
    # 16, 48 or 256 (docs/benchmarks.md section 9).
    config.actor_hidden_dims = (48, 48)
    config.value_hidden_dims = (48, 48)
    config.actor_num_samples = 6
    config.flow_steps = 3
    config.horizon_length = 5
    config.alpha = 3.0
    for key, value in overrides.items():
        config[key] = value
    return config


_agents = {}


def make_agent(seed=0, ob_shape=(OB_DIM,), **overrides):
    """A tiny agent; agents are immutable, so equal requests share one (and its compiled functions)."""
    config = make_config(**overrides)
    key = (seed, ob_shape, tuple(sorted(config.to_dict().items())))
    if key not in _agents:
        ex_obs = np.zeros(ob_shape, np.float32)
        _agents[key] = ACFQLAgent.create(seed, ex_obs, np.zeros(ACTION_DIM, np.float32), config)
    return _agents[key]


def make_batch(seed, h, ob_shape=(OB_DIM,), batch_size=BATCH):
    """A batch with the sample_sequence layout."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(batch_size, *ob_shape)).astype(np.float32)
    next_obs = rng.normal(size=(batch_size, h, *ob_shape)).astype(np.float32)
    return dict(
        observations=obs,
        actions=rng.uniform(-1, 1, (batch_size, h, ACTION_DIM)).astype(np.float32),
        next_observations=next_obs,
        rewards=np.cumsum(rng.normal(size=(batch_size, h)), axis=1).astype(np.float32),
        masks=np.ones((batch_size, h), np.float32),
        valid=np.ones((batch_size, h), np.float32),
    )


def with_params(agent, name, fn):
    params = dict(agent.network.params)
    params[name] = jax.tree_util.tree_map(fn, params[name])
    return agent.replace(network=agent.network.replace(params=params))


def all_zero(tree):
    return all(np.all(np.asarray(x) == 0) for x in jax.tree_util.tree_leaves(tree))


@pytest.fixture(scope="module")
def distill_agent():
    return make_agent(actor_type="distill-ddpg")


# ---------------------------------------------------------------- gradient routing


@pytest.mark.parametrize("actor_type", ["distill-ddpg", "best-of-n"])
def test_gradient_isolation(actor_type):
    agent = make_agent(actor_type=actor_type)
    batch, rng = make_batch(0, 5), jax.random.PRNGKey(1)
    suffixes = [""]

    def terms(params):
        actor_loss, info = agent.actor_loss(batch, params, rng)
        distill_and_q = agent.config["alpha"] * info["actor/distill_loss"] + info["actor/q_loss"]
        critic_loss = agent.critic_loss(batch, params, rng)[0]
        return jnp.stack([distill_and_q, actor_loss, info["actor/bc_flow_loss"], critic_loss])

    # One reverse pass per term (rows of the Jacobian), compiled once.
    jacobian = jax.jit(jax.jacrev(terms))(agent.network.params)
    distill_and_q, actor, bc, critic = (jax.tree_util.tree_map(lambda j, i=i: j[i], jacobian) for i in range(4))

    def parts(name):
        return [f"modules_{name}{s}" for s in suffixes]

    for name in parts("actor_bc_flow"):  # the distillation target and the Q term do not train the flow
        assert all_zero(distill_and_q[name]), name
        assert not all_zero(bc[name]) and not all_zero(actor[name]), name
    for name in parts("critic") + parts("target_critic"):  # the actor's Q term does not train critics
        assert all_zero(actor[name]), name
    for name in parts("target_critic") + parts("actor_bc_flow"):  # the TD target is a constant
        assert all_zero(critic[name]), name
    for name in parts("critic"):
        assert not all_zero(critic[name]), name
    if actor_type == "distill-ddpg":
        for name in parts("actor_onestep_flow"):
            assert all_zero(bc[name]), name
            assert not all_zero(distill_and_q[name]), name
    else:
        assert not any("onestep" in k for k in agent.network.params)


# ---------------------------------------------------------------- critic target


@pytest.mark.parametrize(
    "h, chunking, actor_type, q_agg, num_qs",
    [
        (1, True, "best-of-n", "mean", 2),
        (5, True, "best-of-n", "mean", 2),
        (5, False, "best-of-n", "mean", 2),
        (5, True, "distill-ddpg", "mean", 2),
        (3, True, "best-of-n", "min", 3),
        (2, True, "distill-ddpg", "mean", 1),
    ],
)
def test_td_target_by_hand(h, chunking, actor_type, q_agg, num_qs):
    agent = make_agent(horizon_length=h, action_chunking=chunking, actor_type=actor_type, q_agg=q_agg, num_qs=num_qs)
    agent = with_params(agent, "modules_target_critic", lambda x: 1.5 * x + 0.01)  # target != critic
    batch = make_batch(1, h)
    batch["masks"][0, -1] = 0.0  # row 0 ends inside the window: no bootstrap
    batch["valid"][1, -1] = 0.0  # row 1 runs past a trajectory end: left out of the loss
    rng = jax.random.PRNGKey(3)
    critic_loss = jax.jit(agent.critic_loss)
    loss, info = critic_loss(batch, agent.network.params, rng)

    next_obs = batch["next_observations"][:, -1]  # (B, ob)
    next_actions = agent.sample_actions(next_obs, rng)  # the acting procedure, same rng
    next_qs = agent.network.select("target_critic")(next_obs, next_actions).reshape(num_qs, BATCH)
    next_q = next_qs.min(axis=0) if q_agg == "min" else next_qs.mean(axis=0)
    target = batch["rewards"][:, -1] + 0.99**h * batch["masks"][:, -1] * next_q
    actions = batch["actions"].reshape(BATCH, -1) if chunking else batch["actions"][:, 0]
    q = agent.network.select("critic")(batch["observations"], actions)  # (K, B)
    expected = np.mean(batch["valid"][:, -1] * (q - target) ** 2)
    assert next_actions.shape == (BATCH, ACTION_DIM * (h if chunking else 1))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(info["critic/target_q_mean"], target.mean(), rtol=1e-5, atol=1e-6)

    changed = {k: v.copy() for k, v in batch.items()}
    changed["next_observations"][0] += 3.0  # masked bootstrap
    changed["rewards"][1] += 100.0  # invalid window
    changed["next_observations"][1] -= 3.0
    np.testing.assert_allclose(critic_loss(changed, agent.network.params, rng)[0], loss, rtol=1e-6)
    changed["rewards"][2] += 1.0  # a valid row does count
    assert abs(float(critic_loss(changed, agent.network.params, rng)[0]) - float(loss)) > 1e-3


# ---------------------------------------------------------------- best-of-N


def test_best_of_n_picks_highest_mean_q():
    ob_shape = (OB_DIM,)
    agent = make_agent()
    n, action_size = agent.config["actor_num_samples"], 5 * ACTION_DIM
    obs = make_batch(2, 5, ob_shape)["observations"]
    rng = jax.random.PRNGKey(7)

    def by_hand(obs, noise_shape):
        noises = jax.random.normal(rng, noise_shape)  # (*B, N, A)
        reps = jnp.repeat(jnp.expand_dims(obs, obs.ndim - len(ob_shape)), n, axis=obs.ndim - len(ob_shape))
        candidates = agent.compute_flow_actions(reps, noises)  # (*B, N, A)
        q = agent.network.select("critic")(reps, candidates).mean(axis=0)  # (*B, N)
        top2 = np.sort(np.asarray(q), axis=-1)[..., -2:]
        assert np.all(top2[..., 1] - top2[..., 0] > 1e-5)  # the argmax is unambiguous
        best = jnp.argmax(q, axis=-1)
        return jnp.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :], candidates

    got = agent.sample_actions(obs, rng)
    expected, candidates = by_hand(obs, (BATCH, n, action_size))
    assert got.shape == (BATCH, action_size)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.all(np.abs(got) <= 1.0)
    assert not np.allclose(candidates[:, 0], candidates[:, 1])  # candidates really differ

    single = agent.sample_actions(obs[0], rng)  # no batch axis (the driver's call)
    assert single.shape == (action_size,)
    np.testing.assert_allclose(single, by_hand(obs[0], (n, action_size))[0], atol=1e-5)


def test_sample_actions_shapes_without_chunking(distill_agent):
    agent = make_agent(action_chunking=False)
    for a in (agent, distill_agent):
        per_step = ACTION_DIM if a is agent else 5 * ACTION_DIM
        out = a.sample_actions(np.full((2, 3, OB_DIM), 5.0, np.float32), jax.random.PRNGKey(0))
        assert out.shape == (2, 3, per_step)
        assert np.all(np.abs(out) <= 1.0)


# ---------------------------------------------------------------- actor loss pieces


def test_normalize_q_loss_scales_the_q_term(distill_agent):
    plain = distill_agent
    normalized = plain.replace(config=plain.config.copy({"normalize_q_loss": True}))
    batch, rng = make_batch(3, 5), jax.random.PRNGKey(4)
    _, info_plain = plain.actor_loss(batch, plain.network.params, rng)
    _, info_norm = normalized.actor_loss(batch, plain.network.params, rng)

    _, _, z_rng = jax.random.split(rng, 3)  # the actor loss's noise for mu(s, z)
    noises = jax.random.normal(z_rng, (BATCH, 5 * ACTION_DIM))
    mu = plain.network.select("actor_onestep_flow")(batch["observations"], noises)
    q = plain.network.select("critic")(batch["observations"], jnp.clip(mu, -1, 1)).mean(axis=0)  # (B,)
    mean_abs_q = float(jnp.abs(q).mean())
    assert abs(mean_abs_q - 1.0) > 0.05  # the scale is not trivially one

    np.testing.assert_allclose(info_plain["actor/q_loss"], -q.mean(), rtol=1e-5)
    np.testing.assert_allclose(info_norm["actor/q_loss"], info_plain["actor/q_loss"] / mean_abs_q, rtol=1e-5)
    for key in ("actor/bc_flow_loss", "actor/distill_loss"):
        np.testing.assert_allclose(info_norm[key], info_plain[key], rtol=1e-6)

    def q_grad(agent):
        fn = lambda p: agent.actor_loss(batch, p, rng)[1]["actor/q_loss"]
        return jax.jit(jax.grad(fn))(plain.network.params)["modules_actor_onestep_flow"]

    jax.tree_util.tree_map(  # the normaliser is a constant: the gradient scales by the same 1/mean|Q|
        lambda g, n: np.testing.assert_allclose(n, g / mean_abs_q, rtol=1e-4, atol=1e-7),
        q_grad(plain),
        q_grad(normalized),
    )


# ---------------------------------------------------------------- updates


@pytest.mark.parametrize("actor_type", ["best-of-n", "distill-ddpg"])
def test_batch_update_equals_sequential_updates(actor_type):
    agent = make_agent(actor_type=actor_type, weight_decay=0.1 if actor_type == "best-of-n" else 0.0)
    batches = [make_batch(10 + i, 5) for i in range(3)]
    sequential, infos = agent, []
    for batch in batches:
        sequential, info = sequential.update(batch)
        infos.append(info)
    stacked = jax.tree_util.tree_map(lambda *x: np.stack(x), *batches)
    scanned, scan_info = agent.batch_update(stacked)

    assert int(scanned.network.step) == int(agent.network.step) + 3
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), sequential, scanned)
    for key in ("critic/critic_loss", "actor/actor_loss", "actor/bc_flow_loss"):
        np.testing.assert_allclose(scan_info[key], np.mean([i[key] for i in infos]), rtol=1e-5)
    assert not np.allclose(
        agent.network.params["modules_critic"]["value_net"]["Dense_0"]["kernel"],
        scanned.network.params["modules_critic"]["value_net"]["Dense_0"]["kernel"],
    )


def test_update_moves_target_by_polyak_toward_the_pre_step_critic():
    agent = make_agent(weight_decay=0.1)  # AdamW: the Polyak step must hold on this path too
    agent = with_params(agent, "modules_target_critic", lambda x: x - 0.3)
    old = agent.network.params
    new, _ = agent.update(make_batch(5, 5))
    tau = agent.config["tau"]
    expected = jax.tree_util.tree_map(
        lambda c, t: tau * c + (1 - tau) * t, old["modules_critic"], old["modules_target_critic"]
    )
    # Target moves toward the pre-step critic, as in the reference (not toward the updated critic).
    jax.tree_util.tree_map(
        lambda e, g: np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7),
        expected,
        new.network.params["modules_target_critic"],
    )
    assert not all_zero(
        jax.tree_util.tree_map(lambda a, b: a - b, old["modules_critic"], new.network.params["modules_critic"])
    )


def test_weight_decay_skips_the_target_critic():
    # After update() the Polyak step overwrites the target, so the decay shows only in the optimizer step
    # itself: with zero gradients Adam moves nothing and AdamW multiplies by (1 - lr * weight_decay). The
    # target critic is outside the optimizer (it takes gradients for the trainable entries only).
    agent = make_agent(weight_decay=0.1)
    params = agent.network.params
    trainable, targets = flax_utils.split_targets(params)
    assert list(targets) == ["modules_target_critic"]
    stepped = agent.network.apply_gradients(jax.tree_util.tree_map(jnp.zeros_like, trainable)).params
    factor = 1 - agent.config["lr"] * agent.config["weight_decay"]
    for name in params:
        scale = 1.0 if name == "modules_target_critic" else factor
        jax.tree_util.tree_map(
            lambda old, new, s=scale: np.testing.assert_allclose(new, s * old, rtol=1e-6), params[name], stepped[name]
        )


# ---------------------------------------------------------------- configuration


def test_create_leaves_config_unchanged_and_fills_a_copy():
    config = make_config(actor_type="best-of-n")
    before = config.to_dict()
    agent = ACFQLAgent.create(0, np.zeros((4, OB_DIM)), np.zeros((4, ACTION_DIM)), config)  # batched examples
    assert config.to_dict() == before and config.ob_dims is None and config.action_dim is None
    assert agent.config["ob_dims"] == (OB_DIM,) and agent.config["action_dim"] == ACTION_DIM
    assert agents.get("acfql").agent_class is ACFQLAgent

    # best-of-n builds no one-step actor; Adam holds two moments per trainable parameter and a step count,
    # none for the target critic, which only moves by Polyak averaging.
    params = agent.network.params
    assert sorted(params) == ["modules_actor_bc_flow", "modules_critic", "modules_target_critic"]
    size = lambda tree: sum(np.size(x) for x in jax.tree_util.tree_leaves(tree))
    trainable = size(params["modules_actor_bc_flow"]) + size(params["modules_critic"])
    assert size(agent.network.opt_state) == 2 * trainable + 1


def config_keys_read(source):
    """String keys read (not written) as `config[...]`, `cfg[...]`, `<x>.config[...]` or `config.get(...)`.

    Assignment targets (`config["ob_dims"] = ...`, `config["a"], config["b"] = ...`) are stores in the
    syntax tree and do not count; f-string fields do.
    """

    def is_config(node):
        return (isinstance(node, ast.Name) and node.id in ("config", "cfg")) or (
            isinstance(node, ast.Attribute) and node.attr == "config"
        )

    keys = set()
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and is_config(node.value)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            keys.add(node.slice.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_config(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(node.args[0].value)
    return keys


def test_config_keys_read_counts_reads_only():
    source = """
def f(config, cfg, agent):
    config["written"] = 1
    config["tuple_a"], cfg["tuple_b"] = 1, 2
    cfg["augmented"] += 1
    x = config["plain"] + agent.config["attribute"]
    if cfg["compared"] == 2:
        print(f"{config['in_fstring']}", config.get("got"), other["not_config"])
"""
    assert config_keys_read(source) == {"plain", "attribute", "compared", "in_fstring", "got"}


def test_every_config_key_is_read():
    # The agent file and the plumbing it shares with ACRLPD (policy_steps, policy_actions, fill_shapes).
    sources = [inspect.getsource(acfql), inspect.getsource(common)]
    read = set().union(*(config_keys_read(source) for source in sources))
    driver_keys = {"agent_name", "batch_size"}  # read by main.py / main_online.py
    unread = sorted(set(get_config().keys()) - driver_keys - read)
    assert not unread, f"config keys {unread} are never read"
    assert read <= set(get_config().keys()), sorted(read - set(get_config().keys()))  # no stale names


# Bad values beyond the wrong kinds (tests/test_agents.py tries one of those for every key of every agent);
# (key, value) cases. ACFQLAgent.create gets a plain dict (a ConfigDict would refuse some of these types).
NAN, INF = float("nan"), float("inf")
BAD_VALUES = {
    "agent_name": ["acrlpd", None],
    "lr": [0.0, -1e-3, NAN, "3e-4"],
    "batch_size": [0, True, 2.5],
    "actor_hidden_dims": [(), (32, 0), (32, True), "32"],
    "value_hidden_dims": [(), (32, -1), (32, 2.0)],
    "layer_norm": [1, "True", None],
    "actor_layer_norm": [0],
    "discount": [0.0, 1.5, NAN, True],
    "tau": [0.0, 1.01, -0.1],
    "q_agg": ["max", None],
    "alpha": [-1.0, INF, NAN, False],
    "num_qs": [0, True, 2.0],
    "flow_steps": [0, True],
    "normalize_q_loss": [0],
    "horizon_length": [None, 0, True, 5.0],
    "action_chunking": [None, 1],
    "actor_type": ["sac"],
    "actor_num_samples": [0, False],
    "use_fourier_features": ["False"],
    "fourier_feature_dim": [3, 0, True],
    "weight_decay": [-0.1, NAN],
    "ob_dims": [(0,), (6.0,), (OB_DIM + 1,)],  # the last disagrees with the data
    "action_dim": [0, True, ACTION_DIM + 5],  # the last disagrees with the data
}


@pytest.mark.parametrize(
    "key, value",
    [(k, v) for k, values in BAD_VALUES.items() for v in values],
    ids=[f"{k}={v!r}" for k, values in BAD_VALUES.items() for v in values],
)
def test_bad_config_raises(key, value):
    config = make_config().to_dict()
    config[key] = value
    with pytest.raises(ValueError, match=rf"--agent\.{key}\b"):
        ACFQLAgent.create(0, np.zeros(OB_DIM), np.zeros(ACTION_DIM), config)


def test_unknown_config_key_raises():
    config = make_config().to_dict()
    config["num_q"] = 2
    with pytest.raises(ValueError, match="num_q"):
        ACFQLAgent.create(0, np.zeros(OB_DIM), np.zeros(ACTION_DIM), config)


def test_create_seeds():
    config = make_config()

    def critic_kernel(seed):
        agent = ACFQLAgent.create(seed, np.zeros(OB_DIM), np.zeros(ACTION_DIM), config)
        return np.asarray(agent.network.params["modules_critic"]["value_net"]["Dense_0"]["kernel"])

    # An int seed is PRNGKey(seed); a key (the driver's seeding.jax_key(seed, 'agent')) is used as it is.
    np.testing.assert_array_equal(critic_kernel(3), critic_kernel(jax.random.PRNGKey(3)))
    agent_key = seeding.jax_key(3, "agent")
    np.testing.assert_array_equal(critic_kernel(agent_key), critic_kernel(seeding.jax_key(3, "agent")))
    assert not np.array_equal(critic_kernel(agent_key), critic_kernel(3))
    assert not np.array_equal(critic_kernel(agent_key), critic_kernel(seeding.jax_key(4, "agent")))
    assert not np.array_equal(critic_kernel(0), critic_kernel(1))  # two int seeds, two networks


def test_create_rejects_an_action_dim_that_disagrees_with_the_data():
    config = make_config(action_dim=7)
    with pytest.raises(ValueError, match="action_dim"):
        ACFQLAgent.create(0, np.zeros(OB_DIM), np.zeros(ACTION_DIM), config)
    assert ACFQLAgent.create(0, np.zeros(OB_DIM), np.zeros(7), config).config["action_dim"] == 7


@pytest.mark.parametrize("steps", [6, 4])
def test_windows_longer_than_the_chunk_raise(steps):
    batch = make_batch(0, steps)  # windows of 6 (4) steps for h = 5: rewards[:, -1] would be the wrong sum
    with pytest.raises(ValueError, match="horizon_length"):
        make_agent().update(batch)


# ---------------------------------------------------------------- toy chunked bandit


@pytest.mark.parametrize("actor_type", ["best-of-n", "distill-ddpg"])
def test_toy_chunked_bandit(actor_type):
    """One constant state, h=2, four data chunks; only (0.6, -0.6) pays 1 and every window ends (mask 0),
    so Q(chunk) = its reward. The critic must rank it first and the actor must choose it."""
    chunks = np.array([[-0.6, -0.6], [0.6, 0.6], [-0.6, 0.6], [0.6, -0.6]], np.float32)
    good = 3
    config = make_config(
        horizon_length=2,
        actor_type=actor_type,
        actor_hidden_dims=(64, 64),
        value_hidden_dims=(64, 64),
        lr=3e-3,
        flow_steps=5,
        actor_num_samples=16,
        alpha=0.5,
    )
    agent = ACFQLAgent.create(0, np.ones(1, np.float32), np.zeros(1, np.float32), config)
    data_rng = np.random.default_rng(0)

    def batches(updates, size=64):
        idx = data_rng.integers(0, 4, (updates, size))  # (U, B)
        reward = (idx == good).astype(np.float32)
        return dict(
            observations=np.ones((updates, size, 1), np.float32),
            actions=chunks[idx][..., None],  # (U, B, 2, 1)
            next_observations=np.ones((updates, size, 2, 1), np.float32),
            rewards=np.stack([np.zeros_like(reward), reward], axis=-1),  # reward at the chunk's end
            masks=np.broadcast_to(np.array([1.0, 0.0], np.float32), (updates, size, 2)).copy(),
            valid=np.ones((updates, size, 2), np.float32),
        )

    for _ in range(10):
        agent, _ = agent.batch_update(batches(50))

    q = np.asarray(agent.network.select("critic")(np.ones((4, 1), np.float32), chunks).mean(axis=0))
    assert abs(q[good] - 1.0) < 0.2 and np.all(np.abs(np.delete(q, good)) < 0.2), q
    acts = agent.sample_actions(np.ones((64, 1), np.float32), jax.random.PRNGKey(0))  # (64, 2)
    nearest = np.argmin(np.linalg.norm(np.asarray(acts)[:, None] - chunks, axis=-1), axis=-1)  # (64,)
    assert np.mean(nearest == good) >= 0.9, acts[:8]
    # The one-step actor may overshoot along the critic's extrapolation, never toward another chunk.
    assert np.all(np.mean(acts, axis=0) * np.sign(chunks[good]) > 0.4), acts[:8]


def test_config_is_static_and_hashable(distill_agent):
    assert isinstance(distill_agent.config, flax.core.FrozenDict)
    hash(distill_agent.config)  # jit needs a hashable static config
    assert not any(isinstance(x, str) for x in jax.tree_util.tree_leaves(distill_agent))
