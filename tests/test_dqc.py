"""DQC agent and its window sampler: losses by hand, gradient routing, scan updates, best-of-N, config,
sampler invariants.

Tiny networks on CPU; every test asserts a value that a wrong implementation would get wrong. The
fidelity to the authors' release is tests/test_golden_dqc.py's job.
"""

import ast
import inspect
import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.dqc as dqc
import utils.goal_windows as goal_windows
from agents.dqc import BATCH_KEYS, DQCAgent, check_config, get_config
from utils import seeding
from utils.goal_windows import GoalWindows

OB_DIM, GOAL_DIM, ACTION_DIM, H, H_A, BATCH = 5, 3, 2, 4, 2, 8


def make_config(**overrides):
    config = get_config()
    config.actor_hidden_dims = (16, 16)
    config.value_hidden_dims = (16, 16)
    config.flow_steps = 2
    config.best_of_n = 5
    config.backup_horizon = H
    config.policy_chunk_size = H_A
    config.discount = 0.9
    for key, value in overrides.items():
        config[key] = value
    return config


_agents = {}


def make_agent(seed=0, **overrides):
    """A tiny agent; agents are immutable, so equal requests share one (and its compiled functions)."""
    config = make_config(**overrides)
    key = (seed, tuple(sorted(config.to_dict().items())))
    if key not in _agents:
        ex = [np.zeros(n, np.float32) for n in (OB_DIM, ACTION_DIM, GOAL_DIM)]
        _agents[key] = DQCAgent.create(seed, ex[0], ex[1], config, ex_goals=ex[2])
    return _agents[key]


def make_batch(seed, batch_size=BATCH, h=H):
    """A batch with the GoalWindows layout: rows 0-1 reach the goal inside the window, row 2 has a short
    window (valids 0 in the last column only, so the release's column and column h_a - 1 differ), the rest
    bootstrap. Row 3 bootstraps after k = 2 < h steps: never drawn by GoalWindows, it tells gamma^k from
    gamma^h."""
    rng = np.random.default_rng(seed)
    k = np.full(batch_size, h)
    k[:4] = [0, 2, h, 2]
    reached = np.array([1, 1] + [0] * (batch_size - 2), np.float32)
    valids = np.ones((batch_size, h), np.float32)
    valids[2, -1] = 0.0
    return dict(
        observations=rng.normal(size=(batch_size, OB_DIM)).astype(np.float32),
        actions=rng.uniform(-1, 1, (batch_size, ACTION_DIM)).astype(np.float32),
        high_value_goals=rng.normal(size=(batch_size, GOAL_DIM)).astype(np.float32),
        high_value_action_chunks=rng.uniform(-1, 1, (batch_size, h * ACTION_DIM)).astype(np.float32),
        high_value_next_observations=rng.normal(size=(batch_size, OB_DIM)).astype(np.float32),
        high_value_backup_horizon=k.astype(np.int32),
        high_value_masks=1.0 - reached,
        high_value_rewards=(0.9**k * reached).astype(np.float32),
        valids=valids,
    )


def with_params(agent, name, fn):
    params = dict(agent.network.params)
    params[name] = jax.tree_util.tree_map(fn, params[name])
    return agent.replace(network=agent.network.replace(params=params))


def all_zero(tree):
    return all(np.all(np.asarray(x) == 0) for x in jax.tree_util.tree_leaves(tree))


def sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def bce(logit, target):
    p = sigmoid(logit)
    return -(target * np.log(p) + (1 - target) * np.log(1 - p))


def logits(agent, name, batch, obs_key="observations", actions=None):
    """A critic's logits by a direct module call: (K, B) for the ensembles, (B,) for the value."""
    inputs = np.concatenate([batch[obs_key], batch["high_value_goals"]], axis=-1)
    out = agent.network.select(name)(inputs, actions) if actions is not None else agent.network.select(name)(inputs)
    return np.asarray(out, np.float64)


# ---------------------------------------------------------------- losses by hand


@pytest.mark.parametrize("num_qs", [1, 2, 3])
def test_chunk_critic_target_by_hand(num_qs):
    agent = make_agent(num_qs=num_qs)
    batch = make_batch(0)
    loss, info = jax.jit(agent.chunk_critic_loss)(batch, agent.network.params, jax.random.PRNGKey(0))

    next_v = sigmoid(logits(agent, "value", batch, "high_value_next_observations"))  # (B,)
    k, m = batch["high_value_backup_horizon"], batch["high_value_masks"]
    target = np.clip(batch["high_value_rewards"] + 0.9**k * m * next_v, 0, 1)
    assert target[0] == 1.0 and np.isclose(target[1], 0.81)  # reached at k = 0 and k = 2: gamma^k, no bootstrap
    np.testing.assert_allclose(target[3], 0.81 * next_v[3], rtol=1e-6)
    np.testing.assert_allclose(target[4:], 0.9**H * next_v[4:], rtol=1e-6)
    q_logit = logits(agent, "chunk_critic", batch, actions=batch["high_value_action_chunks"]).reshape(num_qs, BATCH)
    np.testing.assert_allclose(loss, bce(q_logit, target).mean(), rtol=1e-5)
    np.testing.assert_allclose(info["chunk_critic/q_mean"], sigmoid(q_logit).mean(), rtol=1e-5)


@pytest.mark.parametrize(
    "use_chunk_critic, method, q_agg",
    [(True, "expectile", "mean"), (True, "quantile", "min"), (False, "expectile", "min"), (False, "quantile", "mean")],
)
def test_distillation_by_hand(use_chunk_critic, method, q_agg):
    kappa = 0.8
    agent = make_agent(use_chunk_critic=use_chunk_critic, distill_method=method, kappa_d=kappa, q_agg=q_agg)
    batch = make_batch(1)
    loss, _ = jax.jit(agent.action_critic_loss)(batch, agent.network.params, jax.random.PRNGKey(0))

    chunks = batch["high_value_action_chunks"]
    if use_chunk_critic:  # member i learns from member i of the chunk critic; no aggregation
        target = sigmoid(logits(agent, "chunk_critic", batch, actions=chunks))  # (K, B)
    else:  # the h-step target itself
        next_v = sigmoid(logits(agent, "value", batch, "high_value_next_observations"))
        k, m = batch["high_value_backup_horizon"], batch["high_value_masks"]
        target = np.clip(batch["high_value_rewards"] + 0.9**k * m * next_v, 0, 1)  # (B,)
    q_logit = logits(agent, "action_critic", batch, actions=chunks[:, : H_A * ACTION_DIM])  # (K, B): first h_a
    q = sigmoid(q_logit)
    above = target >= q
    assert np.any(above) and np.any(~above)  # both weights occur
    weight = np.where(above, kappa, 1 - kappa)
    if method == "expectile":
        errors = bce(q_logit, target)
    else:
        # In float32 as the agent computes it: 1 - (1 - 1e-5) is 1.0014e-05 there (target 1: row 0).
        clipped = np.clip(target.astype(np.float32), 1e-5, 1 - 1e-5)
        errors = np.abs(q_logit - (np.log(clipped) - np.log(np.float32(1) - clipped)))
    # The release's valids column: min(h_a * action_dim, h) - 1 = 3 here (row 2 is 0 there, 1 in column h_a - 1).
    valid = batch["valids"][:, min(H_A * ACTION_DIM, H) - 1]
    assert valid[2] == 0 and batch["valids"][2, H_A - 1] == 1
    np.testing.assert_allclose(loss, np.mean(weight * errors * valid), rtol=1e-5)


@pytest.mark.parametrize(
    "method, q_agg, num_qs", [("expectile", "mean", 2), ("quantile", "min", 3), ("quantile", "mean", 1)]
)
def test_value_loss_by_hand(method, q_agg, num_qs):
    kappa = 0.9
    agent = make_agent(implicit_backup_type=method, kappa_b=kappa, q_agg=q_agg, num_qs=num_qs)
    agent = with_params(agent, "modules_target_action_critic", lambda x: 1.3 * x + 0.02)  # target != online
    batch = make_batch(2)
    loss, info = jax.jit(agent.value_loss)(batch, agent.network.params, jax.random.PRNGKey(0))

    policy_chunks = batch["high_value_action_chunks"][:, : H_A * ACTION_DIM]
    qs = sigmoid(logits(agent, "target_action_critic", batch, actions=policy_chunks)).reshape(num_qs, BATCH)
    q = qs.min(axis=0) if q_agg == "min" else qs.mean(axis=0)
    v_logit = logits(agent, "value", batch)
    v = sigmoid(v_logit)
    assert np.any(q >= v) and np.any(q < v)
    weight = np.where(q >= v, kappa, 1 - kappa)
    errors = bce(v_logit, q) if method == "expectile" else np.abs(v_logit - np.log(q / (1 - q)))
    valid = batch["valids"][:, min(H_A * ACTION_DIM, H) - 1]
    np.testing.assert_allclose(loss, np.mean(weight * errors * valid), rtol=1e-5)
    np.testing.assert_allclose(info["action_critic/adv"], np.mean(q - v), rtol=1e-4, atol=1e-7)


def test_actor_loss_by_hand():
    agent = make_agent()
    batch, rng = make_batch(3), jax.random.PRNGKey(4)
    loss, _ = jax.jit(agent.actor_loss)(batch, agent.network.params, rng)

    _, x_rng, t_rng, _ = jax.random.split(rng, 4)
    x_0 = jax.random.normal(x_rng, (BATCH, H_A * ACTION_DIM))
    t = jax.random.uniform(t_rng, (BATCH, 1))
    x_1 = batch["high_value_action_chunks"][:, : H_A * ACTION_DIM]
    pred = agent.network.select("actor_bc")(batch["observations"], (1 - t) * x_0 + t * x_1, t)  # no goal input
    per_row = np.mean(np.square(np.asarray(pred) - (x_1 - np.asarray(x_0))), axis=-1)
    valid = batch["valids"][:, min(H_A * ACTION_DIM, H) - 1]
    np.testing.assert_allclose(loss, np.mean(per_row * valid), rtol=1e-5)


# ---------------------------------------------------------------- gradient routing


@pytest.mark.parametrize("use_chunk_critic", [True, False])
def test_gradient_routing(use_chunk_critic):
    agent = make_agent(use_chunk_critic=use_chunk_critic)
    batch, rng = make_batch(4), jax.random.PRNGKey(1)
    names = ["chunk_critic_loss", "action_critic_loss", "value_loss", "actor_loss"][(0 if use_chunk_critic else 1) :]

    def terms(params):
        return jnp.stack([getattr(agent, name)(batch, params, rng)[0] for name in names])

    jacobian = jax.jit(jax.jacrev(terms))(agent.network.params)
    # Each loss trains exactly one module: the V in the backup target, Q_h in the distillation target and
    # the target Q_a in the value loss are constants.
    trains = {
        "chunk_critic_loss": "modules_chunk_critic",
        "action_critic_loss": "modules_action_critic",
        "value_loss": "modules_value",
        "actor_loss": "modules_actor_bc",
    }
    assert ("modules_chunk_critic" in agent.network.params) == use_chunk_critic
    for i, name in enumerate(names):
        for module, grads in jacobian.items():
            row = jax.tree_util.tree_map(lambda j, i=i: j[i], grads)
            if module == trains[name]:
                assert not all_zero(row), f"{name} does not train {module}"
            else:
                assert all_zero(row), f"{name} sends gradient to {module}"


def test_update_moves_target_by_polyak_toward_the_pre_step_action_critic():
    agent = with_params(make_agent(), "modules_target_action_critic", lambda x: x - 0.3)
    old = agent.network.params
    new, info = agent.update(make_batch(5))
    tau = agent.config["tau"]
    expected = jax.tree_util.tree_map(
        lambda c, t: tau * c + (1 - tau) * t, old["modules_action_critic"], old["modules_target_action_critic"]
    )
    jax.tree_util.tree_map(
        lambda e, g: np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7),
        expected,
        new.network.params["modules_target_action_critic"],
    )
    for name in ("modules_action_critic", "modules_chunk_critic", "modules_value", "modules_actor_bc"):
        assert not all_zero(jax.tree_util.tree_map(lambda a, b: a - b, old[name], new.network.params[name])), name
    assert info["grad/max"] >= 0 >= info["grad/min"]


def test_batch_update_equals_sequential_updates():
    agent = make_agent()
    batches = [make_batch(10 + i) for i in range(3)]
    sequential, infos = agent, []
    for batch in batches:
        sequential, info = sequential.update({**batch, "unused": np.zeros(3)})  # other keys stay outside jit
        infos.append(info)
    scanned, scan_info = agent.batch_update(jax.tree_util.tree_map(lambda *x: np.stack(x), *batches))

    assert int(scanned.network.step) == int(agent.network.step) + 3
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), sequential, scanned)
    for key in ("chunk_critic/critic_loss", "action_critic/critic_loss", "action_critic/value_loss"):
        np.testing.assert_allclose(scan_info[key], np.mean([i[key] for i in infos]), rtol=1e-5)


def test_batch_of_the_wrong_horizon_raises():
    with pytest.raises(ValueError, match="backup_horizon"):
        make_agent().update(make_batch(0, h=H + 1))


def test_update_reads_only_the_batch_keys():
    batch = make_batch(6)
    with pytest.raises(KeyError, match="valids"):
        make_agent().update({k: v for k, v in batch.items() if k != "valids"})
    source = inspect.getsource(dqc)
    read = {node.slice.value for node in ast.walk(ast.parse(source)) if _is_batch_read(node)}
    assert read == set(BATCH_KEYS)  # every key in BATCH_KEYS is read, and no other


def _is_batch_read(node):
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "batch"
        and isinstance(node.slice, ast.Constant)
    )


# ---------------------------------------------------------------- best-of-N


def test_best_of_n_picks_the_candidate_with_the_highest_action_critic_value():
    agent = make_agent(q_agg="min")
    n, action_size = agent.config["best_of_n"], H_A * ACTION_DIM
    batch = make_batch(7)
    obs, goals = batch["observations"], batch["high_value_goals"]
    rng = jax.random.PRNGKey(3)

    def by_hand(obs, goals):
        batch_shape = obs.shape[:-1]
        noises = jnp.stack([jax.random.normal(key, (*batch_shape, action_size)) for key in jax.random.split(rng, n)])
        obs_n, goals_n = (np.broadcast_to(x, (n, *x.shape)) for x in (obs, goals))
        actions = noises
        for i in range(2):  # flow_steps Euler steps
            t = jnp.full((*actions.shape[:-1], 1), i / 2)
            actions = actions + agent.network.select("actor_bc")(obs_n, actions, t) / 2
        actions = np.clip(np.asarray(actions), -1, 1)  # (N, *B, A)
        qs = agent.network.select("action_critic")(np.concatenate([obs_n, goals_n], -1), actions)  # (K, N, *B)
        q = np.asarray(qs).min(axis=0)  # (N, *B)
        top2 = np.sort(q, axis=0)[-2:]
        assert np.all(top2[1] - top2[0] > 1e-6)  # the argmax is unambiguous
        best = np.argmax(q, axis=0)
        return np.take_along_axis(actions, best[None, ..., None], axis=0)[0], best

    got = agent.sample_actions(obs, rng, goals=goals)
    expected, best = by_hand(obs, goals)
    assert got.shape == (BATCH, action_size)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert len(set(best.tolist())) > 1  # not always the first candidate
    assert np.all(np.abs(got) <= 1.0)

    single = agent.sample_actions(obs[0], rng, goals=goals[0])  # one observation, one goal: the driver's call
    assert single.shape == (action_size,)
    np.testing.assert_allclose(single, by_hand(obs[0], goals[0])[0], atol=1e-5)


def test_sample_actions_shapes_and_goal_requirement():
    agent = make_agent()
    obs, goals = np.ones((2, 3, OB_DIM), np.float32), np.ones((2, 3, GOAL_DIM), np.float32)
    assert agent.sample_actions(obs, jax.random.PRNGKey(0), goals=goals).shape == (2, 3, H_A * ACTION_DIM)
    assert agent.sample_actions(obs, jax.random.PRNGKey(0), goals=goals, best_of_n=2).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="goals"):
        agent.sample_actions(obs, jax.random.PRNGKey(0))


# ---------------------------------------------------------------- configuration


def test_create_leaves_config_unchanged_and_fills_a_copy():
    config = make_config()
    before = config.to_dict()
    agent = DQCAgent.create(0, np.zeros((4, OB_DIM)), np.zeros((4, ACTION_DIM)), config)  # goals = observations
    assert config.to_dict() == before and config.ob_dims is None and config.action_dim is None
    assert agent.config["ob_dims"] == (OB_DIM,) and agent.config["action_dim"] == ACTION_DIM
    assert isinstance(agent.config, flax.core.FrozenDict)
    hash(agent.config)
    params = agent.network.params
    assert params["modules_value"]["value_net"]["Dense_0"]["kernel"].shape == (2 * OB_DIM, 16)
    assert params["modules_action_critic"]["value_net"]["Dense_0"]["kernel"].shape == (2, 2 * OB_DIM + 4, 16)
    assert params["modules_actor_bc"]["mlp"]["Dense_0"]["kernel"].shape == (OB_DIM + 4 + 1, 16)  # no goal
    jax.tree_util.tree_map(
        np.testing.assert_array_equal, params["modules_action_critic"], params["modules_target_action_critic"]
    )
    # Adam moments for every trainable parameter, none for the target (it only moves by Polyak averaging).
    size = lambda tree: sum(np.size(x) for x in jax.tree_util.tree_leaves(tree))
    trainable = size(params) - size(params["modules_target_action_critic"])
    assert size(agent.network.opt_state) == 2 * trainable + 1


def test_create_seeds():
    config = make_config()

    def kernel(seed):
        agent = DQCAgent.create(seed, np.zeros(OB_DIM), np.zeros(ACTION_DIM), config)
        return np.asarray(agent.network.params["modules_value"]["value_net"]["Dense_0"]["kernel"])

    np.testing.assert_array_equal(kernel(3), kernel(jax.random.PRNGKey(3)))
    assert not np.array_equal(kernel(seeding.jax_key(3, "agent")), kernel(3))
    assert not np.array_equal(kernel(0), kernel(1))


def config_keys_read(source):
    """String keys read as `config[...]`, `cfg[...]` or `<x>.config[...]` (assignments excluded)."""
    keys = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            value = node.value
            if (isinstance(value, ast.Name) and value.id in ("config", "cfg")) or (
                isinstance(value, ast.Attribute) and value.attr == "config"
            ):
                keys.add(node.slice.value)
    return keys


def test_every_config_key_is_read():
    checks = inspect.getsource(check_config)  # names every key without using it
    source = inspect.getsource(dqc).replace(checks, "")
    read = config_keys_read(source) | config_keys_read(inspect.getsource(goal_windows)) | set(goal_windows.GOAL_KEYS)
    driver_keys = {"agent_name", "batch_size"}
    assert set(get_config().keys()) - driver_keys - read == set()


BAD_VALUES = [
    ("agent_name", "acfql"),
    ("lr", 0.0),
    ("lr", float("nan")),
    ("batch_size", True),
    ("actor_hidden_dims", ()),
    ("value_hidden_dims", (16, 0)),
    ("layer_norm", 1),
    ("discount", 1.0),
    ("discount", 0.0),
    ("tau", 0.0),
    ("num_qs", 0),
    ("q_agg", "max"),
    ("flow_steps", 0),
    ("value_p_curgoal", 1.5),
    ("value_geom_sample", "no"),
    ("use_chunk_critic", None),
    ("backup_horizon", 0),
    ("policy_chunk_size", H + 1),
    ("policy_chunk_size", 0),
    ("distill_method", "huber"),
    ("kappa_d", 1.0),
    ("kappa_d", 0.0),
    ("implicit_backup_type", "max"),
    ("kappa_b", 1.2),
    ("best_of_n", 0),
    ("ob_dims", (0,)),
    ("action_dim", 2.0),
]


@pytest.mark.parametrize("key, value", BAD_VALUES, ids=[f"{k}={v!r}" for k, v in BAD_VALUES])
def test_bad_config_raises(key, value):
    config = make_config().to_dict()
    config[key] = value
    with pytest.raises(ValueError, match=rf"^--agent\.{key} must be .*, got {re.escape(repr(value))}\.$"):
        check_config(config)


def test_config_messages():
    config = make_config().to_dict()
    with pytest.raises(
        ValueError, match=r"--agent\.policy_chunk_size must be an int in \[1, backup_horizon=4\], got 5"
    ):
        check_config({**config, "policy_chunk_size": 5})
    with pytest.raises(ValueError, match=r"sum to 1, got 1\.1"):
        check_config({**config, "value_p_curgoal": 0.3})
    with pytest.raises(ValueError, match=r"\['kappa'\] are not keys of the dqc agent"):
        check_config({**config, "kappa": 0.5})
    with pytest.raises(ValueError, match="lacks the key.*best_of_n"):
        check_config({k: v for k, v in config.items() if k != "best_of_n"})
    checked = check_config({**config, "actor_hidden_dims": [8, 8]})
    assert checked["actor_hidden_dims"] == (8, 8) and isinstance(checked, dict)
    assert check_config(get_config()) == get_config().to_dict()  # the defaults are valid


# ---------------------------------------------------------------- GoalWindows


def chain_dataset(lengths, seed=0):
    """Trajectories of the given lengths; observation column 0 holds the row number, column 1 the trajectory."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    traj = np.repeat(np.arange(len(lengths)), lengths)
    obs = np.stack([np.arange(n), traj, rng.normal(size=n)], axis=1).astype(np.float32)
    actions = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)
    terminals = np.zeros(n, np.float32)
    terminals[np.cumsum(lengths) - 1] = 1
    return obs, actions, terminals, traj


def windows_config(**overrides):
    return make_config(backup_horizon=5, discount=0.9, **overrides)


def test_windows_stay_in_their_trajectory_and_start_where_a_window_fits():
    lengths = [3, 12, 6, 5, 30, 7]  # the first holds no window of 5 (it needs 6 rows), the fourth neither
    obs, actions, terminals, traj = chain_dataset(lengths)
    windows = GoalWindows(obs, actions, terminals, windows_config())
    ends = np.cumsum(lengths) - 1
    expected = np.concatenate(
        [np.arange(s, e - 5 + 1) for s, e in zip(ends - np.array(lengths) + 1, ends, strict=True)]
    )
    np.testing.assert_array_equal(windows.valid_idxs, expected)

    batch = windows.sample(4000, np.random.default_rng(0))
    rows = batch["observations"][:, 0].astype(int)
    assert set(rows.tolist()) == set(expected.tolist())  # every valid start is drawn, no other
    k = batch["high_value_backup_horizon"]
    next_rows = batch["high_value_next_observations"][:, 0].astype(int)
    np.testing.assert_array_equal(next_rows, rows + k)
    np.testing.assert_array_equal(traj[next_rows], traj[rows])  # never across a trajectory end
    chunk_rows = batch["high_value_action_chunks"].reshape(-1, 5, 2)[..., 0].astype(int)  # (B, h)
    np.testing.assert_array_equal(chunk_rows, rows[:, None] + np.arange(5))
    assert np.all(batch["valids"] == 1)
    np.testing.assert_array_equal(batch["actions"][:, 0], rows)

    reached = batch["high_value_masks"] == 0
    goal_rows = rows + batch["high_value_offsets"]
    np.testing.assert_array_equal(reached, (goal_rows >= rows) & (goal_rows < rows + 5))  # cut exactly at the goal
    np.testing.assert_array_equal(k[reached], (goal_rows - rows)[reached])
    assert np.all(k[~reached] == 5)
    np.testing.assert_allclose(batch["high_value_rewards"], np.where(reached, 0.9**k, 0.0), rtol=1e-6)
    np.testing.assert_array_equal(batch["high_value_goals"], obs[goal_rows])  # no oracle reps: observations


def test_goal_proportions():
    lengths = [40] * 50
    obs, actions, terminals, traj = chain_dataset(lengths)
    config = windows_config(value_p_curgoal=0.1, value_p_trajgoal=0.6, value_p_randomgoal=0.3)
    batch = GoalWindows(obs, actions, terminals, config).sample(20000, np.random.default_rng(1))
    rows = batch["observations"][:, 0].astype(int)
    goal_rows = rows + batch["high_value_offsets"]
    current = goal_rows == rows
    later_same = (goal_rows > rows) & (traj[goal_rows] == traj[rows])
    other = traj[goal_rows] != traj[rows]
    # A random goal lands in the start's trajectory with probability ~1/50.
    assert abs(current.mean() - 0.1) < 0.015, current.mean()
    assert abs(later_same.mean() - (0.6 + 0.3 / 50 / 2)) < 0.02, later_same.mean()
    assert abs(other.mean() - 0.3 * 49 / 50) < 0.015, other.mean()
    # Uniform later goals: offsets spread over [1, final - start] (ends at half weight: the release's rounding).
    offsets = (goal_rows - rows)[later_same]
    final = (traj[rows] + 1) * 40 - 1
    np.testing.assert_allclose(offsets.mean(), np.mean(1 + (final - rows)[later_same]) / 2, rtol=0.02)
    # Random goals are drawn like the starts: only rows where a whole window fits.
    assert np.all((goal_rows[other] % 40) <= 40 - 1 - 5)


def test_geometric_goals():
    obs, actions, terminals, _ = chain_dataset([400] * 5)
    config = windows_config(value_p_curgoal=0.0, value_p_trajgoal=1.0, value_p_randomgoal=0.0, value_geom_sample=True)
    batch = GoalWindows(obs, actions, terminals, config).sample(20000, np.random.default_rng(2))
    rows = batch["observations"][:, 0].astype(int)
    offsets = batch["high_value_offsets"]
    final = (rows // 400 + 1) * 400 - 1
    assert np.all(offsets >= 1) and np.all(rows + offsets <= final)
    uncapped = rows + 60 < final
    np.testing.assert_allclose(offsets[uncapped].mean(), 1 / (1 - 0.9), rtol=0.05)  # Geometric(1 - gamma)


def test_windows_are_seeded_and_leave_global_numpy_alone():
    obs, actions, terminals, _ = chain_dataset([20, 30, 25])
    windows = GoalWindows(obs, actions, terminals, windows_config(), oracle_reps=obs[:, :2] * 10)
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    a = windows.sample(64, np.random.default_rng(5))
    b = windows.sample(64, np.random.default_rng(5))
    c = windows.sample(64, np.random.default_rng(6))
    np.testing.assert_array_equal(np.random.get_state()[1], state)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["observations"], c["observations"])
    rows = a["observations"][:, 0].astype(int) + a["high_value_offsets"]
    np.testing.assert_array_equal(a["high_value_goals"], obs[rows, :2] * 10)  # oracle representations


def test_window_cut_at_the_trajectory_end_and_given_goals():
    obs, actions, terminals, _ = chain_dataset([11, 9])
    windows = GoalWindows(obs, actions, terminals, windows_config())
    idxs, goal_idxs = np.array([8, 3, 3, 3, 10]), np.array([0, 3, 5, 9, 15])
    batch = windows.sample(5, np.random.default_rng(0), idxs=idxs, goal_idxs=goal_idxs)
    np.testing.assert_array_equal(batch["high_value_backup_horizon"], [2, 0, 2, 5, 0])
    np.testing.assert_array_equal(batch["high_value_masks"], [0, 0, 0, 1, 0])
    np.testing.assert_allclose(batch["high_value_rewards"], [0.81, 1, 0.81, 0, 1], rtol=1e-6)
    np.testing.assert_array_equal(batch["valids"][0], [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch["high_value_action_chunks"][0, ::2], [8, 9, 10, 10, 10])


def test_windows_errors():
    obs, actions, terminals, _ = chain_dataset([4, 5])
    with pytest.raises(ValueError, match="no trajectory is long enough .*backup_horizon=5.*longest has 5"):
        GoalWindows(obs, actions, terminals, windows_config())
    obs, actions, terminals, _ = chain_dataset([8, 9])
    with pytest.raises(ValueError, match="last row"):
        GoalWindows(obs, actions, np.zeros_like(terminals), windows_config())
    with pytest.raises(ValueError, match="sum to 1"):
        GoalWindows(obs, actions, terminals, windows_config(value_p_curgoal=0.5))
    with pytest.raises(ValueError, match="idxs"):
        GoalWindows(obs, actions, terminals, windows_config()).sample(2, np.random.default_rng(0), idxs=[0, 17])


def test_sampler_windows_feed_the_update():
    obs, actions, terminals, _ = chain_dataset([12, 9, 15])
    obs = np.concatenate([obs, np.zeros((len(obs), OB_DIM - obs.shape[1]), np.float32)], axis=1)  # (N, D)
    windows = GoalWindows(obs, actions, terminals, make_config().to_dict(), oracle_reps=obs[:, :GOAL_DIM])
    agent = make_agent()
    batch = windows.sample(BATCH, np.random.default_rng(0))
    new, info = agent.update(batch)
    assert int(new.network.step) == int(agent.network.step) + 1
    assert all(np.isfinite(v) for v in info.values())
    stacked = jax.tree_util.tree_map(
        lambda *x: np.stack(x), *[windows.sample(BATCH, np.random.default_rng(i)) for i in range(2)]
    )
    assert int(agent.batch_update(stacked)[0].network.step) == int(agent.network.step) + 2
