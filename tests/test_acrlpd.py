"""ACRLPD agent: temperature, target entropy, masked BC, gradient routing, TD target, scan, a chunked bandit.

Tiny networks on CPU. Compilations are the cost here, so the jitted tests share one config (the bandit's).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.acrlpd import ACRLPDAgent, get_config
from utils import seeding

GAMMA = 0.99


def make_config(h=3, **overrides):
    config = get_config()
    config.horizon_length = h
    # 48 wide: XLA's CPU compiler (jaxlib 0.6.0) takes minutes on the update of 32-wide MLPs and seconds on
    # 16, 48 or 256 (docs/benchmarks.md section 9).
    config.actor_hidden_dims = (48, 48)
    config.value_hidden_dims = (48, 48)
    config.num_qs = 3
    for key, value in overrides.items():
        config[key] = value
    return config


def random_batch(seed, batch_size=6, h=3, ob_dim=4, action_dim=2):
    """A chunk batch (docs/batch_contract.md) with some masks and valid flags at 0."""
    rng = np.random.default_rng(seed)
    masks = np.ones((batch_size, h), np.float32)
    masks[0, 1:] = 0.0  # a terminal inside the first window
    valid = np.ones((batch_size, h), np.float32)
    valid[0, 2:] = 0.0
    valid[1, 1:] = 0.0
    return dict(
        observations=rng.normal(size=(batch_size, ob_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (batch_size, h, action_dim)).astype(np.float32),
        next_observations=rng.normal(size=(batch_size, h, ob_dim)).astype(np.float32),
        rewards=rng.normal(size=(batch_size, h)).astype(np.float32),
        masks=masks,
        valid=valid,
    )


def create(config, batch, seed=0):
    return ACRLPDAgent.create(seed, batch["observations"], batch["actions"][:, 0], config)


# ---------------------------------------------------------------- the toy chunked bandit (shared config)

CANDIDATES = np.array([[0.5, -0.5], [-0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]], np.float32)  # chunks (h=2, A=1)
GOOD = 0  # the only chunk with reward 1


def bandit_config(**overrides):
    return make_config(h=2, lr=1e-3, bc_alpha=0.05, init_temp=0.1, **overrides)


def bandit_batches(seed, num_batches, batch_size=64):
    """Constant observation; each window is one candidate chunk, rewarded 1 iff it is GOOD; terminal after it."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(len(CANDIDATES), size=(num_batches, batch_size))
    reward = (idx == GOOD).astype(np.float32)
    return dict(
        observations=np.ones((num_batches, batch_size, 2), np.float32),
        actions=CANDIDATES[idx][..., None],  # (U, B, h=2, A=1)
        next_observations=np.ones((num_batches, batch_size, 2, 2), np.float32),
        rewards=np.stack([reward, reward], axis=-1),  # r_t = 1 (GOOD), r_{t+1} = 0: partial sums (1, 1)
        masks=np.broadcast_to(np.array([1.0, 0.0], np.float32), (num_batches, batch_size, 2)).copy(),
        valid=np.ones((num_batches, batch_size, 2), np.float32),
    )


def first(batches):
    return jax.tree_util.tree_map(lambda x: x[0], batches)


@pytest.fixture(scope="module")
def bandit_agent():
    return create(bandit_config(), first(bandit_batches(0, 1)))


# ---------------------------------------------------------------- temperature and target entropy


def test_target_entropy_is_half_the_negative_chunk_size():
    batch = random_batch(0, h=5, action_dim=5)
    assert create(make_config(h=5), batch).config["target_entropy"] == pytest.approx(-12.5)
    assert create(make_config(h=5, action_chunking=False), batch).config["target_entropy"] == pytest.approx(-2.5)
    assert create(make_config(h=5, target_entropy=3.0), batch).config["target_entropy"] == 3.0


def test_temperature_falls_above_target_entropy_and_rises_below(bandit_agent):
    batch = first(bandit_batches(1, 1))
    # Target -1 (= -0.5 * 2): a fresh tanh-Gaussian (std ~ 1) has entropy well above it.
    new_agent, info = bandit_agent.update(batch)
    assert info["actor/entropy"] > bandit_agent.config["target_entropy"]
    assert info["actor/alpha_loss"] > 0
    assert new_agent.network.select("temperature")() < bandit_agent.network.select("temperature")()

    low = create(bandit_config(target_entropy=100.0), batch)
    new_low, info = low.update(batch)
    assert info["actor/entropy"] < 100.0
    assert info["actor/alpha_loss"] < 0
    assert new_low.network.select("temperature")() > low.network.select("temperature")()


# ---------------------------------------------------------------- masked BC


def test_bc_term_ignores_chunk_steps_with_valid_zero():
    batch = random_batch(2)  # row 0: valid (1, 1, 0); row 1: valid (1, 0, 0)
    agent = create(make_config(bc_alpha=1.0), batch)
    rng = jax.random.PRNGKey(3)

    def bc_loss(actions):
        return float(agent.actor_loss({**batch, "actions": actions}, agent.network.params, rng)[1]["actor/bc_loss"])

    base = bc_loss(batch["actions"])
    invalid = batch["actions"].copy()
    invalid[0, 2] = -invalid[0, 2]
    invalid[1, 1:] = 0.9
    assert bc_loss(invalid) == base
    changed = batch["actions"].copy()
    changed[0, 1] = -changed[0, 1]
    assert abs(bc_loss(changed) - base) > 1e-3

    # Every step valid: the masked NLL is the whole-chunk -log pi(A_data | s) of the reference.
    all_valid = {**batch, "valid": np.ones_like(batch["valid"])}
    nll = agent.actor_loss(all_valid, agent.network.params, rng)[1]["actor/bc_nll"]
    dist = agent.network.select("actor")(batch["observations"])
    chunk = np.clip(batch["actions"].reshape(len(batch["actions"]), -1), -1 + 1e-5, 1 - 1e-5)
    np.testing.assert_allclose(nll, -np.mean(dist.log_prob(chunk)), rtol=1e-4)


# ---------------------------------------------------------------- gradient routing


def _norms(grads):
    return {
        name: float(sum(jnp.sum(jnp.abs(g)) for g in jax.tree_util.tree_leaves(sub))) for name, sub in grads.items()
    }


def test_each_loss_moves_only_its_own_module():
    batch = random_batch(4)
    config = make_config(bc_alpha=0.5, backup_entropy=True, num_min_qs=2, q_agg="min")
    agent = create(config, batch)
    params, rng = agent.network.params, jax.random.PRNGKey(5)

    critic = _norms(jax.grad(lambda p: agent.critic_loss(batch, p, rng)[0])(params))
    assert critic["modules_critic"] > 0
    assert critic["modules_actor"] == critic["modules_temperature"] == critic["modules_target_critic"] == 0.0

    actor = _norms(jax.grad(lambda p: agent.actor_loss(batch, p, rng)[0])(params))
    assert actor["modules_actor"] > 0
    assert actor["modules_critic"] == actor["modules_temperature"] == actor["modules_target_critic"] == 0.0

    temperature = _norms(jax.grad(lambda p: agent.temperature_loss(p, jnp.float32(0.3))[0])(params))
    assert temperature["modules_temperature"] > 0
    assert temperature["modules_critic"] == temperature["modules_actor"] == temperature["modules_target_critic"] == 0

    total = _norms(jax.grad(lambda p: agent.total_loss(batch, p, rng)[0])(params))
    assert total["modules_target_critic"] == 0.0


# ---------------------------------------------------------------- TD target by hand


def _perturbed_target(agent, seed):
    """The agent with target-critic parameters that differ from the critic's (as after some training)."""
    params = dict(agent.network.params)
    leaves, tree = jax.tree_util.tree_flatten(params["modules_target_critic"])
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    leaves = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    params["modules_target_critic"] = jax.tree_util.tree_unflatten(tree, leaves)
    return agent.replace(network=agent.network.replace(params=params))


def _hand_critic_loss(agent, batch, rng, aggregate):
    """critic_loss written out: the next chunk from the split rng, the target formula, the valid weighting."""
    cfg, h = agent.config, batch["rewards"].shape[1]
    sample_rng, _ = jax.random.split(rng)
    dist = agent.network.select("actor")(batch["next_observations"][:, -1])
    next_actions = dist.sample(seed=sample_rng)
    next_log_probs = np.asarray(dist.log_prob(next_actions))
    next_qs = np.asarray(agent.network.select("target_critic")(batch["next_observations"][:, -1], next_actions))
    target = batch["rewards"][:, -1] + GAMMA**h * batch["masks"][:, -1] * aggregate(next_qs)
    if cfg["backup_entropy"]:
        alpha = float(agent.network.select("temperature")())
        target = target - GAMMA**h * batch["masks"][:, -1] * alpha * next_log_probs
    actions = batch["actions"].reshape(len(target), -1) if cfg["action_chunking"] else batch["actions"][:, 0]
    q = np.asarray(agent.network.select("critic")(batch["observations"], actions))  # (K, B)
    return np.mean(batch["valid"][:, -1] * (q - target) ** 2)


@pytest.mark.parametrize(
    "overrides, aggregate",
    [
        (dict(q_agg="mean"), lambda qs: qs.mean(0)),
        (dict(q_agg="min"), lambda qs: qs.min(0)),
        (dict(q_agg="min", num_min_qs=3), lambda qs: qs.min(0)),  # the whole ensemble: deterministic
        (dict(q_agg="mean", backup_entropy=True, init_temp=0.3), lambda qs: qs.mean(0)),
        (dict(q_agg="mean", action_chunking=False), lambda qs: qs.mean(0)),
    ],
)
def test_td_target_matches_hand_computation(overrides, aggregate):
    batch = random_batch(6)
    agent = _perturbed_target(create(make_config(**overrides), batch), seed=7)
    rng = jax.random.PRNGKey(8)
    loss = agent.critic_loss(batch, agent.network.params, rng)[0]
    np.testing.assert_allclose(loss, _hand_critic_loss(agent, batch, rng, aggregate), rtol=1e-5)


def test_random_subset_of_one_member_uses_one_target_member():
    batch = random_batch(9)
    agent = _perturbed_target(create(make_config(q_agg="min", num_min_qs=1), batch), seed=10)
    rng = jax.random.PRNGKey(11)
    loss = agent.critic_loss(batch, agent.network.params, rng)[0]
    per_member = [_hand_critic_loss(agent, batch, rng, lambda qs, k=k: qs[k]) for k in range(3)]
    assert min(abs(loss - x) / x for x in per_member) < 1e-5
    assert max(per_member) - min(per_member) > 1e-3  # the members differ, so the subset was really one member


# ---------------------------------------------------------------- scan, sampling, the bandit


def test_batch_update_equals_sequential_updates(bandit_agent):
    batches = bandit_batches(12, 3)
    scanned, scanned_info = bandit_agent.batch_update(batches)
    agent, infos = bandit_agent, []
    for u in range(3):
        agent, info = agent.update(jax.tree_util.tree_map(lambda x, u=u: x[u], batches))
        infos.append(info)
    assert int(scanned.network.step) == int(agent.network.step) == 4
    np.testing.assert_array_equal(scanned.rng, agent.rng)
    for a, b in zip(
        jax.tree_util.tree_leaves(scanned.network.params), jax.tree_util.tree_leaves(agent.network.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in ("critic/critic_loss", "actor/actor_loss", "actor/alpha_loss"):
        np.testing.assert_allclose(scanned_info[key], np.mean([i[key] for i in infos]), rtol=1e-4, atol=1e-6)


def test_sample_actions_shapes_and_range(bandit_agent):
    rng = jax.random.PRNGKey(13)
    single = bandit_agent.sample_actions(np.ones(2, np.float32), rng)
    batched = bandit_agent.sample_actions(np.ones((5, 2), np.float32), rng)
    assert single.shape == (2,) and batched.shape == (5, 2)
    assert np.all(np.abs(batched) <= 1.0)


def test_chunked_bandit_learns_the_rewarding_chunk(bandit_agent):
    batches = bandit_batches(14, 3 * 150)
    agent = bandit_agent
    for i in range(150):  # 450 gradient steps in 150 calls of the shared (U=3) compiled scan
        agent, _ = agent.batch_update(jax.tree_util.tree_map(lambda x, i=i: x[3 * i : 3 * i + 3], batches))
    obs = np.ones((len(CANDIDATES), 2), np.float32)
    q = np.asarray(agent.network.select("critic")(obs, CANDIDATES)).mean(0)  # (4,)
    assert q[GOOD] > np.delete(q, GOOD).max() + 0.3, q
    mean_action = np.asarray(jnp.tanh(agent.network.select("actor")(obs[:1]).distribution.mode()))[0]  # (2,)
    distances = np.linalg.norm(CANDIDATES - mean_action, axis=-1)
    assert np.argmin(distances) == GOOD, (mean_action, distances)


# ---------------------------------------------------------------- config handling


def test_create_leaves_config_unchanged():
    config = make_config()
    before = config.to_dict()
    agent = create(config, random_batch(15))
    assert config.to_dict() == before
    assert config.target_entropy is None and config.action_dim is None
    assert agent.config["action_dim"] == 2 and agent.config["ob_dims"] == (4,)


NAN, INF = float("nan"), float("inf")
# A bad value for every key of get_config(): {key: [overrides, ...]}, each raising a ValueError that names key.
# ACRLPDAgent.create gets a plain dict (a ConfigDict would refuse some of these types before the agent could).
BAD_OVERRIDES = {
    "agent_name": [dict(agent_name="acfql")],
    "lr": [dict(lr=0.0), dict(lr=NAN), dict(lr="3e-4")],
    "batch_size": [dict(batch_size=0), dict(batch_size=True)],
    "actor_hidden_dims": [dict(actor_hidden_dims=()), dict(actor_hidden_dims=(32, 0))],
    "value_hidden_dims": [dict(value_hidden_dims=(32, True)), dict(value_hidden_dims="32")],
    "layer_norm": [dict(layer_norm=1)],
    "actor_layer_norm": [dict(actor_layer_norm="False")],
    "discount": [dict(discount=0.0), dict(discount=1.01), dict(discount=True)],
    "tau": [dict(tau=0.0), dict(tau=2.0)],
    "num_qs": [dict(num_qs=0), dict(num_qs=True), dict(num_qs=3.0)],
    "num_min_qs": [
        dict(q_agg="min", num_min_qs=4),
        dict(q_agg="min", num_min_qs=0),
        dict(q_agg="min", num_min_qs=True),
    ],
    "q_agg": [dict(num_min_qs=2), dict(q_agg="median")],  # the random-subset minimum needs q_agg='min'
    "backup_entropy": [dict(backup_entropy=1)],
    "init_temp": [dict(init_temp=0.0), dict(init_temp=-1.0), dict(init_temp=INF)],
    "target_entropy_multiplier": [dict(target_entropy_multiplier=-0.5), dict(target_entropy_multiplier=NAN)],
    "target_entropy": [dict(target_entropy=NAN), dict(target_entropy=-INF), dict(target_entropy="-3")],
    "bc_alpha": [dict(bc_alpha=-0.01), dict(bc_alpha=False)],
    "horizon_length": [dict(horizon_length=None), dict(horizon_length=0), dict(horizon_length=True)],
    "action_chunking": [dict(action_chunking=None), dict(action_chunking=0)],
    "ob_dims": [dict(ob_dims=(0,)), dict(ob_dims=(5,))],  # the data's observations have 4 dims
    "action_dim": [dict(action_dim=0), dict(action_dim=True), dict(action_dim=7)],  # the data's actions: 2
}


@pytest.mark.parametrize(
    "key, overrides",
    [(k, o) for k, cases in BAD_OVERRIDES.items() for o in cases],
    ids=[f"{k}:{o}" for k, cases in BAD_OVERRIDES.items() for o in cases],
)
def test_bad_config_raises_naming_the_key(key, overrides):
    config = make_config().to_dict()
    config.update(overrides)
    with pytest.raises(ValueError, match=rf"--agent\.{key}\b"):
        create(config, random_batch(16))


def test_create_seeds():
    config, batch = make_config(), random_batch(17)

    def critic_kernel(seed):
        params = create(config, batch, seed).network.params
        return np.asarray(params["modules_critic"]["value_net"]["Dense_0"]["kernel"])

    # An int seed is PRNGKey(seed); a key (the driver's seeding.jax_key(seed, 'agent')) is used as it is.
    np.testing.assert_array_equal(critic_kernel(3), critic_kernel(jax.random.PRNGKey(3)))
    agent_key = seeding.jax_key(3, "agent")
    np.testing.assert_array_equal(critic_kernel(agent_key), critic_kernel(seeding.jax_key(3, "agent")))
    assert not np.array_equal(critic_kernel(agent_key), critic_kernel(3))
    assert not np.array_equal(critic_kernel(0), critic_kernel(1))


@pytest.mark.parametrize("chunking", [True, False])
@pytest.mark.parametrize("steps", [4, 2])
def test_windows_of_another_length_than_the_chunk_raise(chunking, steps):
    # h = 3. A 4-step window would pair a 4-step reward sum (rewards[:, -1]) with gamma^3; a 2-step one a
    # 2-step sum. Without chunking no network input reveals the window length, so only the check can.
    agent = create(make_config(action_chunking=chunking), random_batch(18))
    with pytest.raises(ValueError, match="horizon_length"):
        agent.update(random_batch(19, h=steps))
