"""DQC's goal-conditioned windows: the authors' `CGCDataset.sample` (ColinQiyangLi/dqc at df89825), on the
host (`GoalWindows`, a seeded numpy generator) and on the device (`DeviceGoalWindows`, JAX keys).

The batch contract, for a window starting at row `i` of a trajectory ending at row `final`, `h` =
`backup_horizon`, value goal row `g` (docs/batch_contract.md, section 11, works two windows through):

    k = min(h, final - i), cut to g - i when 0 <= g - i < k     (high_value_backup_horizon)
    reached = k < h;  reward = gamma^k if reached else 0;  mask = 1 - reached
    next observation s_{i+k};  chunk a_i .. a_{i+h-1} (the last row repeated past final), valids 1 up to final

Goals: the current state with probability `value_p_curgoal`, a later state of the trajectory with
`value_p_trajgoal` (uniform over `[i + 1, final]`, or `i + Geometric(1 - discount)` capped at `final` with
`value_geom_sample`), else a random start. Starts are drawn where a whole window fits (`valid_idxs`).
"""

from typing import Dict, Mapping, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.device_sampler import available_memory

GOAL_KEYS = ("value_p_curgoal", "value_p_trajgoal", "value_p_randomgoal", "value_geom_sample")


def _xp(x):
    return jnp if isinstance(x, jax.Array) else np  # tracers are jax.Arrays: the device path inside jit


def backup_horizons(idxs, final_idxs, goal_idxs, horizon):
    """`(B,)` backup horizons k: `horizon` cut at the trajectory's last row and at a goal inside the window."""
    xp = _xp(idxs)
    k = xp.minimum(horizon, final_idxs - idxs)  # the trajectory's end
    offsets = goal_idxs - idxs
    return xp.where((offsets >= 0) & (offsets < k), offsets, k)  # the goal, when it lies inside


def _window_batch(observations, actions, goals, final, discount_powers, horizon, idxs, goal_idxs) -> Dict:
    """The batch of `GoalWindows.sample` at starts `idxs` with goals `goal_idxs`: numpy or (traced) JAX arrays."""
    xp = _xp(idxs)
    final = final[idxs]  # (B,)
    k = backup_horizons(idxs, final, goal_idxs, horizon)  # (B,)
    reached = (k < horizon).astype(xp.float32)  # (B,)
    steps = idxs[:, None] + xp.arange(horizon, dtype=idxs.dtype)  # (B, h) rows of the window
    chunks = actions[xp.minimum(steps, final[:, None])]  # (B, h, A), the last row repeated past the end
    return {
        "observations": observations[idxs],
        "actions": actions[idxs],
        "high_value_goals": goals[goal_idxs],
        "high_value_action_chunks": chunks.reshape(idxs.shape[0], -1),  # (B, h * A)
        "valids": (steps <= final[:, None]).astype(xp.float32),  # (B, h)
        "high_value_next_observations": observations[idxs + k],
        "high_value_backup_horizon": k.astype(xp.int32),
        "high_value_rewards": discount_powers[k] * reached,  # float32(gamma^k) or 0
        "high_value_masks": 1.0 - reached,
        "high_value_offsets": (goal_idxs - idxs).astype(xp.int32),
    }


class GoalWindows:
    """The windows of one dataset: `observations (N, D)`, `actions (N, A)`, `terminals (N,)` (1 on the last row
    of each trajectory, the last row included), goals `oracle_reps (N, G)` (else the observations); `config`
    gives `backup_horizon`, `discount` and `GOAL_KEYS`. `ValueError` for shapes that disagree, a last row that
    ends no trajectory, goal probabilities that do not sum to 1, or no trajectory of `backup_horizon + 1` rows.
    """

    def __init__(self, observations, actions, terminals, config: Mapping, oracle_reps=None):
        self.observations, self.actions = observations, actions
        self.goals = observations if oracle_reps is None else oracle_reps
        self.horizon = int(config["backup_horizon"])
        self.discount = float(config["discount"])
        self.p_cur, self.p_traj, self.p_random, self.geom_sample = (config[k] for k in GOAL_KEYS)
        self.size = len(terminals)
        lengths = {"observations": len(observations), "actions": len(actions), "goals": len(self.goals)}
        if any(n != self.size for n in lengths.values()):
            raise ValueError(f"GoalWindows: terminals has {self.size} rows but {lengths}.")
        if not np.isclose(self.p_cur + self.p_traj + self.p_random, 1.0):
            raise ValueError(f"GoalWindows: the goal probabilities {[config[k] for k in GOAL_KEYS[:3]]} must sum to 1.")
        self.terminal_locs = np.flatnonzero(np.asarray(terminals) > 0)  # (T,) last row of each trajectory
        if len(self.terminal_locs) == 0 or self.terminal_locs[-1] != self.size - 1:
            raise ValueError("GoalWindows: the last row must end a trajectory (terminals[-1] == 1).")
        rows = np.arange(self.size)
        self.final = self.final_idxs(rows)  # (N,) the last row of each row's trajectory
        # float32 of the float64 powers gamma^k, k = 0..h: the release's numbers, on the host and the device alike.
        self.discount_powers = (self.discount ** np.arange(self.horizon + 1)).astype(np.float32)
        # Starts with a whole window: actions i .. i+h-1 and the state i+h in the trajectory (the release's
        # per-trajectory `arange(start, final + 1 - h)`).
        self.valid_idxs = rows[self.final - rows >= self.horizon]
        if len(self.valid_idxs) == 0:
            longest = int(np.max(np.diff(np.concatenate([[-1], self.terminal_locs]))))
            raise ValueError(
                f"GoalWindows: no trajectory is long enough for a window of backup_horizon={self.horizon} "
                f"(needs {self.horizon + 1} rows; the longest has {longest})."
            )

    def final_idxs(self, idxs):
        """The last row of the trajectory of each row in `idxs`."""
        return self.terminal_locs[np.searchsorted(self.terminal_locs, idxs)]

    def random_starts(self, n, rng: np.random.Generator):
        """`n` rows drawn uniformly from `valid_idxs`."""
        return self.valid_idxs[rng.integers(len(self.valid_idxs), size=n)]

    def sample_goals(self, idxs, rng: np.random.Generator):
        """Value-goal rows `(B,)` for start rows `idxs`, drawn in the release's order."""
        n = len(idxs)
        final = self.final_idxs(idxs)
        random_goals = self.random_starts(n, rng)  # the release draws random goals like the starts
        if self.geom_sample:
            traj_goals = np.minimum(idxs + rng.geometric(p=1 - self.discount, size=n), final)  # offsets >= 1
        else:
            distances = rng.random(n)  # [0, 1): the release's rounding of a uniform point of [i + 1, final]
            traj_goals = np.round(np.minimum(idxs + 1, final) * distances + final * (1 - distances)).astype(int)
        if self.p_cur == 1.0:
            return np.array(idxs)
        goals = np.where(rng.random(n) < self.p_traj / (1.0 - self.p_cur), traj_goals, random_goals)
        return np.where(rng.random(n) < self.p_cur, idxs, goals)

    def sample(self, batch_size, rng: np.random.Generator, idxs=None, goal_idxs=None):
        """`batch_size` windows, all draws from `rng`; `idxs` (any rows: a start near a trajectory's end gets a
        window cut there) and `goal_idxs` replace the drawn starts and goals. numpy arrays: `observations (B, D)`,
        `actions (B, A)` (a_i), `high_value_goals (B, G)`, `high_value_action_chunks (B, h * A)`, `valids (B, h)`,
        `high_value_next_observations (B, D)`, `high_value_backup_horizon`, `high_value_offsets (B,)` int32,
        `high_value_rewards`, `high_value_masks (B,)` float32."""
        idxs = self.random_starts(batch_size, rng) if idxs is None else np.asarray(idxs)
        if idxs.shape != (batch_size,) or idxs.min() < 0 or idxs.max() >= self.size:
            raise ValueError(f"GoalWindows.sample: idxs must be {batch_size} rows in [0, {self.size}).")
        goal_idxs = self.sample_goals(idxs, rng) if goal_idxs is None else np.asarray(goal_idxs)
        return _window_batch(
            self.observations, self.actions, self.goals, self.final, self.discount_powers, self.horizon, idxs,
            goal_idxs,
        )  # fmt: skip


class DeviceGoalWindows(flax.struct.PyTreeNode):
    """The tables of a `GoalWindows` on the device (`create`); a pytree with the arrays as leaves, so it can be an
    argument of jitted functions (`utils.device_sampler.offline_updates`) and shared by `jax.vmap`.

    `windows(idxs, goal_idxs)` equals `GoalWindows.sample(B, rng, idxs=idxs, goal_idxs=goal_idxs)` bit for bit;
    `sample(key, B)` draws from the distribution of `GoalWindows.sample(B, rng)` with JAX keys (other numbers).
    `goals` is None when the goals are the observations; `final` and `valid_idxs` are int32.
    """

    observations: jax.Array
    actions: jax.Array
    goals: Optional[jax.Array]
    final: jax.Array
    valid_idxs: jax.Array
    discount_powers: jax.Array
    horizon: int = flax.struct.field(pytree_node=False)
    discount: float = flax.struct.field(pytree_node=False)
    p_cur: float = flax.struct.field(pytree_node=False)
    p_traj: float = flax.struct.field(pytree_node=False)
    geom_sample: bool = flax.struct.field(pytree_node=False)
    size: int = flax.struct.field(pytree_node=False)

    @classmethod
    def create(cls, windows: GoalWindows, device=None) -> "DeviceGoalWindows":
        """Copy `windows`' tables to `device`; `ValueError` for a field JAX would change (cast float64 data
        first) or more rows than int32 indexes."""
        _check_device_dtypes(windows)
        if windows.size >= 2**31:
            raise ValueError(f"DeviceGoalWindows indexes rows with int32; {windows.size} rows are too many.")
        put = lambda x: jax.device_put(x, device)  # noqa: E731
        return cls(
            observations=put(windows.observations),
            actions=put(windows.actions),
            goals=None if windows.goals is windows.observations else put(windows.goals),
            final=put(windows.final.astype(np.int32)),
            valid_idxs=put(windows.valid_idxs.astype(np.int32)),
            discount_powers=put(windows.discount_powers),
            horizon=windows.horizon,
            discount=windows.discount,
            p_cur=float(windows.p_cur),
            p_traj=float(windows.p_traj),
            geom_sample=bool(windows.geom_sample),
            size=windows.size,
        )

    @property
    def nbytes(self) -> int:
        return int(sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(self)))

    def start_rows(self, key: jax.Array, batch_size: int) -> jax.Array:
        """`(B,)` int32 starts drawn uniformly from `valid_idxs` (`batch_size` static)."""
        return self.valid_idxs[jax.random.randint(key, (batch_size,), 0, self.valid_idxs.shape[0])]

    def sample_goals(self, key: jax.Array, idxs: jax.Array) -> jax.Array:
        """`(B,)` int32 value-goal rows for the starts `idxs`, drawn like `GoalWindows.sample_goals`."""
        if self.p_cur == 1.0:
            return idxs
        n = idxs.shape[0]
        random_key, traj_key, choice_key, current_key = jax.random.split(key, 4)
        random_goals = self.start_rows(random_key, n)  # drawn like the starts, as in the release
        final = self.final[idxs]  # (B,)
        if self.geom_sample:
            offsets = jax.random.geometric(traj_key, 1 - self.discount, (n,), dtype=jnp.int32)  # >= 1
            traj_goals = jnp.minimum(idxs + offsets, final)
        else:
            # The host's round(min(i + 1, final) * d + final * (1 - d)), written relative to i so that float32
            # holds it exactly at any row count: i + round(min(1, final - i) * d + (final - i) * (1 - d)).
            d = jax.random.uniform(traj_key, (n,))  # [0, 1)
            span = (final - idxs).astype(jnp.float32)
            traj_goals = idxs + jnp.round(jnp.minimum(1.0, span) * d + span * (1 - d)).astype(jnp.int32)
        u_choice, u_current = jax.random.uniform(choice_key, (n,)), jax.random.uniform(current_key, (n,))
        goals = jnp.where(u_choice < self.p_traj / (1.0 - self.p_cur), traj_goals, random_goals)
        return jnp.where(u_current < self.p_cur, idxs, goals)

    def windows(self, idxs, goal_idxs) -> Dict[str, jax.Array]:
        """The windows at starts `idxs` with value goals `goal_idxs` (`(B,)` rows in `[0, N)`, checked when
        concrete: `ValueError`), `GoalWindows.sample`'s batch bit for bit."""
        for name, rows in (("idxs", idxs), ("goal_idxs", goal_idxs)):
            if not isinstance(rows, jax.core.Tracer):
                values = np.asarray(rows)
                if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
                    raise ValueError(f"{name} must be a 1-D integer array, got {values.shape} {values.dtype}.")
                if values.size and (values.min() < 0 or values.max() >= self.size):
                    raise ValueError(f"DeviceGoalWindows.windows: {name} must be rows in [0, {self.size}).")
        if np.shape(idxs) != np.shape(goal_idxs):
            raise ValueError(f"idxs {np.shape(idxs)} and goal_idxs {np.shape(goal_idxs)} differ in shape.")
        return _goal_windows(self, jnp.asarray(idxs, jnp.int32), jnp.asarray(goal_idxs, jnp.int32))

    def sample(self, key: jax.Array, batch_size: int) -> Dict[str, jax.Array]:
        """`batch_size` windows: starts and goals drawn with `key` (pure, jittable; `batch_size` static)."""
        start_key, goal_key = jax.random.split(key)
        idxs = self.start_rows(start_key, batch_size)
        return _goal_windows(self, idxs, self.sample_goals(goal_key, idxs))


@jax.jit
def _goal_windows(w: DeviceGoalWindows, idxs: jax.Array, goal_idxs: jax.Array) -> Dict[str, jax.Array]:
    goals = w.observations if w.goals is None else w.goals
    return _window_batch(w.observations, w.actions, goals, w.final, w.discount_powers, w.horizon, idxs, goal_idxs)


def _check_device_dtypes(windows: GoalWindows):
    fields = {"observations": windows.observations, "actions": windows.actions, "goals": windows.goals}
    bad = {k: np.asarray(v).dtype for k, v in fields.items() if jax.dtypes.canonicalize_dtype(v.dtype) != v.dtype}
    if bad:
        raise ValueError(
            f"DeviceGoalWindows: JAX would change the dtype of {bad} on the device (enable jax_enable_x64 or cast "
            "the data to float32 first), so the windows would not equal the host's."
        )


def estimate_nbytes(windows: GoalWindows) -> int:
    """Device bytes of a `DeviceGoalWindows` of `windows`: observations, actions, goals (when not the
    observations), the int32 `final` and valid starts, and the `h + 1` discount powers."""
    arrays = [windows.observations, windows.actions] + (
        [] if windows.goals is windows.observations else [windows.goals]
    )
    return int(
        sum(np.asarray(a).nbytes for a in arrays) + 4 * (windows.size + len(windows.valid_idxs) + windows.horizon + 1)
    )


def fits_on_device(windows: GoalWindows, device=None, fraction: float = 0.5) -> bool:
    """`utils.device_sampler.fits_on_device`'s rule for `windows`; `ValueError` for `fraction` outside `(0, 1]`."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    try:
        _check_device_dtypes(windows)
    except ValueError:
        return False
    return estimate_nbytes(windows) <= fraction * available_memory(device)


class GoalWindowSource:
    """DQC's window source over one dataset (`AgentSpec.windows`): `GoalWindows` of its rows (`oracle_reps`
    as goals where the env has them) drawn with the dataset's own generator."""

    def __init__(self, dataset, config):
        self.dataset = dataset
        reps = dataset["oracle_reps"] if "oracle_reps" in dataset else None
        self.windows = GoalWindows(dataset["observations"], dataset["actions"], dataset["terminals"], config, reps)

    def sample(self, batch_size: int):
        return self.windows.sample(batch_size, self.dataset.rng)

    def fits_on_device(self) -> bool:
        return fits_on_device(self.windows)

    def on_device(self) -> "DeviceGoalWindows":
        return DeviceGoalWindows.create(self.windows)
