"""utils/flax_utils.py: checkpoints round trip to the bit and fail loudly; Polyak math; gradient routing."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.acfql import ACFQLAgent, get_config
from utils.flax_utils import (
    CheckpointError,
    ModuleDict,
    TrainState,
    load_checkpoint_metadata,
    polyak_update,
    restore_agent,
    save_agent,
)
from utils.networks import MLP


def tiny_agent(seed=0, hidden=(16, 16)):
    config = get_config()
    config.horizon_length = 2
    config.actor_type = "distill-ddpg"
    config.actor_hidden_dims = config.value_hidden_dims = hidden
    return ACFQLAgent.create(seed, np.zeros(3, np.float32), np.zeros(2, np.float32), config)


def trained_agent():
    """An agent after one update, so the optimizer moments and the step are not at their initial values."""
    rng = np.random.default_rng(0)
    batch = dict(
        observations=rng.normal(size=(4, 3)).astype(np.float32),
        actions=rng.uniform(-1, 1, (4, 2, 2)).astype(np.float32),
        next_observations=rng.normal(size=(4, 2, 3)).astype(np.float32),
        rewards=rng.normal(size=(4, 2)).astype(np.float32),
        masks=np.ones((4, 2), np.float32),
        valid=np.ones((4, 2), np.float32),
    )
    return tiny_agent().update(batch)[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    agent = trained_agent()
    path = save_agent(agent, str(tmp_path_factory.mktemp("ckpt") / "agent.msgpack"), metadata={"step": 7})
    return agent, path


def test_save_restore_round_trip_is_bit_exact(saved):
    agent, path = saved
    template = tiny_agent(seed=123)  # same structure, different values
    restored = restore_agent(template, path)
    leaves = jax.tree_util.tree_leaves_with_path(agent)
    restored_leaves = jax.tree_util.tree_leaves_with_path(restored)
    assert [p for p, _ in leaves] == [p for p, _ in restored_leaves]
    assert len(leaves) > 10
    for (key, a), (_, b) in zip(leaves, restored_leaves, strict=True):
        assert np.asarray(a).dtype == np.asarray(b).dtype, jax.tree_util.keystr(key)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(key))
    assert not np.array_equal(
        jax.tree_util.tree_leaves(template.network.params)[0], jax.tree_util.tree_leaves(agent.network.params)[0]
    )
    assert load_checkpoint_metadata(path) == {"step": 7}
    # The restored agent acts exactly like the saved one.
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(
        restored.sample_actions(obs, jax.random.PRNGKey(0)), agent.sample_actions(obs, jax.random.PRNGKey(0))
    )


def test_truncated_checkpoint_raises(saved, tmp_path):
    _, path = saved
    with open(path, "rb") as f:
        data = f.read()
    broken = tmp_path / "broken.msgpack"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        restore_agent(tiny_agent(), str(broken))


def test_missing_checkpoint_raises(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        restore_agent(tiny_agent(), str(tmp_path / "nothing_here.msgpack"))


def test_checkpoint_of_a_different_size_raises(saved):
    _, path = saved
    with pytest.raises(CheckpointError, match="differ|does not match"):
        restore_agent(tiny_agent(hidden=(8, 8)), path)


def test_save_leaves_no_temporary_files(saved):
    _, path = saved
    assert [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp")] == []


def test_polyak_update_on_hand_numbers():
    source = {"a": jnp.array(1.0), "b": jnp.array([2.0, 4.0])}
    target = {"a": jnp.array(3.0), "b": jnp.array([0.0, 8.0])}
    new = polyak_update(source, target, 0.25)
    np.testing.assert_allclose(new["a"], 0.25 * 1.0 + 0.75 * 3.0)  # 2.5
    np.testing.assert_allclose(new["b"], [0.5, 7.0])
    np.testing.assert_allclose(target["b"], [0.0, 8.0])  # inputs untouched


def test_module_called_without_params_gets_exactly_zero_gradient():
    network_def = ModuleDict({"a": MLP((4, 1)), "b": MLP((4, 1))})
    x = jnp.linspace(-1, 1, 6).reshape(3, 2)
    params = network_def.init(jax.random.PRNGKey(0), a=(x,), b=(x,))["params"]
    state = TrainState.create(network_def, params, tx=optax.adam(1e-3))

    def loss(grad_params):
        with_grad = state.select("a")(x, params=grad_params)
        without = state.select("b")(x)  # stored parameters: a constant
        return jnp.sum(with_grad * without) + jnp.sum(without**2)

    grads = jax.grad(loss)(state.params)
    assert all(np.all(np.asarray(g) == 0) for g in jax.tree_util.tree_leaves(grads["modules_b"]))
    assert any(np.any(np.asarray(g) != 0) for g in jax.tree_util.tree_leaves(grads["modules_a"]))


def test_apply_loss_fn_gradient_statistics():
    network_def = ModuleDict({"a": nn.Dense(2)})
    x = jnp.array([[1.0, -2.0]])
    params = network_def.init(jax.random.PRNGKey(0), a=(x,))["params"]
    state = TrainState.create(network_def, params, tx=optax.sgd(0.1))
    loss = lambda p: (jnp.sum(state.select("a")(x, params=p)), {})
    new_state, info = state.apply_loss_fn(loss)
    # d/dkernel = x^T 1 = [[1, 1], [-2, -2]], d/dbias = [1, 1]
    np.testing.assert_allclose(info["grad/norm"], np.sqrt(1 + 1 + 4 + 4 + 1 + 1), rtol=1e-6)
    assert float(info["grad/max"]) == 1.0 and float(info["grad/min"]) == -2.0
    np.testing.assert_allclose(new_state.params["modules_a"]["bias"], params["modules_a"]["bias"] - 0.1)
    assert int(new_state.step) == 2
