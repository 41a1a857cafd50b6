"""Fidelity guard: three ACFQL updates equal the authors' updates, value for value.

`tests/data/acfql_golden.npz` holds the parameters, batches and results of three `update` calls
made with the authors' implementation (ColinQiyangLi/qc at commit 48283b4, `agents/acfql.py`;
tests/data/README.md says how). This test repeats the procedure on our agent, for QC-FQL
(`distill-ddpg`, alpha = 10) and QC (`best-of-n`, N = 4):

* the same tiny configuration and the authors' initial parameters (loaded into ours);
* every `jax.random.normal` / `jax.random.uniform` call of the agent's code during update k is
  answered by the next draw of `numpy.random.RandomState(1000 + k)`, in call order, with jit
  disabled so that the replacement reaches every call;
* every info value both sides log, and every parameter after the third update (target critic
  included), must agree to a relative error below 1e-5.

Any change to what one update computes (TD target, discount exponent, ensemble aggregation, flow
matching loss, distillation and Q terms, clipping, optimizer, Polyak step, order of the random
draws) makes it fail.
"""

import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

import agents.acfql as acfql
import utils.flax_utils as flax_utils
from agents.acfql import ACFQLAgent, get_config
from tests.golden_noise import NumpyNoise, authors_grad_norm, entries, flat_params

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "acfql_golden.npz")
OB_DIM, ACTION_DIM, HORIZON, NUM_UPDATES = 7, 3, 3, 3
CASES = {
    "fql": dict(actor_type="distill-ddpg", alpha=10.0),
    "qc": dict(actor_type="best-of-n", actor_num_samples=4),
}
# Info keys the comparison must cover; a renamed key on either side would otherwise drop silently.
REQUIRED_INFO = {
    "critic/critic_loss",
    "critic/q_mean",
    "critic/q_max",
    "critic/q_min",
    "actor/actor_loss",
    "actor/bc_flow_loss",
    "actor/distill_loss",
}


# Info keys logged on both sides under one name but defined differently, with the authors' definition
# evaluated on the gradient our update applied. grad/norm: ours is the global L2 norm of the gradient
# (utils/flax_utils.py), the authors' the L1 norm of the vector of per-leaf L2 norms (3.5x larger here).
KNOWN_DIFFERENCES = {"grad/norm": authors_grad_norm}
RTOL = 1e-5
# Both sides run the same float32 operations (on CPU every compared value but grad/norm matched bit
# for bit), so rtol alone would do there; atol only keeps entries whose exact value is ~0 (a
# zero-initialised bias after steps that nearly cancel) from failing on last-bit rounding noise
# elsewhere (float32 eps ~1e-7 times O(1) operands). It must stay far below the smallest change a
# wrong update makes: a Polyak rate of 2 * tau moves target-critic entries by only ~5e-6.
ATOL = 1e-7


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as data:
        return {k: data[k] for k in data.files}


def _make_agent(case, golden):
    """Our agent with the golden configuration and the authors' initial parameters."""
    config = get_config()
    config.actor_hidden_dims = (32, 32)
    config.value_hidden_dims = (32, 32)
    config.flow_steps = 3
    config.horizon_length = HORIZON
    for key, value in CASES[case].items():
        config[key] = value
    agent = ACFQLAgent.create(0, np.zeros(OB_DIM, np.float32), np.zeros(ACTION_DIM, np.float32), config)

    ours = flat_params(agent)
    theirs = entries(golden, f"{case}/params0")
    # The authors' best-of-N agent also builds a one-step actor it never uses: extra golden entries
    # are ignored, but every parameter of ours must come from the golden file with the same shape.
    missing = sorted(set(ours) - set(theirs))
    assert not missing, f"parameters of our agent absent from the golden file: {missing}"
    for path, value in ours.items():
        assert value.shape == theirs[path].shape, f"{path}: ours {value.shape}, golden {theirs[path].shape}"
    loaded = {path: jnp.asarray(theirs[path], dtype=value.dtype) for path, value in ours.items()}
    params = flax.serialization.from_state_dict(agent.network.params, traverse_util.unflatten_dict(loaded, sep="/"))
    network = agent.network.with_params(params)
    return agent.replace(network=network)


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_matches_authors(case, golden, monkeypatch):
    agent = _make_agent(case, golden)
    noise = NumpyNoise(jax.random.normal, jax.random.uniform, acfql.__name__)
    # agents/acfql.py calls jax.random.normal / uniform through the jax.random module at call time.
    monkeypatch.setattr(acfql.jax.random, "normal", noise.normal)
    monkeypatch.setattr(acfql.jax.random, "uniform", noise.uniform)
    # The gradient each update applies, for the authors' definitions in KNOWN_DIFFERENCES.
    grads_seen = []
    apply_gradients = flax_utils.TrainState.apply_gradients

    def recording_apply_gradients(self, grads):
        grads_seen.append(grads)
        return apply_gradients(self, grads)

    monkeypatch.setattr(flax_utils.TrainState, "apply_gradients", recording_apply_gradients)

    with jax.disable_jit():
        for k in range(NUM_UPDATES):
            batch = {name: jnp.asarray(v) for name, v in entries(golden, f"batch{k}").items()}
            noise.reset(1000 + k)
            calls_before, grads_before = noise.calls, len(grads_seen)
            agent, info = agent.update(batch)
            assert noise.calls > calls_before, "the update drew no noise through the patched functions"
            assert len(grads_seen) == grads_before + 1, "the update applied no gradient through TrainState"

            theirs = entries(golden, f"{case}/step{k}")
            shared = sorted(set(info) & set(theirs))
            assert REQUIRED_INFO <= set(shared), f"info keys not on both sides: {REQUIRED_INFO - set(shared)}"
            for key in shared:
                ours = KNOWN_DIFFERENCES[key](grads_seen[-1]) if key in KNOWN_DIFFERENCES else np.asarray(info[key])
                np.testing.assert_allclose(ours, theirs[key], rtol=RTOL, atol=ATOL, err_msg=f"update {k}: {key}")

    ours = flat_params(agent)
    theirs = entries(golden, f"{case}/params3")
    assert any(p.startswith("modules_target_critic/") for p in ours)
    missing = sorted(set(ours) - set(theirs))
    assert not missing, f"parameters absent from the golden file's final parameters: {missing}"
    for path, value in ours.items():
        np.testing.assert_allclose(
            np.asarray(value), theirs[path], rtol=RTOL, atol=ATOL, err_msg=f"after {NUM_UPDATES} updates: {path}"
        )
