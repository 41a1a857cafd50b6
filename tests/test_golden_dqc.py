"""Fidelity guard: DQC updates and windows equal the authors' release, value for value.

`tests/data/dqc_update_golden.npz` and `dqc_windows_golden.npz` were made with the authors' code
(ColinQiyangLi/dqc at df89825; tests/data/README.md says how). This test repeats the procedure:

* updates: for each case (`dqc`: expectile distillation + quantile backup, `dqc_alt`: the other two
  losses, `ns`: no chunk critic), our agent with the golden configuration and the authors' initial
  parameters makes three updates on the golden batches; every `jax.random.normal` / `uniform` call of
  agents/dqc.py during update k is answered by the next draw of `numpy.random.RandomState(1000 + k)`
  (jit disabled so the replacement reaches it). Every info value both sides log and every parameter
  after the third update (target action critic included) must agree to rtol 1e-5.
* windows: `GoalWindows.sample` with the golden start and goal rows returns the authors' arrays.

The guard tests at the end change one thing the method depends on (kappa_b, kappa_d, the discount
power of the bootstrap, the ensemble aggregation, the valids column; the goal cut, the trajectory-end
cut and gamma^k in the windows) and assert that the comparison then fails.
"""

import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.dqc as dqc
import utils.flax_utils as flax_utils
import utils.goal_windows as goal_windows
from agents.dqc import DQCAgent, get_config
from tests.golden_noise import NumpyNoise, authors_grad_norm, entries, flat_params, with_golden_params

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
UPDATE_GOLDEN = os.path.join(DATA, "dqc_update_golden.npz")
WINDOWS_GOLDEN = os.path.join(DATA, "dqc_windows_golden.npz")
OB_DIM, GOAL_DIM, ACTION_DIM, NUM_UPDATES = 7, 4, 3, 3
BASE = dict(
    actor_hidden_dims=(32, 32), value_hidden_dims=(32, 32), flow_steps=3, discount=0.99, best_of_n=4, backup_horizon=5
)
CASES = {
    "dqc": dict(
        use_chunk_critic=True,
        policy_chunk_size=2,
        distill_method="expectile",
        kappa_d=0.8,
        implicit_backup_type="quantile",
        kappa_b=0.93,
        q_agg="min",
    ),
    "dqc_alt": dict(
        use_chunk_critic=True,
        policy_chunk_size=2,
        distill_method="quantile",
        kappa_d=0.7,
        implicit_backup_type="expectile",
        kappa_b=0.9,
        q_agg="mean",
    ),
    "ns": dict(
        use_chunk_critic=False,
        policy_chunk_size=1,
        distill_method="expectile",
        kappa_d=0.5,
        implicit_backup_type="quantile",
        kappa_b=0.7,
        q_agg="min",
    ),
}
# Info keys the comparison must cover; a renamed key on either side would otherwise drop silently.
REQUIRED_INFO = {
    "action_critic/critic_loss",
    "action_critic/q_mean",
    "action_critic/value_loss",
    "action_critic/adv",
    "action_critic/v_mean",
    "actor/bc_flow_loss",
    "grad/norm",
    "grad/max",
    "grad/min",
}
CHUNK_INFO = {"chunk_critic/critic_loss", "chunk_critic/q_mean", "chunk_critic/q_logit_mean"}


# Logged on both sides under one name but defined differently (as in tests/test_golden.py): our grad/norm
# is the global L2 norm (utils/flax_utils.py); the authors' is checked on the gradient our update applied.
KNOWN_DIFFERENCES = {"grad/norm": authors_grad_norm}
RTOL = 1e-5
# As in tests/test_golden.py: the same float32 operations run on both sides (on CPU every value matched to
# the last bit or two), so atol only spares entries whose exact value is ~0 (a zero-initialised bias after
# steps that nearly cancel). It stays far below the smallest change a wrong update makes: the Polyak step
# moves the target action critic by ~tau * 3 Adam steps * lr ~ 5e-6, and the guard tests below fail at it.
ATOL = 1e-7


@pytest.fixture(scope="module")
def golden():
    with np.load(UPDATE_GOLDEN) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def windows_golden():
    with np.load(WINDOWS_GOLDEN) as data:
        return {k: data[k] for k in data.files}


def _make_agent(case, golden):
    """Our agent with the golden configuration and the authors' initial parameters."""
    config = get_config()
    for key, value in {**BASE, **CASES[case]}.items():
        config[key] = value
    ex_obs, ex_action, ex_goal = (np.zeros(n, np.float32) for n in (OB_DIM, ACTION_DIM, GOAL_DIM))
    agent = DQCAgent.create(0, ex_obs, ex_action, config, ex_goals=ex_goal)
    return with_golden_params(agent, entries(golden, f"{case}/params0"))


def _mismatches(agent, case, golden, monkeypatch, batch_change=None):
    """Three updates of `agent` on the golden batches and noise; the golden values ours does not match.

    `batch_change(batch) -> batch` alters each batch first (the guard tests). Returns a list of
    `'update k: key'` / `'params3: path'` strings, empty when everything agrees within RTOL / ATOL.
    """
    noise = NumpyNoise(jax.random.normal, jax.random.uniform, dqc.__name__)
    monkeypatch.setattr(dqc.jax.random, "normal", noise.normal)
    monkeypatch.setattr(dqc.jax.random, "uniform", noise.uniform)
    grads_seen = []
    apply_gradients = flax_utils.TrainState.apply_gradients

    def recording_apply_gradients(self, grads):
        grads_seen.append(grads)
        return apply_gradients(self, grads)

    monkeypatch.setattr(flax_utils.TrainState, "apply_gradients", recording_apply_gradients)

    def differs(ours, theirs):
        return not np.allclose(ours, theirs, rtol=RTOL, atol=ATOL) or np.shape(ours) != np.shape(theirs)

    bad = []
    required = REQUIRED_INFO | (CHUNK_INFO if CASES[case]["use_chunk_critic"] else set())
    with jax.disable_jit():
        for k in range(NUM_UPDATES):
            batch = {name: jnp.asarray(v) for name, v in entries(golden, f"batch{k}").items()}
            batch = batch_change(batch) if batch_change else batch
            noise.reset(1000 + k)
            calls_before, grads_before = noise.calls, len(grads_seen)
            agent, info = agent.update(batch)
            assert noise.calls == calls_before + 2, "the update should draw one normal and one uniform"
            assert len(grads_seen) == grads_before + 1, "the update applied no gradient through TrainState"

            theirs = entries(golden, f"{case}/step{k}")
            assert required <= set(info) & set(theirs), f"info keys not on both sides: {required - set(info)}"
            for key in sorted(set(info) & set(theirs)):
                ours = KNOWN_DIFFERENCES[key](grads_seen[-1]) if key in KNOWN_DIFFERENCES else np.asarray(info[key])
                if differs(ours, theirs[key]):
                    bad.append(f"update {k}: {key} ours {ours} golden {theirs[key]}")

    ours, theirs = flat_params(agent), entries(golden, f"{case}/params3")
    assert sorted(ours) == sorted(theirs) and any(p.startswith("modules_target_action_critic/") for p in ours)
    bad += [f"params3: {path}" for path, value in ours.items() if differs(np.asarray(value), theirs[path])]
    return bad


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_matches_authors(case, golden, monkeypatch):
    assert _mismatches(_make_agent(case, golden), case, golden, monkeypatch) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_initial_parameters_are_the_authors(case, golden):
    # create(seed=0) builds the release's modules in its parameter tree from the same key: the golden
    # parameters before the first update are our own initial parameters, bit for bit.
    config = get_config()
    for key, value in {**BASE, **CASES[case]}.items():
        config[key] = value
    ex_obs, ex_action, ex_goal = (np.zeros(n, np.float32) for n in (OB_DIM, ACTION_DIM, GOAL_DIM))
    ours = flat_params(DQCAgent.create(0, ex_obs, ex_action, config, ex_goals=ex_goal))
    for path, theirs in entries(golden, f"{case}/params0").items():
        np.testing.assert_array_equal(ours[path], theirs, err_msg=path)


def _with_config(agent, **changes):
    return agent.replace(config=flax.core.FrozenDict({**agent.config, **changes}))


def _intended_valids_column(batch):
    """The column h_a - 1 in every column of `valids` (what the paper means; the release reads another)."""
    column = batch["valids"][:, CASES["dqc"]["policy_chunk_size"] - 1]
    return {**batch, "valids": jnp.broadcast_to(column[:, None], batch["valids"].shape)}


# (case, what is changed, agent -> agent, batch -> batch). Each must break the comparison.
GUARDS = (
    [(case, "kappa_b + 0.01", lambda a: _with_config(a, kappa_b=a.config["kappa_b"] + 0.01), None) for case in CASES]
    + [(case, "kappa_d + 0.01", lambda a: _with_config(a, kappa_d=a.config["kappa_d"] + 0.01), None) for case in CASES]
    + [
        # gamma^(k+1) instead of gamma^k in the bootstrap (the chunk critic's target, and the action critic's in ns)
        (
            case,
            "discount power k+1",
            None,
            lambda b: {**b, "high_value_backup_horizon": b["high_value_backup_horizon"] + 1},
        )
        for case in CASES
    ]
    + [
        ("dqc", "q_agg mean", lambda a: _with_config(a, q_agg="mean"), None),
        ("ns", "q_agg mean", lambda a: _with_config(a, q_agg="mean"), None),
        ("dqc", "valids column h_a - 1", None, _intended_valids_column),
    ]
)


@pytest.mark.parametrize("case, change, agent_change, batch_change", GUARDS, ids=[f"{c}-{w}" for c, w, _, _ in GUARDS])
def test_update_guard_bites(case, change, agent_change, batch_change, golden, monkeypatch):
    agent = _make_agent(case, golden)
    agent = agent_change(agent) if agent_change else agent
    bad = _mismatches(agent, case, golden, monkeypatch, batch_change)
    assert bad, f"{change}: the golden comparison still passes"


# ---------------------------------------------------------------- windows

WINDOW_KEYS = (
    "observations",
    "actions",
    "high_value_goals",
    "high_value_action_chunks",
    "valids",
    "high_value_next_observations",
    "high_value_backup_horizon",
    "high_value_rewards",
    "high_value_masks",
    "high_value_offsets",
)


def _window_mismatches(windows_golden, discount=0.99, oracle=True, rows=slice(None)):
    """The window keys where `GoalWindows.sample` differs from the golden batch (for the golden windows `rows`)."""
    config = get_config()
    config.discount, config.backup_horizon = discount, 5
    g = windows_golden
    windows = goal_windows.GoalWindows(
        g["observations"], g["actions"], g["terminals"], config, oracle_reps=g["oracle_reps"] if oracle else None
    )
    idxs, goal_idxs = g["idxs"][rows], g["goal_idxs"][rows]
    batch = windows.sample(len(idxs), np.random.default_rng(0), idxs=idxs, goal_idxs=goal_idxs)
    assert set(WINDOW_KEYS) <= set(batch) and set(dqc.BATCH_KEYS) <= set(batch)
    bad = []
    for key in WINDOW_KEYS:
        theirs = g[f"batch/{key}"][rows]
        if np.shape(batch[key]) != theirs.shape or not np.allclose(batch[key], theirs, rtol=1e-6, atol=0):
            bad.append(key)
    return bad


def test_windows_match_authors(windows_golden):
    assert _window_mismatches(windows_golden) == []


def _no_goal_cut(idxs, final_idxs, goal_idxs, horizon):
    return np.minimum(horizon, final_idxs - idxs)


def _no_end_cut(idxs, final_idxs, goal_idxs, horizon):
    offsets = goal_idxs - idxs
    return np.where((offsets >= 0) & (offsets < horizon), offsets, horizon)


@pytest.mark.parametrize(
    "change, expected",
    [
        ("no goal cut", {"high_value_backup_horizon", "high_value_rewards", "high_value_masks"}),
        ("no trajectory-end cut", {"high_value_backup_horizon", "high_value_rewards", "high_value_masks"}),
        ("discount 0.995", {"high_value_rewards"}),
        ("goals from observations", {"high_value_goals"}),
    ],
)
def test_windows_guard_bites(change, expected, windows_golden, monkeypatch):
    rows = slice(None)
    if change == "no goal cut":
        monkeypatch.setattr(goal_windows, "backup_horizons", _no_goal_cut)
    elif change == "no trajectory-end cut":
        monkeypatch.setattr(goal_windows, "backup_horizons", _no_end_cut)
        rows = windows_golden["idxs"] + 5 < len(windows_golden["terminals"])  # windows that stay inside the data
    discount = 0.995 if change == "discount 0.995" else 0.99
    bad = _window_mismatches(windows_golden, discount, oracle=change != "goals from observations", rows=rows)
    assert expected <= set(bad), bad
