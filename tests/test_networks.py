"""utils/networks.py: layer-norm placement, ensembles, shapes, tanh-Gaussian head."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from utils.networks import MLP, ActorVectorField, FourierFeatures, TanhNormalActor, Value

X = jax.random.normal(jax.random.PRNGKey(0), (5, 7))


def test_mlp_layer_norm_after_activation_of_hidden_layers_only():
    mlp = MLP((16, 16, 3), layer_norm=True)
    params = mlp.init(jax.random.PRNGKey(1), X)["params"]
    assert sorted(params) == ["Dense_0", "Dense_1", "Dense_2", "LayerNorm_0", "LayerNorm_1"]
    out, state = mlp.apply({"params": params}, X, capture_intermediates=True)
    inter = state["intermediates"]
    dense0 = inter["Dense_0"]["__call__"][0]
    ln0 = inter["LayerNorm_0"]["__call__"][0]
    # LayerNorm_0 normalises gelu(Dense_0(x)) (activation first, then layer norm; scale 1, bias 0 at init).
    h = nn.gelu(dense0)
    expected = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(ln0, expected, atol=1e-4)
    np.testing.assert_allclose(ln0.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(ln0.std(-1), 1.0, atol=1e-3)
    # The output layer is neither activated nor normalised.
    np.testing.assert_allclose(out, inter["Dense_2"]["__call__"][0])
    assert out.shape == (5, 3)
    plain = MLP((16, 16, 3)).init(jax.random.PRNGKey(1), X)["params"]
    assert sorted(plain) == ["Dense_0", "Dense_1", "Dense_2"]


def test_value_ensemble_members_differ_and_shapes():
    actions = jnp.ones((5, 2))
    value = Value(hidden_dims=(16, 16), num_ensembles=3)
    params = value.init(jax.random.PRNGKey(2), X, actions)
    q = value.apply(params, X, actions)
    assert q.shape == (3, 5)
    kernel = params["params"]["value_net"]["Dense_0"]["kernel"]
    assert kernel.shape == (3, 9, 16)
    assert not np.allclose(kernel[0], kernel[1]) and not np.allclose(q[0], q[1])

    single = Value(hidden_dims=(16,), num_ensembles=1)
    assert single.apply(single.init(jax.random.PRNGKey(3), X, actions), X, actions).shape == (5,)


def test_fourier_features_and_actor_vector_field():
    t = jnp.linspace(0, 1, 4)[:, None]  # (4, 1)
    fixed = FourierFeatures(8)
    out = fixed.apply({}, t)
    assert out.shape == (4, 8)
    np.testing.assert_allclose(out[0], [1, 1, 1, 1, 0, 0, 0, 0], atol=1e-7)  # cos 0 = 1, sin 0 = 0
    # Frequencies 10000^(-j/3), j = 0..3: at t = 1 the features are cos and sin of those.
    freqs = 10000.0 ** (-np.arange(4) / 3)
    np.testing.assert_allclose(out[-1], np.concatenate([np.cos(freqs), np.sin(freqs)]), rtol=1e-6)

    field = ActorVectorField(hidden_dims=(16,), action_dim=6, use_fourier_features=True, fourier_feature_dim=8)
    obs, x, times = jnp.ones((2, 3, 7)), jnp.zeros((2, 3, 6)), jnp.zeros((2, 3, 1))  # extra batch axes
    v = field.apply(field.init(jax.random.PRNGKey(5), obs, x, times), obs, x, times)
    assert v.shape == (2, 3, 6)


def test_tanh_normal_actor_samples_inside_and_finite_log_prob():
    actor = TanhNormalActor(hidden_dims=(16,), action_dim=4)
    params = actor.init(jax.random.PRNGKey(6), X)
    dist = actor.apply(params, X)
    actions, log_probs = dist.sample_and_log_prob(seed=jax.random.PRNGKey(7))
    assert actions.shape == (5, 4) and log_probs.shape == (5,)
    assert np.all(np.abs(actions) < 1.0)
    assert np.all(np.isfinite(log_probs))
    np.testing.assert_allclose(dist.log_prob(actions), log_probs, rtol=1e-4, atol=1e-4)
    # Dataset actions are clipped to 1 - 1e-5 (docs/datasets.md); their log-probability is finite.
    edge = jnp.full((5, 4), 1 - 1e-5) * jnp.array([1, -1, 1, -1])
    assert np.all(np.isfinite(dist.log_prob(edge)))
