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
"""

from typing import Mapping

import numpy as np

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
        `high_value_rewards`, `high_value_masks (B,)` float32, `high_value_offsets (B,)` (goal row - i).
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
            "high_value_offsets": goal_idxs - idxs,
        }
