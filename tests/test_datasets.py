"""Tests for utils/datasets.py: the chunked batch contract, the replay buffer wrap-around, errors."""

import numpy as np
import pytest

from utils.datasets import Dataset, ReplayBuffer

SEQ_KEYS = {
    "observations",
    "full_observations",
    "actions",
    "next_observations",
    "next_actions",
    "rewards",
    "masks",
    "terminals",
    "valid",
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def random_fields(n, rng, pixel=False, p_terminal=0.1, p_mask_zero=0.2):
    """Random rows with random terminals and masks (0 at terminals and at random other steps)."""
    ob_shape = (4, 5, 3) if pixel else (3,)
    if pixel:
        obs = rng.integers(0, 256, size=(n, *ob_shape), dtype=np.uint8)
        next_obs = rng.integers(0, 256, size=(n, *ob_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(n, *ob_shape)).astype(np.float32)
        next_obs = rng.normal(size=(n, *ob_shape)).astype(np.float32)
    terminals = (rng.random(n) < p_terminal).astype(np.float32)
    masks = (rng.random(n) >= p_mask_zero).astype(np.float32)
    return dict(
        observations=obs,
        next_observations=next_obs,
        actions=rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        rewards=rng.normal(size=n).astype(np.float32),
        terminals=terminals,
        masks=masks,
        qpos=rng.normal(size=(n, 4)),
    )


def slow_sequence(f, starts, H, discount, stop_reward_at_mask_zero):
    """The contract of docs/batch_contract.md, one window and one step at a time."""
    n = len(f["rewards"])
    out = {key: [] for key in SEQ_KEYS}
    for i in starts:
        total, run_mask, run_term, counting = 0.0, 1.0, 0.0, True
        rew, msk, term, val = [], [], [], []
        for k in range(H):
            row = i + k
            if counting or not stop_reward_at_mask_zero:
                total += discount**k * float(f["rewards"][row])
            if f["masks"][row] == 0:
                counting = False  # later rewards are dropped by the corrected sums
            val.append(1.0 if k == 0 else 1.0 - term[k - 1])
            run_mask = min(run_mask, float(f["masks"][row]))
            run_term = max(run_term, float(f["terminals"][row]))
            rew.append(total)
            msk.append(run_mask)
            term.append(run_term)
        time_axis = 0  # (H, *ob) for any observation shape
        out["observations"].append(f["observations"][i])
        out["full_observations"].append(np.stack([f["observations"][i + k] for k in range(H)], time_axis))
        out["next_observations"].append(np.stack([f["next_observations"][i + k] for k in range(H)], time_axis))
        out["actions"].append(np.stack([f["actions"][i + k] for k in range(H)]))
        out["next_actions"].append(np.stack([f["actions"][min(i + k + 1, n - 1)] for k in range(H)]))
        out["rewards"].append(rew)
        out["masks"].append(msk)
        out["terminals"].append(term)
        out["valid"].append(val)
    return {key: np.asarray(value) for key, value in out.items()}


def seven_step_fields():
    """Two trajectories: rows 0-3 (terminal at row 3) and rows 4-6 (terminal at row 6).

    Row 1 has mask 0 without being a terminal (an OGBench success inside play data).
    Row t has observation [t], next observation [t + 1], action [10 t] and reward t + 1.
    """
    t = np.arange(7, dtype=np.float32)
    return dict(
        observations=t[:, None],
        next_observations=t[:, None] + 1,
        actions=10 * t[:, None],
        rewards=t + 1,  # 1 2 3 4 5 6 7
        masks=np.array([1, 0, 1, 1, 1, 1, 1], dtype=np.float32),
        terminals=np.array([0, 0, 0, 1, 0, 0, 1], dtype=np.float32),
    )


def transition(t):
    """A transition whose every field encodes the time step t."""
    return dict(
        observations=np.array([t], dtype=np.float32),
        next_observations=np.array([t + 1], dtype=np.float32),
        actions=np.array([t], dtype=np.float32),
        rewards=np.float32(t),
        masks=np.float32(1.0),
        terminals=np.float32(0.0),
    )


# --------------------------------------------------------------------------------------------
# sample_sequence == per-window loop
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pixel", [False, True])  # observations (3,) or images (4, 5, 3): one layout
@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("H", [1, 3, 5])
def test_sample_sequence_matches_slow_loop(pixel, stop, H):
    rng = np.random.default_rng(123)
    f = random_fields(120, rng, pixel=pixel)
    ds = Dataset.create(stop_reward_at_mask_zero=stop, **f)
    starts = np.arange(ds.size - H + 1)  # every window, the last one included
    got = ds.sample_sequence(len(starts), H, 0.9, idxs=starts)
    want = slow_sequence(f, starts, H, 0.9, stop)
    assert set(got) == SEQ_KEYS
    B = len(starts)
    ob = f["observations"].shape[1:]
    pix = (H, *ob)
    shapes = dict(
        observations=(B, *ob),
        full_observations=(B, *pix),
        next_observations=(B, *pix),
        actions=(B, H, 2),
        next_actions=(B, H, 2),
    )
    for key in SEQ_KEYS:
        assert got[key].shape == shapes.get(key, (B, H)), key
        if key in ("rewards", "masks", "terminals", "valid"):
            assert got[key].dtype == np.float32, key
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6, err_msg=key)
        else:
            assert got[key].dtype == f[key.replace("full_", "").replace("next_actions", "actions")].dtype
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # The random data really exercised both reward modes.
    assert (f["masks"][:-1] == 0).any() and (f["terminals"] == 1).any()


def test_flag_changes_rewards_only_after_mask_zero():
    rng = np.random.default_rng(5)
    f = random_fields(200, rng)
    starts = np.arange(200 - 4 + 1)
    default = Dataset.create(**f).sample_sequence(len(starts), 4, 0.99, idxs=starts)
    fixed_ds = Dataset.create(stop_reward_at_mask_zero=True, **f)
    fixed = fixed_ds.sample_sequence(len(starts), 4, 0.99, idxs=starts)
    # Identical wherever no mask before step k was 0, different somewhere else.
    clean = np.ones_like(default["masks"], dtype=bool)
    clean[:, 1:] = default["masks"][:, :-1] != 0
    np.testing.assert_array_equal(default["rewards"][clean], fixed["rewards"][clean])
    assert not np.allclose(default["rewards"][~clean], fixed["rewards"][~clean])
    for key in SEQ_KEYS - {"rewards"}:
        np.testing.assert_array_equal(default[key], fixed[key])


# --------------------------------------------------------------------------------------------
# Hand-written 7-step trajectory, expected values written out (discount 0.5: exact in float32)
# --------------------------------------------------------------------------------------------
# start row: (rewards default, rewards with stop_reward_at_mask_zero, masks, terminals, valid)
SEVEN_STEP_EXPECTED = {
    # rows 0,1,2: no terminal; mask 0 at step 1 (row 1)
    0: ([1.0, 2.0, 2.75], [1.0, 2.0, 2.0], [1, 0, 0], [0, 0, 0], [1, 1, 1]),
    # rows 1,2,3: the terminal is the last step; mask 0 at step 0
    1: ([2.0, 3.5, 4.5], [2.0, 2.0, 2.0], [0, 0, 0], [0, 0, 1], [1, 1, 1]),
    # rows 2,3,4: terminal inside (step 1); step 2 is the next trajectory
    2: ([3.0, 5.0, 6.25], [3.0, 5.0, 6.25], [1, 1, 1], [0, 1, 1], [1, 1, 0]),
    # rows 3,4,5: terminal at step 0
    3: ([4.0, 6.5, 8.0], [4.0, 6.5, 8.0], [1, 1, 1], [1, 1, 1], [1, 0, 0]),
    # rows 4,5,6: terminal at the last step (the end of the data)
    4: ([5.0, 8.0, 9.75], [5.0, 8.0, 9.75], [1, 1, 1], [0, 0, 1], [1, 1, 1]),
}


@pytest.mark.parametrize("stop", [False, True])
def test_seven_step_trajectory_literal(stop):
    ds = Dataset.create(stop_reward_at_mask_zero=stop, **seven_step_fields())
    starts = np.array(sorted(SEVEN_STEP_EXPECTED))
    got = ds.sample_sequence(len(starts), 3, 0.5, idxs=starts)
    for b, start in enumerate(starts):
        rew_default, rew_stop, masks, terminals, valid = SEVEN_STEP_EXPECTED[start]
        want_rewards = rew_stop if stop else rew_default
        np.testing.assert_array_equal(got["rewards"][b], want_rewards, err_msg=str(start))
        np.testing.assert_array_equal(got["masks"][b], masks, err_msg=str(start))
        np.testing.assert_array_equal(got["terminals"][b], terminals, err_msg=str(start))
        np.testing.assert_array_equal(got["valid"][b], valid, err_msg=str(start))
    # Window at row 2: observations and actions of rows 2, 3, 4; next actions of rows 3, 4, 5.
    np.testing.assert_array_equal(got["observations"][2], [2.0])
    np.testing.assert_array_equal(got["full_observations"][2], [[2.0], [3.0], [4.0]])
    np.testing.assert_array_equal(got["next_observations"][2], [[3.0], [4.0], [5.0]])
    np.testing.assert_array_equal(got["actions"][2], [[20.0], [30.0], [40.0]])
    np.testing.assert_array_equal(got["next_actions"][2], [[30.0], [40.0], [50.0]])
    # Window at row 4: the next action of the last row is clipped to the last row.
    np.testing.assert_array_equal(got["next_actions"][4], [[50.0], [60.0], [60.0]])


def test_start_indices_cover_zero_to_size_minus_h():
    ds = Dataset.create(seed=3, **seven_step_fields())
    starts = ds.sample_sequence(4000, 3, 0.5)["observations"][:, 0]
    assert set(starts.tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}  # [0, 7 - 3]


def test_only_the_keys_asked_for_are_built_from_the_same_windows():
    """`keys=` (the drivers ask for the update's batch keys only) gives those entries of the very windows the
    full batch has, draw after draw, in the order asked; a key the windows lack is left for select_keys."""
    f = random_fields(50, np.random.default_rng(0))
    full, some = Dataset.create(seed=7, **f), Dataset.create(seed=7, **f)
    keys = ("valid", "observations", "next_actions", "rewards")
    for _ in range(3):
        a, b = full.sample_sequence(16, 3, 0.9), some.sample_sequence(16, 3, 0.9, keys=keys)
        assert tuple(b) == keys
        for k in keys:
            np.testing.assert_array_equal(a[k], b[k])
    assert list(some.sample_sequence(4, 3, 0.9, keys=("actions", "goals"))) == ["actions"]


# --------------------------------------------------------------------------------------------
# Randomness
# --------------------------------------------------------------------------------------------
def test_seeded_and_explicit_rng_and_no_global_state():
    f = random_fields(50, np.random.default_rng(0))
    global_state = np.random.get_state()[1].copy()
    a = Dataset.create(seed=7, **f).sample_sequence(16, 3, 0.9)
    b = Dataset.create(seed=7, **f).sample_sequence(16, 3, 0.9)
    c = Dataset.create(seed=8, **f).sample_sequence(16, 3, 0.9)
    np.testing.assert_array_equal(a["observations"], b["observations"])
    assert not np.array_equal(a["observations"], c["observations"])
    # An explicit rng overrides the dataset's own and leaves it untouched.
    ds = Dataset.create(seed=8, **f)
    d = ds.sample(16, rng=np.random.default_rng(7))
    e = Dataset.create(seed=7, **f).sample(16)
    np.testing.assert_array_equal(d["observations"], e["observations"])
    np.testing.assert_array_equal(ds.sample_sequence(16, 3, 0.9)["observations"], c["observations"])
    np.testing.assert_array_equal(np.random.get_state()[1], global_state)


def test_mapping_interface_and_copy():
    f = random_fields(20, np.random.default_rng(0))
    ds = Dataset.create(**f)
    assert ds.size == 20 and set(ds.keys()) == set(f) and set(dict(ds)) == set(f)
    np.testing.assert_array_equal(ds["qpos"], f["qpos"])
    sample = ds.sample(8)
    assert set(sample) == set(f) and sample["qpos"].shape == (8, 4)
    new_rewards = np.zeros(20, dtype=np.float32)
    ds2 = ds.copy(add_or_replace=dict(rewards=new_rewards))
    np.testing.assert_array_equal(ds2["rewards"], new_rewards)
    np.testing.assert_array_equal(ds["rewards"], f["rewards"])
    assert f["rewards"].flags.writeable  # the caller's array flags are left alone
    with pytest.raises(ValueError):
        ds["rewards"][0] = 1.0  # the dataset's own view is read-only


# --------------------------------------------------------------------------------------------
# Replay buffer wrap-around
# --------------------------------------------------------------------------------------------
def test_buffer_wraps_and_never_samples_across_the_seam():
    buf = ReplayBuffer.create(transition(0), size=5, seed=0)
    assert (buf.size, buf.pointer, buf.max_size) == (0, 0, 5)
    for t in range(8):
        buf.add_transition(transition(t))
        assert buf.size == min(t + 1, 5) and buf.pointer == (t + 1) % 5
    # Storage: rows 0-2 were overwritten by t = 5, 6, 7; rows 3, 4 still hold t = 3, 4.
    np.testing.assert_array_equal(buf["observations"][:, 0], [5, 6, 7, 3, 4])
    np.testing.assert_array_equal(buf["next_observations"][:, 0], [6, 7, 8, 4, 5])
    np.testing.assert_array_equal(buf["rewards"], [5, 6, 7, 3, 4])
    assert (buf.size, buf.pointer) == (5, 3)

    seq = buf.sample_sequence(3000, 3, 0.5)
    first = seq["full_observations"][:, :, 0]  # (B, H)
    # Every window is consecutive in time; the storage windows [6, 7, 3] and [7, 3, 4] never appear.
    np.testing.assert_array_equal(np.diff(first, axis=1), 1)
    assert set(first[:, 0].tolist()) == {3.0, 4.0, 5.0}
    assert set(first.ravel().tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}  # every row held is drawn
    np.testing.assert_array_equal(seq["next_observations"][:, :, 0], first + 1)
    window_567 = first[:, 0] == 5
    np.testing.assert_array_equal(seq["rewards"][window_567][0], [5.0, 8.0, 9.75])
    np.testing.assert_array_equal(seq["next_actions"][window_567][0][:, 0], [6, 7, 7])  # clipped at newest

    # Single transitions and H = 1 windows reach every row.
    assert set(buf.sample(2000)["observations"][:, 0].tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}
    assert set(buf.sample_sequence(2000, 1, 0.5)["observations"][:, 0].tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}
    # H = size: the only window is the whole buffer in time order.
    np.testing.assert_array_equal(
        buf.sample_sequence(4, 5, 0.5)["full_observations"][:, :, 0], np.tile([3, 4, 5, 6, 7], (4, 1))
    )


def test_wrapped_buffer_matches_time_ordered_dataset():
    rng = np.random.default_rng(11)
    f = random_fields(23, rng)
    buf = ReplayBuffer.create({k: v[0] for k, v in f.items()}, size=9)
    for t in range(23):
        buf.add_transition({k: v[t] for k, v in f.items()})
    ordered = Dataset.create(**{k: v[-9:] for k, v in f.items()})  # the 9 newest rows, oldest first
    for H in (1, 4, 9):
        starts = np.arange(9 - H + 1)
        got = buf.sample_sequence(len(starts), H, 0.9, idxs=starts)
        want = ordered.sample_sequence(len(starts), H, 0.9, idxs=starts)
        for key in SEQ_KEYS:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} H={H}")


def test_buffer_partially_filled():
    buf = ReplayBuffer.create(transition(0), size=5)
    for t in range(3):
        buf.add_transition(transition(t))
    assert (buf.size, buf.pointer) == (3, 3)
    assert set(buf.sample(500)["observations"][:, 0].tolist()) == {0.0, 1.0, 2.0}
    with pytest.raises(ValueError, match="longer than the data"):
        buf.sample_sequence(4, 4, 0.9)


def test_create_from_larger_dataset_keeps_all_rows_and_first_online_row_is_sampleable():
    f = {k: v.copy() for k, v in seven_step_fields().items()}
    before = {k: v.copy() for k, v in f.items()}
    buf = ReplayBuffer.create_from_initial_dataset(f, size=4)
    assert (buf.max_size, buf.size, buf.pointer) == (8, 7, 7)  # grown to max(4, 7 + 1)
    np.testing.assert_array_equal(buf["observations"][:7, 0], np.arange(7))

    buf.add_transition(transition(100))
    assert (buf.size, buf.pointer) == (8, 0)
    assert 100.0 in buf.sample(2000)["observations"][:, 0]
    assert 100.0 in buf.sample_sequence(2000, 1, 0.5)["observations"][:, 0]
    seq = buf.sample_sequence(2000, 3, 0.5)
    assert 100.0 in seq["full_observations"][:, 2, 0]  # as the last step of the newest window
    newest_window = seq["full_observations"][seq["observations"][:, 0] == 5]  # (n, H, 1)
    np.testing.assert_array_equal(newest_window[0, :, 0], [5, 6, 100])

    # The next row overwrites the oldest offline row (0); windows stay in time order.
    buf.add_transition(transition(101))
    seq = buf.sample_sequence(2000, 3, 0.5)["full_observations"][:, :, 0]
    assert 0.0 not in seq and 101.0 in seq
    assert {tuple(w) for w in seq.tolist()} == {(1, 2, 3), (2, 3, 4), (3, 4, 5), (4, 5, 6), (5, 6, 100), (6, 100, 101)}
    # The caller's arrays were copied, not mutated.
    for key in before:
        np.testing.assert_array_equal(f[key], before[key])


def test_create_from_smaller_dataset_uses_requested_size():
    buf = ReplayBuffer.create_from_initial_dataset(Dataset.create(**seven_step_fields()), size=20)
    assert (buf.max_size, buf.size, buf.pointer) == (20, 7, 7)
    buf.add_transition(transition(100))
    assert 100.0 in buf.sample_sequence(3000, 3, 0.5)["full_observations"][:, 2, 0]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
def test_error_different_lengths():
    f = seven_step_fields()
    f["rewards"] = f["rewards"][:5]
    with pytest.raises(ValueError, match="different lengths") as err:
        Dataset.create(**f)
    assert "'rewards': 5" in str(err.value) and "'observations': 7" in str(err.value)


def test_error_missing_required_key():
    f = seven_step_fields()
    del f["masks"]
    with pytest.raises(ValueError, match=r"missing required field\(s\) \['masks'\]"):
        Dataset.create(**f)
    with pytest.raises(ValueError, match="masks"):
        ReplayBuffer.create({k: v[0] for k, v in f.items()}, size=3)
    with pytest.raises(ValueError, match="masks"):
        ReplayBuffer.create_from_initial_dataset(f, size=3)


@pytest.mark.parametrize("H", [0, -1, 8])
def test_error_bad_sequence_length(H):
    ds = Dataset.create(**seven_step_fields())
    with pytest.raises(ValueError, match="sequence_length"):
        ds.sample_sequence(4, H, 0.9)


def test_error_bad_idxs():
    ds = Dataset.create(**seven_step_fields())
    with pytest.raises(ValueError, match="idxs"):
        ds.sample_sequence(2, 3, 0.9, idxs=np.array([0, 5]))  # 5 > 7 - 3
    with pytest.raises(ValueError, match="idxs"):
        ds.sample_sequence(3, 3, 0.9, idxs=np.array([0, 1]))


@pytest.mark.parametrize(
    "key,row,value",
    [("observations", 3, np.nan), ("actions", 5, np.inf), ("rewards", 0, np.nan), ("next_observations", 6, -np.inf)],
)
def test_error_non_finite(key, row, value):
    f = seven_step_fields()
    f[key] = f[key].copy()
    f[key][row] = value
    with pytest.raises(ValueError, match=f"'{key}' has a non-finite value .* at row {row}$"):
        Dataset.create(**f)
    with pytest.raises(ValueError, match=f"'{key}' has a non-finite value .* at row {row}$"):
        ReplayBuffer.create_from_initial_dataset(f, size=10)


def test_error_add_transition_leaves_buffer_unchanged():
    buf = ReplayBuffer.create(transition(0), size=4)
    buf.add_transition(transition(1))
    bad = transition(2)
    bad["rewards"] = np.float32(np.nan)
    with pytest.raises(ValueError, match="'rewards' has a non-finite value"):
        buf.add_transition(bad)
    bad = transition(2)
    bad["observations"] = np.array([np.inf], dtype=np.float32)
    with pytest.raises(ValueError, match="'observations' has a non-finite value"):
        buf.add_transition(bad)
    bad = transition(2)
    del bad["terminals"]
    with pytest.raises(ValueError, match=r"missing \['terminals'\]"):
        buf.add_transition(bad)
    bad = transition(2)
    bad["actions"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="'actions' has shape"):
        buf.add_transition(bad)
    assert (buf.size, buf.pointer) == (1, 1)
    np.testing.assert_array_equal(buf["observations"][:, 0], [1, 0, 0, 0])


def test_error_other_shapes():
    f = seven_step_fields()
    f["rewards"] = f["rewards"][:, None]
    with pytest.raises(ValueError, match="'rewards' must be 1-D"):
        Dataset.create(**f)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer.create(transition(0), size=3).sample(4)


def test_identity_equality_and_hash():
    ds = Dataset.create(**seven_step_fields())
    other = Dataset.create(**seven_step_fields())
    assert ds == ds and ds != other and len({ds, other}) == 2
