"""`DeviceGoalWindows`: DQC's goal windows drawn on the device.

* `windows(idxs, goal_idxs)` equals the host's `GoalWindows.sample(idxs=..., goal_idxs=...)` bit for bit (keys,
  dtypes, values), every start and goal kind included (cut at the goal, at the trajectory end, behind);
* `sample(key, B)` has the host's distribution: uniform starts over the whole-window starts, goal kinds in
  the configured proportions, uniform and geometric later goals;
* it works inside `utils.device_sampler.offline_updates` with the real `DQCAgent` (tiny): grouping k steps per
  call gives the same agent, and a vmap over seeds equals each seed alone.
"""

import functools

import jax
import numpy as np
import pytest

from agents.dqc import DQCAgent, get_config
from tests.test_device_sampler import assert_trees_close, run_grouped
from utils import goal_windows
from utils.device_sampler import offline_updates
from utils.goal_windows import DeviceGoalWindows, GoalWindows


def chain_dataset(lengths, seed=0, goal_dim=None):
    """Trajectories of the given lengths; observation column 0 holds the row number, column 1 the trajectory."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    traj = np.repeat(np.arange(len(lengths)), lengths)
    obs = np.stack([np.arange(n), traj, rng.normal(size=n)], axis=1).astype(np.float32)
    actions = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    terminals = np.zeros(n, np.float32)
    terminals[np.cumsum(lengths) - 1] = 1
    reps = None if goal_dim is None else rng.normal(size=(n, goal_dim)).astype(np.float32)
    return obs, actions, terminals, traj, reps


def config(**overrides):
    c = dict(backup_horizon=5, discount=0.97, value_p_curgoal=0.2, value_p_trajgoal=0.5, value_p_randomgoal=0.3)
    return {**c, "value_geom_sample": False, **overrides}


@pytest.mark.parametrize("oracle", [True, False])
def test_windows_equal_the_host_bit_for_bit(oracle):
    obs, actions, terminals, _, reps = chain_dataset([11, 9, 14, 3, 8], goal_dim=4 if oracle else None)
    host = GoalWindows(obs, actions, terminals, config(), oracle_reps=reps)
    device = DeviceGoalWindows.create(host)
    n = len(terminals)
    rows = np.arange(n)
    idxs = np.repeat(rows, n)  # every start (also where no whole window fits) with every goal row
    goal_idxs = np.tile(rows, n)
    expected = host.sample(len(idxs), np.random.default_rng(0), idxs=idxs, goal_idxs=goal_idxs)
    got = device.windows(idxs, goal_idxs)
    assert set(got) == set(expected)
    for key in expected:
        value = np.asarray(got[key])
        assert value.dtype == expected[key].dtype and value.shape == expected[key].shape, key
        np.testing.assert_array_equal(value, expected[key], err_msg=key)
    assert (device.goals is None) == (not oracle)
    assert device.nbytes == goal_windows.estimate_nbytes(host)
    # Every kind of window is among them.
    k, reached = expected["high_value_backup_horizon"], expected["high_value_masks"] == 0
    assert reached.any() and (~reached).any() and (k < 5).any() and (expected["valids"] == 0).any()


def test_sampled_windows_are_windows_of_their_rows():
    obs, actions, terminals, _, reps = chain_dataset([30, 12, 40], goal_dim=3)
    host = GoalWindows(obs, actions, terminals, config(), oracle_reps=reps)
    device = DeviceGoalWindows.create(host)
    batch = jax.jit(device.sample, static_argnums=1)(jax.random.PRNGKey(3), 256)
    idxs = np.asarray(batch["observations"][:, 0]).astype(int)
    goal_idxs = idxs + np.asarray(batch["high_value_offsets"])
    expected = host.sample(256, np.random.default_rng(0), idxs=idxs, goal_idxs=goal_idxs)
    for key in expected:
        np.testing.assert_array_equal(np.asarray(batch[key]), expected[key], err_msg=key)


def test_sample_has_the_host_distribution():
    lengths = [40] * 50
    obs, actions, terminals, traj, _ = chain_dataset(lengths)
    c = config(value_p_curgoal=0.1, value_p_trajgoal=0.6, value_p_randomgoal=0.3)
    host = GoalWindows(obs, actions, terminals, c)
    device = DeviceGoalWindows.create(host)
    n = 40000
    batch = device.sample(jax.random.PRNGKey(0), n)
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    goal_rows = rows + np.asarray(batch["high_value_offsets"])
    # Starts: uniform over the whole-window starts (and only those).
    counts = np.bincount(rows, minlength=len(terminals))
    assert set(np.flatnonzero(counts)) == set(host.valid_idxs)
    expected = n / len(host.valid_idxs)
    assert abs(counts[host.valid_idxs].mean() - expected) < 1e-9
    chi2 = ((counts[host.valid_idxs] - expected) ** 2 / expected).sum()  # ~ chi2 with V - 1 = 1699 dof
    assert chi2 < len(host.valid_idxs) + 6 * np.sqrt(2 * len(host.valid_idxs)), chi2
    # Goal kinds in the host's proportions (a random goal lands in the start's trajectory with probability 1/50).
    current = goal_rows == rows
    later_same = (goal_rows > rows) & (traj[goal_rows] == traj[rows])
    other = traj[goal_rows] != traj[rows]
    assert abs(current.mean() - 0.1) < 0.01, current.mean()
    assert abs(later_same.mean() - (0.6 + 0.3 / 50 / 2)) < 0.015, later_same.mean()
    assert abs(other.mean() - 0.3 * 49 / 50) < 0.01, other.mean()
    assert np.all((goal_rows[other] % 40) <= 40 - 1 - 5)  # random goals are drawn like the starts
    # Uniform later goals over [i + 1, final], ends at half weight: the host's rounding, in the same proportions.
    host_batch = host.sample(n, np.random.default_rng(1))
    host_rows = host_batch["observations"][:, 0].astype(int)
    host_offsets = host_batch["high_value_offsets"][(host_batch["high_value_offsets"] > 0)]
    offsets = (goal_rows - rows)[later_same]
    final = (traj[rows] + 1) * 40 - 1
    np.testing.assert_allclose(offsets.mean(), np.mean(1 + (final - rows)[later_same]) / 2, rtol=0.02)
    ends = (goal_rows == final)[later_same].mean()
    host_final = (host_rows // 40 + 1) * 40 - 1
    host_ends = (host_rows + host_batch["high_value_offsets"] == host_final)[host_batch["high_value_offsets"] > 0]
    assert abs(ends - host_ends.mean()) < 0.01 and host_offsets.size > 0


def test_geometric_goals_and_current_only():
    obs, actions, terminals, _, _ = chain_dataset([400] * 5)
    c = config(value_p_curgoal=0.0, value_p_trajgoal=1.0, value_p_randomgoal=0.0, value_geom_sample=True)
    c["discount"] = 0.9
    device = DeviceGoalWindows.create(GoalWindows(obs, actions, terminals, c))
    batch = device.sample(jax.random.PRNGKey(2), 20000)
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    offsets = np.asarray(batch["high_value_offsets"])
    final = (rows // 400 + 1) * 400 - 1
    assert np.all(offsets >= 1) and np.all(rows + offsets <= final)
    uncapped = rows + 60 < final
    np.testing.assert_allclose(offsets[uncapped].mean(), 1 / (1 - 0.9), rtol=0.05)  # Geometric(1 - gamma)
    only_current = config(value_p_curgoal=1.0, value_p_trajgoal=0.0, value_p_randomgoal=0.0)
    device = DeviceGoalWindows.create(GoalWindows(obs, actions, terminals, only_current))
    batch = device.sample(jax.random.PRNGKey(2), 100)
    assert np.all(np.asarray(batch["high_value_offsets"]) == 0) and np.all(np.asarray(batch["high_value_masks"]) == 0)


def test_errors_and_fits(monkeypatch):
    obs, actions, terminals, _, reps = chain_dataset([12, 9], goal_dim=2)
    host = GoalWindows(obs, actions, terminals, config(), oracle_reps=reps)
    device = DeviceGoalWindows.create(host)
    with pytest.raises(ValueError, match=r"idxs must be rows in \[0, 21\)"):
        device.windows(np.array([0, 21]), np.array([0, 1]))
    with pytest.raises(ValueError, match="1-D integer"):
        device.windows(np.array([0.0, 1.0]), np.array([0, 1]))
    f64 = GoalWindows(obs.astype(np.float64), actions, terminals, config(), oracle_reps=reps)
    with pytest.raises(ValueError, match="jax_enable_x64"):
        DeviceGoalWindows.create(f64)
    assert not goal_windows.fits_on_device(f64)
    need = goal_windows.estimate_nbytes(host)
    monkeypatch.setattr(goal_windows, "available_memory", lambda device=None: 2 * need)
    assert goal_windows.fits_on_device(host) and not goal_windows.fits_on_device(host, fraction=0.4)
    with pytest.raises(ValueError, match="fraction"):
        goal_windows.fits_on_device(host, fraction=0.0)


# ---------------------------------------------------------------- with the real agent


OB_DIM, GOAL_DIM, H, H_A, BATCH = 3, 2, 4, 2, 16


def tiny_dqc(seed):
    c = get_config()
    c.actor_hidden_dims = c.value_hidden_dims = (16, 16)
    c.flow_steps, c.best_of_n, c.batch_size = 2, 4, BATCH
    c.backup_horizon, c.policy_chunk_size, c.discount = H, H_A, 0.95
    return DQCAgent.create(seed, np.zeros(OB_DIM, np.float32), np.zeros(2, np.float32), c, np.zeros(GOAL_DIM))


@pytest.fixture(scope="module")
def setup():
    obs, actions, terminals, _, reps = chain_dataset([20, 15, 25], goal_dim=GOAL_DIM)
    agent = tiny_dqc(0)
    host = GoalWindows(obs, actions, terminals, dict(agent.config), oracle_reps=reps)
    return agent, host, DeviceGoalWindows.create(host)


def test_k_grouping_through_offline_updates_gives_the_same_agent(setup):
    agent, host, device = setup
    key = jax.random.PRNGKey(7)
    one, info_one = run_grouped(agent, device, key, [1] * 6)
    six, info_six = run_grouped(agent, device, key, [6])
    threes, info_threes = run_grouped(agent, device, key, [3, 3])
    tol = dict(rtol=0.0, atol=0.0) if jax.default_backend() == "cpu" else dict(rtol=1e-6, atol=1e-7)
    for other, info in ((six, info_six), (threes, info_threes)):
        assert_trees_close(other, one, **tol)
        assert_trees_close(info, info_one, **tol)
    assert int(one.network.step) == int(agent.network.step) + 6
    assert all(np.isfinite(np.asarray(v)) for v in info_one.values())


def test_offline_updates_equal_host_updates_on_the_same_windows(setup):
    agent, host, device = setup
    key, first, k = jax.random.PRNGKey(5), 3, 3
    expected = agent
    for t in range(first, first + k):
        batch = device.sample(jax.random.fold_in(key, t), BATCH)  # the step's windows, read back to the host
        idxs = np.asarray(batch["observations"][:, 0]).astype(int)
        goal_idxs = idxs + np.asarray(batch["high_value_offsets"])
        expected, _ = expected.update(host.sample(BATCH, np.random.default_rng(0), idxs=idxs, goal_idxs=goal_idxs))
    got, _ = offline_updates(agent, device, key, first, num_steps=k)
    assert_trees_close(got, expected, rtol=1e-5, atol=1e-6)


def test_vmap_over_seeds_equals_each_seed_alone(setup):
    agent, _, device = setup
    fresh = tiny_dqc(1)
    other = agent.replace(
        rng=fresh.rng, network=agent.network.replace(params=fresh.network.params, opt_state=fresh.network.opt_state)
    )
    stacked = jax.tree_util.tree_map(lambda *x: np.stack(x), agent, other)
    keys = np.stack([jax.random.PRNGKey(1), jax.random.PRNGKey(2)])
    run = jax.vmap(functools.partial(offline_updates, num_steps=3), in_axes=(0, None, 0, None))
    together, infos = run(stacked, device, keys, 1)
    for i, single in enumerate((agent, other)):
        alone, info = offline_updates(single, device, keys[i], 1, num_steps=3)
        assert_trees_close(jax.tree_util.tree_map(lambda x, i=i: x[i], together), alone, rtol=1e-5, atol=1e-6)
        assert_trees_close(jax.tree_util.tree_map(lambda x, i=i: x[i], infos), info, rtol=1e-5, atol=1e-5)
