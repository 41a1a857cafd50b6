"""Offline datasets and the online replay buffer: read-only mappings `field -> (N, ...)` array, one
transition per row, trajectories one after another, each owning a seeded `np.random.Generator` (`rng`;
global `np.random` is never used). `Dataset.sample_sequence` returns the chunked batch of
docs/batch_contract.md. Differences from the reference's `utils/datasets.py`: docs/differences.md 5, 6, 15.
"""

from collections.abc import Mapping

import numpy as np

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals", "masks", "next_observations")
# Fields checked for NaN / inf: everything a network sees or a loss is built from.
FINITE_KEYS = ("observations", "next_observations", "actions", "rewards")
# Fields holding one number per row.
SCALAR_KEYS = ("rewards", "masks", "terminals")


def _first_nonfinite_row(arr):
    """Index of the first row of `arr` holding NaN or inf, or None. Integer/bool dtypes are skipped."""
    if not np.issubdtype(arr.dtype, np.inexact):
        return None
    finite = np.isfinite(arr)
    if finite.all():
        return None
    bad_rows = ~finite.reshape(len(arr), -1).all(axis=1)  # (N,)
    return int(np.argmax(bad_rows))


def _check_fields(fields, *, check_finite=True):
    """Validate a dict of per-row arrays; return the common length. Raises ValueError."""
    missing = [k for k in REQUIRED_KEYS if k not in fields]
    if missing:
        raise ValueError(f"missing required field(s) {missing}; got {sorted(fields)}")
    for key, arr in fields.items():
        if arr.ndim == 0:
            raise ValueError(f"field '{key}' is a scalar; every field needs a leading row axis")
    lengths = {key: len(arr) for key, arr in fields.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"fields have different lengths (rows): {lengths}")
    for key in SCALAR_KEYS:
        if key in fields and fields[key].ndim != 1:
            raise ValueError(f"field '{key}' must be 1-D (one number per row), got shape {fields[key].shape}")
    if "observations" in fields and "next_observations" in fields:
        ob, next_ob = fields["observations"].shape[1:], fields["next_observations"].shape[1:]
        if ob != next_ob:
            raise ValueError(f"observations rows have shape {ob}, next_observations rows {next_ob}")
    for key in FINITE_KEYS if check_finite else ():
        if key in fields:
            row = _first_nonfinite_row(fields[key])
            if row is not None:
                raise ValueError(f"field '{key}' has a non-finite value (NaN or inf) at row {row}")
    return next(iter(lengths.values())) if lengths else 0


class Dataset(Mapping):
    """Read-only mapping `name -> array (N, ...)` with uniform and chunked sampling (`Dataset.create`).

    `ds.size` is the number of rows N (`len(ds)` the number of fields, as for any mapping); datasets compare
    and hash by identity. `rng` draws when a sampling call gets no `rng=`; `stop_reward_at_mask_zero`
    selects the partial reward sums of `sample_sequence`.
    """

    def __init__(self, fields, *, rng, stop_reward_at_mask_zero=False):
        """Low-level constructor: trusts `fields` (already validated). Use `create`."""
        self._fields = dict(fields)
        self.rng = rng
        self.stop_reward_at_mask_zero = bool(stop_reward_at_mask_zero)

    @classmethod
    def create(cls, *, seed=0, rng=None, stop_reward_at_mask_zero=False, **fields):
        """A dataset of read-only views (no copy) of `fields`, arrays of N rows: observations (N, *ob),
        actions (N, A), rewards, terminals, masks (N,), next_observations (N, *ob), and any other field
        (kept). It owns `rng`, else `np.random.default_rng(seed)`. `ValueError` naming the field (and the
        first bad row) for a missing field, other lengths, 2-D scalars, observation shapes that differ, or
        NaN/inf in observations, next observations, actions or rewards.
        """
        arrays = {}
        for key, value in fields.items():
            view = np.asarray(value).view()
            view.setflags(write=False)
            arrays[key] = view
        _check_fields(arrays)
        return cls(
            arrays,
            rng=rng if rng is not None else np.random.default_rng(seed),
            stop_reward_at_mask_zero=stop_reward_at_mask_zero,
        )

    # ---- mapping interface ----
    def __getitem__(self, key):
        return self._fields[key]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self):
        return len(self._fields)

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self):
        shapes = ", ".join(f"{k}: {v.shape} {v.dtype}" for k, v in self._fields.items())
        return f"{type(self).__name__}(size={self.size}, {shapes})"

    @property
    def size(self):
        """Number of rows that can be sampled."""
        return len(self._fields["observations"])

    def copy(self, add_or_replace=None):
        """A new Dataset with fields added or replaced (checked like `create`), sharing the generator."""
        fields = dict(self._fields)
        fields.update(add_or_replace or {})
        return type(self).create(rng=self.rng, stop_reward_at_mask_zero=self.stop_reward_at_mask_zero, **fields)

    # ---- sampling ----
    def _physical(self, logical):
        """Logical rows (0 = oldest) -> storage rows: the identity for a Dataset."""
        return logical

    def _start_indices(self, batch_size, sequence_length, rng, idxs):
        """Start rows of the windows: given `idxs` (checked) or uniform draws from [0, size - H]."""
        if not isinstance(sequence_length, (int, np.integer)) or sequence_length < 1:
            raise ValueError(f"sequence_length must be an integer >= 1, got {sequence_length!r}")
        if self.size == 0:
            raise ValueError(f"cannot sample from an empty {type(self).__name__} (size 0)")
        if sequence_length > self.size:
            raise ValueError(f"sequence_length {sequence_length} is longer than the data ({self.size} rows)")
        high = self.size - sequence_length  # last valid start, inclusive
        if idxs is None:
            rng = rng if rng is not None else self.rng
            return rng.integers(0, high + 1, size=batch_size)
        idxs = np.asarray(idxs)
        if idxs.shape != (batch_size,) or not np.issubdtype(idxs.dtype, np.integer):
            raise ValueError(f"idxs must be {batch_size} integers, got shape {idxs.shape} dtype {idxs.dtype}")
        if idxs.size and (idxs.min() < 0 or idxs.max() > high):
            raise ValueError(f"idxs must lie in [0, {high}] for sequence_length {sequence_length}")
        return idxs

    def sample(self, batch_size, rng=None, idxs=None):
        """`batch_size` single transitions, uniform over the rows (or the rows `idxs`, in time order): every
        field, `(B, ...)` at its stored dtype. `ValueError` for an empty dataset or bad `idxs`."""
        starts = self._start_indices(batch_size, 1, rng, idxs)
        rows = self._physical(starts)
        return {key: arr[rows] for key, arr in self._fields.items()}

    # Window starting at row i, H = 3, g = discount. Row i+1 ends its trajectory with a terminal
    # whose mask is 0; row i+2 is the first row of the next trajectory.
    #
    #   step k                      0          1                 2
    #   storage row                 i          i+1               i+2
    #   per-row reward / mask       r_i / 1    r_{i+1} / 0       r_{i+2} / 1
    #   per-row terminal            0          1                 0
    #   ----------------------------------------------------------------------------------------
    #   observations                s_i        (step 0 only, shape (B, *ob))
    #   full_observations[:, k]     s_i        s_{i+1}           s_{i+2}
    #   actions[:, k]               a_i        a_{i+1}           a_{i+2}
    #   next_observations[:, k]     s'_i       s'_{i+1}          s'_{i+2}      (s'_j: stored next obs)
    #   next_actions[:, k]          a_{i+1}    a_{i+2}           a_{i+3}
    #   rewards[:, k]  default      r_i        r_i + g r_{i+1}   r_i + g r_{i+1} + g^2 r_{i+2}
    #   rewards[:, k]  stop flag    r_i        r_i + g r_{i+1}   r_i + g r_{i+1}    (mask_{i+1} = 0)
    #   masks[:, k]                 1          0                 0              (running min)
    #   terminals[:, k]             0          1                 1              (running max)
    #   valid[:, k]                 1          1                 0              (1 - terminals[:, k-1])
    #
    # The critic uses column H-1 (rewards[:, -1], masks[:, -1]) weighted by valid[:, -1]; the BC
    # loss weights step k by valid[:, k]. Step 2 above belongs to another trajectory: valid = 0.
    def sample_sequence(self, batch_size, sequence_length, discount, rng=None, idxs=None, keys=None):
        """`batch_size` windows of `H = sequence_length` consecutive rows: the chunked batch (table above).

        Starts are uniform over `[0, size - H]` (or the rows `idxs`, in time order), so a window may cross a
        trajectory end. For the window at row i, step k = 0..H-1, row reward r, mask m, terminal d:

            rewards[:, k]   = sum_{j<=k} discount^j r_{i+j}        (default, as the reference)
                            = sum_{j<=k} discount^j r_{i+j} * [m_{i+l} != 0 for all l < j]
                                                              (stop_reward_at_mask_zero=True)
            masks[:, k]     = min_{j<=k} m_{i+j}
            terminals[:, k] = max_{j<=k} d_{i+j}
            valid[:, 0] = 1,  valid[:, k] = 1 - terminals[:, k-1]

        `discount` is the gamma of the critic's gamma^H bootstrap. Returns numpy `observations (B, *ob)`,
        `full_observations`, `next_observations (B, H, *ob)`, `actions`, `next_actions (B, H, A)` (row i+k+1,
        clipped to the last row) at their stored dtypes and `rewards`, `masks`, `terminals`, `valid (B, H)`
        float32; `keys` (default all): only these entries, the same windows (the starts are drawn alike).
        `ValueError` for `H < 1`, `H > size` or bad `idxs`.
        """
        H = sequence_length
        starts = self._start_indices(batch_size, H, rng, idxs)  # (B,)
        logical = starts[:, None] + np.arange(H)[None, :]  # (B, H)
        rows = self._physical(logical)  # (B, H)
        next_rows = self._physical(np.minimum(logical + 1, self.size - 1))  # (B, H)

        step_rewards = self._fields["rewards"][rows].astype(np.float64)  # (B, H)
        step_masks = self._fields["masks"][rows].astype(np.float32)  # (B, H)
        step_terminals = self._fields["terminals"][rows].astype(np.float32)  # (B, H)

        masks = np.minimum.accumulate(step_masks, axis=1)  # (B, H)
        terminals = np.maximum.accumulate(step_terminals, axis=1)  # (B, H)
        valid = np.ones_like(terminals)  # (B, H)
        valid[:, 1:] = 1.0 - terminals[:, :-1]

        discounted = step_rewards * np.power(float(discount), np.arange(H))  # (B, H)
        if self.stop_reward_at_mask_zero:
            # Step k counts only if every mask before it is nonzero: masks[:, k-1] != 0.
            counted = np.ones_like(discounted, dtype=bool)  # (B, H)
            counted[:, 1:] = masks[:, :-1] != 0
            discounted = np.where(counted, discounted, 0.0)
        rewards = np.cumsum(discounted, axis=1).astype(np.float32)  # (B, H)

        observations, actions = self._fields["observations"], self._fields["actions"]
        gathers = dict(  # the row gathers, the costly part: only those asked for
            observations=lambda: observations[rows[:, 0]],  # (B, *ob)
            full_observations=lambda: observations[rows],  # (B, H, *ob)
            actions=lambda: actions[rows],  # (B, H, A)
            next_observations=lambda: self._fields["next_observations"][rows],  # (B, H, *ob)
            next_actions=lambda: actions[next_rows],  # (B, H, A)
        )
        batch = {k: gather() for k, gather in gathers.items() if keys is None or k in keys}
        batch.update(rewards=rewards, masks=masks, terminals=terminals, valid=valid)
        return batch if keys is None else {k: batch[k] for k in keys if k in batch}  # (select_keys names a missing one)


class ReplayBuffer(Dataset):
    """A Dataset over circular storage of `max_size` rows, written by `add_transition` at `pointer`; `size`
    rows are held (`buffer[key]` is the whole storage, zeros until written). Sampling works in time order:
    logical row l (0 = oldest) is storage row `(pointer - size + l) % max_size`, so no window joins the newest
    row to the oldest (docs/batch_contract.md, section 8).
    """

    def __init__(self, fields, *, rng, stop_reward_at_mask_zero=False, size=0, pointer=0):
        super().__init__(fields, rng=rng, stop_reward_at_mask_zero=stop_reward_at_mask_zero)
        self.max_size = len(self._fields["observations"])
        self._size = size
        self.pointer = pointer

    @property
    def size(self):
        return self._size

    @classmethod
    def create(cls, example_transition, size, *, seed=0, rng=None, stop_reward_at_mask_zero=False):
        """An empty buffer of `size >= 1` rows shaped and typed like `example_transition` (one transition, no
        row axis, the required fields of `Dataset.create`); `seed`, `rng`, `stop_reward_at_mask_zero` as there."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        storage = {}
        for key, value in dict(example_transition).items():
            value = np.asarray(value)
            storage[key] = np.zeros((size, *value.shape), dtype=value.dtype)
        _check_fields(storage, check_finite=False)
        return cls(
            storage,
            rng=rng if rng is not None else np.random.default_rng(seed),
            stop_reward_at_mask_zero=stop_reward_at_mask_zero,
        )

    @classmethod
    def create_from_initial_dataset(cls, dataset_dict, size, *, seed=0, rng=None, stop_reward_at_mask_zero=False):
        """A buffer holding a copy of `dataset_dict`'s N rows as its oldest rows, `max_size = max(size, N + 1)`
        (as the reference driver: the data are kept whole, and the first online row fits before any offline
        row is overwritten); `size = pointer = N`. `ValueError` as `Dataset.create`."""
        arrays = {key: np.asarray(value) for key, value in dict(dataset_dict).items()}
        n = _check_fields(arrays)
        max_size = max(int(size), n + 1)
        storage = {}
        for key, arr in arrays.items():
            storage[key] = np.zeros((max_size, *arr.shape[1:]), dtype=arr.dtype)
            storage[key][:n] = arr
        return cls(
            storage,
            rng=rng if rng is not None else np.random.default_rng(seed),
            stop_reward_at_mask_zero=stop_reward_at_mask_zero,
            size=n,
            pointer=n % max_size,
        )

    def copy(self, add_or_replace=None):
        """A new ReplayBuffer with copied storage (replacement arrays of `max_size` rows), sharing the generator."""
        fields = {key: np.array(arr) for key, arr in self._fields.items()}
        fields.update({key: np.array(arr) for key, arr in (add_or_replace or {}).items()})
        _check_fields(fields)
        if len(fields["observations"]) != self.max_size:
            raise ValueError(f"replacement fields must have max_size={self.max_size} rows")
        return ReplayBuffer(
            fields,
            rng=self.rng,
            stop_reward_at_mask_zero=self.stop_reward_at_mask_zero,
            size=self._size,
            pointer=self.pointer,
        )

    def _physical(self, logical):
        return (self.pointer - self._size + logical) % self.max_size

    def add_transition(self, transition):
        """Write one transition (exactly the buffer's fields, each shaped like one row) at `pointer` and advance
        it circularly. `ValueError`, writing nothing, for a missing or unknown field, a wrong shape, or NaN/inf
        in observations, next observations, actions or rewards."""
        transition = {key: np.asarray(value) for key, value in dict(transition).items()}
        missing = sorted(set(self._fields) - set(transition))
        unknown = sorted(set(transition) - set(self._fields))
        if missing or unknown:
            raise ValueError(f"transition fields do not match the buffer: missing {missing}, unknown {unknown}")
        for key, value in transition.items():
            if value.shape != self._fields[key].shape[1:]:
                raise ValueError(
                    f"field '{key}' has shape {value.shape}, the buffer stores {self._fields[key].shape[1:]}"
                )
            if key in FINITE_KEYS and np.issubdtype(value.dtype, np.inexact) and not np.isfinite(value).all():
                raise ValueError(
                    f"field '{key}' has a non-finite value (NaN or inf) in the added transition "
                    f"(would be storage row {self.pointer})"
                )
        for key, value in transition.items():
            self._fields[key][self.pointer] = value
        self.pointer = (self.pointer + 1) % self.max_size
        self._size = min(self._size + 1, self.max_size)
