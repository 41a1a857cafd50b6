"""The ACSAC-style agent (agents/acsac.py) at tiny sizes: a causal critic to the bit, per-length TD targets
computed by hand on a window that crosses an episode end (adaptive and whole-chunk bootstraps, 'max' and
'double' length choices), the chosen chunk and length with and without a commitment margin, the fixed-length
control, the update, and its methods.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents import common
from agents.acsac import ACSACAgent, bootstrap_values, check_config, choose, get_config, prefix_targets
from runner import methods
from utils.datasets import Dataset

H, A, D = 3, 2, 4


def tiny_agent(seed=0, **changes):
    config = get_config()
    settings = dict(horizon_length=H, actor_hidden_dims=(16, 16), num_layers=2, num_heads=2, head_dim=4,
                    batch_size=4, actor_num_samples=3, flow_steps=2)  # fmt: skip
    config.update({**settings, **changes})
    return ACSACAgent.create(seed, np.zeros(D, np.float32), np.zeros(A, np.float32), config)


def critic_values(agent, observations, chunks, name="critic"):
    return np.asarray(agent.network.select(name)(observations, chunks))  # (K, *B, H)


def test_critic_is_causal_to_the_bit():
    agent = tiny_agent()
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(5, D)).astype(np.float32)
    chunks = rng.uniform(-1, 1, (5, H * A)).astype(np.float32)
    base = critic_values(agent, observations, chunks)
    assert base.shape == (2, 5, H)
    for h in range(1, H + 1):  # change a_{h+1..H}: Q of the prefixes up to h stay bitwise the same
        changed = chunks.copy()
        changed[:, h * A :] = rng.uniform(-1, 1, changed[:, h * A :].shape)
        np.testing.assert_array_equal(critic_values(agent, observations, changed)[..., :h], base[..., :h])
        if h < H:
            assert np.all(critic_values(agent, observations, changed)[..., h:] != base[..., h:])
        moved = chunks.copy()  # change a_h itself: Q at h and after move
        moved[:, (h - 1) * A : h * A] += 0.5
        assert np.all(critic_values(agent, observations, moved)[..., h - 1] != base[..., h - 1])


@pytest.mark.parametrize("heads, head_dim", [(2, 4), (8, 16)])  # the tiny agent's, and the default's
def test_the_critic_attention_gives_flax_values_and_gradients(heads, head_dim):
    """Issue 60 item 1: `causal_attention` (the faster form) against flax's `dot_product_attention` in the same
    critic with the same parameters: values of every prefix and the gradient of a squared TD-like loss, to float
    tolerance; the parameters (names, shapes, initial values) are the same as before it."""
    import flax.linen as nn

    from agents.acsac import PrefixCritic
    from utils.networks import ensemblize

    agent = tiny_agent(num_heads=heads, head_dim=head_dim)
    sizes = dict(horizon=H, action_dim=A, num_layers=2, num_heads=heads, head_dim=head_dim)
    flax_critic = ensemblize(PrefixCritic, 2)(**sizes, attention_fn=nn.dot_product_attention)
    ours = agent.network.params["modules_critic"]
    rng = np.random.default_rng(1)
    observations = jnp.asarray(rng.normal(size=(6, 3, D)), jnp.float32)  # (B, N, D): as the target's
    chunks = jnp.asarray(rng.uniform(-1, 1, (6, 3, H * A)), jnp.float32)
    targets = jnp.asarray(rng.normal(size=(2, 6, 3, H)), jnp.float32)
    fresh = flax_critic.init(jax.random.PRNGKey(3), observations[:1, 0], chunks[:1, 0])["params"]
    again = ensemblize(PrefixCritic, 2)(**sizes).init(jax.random.PRNGKey(3), observations[:1, 0], chunks[:1, 0])
    jax.tree_util.tree_map(np.testing.assert_array_equal, fresh, again["params"])  # same tree, same start

    def loss(params, critic):
        return jnp.mean(jnp.square(critic.apply({"params": params}, observations, chunks) - targets))

    ref_values = flax_critic.apply({"params": ours}, observations, chunks)
    values = agent.network.select("critic")(observations, chunks)
    assert values.shape == (2, 6, 3, H)
    np.testing.assert_allclose(np.asarray(values), np.asarray(ref_values), rtol=1e-5, atol=1e-6)
    ref_grads = jax.grad(loss)(ours, flax_critic)
    grads = jax.grad(loss)(ours, ensemblize(PrefixCritic, 2)(**sizes))
    scale = max(float(jnp.abs(g).max()) for g in jax.tree_util.tree_leaves(ref_grads))
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grads), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6 * scale)


def window_across_an_episode_end(discount):
    """Two trajectories: rows 0-1 (row 1 ends it and solves the task: mask 0, terminal 1) and rows 2-5; the window
    starts at row 0, so its bootstrap mask drops to 0 after step 0 and its last step is the next trajectory's."""
    dataset = Dataset.create(
        observations=np.arange(6 * D, dtype=np.float32).reshape(6, D) / 10,
        next_observations=np.arange(1, 6 * D + 1, dtype=np.float32).reshape(6, D) / 10,
        actions=np.linspace(-1, 1, 6 * A, dtype=np.float32).reshape(6, A),
        rewards=np.array([0.5, 1.0, 2.0, 4.0, 8.0, 16.0], np.float32),
        terminals=np.array([0, 1, 0, 0, 0, 1], np.float32),
        masks=np.array([1, 0, 1, 1, 1, 1], np.float32),
    )
    batch = dataset.sample_sequence(1, H, discount, idxs=np.array([0]))
    # By hand (docs/batch_contract.md): partial sums, running masks, valid up to the end of the trajectory.
    np.testing.assert_allclose(batch["rewards"][0], [0.5, 0.5 + discount, 0.5 + discount + discount**2 * 2.0])
    np.testing.assert_array_equal(batch["masks"][0], [1, 0, 0])
    np.testing.assert_array_equal(batch["valid"][0], [1, 1, 0])
    return {k: jnp.asarray(v) for k, v in batch.items()}


def next_state_qs(agent, batch, rng, name):
    """Every critic's values `(K, 1, H, N, H')` of the prefixes of the draws `critic_loss(batch, rng)` makes: N
    flow samples at each next state of the window, valued by the critics `name`."""
    n, cfg = agent.config["actor_num_samples"], agent.config
    next_obs = np.asarray(batch["next_observations"])  # (1, H, D)
    noises = jax.random.normal(rng, (1, H, n, H * A))
    repeated = np.repeat(next_obs[:, :, None], n, axis=2)
    velocity = lambda x, t: agent.network.select("actor_bc_flow")(repeated, x, t)  # noqa: E731
    candidates = jnp.clip(common.euler_flow(velocity, noises, cfg["flow_steps"]), -1, 1)
    return critic_values(agent, repeated, candidates, name)


def by_hand(qs, adaptive, target_choice):
    """`V(s')` and its length from critic values `(K, *B, N, H)`, in numpy, one state at a time."""
    flat_qs = qs.reshape(qs.shape[0], -1, *qs.shape[-2:])  # (K, S, N, H)
    values, lengths = [], []
    for state in range(flat_qs.shape[1]):
        q = flat_qs[:, state]  # (K, N, H)
        lengths_allowed = range(H) if adaptive else [H - 1]
        pairs = [(n, h) for n in range(q.shape[1]) for h in lengths_allowed]  # (candidate, length) in order
        chooser = q.min(axis=0) if target_choice == "max" else q[0]
        scorer = q.min(axis=0) if target_choice == "max" else q[1:].min(axis=0)
        n, h = max(pairs, key=lambda p: (chooser[p], -pairs.index(p)))  # the first of the best
        values.append(scorer[n, h])
        lengths.append(h + 1)
    return np.reshape(values, qs.shape[1:-2]), np.reshape(lengths, qs.shape[1:-2])


@pytest.mark.parametrize("target_critic", [False, True])
def test_per_length_targets_by_hand_across_an_episode_end(target_critic):
    discount = 0.9
    agent = tiny_agent(discount=discount, batch_size=1, target_critic=target_critic)
    # A target critic unlike the online one, so the bootstrap's source shows in the numbers.
    params = dict(agent.network.params)
    params["modules_target_critic"] = jax.tree_util.tree_map(lambda x: 1.5 * x + 0.1, params["modules_critic"])
    agent = agent.replace(network=agent.network.replace(params=params))
    batch = window_across_an_episode_end(discount)
    rng = jax.random.PRNGKey(7)
    loss, info = agent.critic_loss(batch, agent.network.params, rng)

    v = by_hand(next_state_qs(agent, batch, rng, "target_critic" if target_critic else "critic"), True, "max")[0]
    other = by_hand(next_state_qs(agent, batch, rng, "critic" if target_critic else "target_critic"), True, "max")[0]
    assert abs(v[0, 0] - other[0, 0]) > 1e-3
    r, m = np.asarray(batch["rewards"]), np.asarray(batch["masks"])
    y = np.array([[r[0, h - 1] + discount**h * m[0, h - 1] * v[0, h - 1] for h in (1, 2, 3)]])
    np.testing.assert_allclose(
        y, np.asarray(prefix_targets(batch["rewards"], batch["masks"], jnp.asarray(v), discount)), rtol=1e-6
    )
    # Step 0 bootstraps; from step 1 the mask is 0 (solved, then the trajectory ended): the reward sum alone.
    assert y[0, 0] == pytest.approx(0.5 + discount * v[0, 0], rel=1e-6)
    np.testing.assert_allclose(y[0, 1:], r[0, 1:], rtol=1e-6)
    assert float(info["critic/target_q_mean"]) == pytest.approx(y.mean(), rel=1e-5, abs=1e-6)
    q = critic_values(agent, np.asarray(batch["observations"]), np.asarray(batch["actions"]).reshape(1, -1))
    valid = np.asarray(batch["valid"])  # (1, H): length 3 is another trajectory's and weighs nothing
    assert float(loss) == pytest.approx(np.mean(valid * (q - y) ** 2), rel=1e-5)

    # With masks 1 the bootstrap enters with gamma^h at every length.
    ones = dict(batch, masks=jnp.ones_like(batch["masks"]))
    _, info = agent.critic_loss(ones, agent.network.params, rng)
    y1 = r + discount ** np.arange(1, H + 1) * v
    assert float(info["critic/target_q_mean"]) == pytest.approx(y1.mean(), rel=1e-5, abs=1e-6)


def test_bootstrap_values_by_hand():
    """V(s') under each setting, on fixed critic values where all four differ."""
    q1 = [[5.0, 1.0, 2.0], [0.0, 3.0, 1.0]]  # (N, H): critic 1
    q2 = [[1.0, 4.0, 2.5], [2.0, 3.0, 0.5]]  # critic 2; min: [[1, 1, 2], [0, 3, 0.5]]
    qs = jnp.array([q1, q2])[:, None]  # (K, B = 1, N, H)
    expected = {  # (adaptive, target_choice): (V, length)
        (True, "max"): (3.0, 2),  # max of the min: candidate 1, length 2
        (False, "max"): (2.0, H),  # whole chunks only: max(2, 0.5)
        (True, "double"): (1.0, 1),  # critic 1 picks (0, 1) (5.0); critic 2 scores it: 1.0
        (False, "double"): (2.5, H),  # critic 1 picks candidate 0's whole chunk (2.0 > 1.0); critic 2: 2.5
    }
    for (adaptive, choice), (value, length) in expected.items():
        values, lengths = bootstrap_values(qs, adaptive, choice)
        assert values.shape == lengths.shape == (1,) and lengths.dtype == jnp.int32
        assert (float(values[0]), int(lengths[0])) == (value, length), (adaptive, choice)
        assert by_hand(np.asarray(qs), adaptive, choice) == ([value], [length])
    # Ties in critic 1 go to the lower candidate, then the shorter prefix; with K = 3 the others' min scores.
    flat = jnp.ones((2, H))
    qs3 = jnp.stack([flat, jnp.array([[7.0, 6.0, 5.0], [0.0, 0.0, 0.0]]), jnp.array([[4.0, 9.0, 9.0], [9.0] * 3])])
    values, lengths = bootstrap_values(qs3, True, "double")
    assert (float(values), int(lengths)) == (4.0, 1)  # (0, 1): min(7, 4)
    values, lengths = bootstrap_values(qs3, False, "double")
    assert (float(values), int(lengths)) == (5.0, H)  # (0, H): min(5, 9)


@pytest.mark.parametrize("adaptive", [True, False])
@pytest.mark.parametrize("target_choice", ["max", "double"])
def test_targets_by_hand_for_each_bootstrap(adaptive, target_choice):
    """`critic_loss` bootstraps as the config says: whole chunks only for the fixed-length control (its
    `adaptive_length=False`), the length chosen by critic 1 and scored by critic 2 under 'double'."""
    discount = 0.9
    agent = tiny_agent(discount=discount, batch_size=1, adaptive_length=adaptive, target_choice=target_choice)
    batch = dict(window_across_an_episode_end(discount))
    batch["masks"] = jnp.ones_like(batch["masks"])  # every length bootstraps
    rng = jax.random.PRNGKey(11)
    loss, info = agent.critic_loss(batch, agent.network.params, rng)

    qs = next_state_qs(agent, batch, rng, "critic")  # (K, 1, H, N, H')
    settings = [(a, c) for a in (True, False) for c in ("max", "double")]
    hand = {setting: by_hand(qs, *setting) for setting in settings}
    v, lengths = hand[(adaptive, target_choice)]
    for setting in settings:  # the four rules give other V(s_{t+h}) here, so the numbers tell them apart
        if setting != (adaptive, target_choice):
            assert np.abs(hand[setting][0] - v).max() > 1e-4, setting
    r = np.asarray(batch["rewards"])
    y = r + discount ** np.arange(1, H + 1) * v  # (1, H)
    assert float(info["critic/target_q_mean"]) == pytest.approx(y.mean(), rel=1e-5, abs=1e-6)
    assert float(info["critic/next_length_mean"]) == pytest.approx(lengths.mean())
    if not adaptive:
        assert np.all(lengths == H)
    q = critic_values(agent, np.asarray(batch["observations"]), np.asarray(batch["actions"]).reshape(1, -1))
    assert float(loss) == pytest.approx(np.mean(np.asarray(batch["valid"]) * (q - y) ** 2), rel=1e-5)


def test_choose_takes_the_joint_argmax():
    candidates = jnp.arange(3 * H * A, dtype=jnp.float32).reshape(3, H * A)  # (N, H * A)
    values = jnp.array([[0.0, 1.0, 2.95], [0.2, 3.0, 2.9], [2.0, 0.0, 0.0]])  # (N, H)
    chunk, length = choose(values, candidates)  # the best prefix: candidate 1, length 2 (3.0)
    np.testing.assert_array_equal(chunk, candidates[1])
    assert int(length) == 2
    chunk, length = choose(values, candidates, adaptive=False)  # the best whole chunk: candidate 0 (2.95)
    np.testing.assert_array_equal(chunk, candidates[0])
    assert int(length) == H
    ties = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])  # ties: lower candidate, then shorter
    chunk, length = choose(ties, candidates)
    np.testing.assert_array_equal(chunk, candidates[0])
    assert int(length) == 1
    batched, lengths = choose(jnp.stack([values, ties]), jnp.stack([candidates, candidates]))  # (*B, N, H)
    np.testing.assert_array_equal(batched, np.stack([candidates[1], candidates[0]]))
    np.testing.assert_array_equal(lengths, [2, 1])


def test_commit_margin_zero_is_the_joint_argmax_and_a_large_one_whole_chunks():
    # Values from {0, 1, 2} on (N, H) = (3, 3): many ties, between prefixes, whole chunks and across candidates.
    values = jnp.asarray(np.random.default_rng(5).integers(0, 3, (500, 3, H)), jnp.float32)  # (*B, N, H)
    candidates = jnp.broadcast_to(jnp.arange(3 * H * A, dtype=jnp.float32).reshape(3, H * A), (500, 3, H * A))
    flat = np.asarray(values).reshape(500, -1).argmax(axis=-1)  # the joint argmax, the first of the best
    chunk, length = choose(values, candidates, margin=0.0)
    np.testing.assert_array_equal(chunk, np.asarray(candidates)[np.arange(500), flat // H])
    np.testing.assert_array_equal(length, flat % H + 1)
    assert 0.2 < np.mean(np.asarray(length) < H) < 0.9  # both kinds of choice occur
    chunk, length = choose(values, candidates, margin=1e6)  # whole chunks, the best one (the lower on ties)
    np.testing.assert_array_equal(length, np.full(500, H))
    whole = np.asarray(values)[..., -1].argmax(axis=-1)
    np.testing.assert_array_equal(chunk, np.asarray(candidates)[np.arange(500), whole])
    np.testing.assert_array_equal(chunk, choose(values, candidates, adaptive=False)[0])


def test_commit_margin_by_hand():
    candidates = jnp.arange(2 * H * A, dtype=jnp.float32).reshape(2, H * A)
    # The best whole chunk: candidate 0 (2.5); the best shorter prefix: candidate 1's first two actions (3.0).
    values = jnp.array([[0.0, 1.0, 2.5], [0.5, 3.0, 2.0]])
    for margin, (best, length) in [(0.0, (1, 2)), (0.25, (1, 2)), (0.5, (0, H)), (1.0, (0, H))]:
        chunk, chosen = choose(values, candidates, margin=margin)  # at 0.5 a tie: the lower candidate's chunk
        np.testing.assert_array_equal(chunk, candidates[best])
        assert int(chosen) == length, margin
    # The prefix's candidate comes first: it wins the tie at the margin, not beyond it.
    values = jnp.array([[3.0, 0.0, 0.0], [0.0, 0.0, 2.5]])
    for margin, (best, length) in [(0.25, (0, 1)), (0.5, (0, 1)), (0.75, (1, H))]:
        chunk, chosen = choose(values, candidates, margin=margin)
        np.testing.assert_array_equal(chunk, candidates[best])
        assert int(chosen) == length, margin


def test_acting_picks_among_the_candidates_and_the_fixed_control_executes_whole_chunks():
    agent = tiny_agent()
    fixed = agent.replace(config=agent.config.copy({"adaptive_length": False}))
    observations = jnp.asarray(np.random.default_rng(1).normal(size=(6, D)), jnp.float32)
    key = jax.random.PRNGKey(3)
    chunk, length = agent.sample_actions(observations, key)
    whole = fixed.sample_actions(observations, key)
    assert chunk.shape == whole.shape == (6, H * A) and length.shape == (6,) and length.dtype == jnp.int32
    assert np.all((1 <= np.asarray(length)) & (np.asarray(length) <= H))
    # Both choose among the same draws, by the prefix values of the critic.
    n = agent.config["actor_num_samples"]
    noises = jax.random.normal(key, (6, n, H * A))
    repeated = jnp.repeat(observations[:, None], n, axis=1)
    velocity = lambda x, t: agent.network.select("actor_bc_flow")(repeated, x, t)  # noqa: E731
    candidates = np.asarray(jnp.clip(common.euler_flow(velocity, noises, agent.config["flow_steps"]), -1, 1))
    values = critic_values(agent, repeated, candidates).min(axis=0)  # (6, N, H)
    for b in range(6):
        best, h = np.unravel_index(np.argmax(values[b]), values[b].shape)
        np.testing.assert_array_equal(np.asarray(chunk[b]), candidates[b, best])
        assert int(length[b]) == h + 1
        np.testing.assert_array_equal(np.asarray(whole[b]), candidates[b, np.argmax(values[b, :, -1])])
    committed = agent.replace(config=agent.config.copy({"commit_margin": 1e6}))
    chunk, length = committed.sample_actions(observations, key)  # a large margin: the fixed control's choices
    np.testing.assert_array_equal(np.asarray(chunk), np.asarray(whole))
    np.testing.assert_array_equal(np.asarray(length), np.full(6, H))
    single = agent.sample_actions(observations[0], key)  # one observation: (H * A,) and ()
    assert single[0].shape == (H * A,) and single[1].shape == ()
    assert agent.sample_actions(observations, key, best_of_n=1)[0].shape == (6, H * A)


def random_batch(seed, batch_size=4):
    rng = np.random.default_rng(seed)
    return dict(
        observations=rng.normal(size=(batch_size, D)).astype(np.float32),
        actions=rng.uniform(-1, 1, (batch_size, H, A)).astype(np.float32),
        next_observations=rng.normal(size=(batch_size, H, D)).astype(np.float32),
        rewards=rng.normal(size=(batch_size, H)).astype(np.float32),
        masks=np.ones((batch_size, H), np.float32),
        valid=np.ones((batch_size, H), np.float32),
    )


@pytest.mark.parametrize("target_critic", [False, True])
def test_update_and_batch_update(target_critic):
    agent = tiny_agent(target_critic=target_critic)
    batches = [random_batch(1), random_batch(2)]
    one, info = agent.update(batches[0])
    compiled = ACSACAgent._update._cache_size()
    two, _ = one.update(batches[1])
    assert ACSACAgent._update._cache_size() == compiled  # the second update reuses the first's compilation
    assert all(np.isfinite(float(v)) for v in info.values())
    assert {"critic/prefix_spread", "critic/next_length_mean", "actor/bc_flow_loss"} <= set(info)
    stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    scanned, _ = agent.batch_update(stacked)
    for a, b in zip(
        jax.tree_util.tree_leaves(two.network.params), jax.tree_util.tree_leaves(scanned.network.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # The target critic moves by tau toward the critic either way; only the bootstrap's source differs.
    before, after = agent.network.params, one.network.params
    moved = jax.tree_util.tree_map(
        lambda t, c: t + 0.005 * (c - t), before["modules_target_critic"], before["modules_critic"]
    )
    for a, b in zip(
        jax.tree_util.tree_leaves(moved), jax.tree_util.tree_leaves(after["modules_target_critic"]), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_config_checks_and_methods():
    with pytest.raises(ValueError, match="--agent.num_heads must be an int >= 1"):
        tiny_agent(num_heads=0)
    with pytest.raises(ValueError, match="--agent.adaptive_length must be True or False"):
        check_config({**get_config().to_dict(), "horizon_length": H, "adaptive_length": 1})
    for changes, message in [
        ({"target_choice": "min"}, r"--agent.target_choice must be one of \('max', 'double'\), got 'min'"),
        ({"target_choice": "double", "num_qs": 1}, r"target_choice='double' needs --agent.num_qs >= 2.*got num_qs=1"),
        ({"commit_margin": -0.1}, "--agent.commit_margin must be a finite number >= 0, got -0.1"),
        ({"commit_margin": float("inf")}, "--agent.commit_margin must be a finite number >= 0, got inf"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_config({**get_config().to_dict(), "horizon_length": H, **changes})
    assert check_config({**get_config().to_dict(), "horizon_length": H, "commit_margin": 1})["commit_margin"] == 1
    spec = agents.get("acsac")
    assert spec.agent_class is ACSACAgent and set(spec.methods) == {"acsac", "acsac-fixed"}
    scene = methods.preset("main", "acsac", "scene-play-singletask-task2-v0")
    assert scene == {"horizon_length": 5, "agent.adaptive_length": True, "sparse": True, "agent.actor_num_samples": 4}
    quad = methods.preset("main", "acsac-fixed", "cube-quadruple-play-singletask-task2-v0")
    assert quad["agent.adaptive_length"] is False and quad["agent.actor_num_samples"] == 8 and not quad["sparse"]
    assert spec.method_of(get_config()) == "acsac"
    assert spec.method_of({**get_config(), "adaptive_length": False}) == "acsac-fixed"
