"""Goal-conditioned windows for DQC: the authors' `CGCDataset.sample` (ColinQiyangLi/dqc at df89825).

A window starts at row `i` (state s_i) and holds the next `h = backup_horizon` actions. Each window
gets a value goal (hindsight relabelling, OGBench style): with probability `value_p_curgoal` the
current state, `value_p_trajgoal` a later state of the same trajectory (uniform over
`[i + 1, final]`, or `i + Geometric(1 - discount)` capped at `final` with `value_geom_sample`),
`value_p_randomgoal` a random state (drawn like the window starts). The backup horizon k is h cut at
the trajectory's last row and at the goal when the goal lies inside the window; a cut window has
reached its goal: reward gamma^k, mask 0 (the release counts a trajectory-end cut as reaching the goal
too, but draws starts only where a whole window fits: `valid_idxs`, so in training no window is cut
there). Two windows, h = 5, a trajectory of rows 10..20 (final row 20)::

    start i = 12, goal row 15 (inside the window: cut at the goal, k = 3)
    step j                        0     1     2     3     4
    row i + j                    12    13    14    15    16
    high_value_action_chunks     a12   a13   a14   a15   a16    (B, h * A), flattened
    valids                        1     1     1     1     1
    high_value_next_observations s15 = s_{i+k};  high_value_goals: rep(s15);  high_value_offsets 3
    high_value_backup_horizon 3;  high_value_rewards gamma^3;  high_value_masks 0

    start i = 18 (no whole window: only through `idxs=`), goal row 2 (behind: no goal cut)
    row i + j                    18    19    20    21    22
    high_value_action_chunks     a18   a19   a20   a20   a20    the last row repeated
    valids                        1     1     1     0     0
    high_value_next_observations s20 (k = final - i = 2);  high_value_offsets -16
    high_value_backup_horizon 2;  high_value_rewards gamma^2;  high_value_masks 0

With goal row 17 or later (or a random goal of another trajectory), i = 12 gives k = 5, next s17,
reward 0, mask 1.

Rows with `terminals` = 1 end a trajectory; the last row must be one. Pass the rows of transitions
that have a successor (the project's OGBench loader; the release's compact layout, whose extra one-row
trajectories hold no window, gives the same windows). All randomness comes from the `np.random.Generator`
given to `sample` (the release used global `np.random`; the draws are in the release's order).

`DeviceGoalWindows` holds the same tables on the device and draws the same distribution there with JAX keys
(`sample(key, B)`), for `utils.device_sampler.offline_updates` (k gradient steps per host call); its
`windows(idxs, goal_idxs)` equals `GoalWindows.sample(idxs=..., goal_idxs=...)` bit for bit.
"""

from typing import Dict, Mapping, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.device_sampler import available_memory

GOAL_KEYS = ("value_p_curgoal", "value_p_trajgoal", "value_p_randomgoal", "value_geom_sample")


def backup_horizons(idxs, final_idxs, goal_idxs, horizon):
    """Backup horizon k `(B,)`: `horizon` cut at the trajectory's last row and at a goal inside the window.

    `idxs`, `final_idxs` (the last row of each start's trajectory) and `goal_idxs` are `(B,)` rows.
    """
    k = np.minimum(horizon, final_idxs - idxs)  # (B,) the trajectory's end
    offsets = goal_idxs - idxs
    return np.where((offsets >= 0) & (offsets < k), offsets, k)  # (B,) the goal, when it lies inside


class GoalWindows:
    """Windows of `backup_horizon` actions with value goals, over one dataset (tables built once).

    Args:
        observations: `(N, D)` s_i.
        actions: `(N, A)` a_i.
        terminals: `(N,)` 1 on the last row of each trajectory (the last row included).
        config: the DQC agent config (reads `backup_horizon`, `discount` and `GOAL_KEYS`).
        oracle_reps: `(N, G)` goal representations of the states; goals are `observations` without.

    Raises:
        ValueError: shapes disagree, the last row is no trajectory end, the goal probabilities do
            not sum to 1, or no trajectory holds a whole window (`backup_horizon` + 1 rows).
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
        final = self.terminal_locs[np.searchsorted(self.terminal_locs, rows)]  # (N,)
        # Starts with a whole window: actions i .. i+h-1 and the state i+h in the trajectory (the release's
        # per-trajectory `arange(start, final + 1 - h)`).
        self.valid_idxs = rows[final - rows >= self.horizon]
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
        """`n` rows drawn uniformly from the starts with a whole window (`valid_idxs`)."""
        return self.valid_idxs[rng.integers(len(self.valid_idxs), size=n)]

    def sample_goals(self, idxs, rng: np.random.Generator):
        """Value-goal rows `(B,)` for start rows `idxs`: current, later in the trajectory, or random."""
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
        """A batch of `batch_size` windows (the keys of `agents.dqc.BATCH_KEYS` and a few more).

        Args:
            batch_size: B.
            rng: all draws (starts, goals).
            idxs: `(B,)` start rows instead of random valid starts (any row; a start near a
                trajectory's end gets a window cut there).
            goal_idxs: `(B,)` value-goal rows instead of drawn ones.

        Returns: dict of numpy arrays: `observations (B, D)`, `actions (B, A)` (a_i),
        `high_value_goals (B, G)`, `high_value_action_chunks (B, h * A)`, `valids (B, h)` float32,
        `high_value_next_observations (B, D)` (s_{i+k}), `high_value_backup_horizon (B,)` int32,
        `high_value_rewards`, `high_value_masks (B,)` float32, `high_value_offsets (B,)` int32 (goal row - i).
        """
        idxs = self.random_starts(batch_size, rng) if idxs is None else np.asarray(idxs)
        if idxs.shape != (batch_size,) or idxs.min() < 0 or idxs.max() >= self.size:
            raise ValueError(f"GoalWindows.sample: idxs must be {batch_size} rows in [0, {self.size}).")
        goal_idxs = self.sample_goals(idxs, rng) if goal_idxs is None else np.asarray(goal_idxs)
        final = self.final_idxs(idxs)  # (B,)
        k = backup_horizons(idxs, final, goal_idxs, self.horizon)  # (B,)
        reached = (k < self.horizon).astype(np.float32)  # (B,)
        steps = idxs[:, None] + np.arange(self.horizon)  # (B, h) rows of the window
        chunks = self.actions[np.minimum(steps, final[:, None])]  # (B, h, A), the last row repeated past the end
        return {
            "observations": self.observations[idxs],
            "actions": self.actions[idxs],
            "high_value_goals": self.goals[goal_idxs],
            "high_value_action_chunks": chunks.reshape(batch_size, -1),  # (B, h * A)
            "valids": (steps <= final[:, None]).astype(np.float32),  # (B, h)
            "high_value_next_observations": self.observations[idxs + k],
            "high_value_backup_horizon": k.astype(np.int32),
            "high_value_rewards": (self.discount**k * reached).astype(np.float32),
            "high_value_masks": 1.0 - reached,
            "high_value_offsets": (goal_idxs - idxs).astype(np.int32),  # int32, as on the device
        }


# ---------------------------------------------------------------- on the device


class DeviceGoalWindows(flax.struct.PyTreeNode):
    """The tables of a `GoalWindows` on the device: `GoalWindows.sample`'s windows drawn with JAX keys.

    Build with `DeviceGoalWindows.create(goal_windows)`. A pytree: the arrays below are its leaves; the
    window size, discount, goal probabilities and row count are static, so it can be an argument of jitted
    functions, of `utils.device_sampler.offline_updates` (which calls `sample(key, B)` inside its `lax.scan`)
    and be shared by `jax.vmap` over seeds (`in_axes=None`).

    * `windows(idxs, goal_idxs)` equals `GoalWindows.sample(B, rng, idxs=idxs, goal_idxs=goal_idxs)` bit for
      bit: the same keys, dtypes and values (the gamma^k rewards come from a float32 table of the host's float64
      powers, so they are the host's numbers).
    * `sample(key, B)` draws what `GoalWindows.sample(B, rng)` draws, from the same distribution (not the
      same numbers: JAX keys, not a numpy generator): starts uniform over the starts with a whole window;
      goals the current state with probability `p_cur`, else a later state of the trajectory with
      probability `p_traj / (1 - p_cur)` (uniform over `[i + 1, final]` with the host's rounding, or
      `i + Geometric(1 - discount)` capped at `final`), else a random start.

    Attributes:
        observations: `(N, D)`; actions `(N, A)`; goals `(N, G)` or None (the goals are the observations).
        final: `(N,)` int32, the last row of each row's trajectory.
        valid_idxs: `(V,)` int32, the starts with a whole window (`GoalWindows.valid_idxs`).
        discount_powers: `(h + 1,)` float32, `float32(discount ** k)` for k = 0..h computed in float64.
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
        """Copy the tables of `windows` to `device` (default: JAX's default device).

        Raises:
            ValueError: a field whose dtype JAX would change (float64 / int64 without `jax_enable_x64`: cast
                the data first), or more rows than int32 indexes.
        """
        _check_device_dtypes(windows)
        if windows.size >= 2**31:
            raise ValueError(f"DeviceGoalWindows indexes rows with int32; {windows.size} rows are too many.")
        put = lambda x: jax.device_put(x, device)  # noqa: E731
        rows = np.arange(windows.size)
        return cls(
            observations=put(windows.observations),
            actions=put(windows.actions),
            goals=None if windows.goals is windows.observations else put(windows.goals),
            final=put(windows.final_idxs(rows).astype(np.int32)),
            valid_idxs=put(windows.valid_idxs.astype(np.int32)),
            discount_powers=put((windows.discount ** np.arange(windows.horizon + 1)).astype(np.float32)),
            horizon=windows.horizon,
            discount=windows.discount,
            p_cur=float(windows.p_cur),
            p_traj=float(windows.p_traj),
            geom_sample=bool(windows.geom_sample),
            size=windows.size,
        )

    @property
    def nbytes(self) -> int:
        """Device bytes held by the arrays (equals `estimate_nbytes` of the `GoalWindows`)."""
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
        """The windows at starts `idxs` with value goals `goal_idxs` (`(B,)` rows in `[0, N)`).

        Returns the dict of `GoalWindows.sample` as device arrays, equal to it bit for bit.

        Raises:
            ValueError: concrete (not traced) rows outside `[0, N)` or not 1-D integers of one length.
        """
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
    """`GoalWindows.sample`'s arithmetic on the device (int32 rows; see `DeviceGoalWindows.windows`)."""
    batch_size, h = idxs.shape[0], w.horizon
    final = w.final[idxs]  # (B,)
    k = jnp.minimum(h, final - idxs)  # (B,) the trajectory's end
    offsets = goal_idxs - idxs  # (B,)
    k = jnp.where((offsets >= 0) & (offsets < k), offsets, k)  # the goal, when it lies inside the window
    reached = (k < h).astype(jnp.float32)  # (B,)
    steps = idxs[:, None] + jnp.arange(h, dtype=jnp.int32)  # (B, h) rows of the window
    chunks = w.actions[jnp.minimum(steps, final[:, None])]  # (B, h, A), the last row repeated past the end
    goals = w.observations if w.goals is None else w.goals
    return {
        "observations": w.observations[idxs],
        "actions": w.actions[idxs],
        "high_value_goals": goals[goal_idxs],
        "high_value_action_chunks": chunks.reshape(batch_size, -1),  # (B, h * A)
        "valids": (steps <= final[:, None]).astype(jnp.float32),  # (B, h)
        "high_value_next_observations": w.observations[idxs + k],
        "high_value_backup_horizon": k.astype(jnp.int32),
        "high_value_rewards": w.discount_powers[k] * reached,  # float32(gamma^k) or 0, the host's numbers
        "high_value_masks": 1.0 - reached,
        "high_value_offsets": offsets,
    }


def _check_device_dtypes(windows: GoalWindows):
    fields = {"observations": windows.observations, "actions": windows.actions, "goals": windows.goals}
    bad = {k: np.asarray(v).dtype for k, v in fields.items() if jax.dtypes.canonicalize_dtype(v.dtype) != v.dtype}
    if bad:
        raise ValueError(
            f"DeviceGoalWindows: JAX would change the dtype of {bad} on the device (enable jax_enable_x64 or cast "
            "the data to float32 first), so the windows would not equal the host's."
        )


def estimate_nbytes(windows: GoalWindows) -> int:
    """Device bytes a `DeviceGoalWindows` of `windows` holds (without building it): observations, actions and
    (when they are not the observations) goals at their dtypes, the per-row `final` and the valid starts
    (int32), and the `h + 1` discount powers."""
    arrays = [windows.observations, windows.actions] + (
        [] if windows.goals is windows.observations else [windows.goals]
    )
    return int(
        sum(np.asarray(a).nbytes for a in arrays)
        + 4 * (windows.size + len(windows.valid_idxs))
        + 4 * (windows.horizon + 1)
    )


def fits_on_device(windows: GoalWindows, device=None, fraction: float = 0.5) -> bool:
    """Whether to sample `windows` on the device (`DeviceGoalWindows`) rather than on the host.

    The rule of `utils.device_sampler.fits_on_device`: True when `estimate_nbytes(windows)` is at most `fraction`
    of `available_memory(device)` and JAX holds every field at its dtype; the rest is left for the agent, its
    optimizer state, activations and XLA's workspace (on CPU the host copy is already resident: the device
    copy doubles it).

    Raises:
        ValueError: `fraction` outside `(0, 1]`.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    try:
        _check_device_dtypes(windows)
    except ValueError:
        return False
    return estimate_nbytes(windows) <= fraction * available_memory(device)


class GoalWindowSource:
    """DQC's windows over one dataset (`AgentSpec.windows`): `GoalWindows` with the dataset's own generator.

    The dataset's rows are the transitions that have a successor (`observations`, `actions`, `terminals`)
    with `oracle_reps` where the env has them (goals are observations otherwise).
    """

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
