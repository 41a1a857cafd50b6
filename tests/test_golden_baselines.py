"""Fidelity guard: the IQL, ReBRAC and IFQL baselines equal the FQL release's updates, value for value.

`tests/data/fql_baselines_update.npz` holds three updates per case made with the release's own code
(seohongpark/fql at 719d044; tests/data/README.md says how). For each case this test builds our agent with the
case's `config_json`, `horizon_length = 1` (the release's one-step batches, as windows of one step) and the
release's initial parameters, and replays the three updates: every `jax.random.normal` / `uniform` call of the
agent's module during update k is answered by the next draw of `numpy.random.RandomState(1000 + k)`, with jit
disabled. Every info value the release logs and every parameter after the third update must agree to rtol 1e-5;
then `sample_actions` on the golden evaluation observations, with the stream `RandomState(2000)`.

The guard tests change one thing the method depends on (the expectile, a loss coefficient, the discount, the
Polyak rate, the target noise) and assert that the comparison then fails.
"""

import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.ifql as ifql
import agents.iql as iql
import agents.rebrac as rebrac
import utils.flax_utils as flax_utils
from tests.golden_noise import NumpyNoise, authors_grad_norm, entries, flat_params, with_golden_params

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fql_baselines_update.npz")
NUM_UPDATES = 3
# case -> the agent module that replays it.
CASES = {"iql": iql, "iql_ddpg": iql, "rebrac": rebrac, "rebrac_ac": rebrac, "ifql": ifql}
# Logged on both sides under one name but defined differently: ours is the global L2 norm (utils/flax_utils.py).
KNOWN_DIFFERENCES = {"grad/norm": authors_grad_norm}
RTOL = 1e-5
# As in tests/test_golden.py: atol only spares entries whose exact value is ~0; far below a Polyak step's 5e-6.
ATOL = 1e-7


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as data:
        return {k: data[k] for k in data.files}


def windows(flat):
    """The release's one-step batch as windows of one step (docs/batch_contract.md, h = 1)."""
    batch = {k: jnp.asarray(v) for k, v in flat.items()}
    step = {k: batch[k][:, None] for k in ("actions", "next_observations", "rewards", "masks", "next_actions")}
    return {**batch, **step, "valid": jnp.ones_like(batch["rewards"][:, None])}


def golden_config(module, case, golden, **changes):
    """The module's config with the case's `config_json` (its keys are the release's), `horizon_length = 1`."""
    config = module.get_config()
    for key, value in json.loads(str(golden[f"{case}/config_json"])).items():
        if key != "action_dim":  # filled in by create()
            config[key] = tuple(value) if isinstance(value, list) else value
    config.horizon_length = 1
    for key, value in changes.items():
        config[key] = value
    return config


def make_agent(case, golden, **changes):
    """Our agent of `case` with the golden configuration (plus `changes`) and the release's initial parameters."""
    module = CASES[case]
    flat = entries(golden, "batch0")
    agent = module.SPEC.agent_class.create(
        0, flat["observations"], flat["actions"], golden_config(module, case, golden)
    )
    agent = with_golden_params(agent, entries(golden, f"{case}/params0"))
    return agent.replace(config=flax.core.FrozenDict({**agent.config, **changes}))


def _patch_noise(module, monkeypatch):
    noise = NumpyNoise(jax.random.normal, jax.random.uniform, module.__name__)
    monkeypatch.setattr(module.jax.random, "normal", noise.normal)
    monkeypatch.setattr(module.jax.random, "uniform", noise.uniform)
    return noise


def mismatches(agent, case, golden, monkeypatch):
    """Three updates of `agent` on the golden batches and noise: the golden values ours does not match
    (`'update k: key'`, `'params3: path'`), empty when everything agrees within RTOL / ATOL."""
    module = CASES[case]
    noise = _patch_noise(module, monkeypatch)
    grads_seen = []
    apply_gradients = flax_utils.TrainState.apply_gradients

    def recording_apply_gradients(self, grads):
        grads_seen.append(grads)
        return apply_gradients(self, grads)

    monkeypatch.setattr(flax_utils.TrainState, "apply_gradients", recording_apply_gradients)
    draws = json.loads(str(golden[f"{case}/meta_json"]))["draws"]

    def differs(ours, theirs):
        return np.shape(ours) != np.shape(theirs) or not np.allclose(ours, theirs, rtol=RTOL, atol=ATOL)

    bad = []
    with jax.disable_jit():
        for k in range(NUM_UPDATES):
            noise.reset(1000 + k)
            calls_before = noise.calls
            agent, info = agent.update(windows(entries(golden, f"batch{k}")))
            assert noise.calls - calls_before == len(draws[f"step{k}"]), (
                f"update {k}: not the release's number of draws"
            )
            theirs = entries(golden, f"{case}/step{k}")
            missing = set(theirs) - set(info)
            assert not missing, f"update {k}: info keys the release logs and ours does not: {sorted(missing)}"
            if "actor/full_update" in info:  # ReBRAC: the actor trains on the release's schedule
                assert bool(info["actor/full_update"]) == bool(golden[f"{case}/full_update"][k]), f"update {k}"
            for key in sorted(theirs):
                ours = KNOWN_DIFFERENCES[key](grads_seen[-1]) if key in KNOWN_DIFFERENCES else np.asarray(info[key])
                if differs(ours, theirs[key]):
                    bad.append(f"update {k}: {key} ours {ours} golden {theirs[key]}")

    ours, theirs = flat_params(agent), entries(golden, f"{case}/params3")
    assert sorted(ours) == sorted(theirs)
    bad += [f"params3: {path}" for path, value in ours.items() if differs(np.asarray(value), theirs[path])]
    return bad


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_matches_release(case, golden, monkeypatch):
    assert mismatches(make_agent(case, golden), case, golden, monkeypatch) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_eval_actions_match_release(case, golden, monkeypatch):
    """`sample_actions` from the golden `params3` on the 5 evaluation observations, in one batched call."""
    agent = make_agent(case, golden)
    agent = with_golden_params(agent, entries(golden, f"{case}/params3"))
    noise = _patch_noise(CASES[case], monkeypatch)
    noise.reset(2000)
    with jax.disable_jit():
        actions = agent.sample_actions(jnp.asarray(golden["eval/observations"]), jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.asarray(actions), golden[f"{case}/eval/actions"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_initial_parameters_are_the_release(case, golden):
    # create(seed=0) builds the release's modules under the same names from the same key: the golden
    # parameters before the first update are our own initial parameters, bit for bit.
    module = CASES[case]
    flat = entries(golden, "batch0")
    agent = module.SPEC.agent_class.create(
        0, flat["observations"], flat["actions"], golden_config(module, case, golden)
    )
    ours = flat_params(agent)
    for path, theirs in entries(golden, f"{case}/params0").items():
        np.testing.assert_array_equal(ours[path], theirs, err_msg=path)


# (case, what is changed: config changes on the replaying agent). Each must break the comparison.
GUARDS = [
    ("iql", "expectile 0.89", dict(expectile=0.89)),
    ("iql", "AWR temperature 10.1", dict(alpha=10.1)),
    ("iql", "discount 0.995", dict(discount=0.995)),
    ("iql", "Polyak rate 2 tau", dict(tau=0.01)),
    ("iql_ddpg", "expectile 0.89", dict(expectile=0.89)),
    ("iql_ddpg", "BC coefficient 0.31", dict(alpha=0.31)),
    ("rebrac", "actor BC 0.11", dict(alpha_actor=0.11)),
    ("rebrac_ac", "critic BC 0.051", dict(alpha_critic=0.051)),
    ("rebrac", "target noise 0.21", dict(actor_noise=0.21)),
    ("rebrac", "discount 0.995", dict(discount=0.995)),
    ("rebrac", "Polyak rate 2 tau", dict(tau=0.01)),
    ("ifql", "expectile 0.89", dict(expectile=0.89)),
    ("ifql", "discount 0.995", dict(discount=0.995)),
    ("ifql", "Polyak rate 2 tau", dict(tau=0.01)),
]


def test_rebrac_actor_schedule_guard_bites(golden, monkeypatch):
    # actor_freq = 1 trains the actor on every update: the release's schedule (updates 0 and 2 critic-only) breaks.
    with pytest.raises(AssertionError, match="update 0"):
        mismatches(make_agent("rebrac", golden, actor_freq=1), "rebrac", golden, monkeypatch)


@pytest.mark.parametrize("case, change, changes", GUARDS, ids=[f"{c}-{w}" for c, w, _ in GUARDS])
def test_guard_bites(case, change, changes, golden, monkeypatch):
    assert mismatches(make_agent(case, golden, **changes), case, golden, monkeypatch), f"{change}: still passes"


def test_ifql_without_chunking_at_h1_is_the_release(golden, monkeypatch):
    # IFQL-n's switch (action_chunking=False) at h = 1 reads the same single action: the release's update again.
    assert mismatches(make_agent("ifql", golden, action_chunking=False), "ifql", golden, monkeypatch) == []


def test_ifql_eval_guard_bites(golden, monkeypatch):
    # One Euler step more: the evaluation actions move (the eval comparison is not vacuous).
    agent = with_golden_params(make_agent("ifql", golden), entries(golden, "ifql/params3"))
    agent = agent.replace(config=flax.core.FrozenDict({**agent.config, "flow_steps": 4}))
    noise = _patch_noise(ifql, monkeypatch)
    noise.reset(2000)
    with jax.disable_jit():
        actions = agent.sample_actions(jnp.asarray(golden["eval/observations"]), jax.random.PRNGKey(0))
    assert not np.allclose(np.asarray(actions), golden["ifql/eval/actions"], rtol=RTOL, atol=ATOL)
