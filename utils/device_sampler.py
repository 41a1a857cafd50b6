"""Offline windows sampled on the device, and `k` gradient steps per host call.

The offline phase of `main.py` takes one gradient step per host call: it draws `B` windows on the
host (`Dataset.sample_sequence`), copies them to the device and runs `agent.update`. This module
lets one host call run `k` steps in one `lax.scan`:

* `DeviceWindowSampler`: a device-resident copy of the dataset (observations, next observations,
  actions) plus precomputed per-start tables of `rewards`, `masks`, `terminals`, `valid`.
  `windows(starts)` returns exactly the batch of `Dataset.sample_sequence(idxs=starts)` (same keys,
  shapes, dtypes and values, bit for bit; docs/batch_contract.md), and `sample(key, B)` draws the
  starts uniformly from `[0, N - H]` with `jax.random.randint`. It is a pytree (arrays are leaves;
  `horizon_length`, `discount`, `size` are static), so it can be an argument of jitted or vmapped
  functions.
* `offline_updates(agent, sampler, key, first_step, num_steps)`: `num_steps` gradient steps in one
  `lax.scan`; offline step `t` draws its windows with the key `fold_in(key, t)`, so the batches do not
  depend on how the steps are grouped into host calls (`k = 1` and `k = 10` give the same batches, and
  an exact resume needs only the base key and the step number).
* `PrefetchingSampler`: the fallback for datasets that do not fit on the device
  (`fits_on_device`). A background thread draws batches on the host with the dataset's own numpy
  generator (the same batches as today's loop, in the same order), stacks `k` of them to
  `(k, B, ...)` and copies them to the device ahead of time; `generator_state()` is the state to
  save for an exact resume. `scan_updates(agent, stacked_batches)` runs them.

Random streams: the device sampler's base key is `utils.seeding.jax_key(seed, "device_sampler")`
(stream 7). The host fallback draws from the dataset stream (`numpy_rng(seed, "dataset")`), so a
run on the fallback reproduces today's batches exactly, and a run on the device sampler draws other
(equally distributed) batches.
"""

import copy
import functools
import os
import queue
import threading
from typing import Any, Dict, Iterable, Optional, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.datasets import Dataset
from utils.flax_utils import scan_updates

# The keys of `Dataset.sample_sequence`, in its order.
SEQUENCE_KEYS = (
    "observations",
    "full_observations",
    "actions",
    "next_observations",
    "next_actions",
    "rewards",
    "masks",
    "terminals",
    "valid",
)
# Per-row fields copied to the device.
ROW_KEYS = ("observations", "next_observations", "actions")
# Per-start `(N - H + 1, H)` float32 tables precomputed on the host.
TABLE_KEYS = ("rewards", "masks", "terminals", "valid")
# Start rows per `sample_sequence` call while the tables are built (bounds host memory).
TABLE_CHUNK = 1 << 16


def _check_horizon(dataset: Dataset, horizon_length) -> int:
    """`horizon_length` as an int; `ValueError` unless `1 <= H <= dataset.size` (the dataset not empty)."""
    if isinstance(horizon_length, bool) or not isinstance(horizon_length, (int, np.integer)) or horizon_length < 1:
        raise ValueError(f"horizon_length must be an integer >= 1, got {horizon_length!r}")
    if dataset.size == 0:
        raise ValueError(f"cannot sample from an empty {type(dataset).__name__} (size 0)")
    if horizon_length > dataset.size:
        raise ValueError(f"horizon_length {horizon_length} is longer than the data ({dataset.size} rows)")
    return int(horizon_length)


def _check_count(value, name: str) -> int:
    """`value` as an int; `ValueError` naming `name` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _time_order(dataset: Dataset, keys: Sequence[str]) -> Dict[str, np.ndarray]:
    """The fields `keys` with rows in time order (row `l` = logical row `l` of `sample_sequence`).

    A `Dataset`'s arrays are returned as they are (no copy); a `ReplayBuffer`'s rows held are
    gathered from its circular storage (`_physical`, the mapping its sampler uses).
    """
    if type(dataset)._physical is Dataset._physical:
        return {key: dataset[key] for key in keys}
    rows = dataset._physical(np.arange(dataset.size))  # (N,) storage rows, oldest first
    return {key: dataset[key][rows] for key in keys}


def _unsupported_dtypes(dataset: Dataset) -> Dict[str, np.dtype]:
    """Row fields whose dtype JAX would change on the device (e.g. float64 without `jax_enable_x64`)."""
    return {
        key: dataset[key].dtype
        for key in ROW_KEYS
        if jax.dtypes.canonicalize_dtype(dataset[key].dtype) != dataset[key].dtype
    }


def window_tables(dataset: Dataset, horizon_length: int, discount: float, chunk: int = TABLE_CHUNK):
    """The per-start tables of every valid window, computed by `Dataset.sample_sequence` itself.

    Row `i` of each table is what `dataset.sample_sequence(..., idxs=[i])` returns for the window
    starting at (logical) row `i`: the same code and arithmetic (float64 reward sums cast to float32,
    `stop_reward_at_mask_zero` of the dataset), so a gather from these tables is bit-identical to the
    host sampler. The windows are computed `chunk` starts at a time on a copy of the dataset that
    holds only `rewards`, `masks` and `terminals` (zero-width observations and actions), so peak
    host memory beyond the tables is about `chunk * H * 40` bytes.

    Args:
        dataset: a `Dataset` (or `ReplayBuffer`: its rows in time order) of `N` rows.
        horizon_length: `H`, `1 <= H <= N`.
        discount: gamma, as passed to `sample_sequence`.
        chunk: start rows per `sample_sequence` call, >= 1.

    Returns:
        dict `rewards, masks, terminals, valid`, each `(N - H + 1, H)` float32 (numpy).

    Raises:
        ValueError: `H < 1`, `H > N`, an empty dataset, or `chunk < 1`.
    """
    H = _check_horizon(dataset, horizon_length)
    chunk = _check_count(chunk, "chunk")
    scalars = _time_order(dataset, ("rewards", "masks", "terminals"))
    n = dataset.size
    empty = np.zeros((n, 0), np.float32)  # (N, 0): gathering windows of it costs nothing
    proxy = Dataset.create(
        observations=empty,
        next_observations=empty,
        actions=empty,
        stop_reward_at_mask_zero=dataset.stop_reward_at_mask_zero,
        **scalars,
    )
    num_starts = n - H + 1
    tables = {key: np.empty((num_starts, H), np.float32) for key in TABLE_KEYS}
    for low in range(0, num_starts, chunk):
        idxs = np.arange(low, min(low + chunk, num_starts))  # (C,)
        batch = proxy.sample_sequence(len(idxs), H, discount, idxs=idxs)
        for key in TABLE_KEYS:
            tables[key][low : low + len(idxs)] = batch[key]  # (C, H) float32
    return tables


def estimate_nbytes(dataset: Dataset, horizon_length: int) -> int:
    """Device bytes a `DeviceWindowSampler` of `dataset` would hold (without building it).

    `observations`, `next_observations`, `actions` at their stored dtype (`N` rows each) plus four
    `(N - H + 1, H)` float32 tables. Raises `ValueError` as `window_tables` for a bad `H`.
    """
    H = _check_horizon(dataset, horizon_length)
    n = dataset.size
    rows = sum(int(np.prod(dataset[key].shape[1:], dtype=np.int64)) * dataset[key].dtype.itemsize for key in ROW_KEYS)
    return n * rows + len(TABLE_KEYS) * (n - H + 1) * H * 4


def available_memory(device=None) -> int:
    """Bytes free for new arrays on `device` (default: `jax.devices()[0]`).

    When the backend reports memory statistics (GPU, TPU): `bytes_limit - bytes_in_use` of
    `device.memory_stats()` (`bytes_limit` is the allocator's pool: with XLA's default preallocation
    75% of the GPU's memory). Otherwise (CPU, whose device memory is host memory): the free host
    memory, `os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')` (page cache not counted, so
    this errs low).
    """
    device = device if device is not None else jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends without statistics raise or return None
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def fits_on_device(dataset: Dataset, horizon_length: int, device=None, fraction: float = 0.5) -> bool:
    """Whether to sample `dataset` on the device (`DeviceWindowSampler`) rather than on the host.

    Rule: True when `estimate_nbytes(dataset, H) <= fraction * available_memory(device)` and JAX can
    hold every row field at its stored dtype (float64 fields need `jax_enable_x64`; otherwise the
    batches would not have the host sampler's dtypes). The other `1 - fraction` is left for the
    agent's parameters, optimizer state, activations and XLA's workspace; on CPU the dataset's host
    copy is already resident, so the device copy doubles it. When False, use `PrefetchingSampler`.

    Args:
        dataset: the offline `Dataset`.
        horizon_length: `H` of the windows.
        device: a `jax.Device`; default `jax.devices()[0]`.
        fraction: share of the available memory the copy may take, in `(0, 1]`.

    Raises:
        ValueError: `fraction` outside `(0, 1]`; `H < 1` or `H > N`.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    if _unsupported_dtypes(dataset):
        _check_horizon(dataset, horizon_length)
        return False
    return estimate_nbytes(dataset, horizon_length) <= fraction * available_memory(device)


class DeviceWindowSampler(flax.struct.PyTreeNode):
    """A device-resident dataset that samples the chunked batch of `Dataset.sample_sequence`.

    Build with `DeviceWindowSampler.create(dataset, horizon_length, discount)`. A pytree: the arrays
    below are its leaves, `horizon_length`, `discount`, `size` and `stop_reward_at_mask_zero` are
    static, so it can be passed to jitted functions and shared by `jax.vmap` (`in_axes=None`).
    `N` = `size` rows in time order, `H` = `horizon_length`, `S = N - H + 1` valid start rows.

    Attributes:
        observations: `(N, *ob)`, stored dtype.
        next_observations: `(N, *ob)`, stored dtype.
        actions: `(N, A)`, stored dtype.
        rewards, masks, terminals, valid: `(S, H)` float32, row `i` = the window starting at row `i`
            exactly as `Dataset.sample_sequence` computes it (`window_tables`).
    """

    observations: jax.Array
    next_observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    masks: jax.Array
    terminals: jax.Array
    valid: jax.Array
    horizon_length: int = flax.struct.field(pytree_node=False)
    discount: float = flax.struct.field(pytree_node=False)
    size: int = flax.struct.field(pytree_node=False)
    stop_reward_at_mask_zero: bool = flax.struct.field(pytree_node=False)

    @classmethod
    def create(cls, dataset: Dataset, horizon_length: int, discount: float, device=None, chunk: int = TABLE_CHUNK):
        """Copy `dataset` to `device` and precompute its window tables (host, numpy, `window_tables`).

        Args:
            dataset: the offline `Dataset` of `N` rows (a `ReplayBuffer` works too: its rows held, in
                time order, as of this call). Extra fields (e.g. `qpos`) are not copied.
            horizon_length: `H`, `1 <= H <= N`; use the agent's `horizon_length`.
            discount: gamma of the reward sums; use the agent's `discount`.
            device: a `jax.Device`; default JAX's default device.
            chunk: start rows per `sample_sequence` call while the tables are built.

        Raises:
            ValueError: `H < 1`, `H > N` or an empty dataset; a row field whose dtype JAX cannot hold
                as it is (float64 / int64 without `jax_enable_x64`: cast the dataset first).
        """
        H = _check_horizon(dataset, horizon_length)
        bad = _unsupported_dtypes(dataset)
        if bad:
            raise ValueError(
                f"fields {bad} cannot live on the device at their stored dtype without jax_enable_x64; cast "
                "them (e.g. to float32) in the dataset so host and device batches agree, or sample on the host."
            )
        tables = window_tables(dataset, H, discount, chunk=chunk)
        rows = _time_order(dataset, ROW_KEYS)
        put = lambda x: jax.device_put(x, device)  # noqa: E731
        return cls(
            **{key: put(rows[key]) for key in ROW_KEYS},
            **{key: put(tables[key]) for key in TABLE_KEYS},
            horizon_length=H,
            discount=float(discount),
            size=int(dataset.size),
            stop_reward_at_mask_zero=bool(dataset.stop_reward_at_mask_zero),
        )

    @property
    def num_starts(self) -> int:
        """`S = N - H + 1`: start rows `0 .. N - H`."""
        return self.size - self.horizon_length + 1

    @property
    def nbytes(self) -> int:
        """Device bytes held by the arrays (equals `estimate_nbytes` of the dataset)."""
        return int(sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(self)))

    def start_rows(self, key: jax.Array, batch_size: int) -> jax.Array:
        """`(B,)` int32 start rows drawn uniformly from `[0, N - H]` with `jax.random.randint(key, ...)`.

        Raises `ValueError` for `batch_size < 1` (it is static: a Python int).
        """
        batch_size = _check_count(batch_size, "batch_size")
        return jax.random.randint(key, (batch_size,), 0, self.num_starts, dtype=jnp.int32)

    def windows(self, starts) -> Dict[str, jax.Array]:
        """The windows starting at `starts` `(B,)` (integers in `[0, N - H]`): `sample_sequence`'s batch.

        Returns:
            dict with the keys, shapes and dtypes of `Dataset.sample_sequence` (docs/batch_contract.md),
            as device arrays: `observations (B, *ob)`, `full_observations (B, H, *ob)`, `actions (B, H, A)`,
            `next_observations (B, H, *ob)`, `next_actions (B, H, A)` (row index clipped to `N - 1`),
            `rewards, masks, terminals, valid (B, H)` float32. Equal value for value to
            `dataset.sample_sequence(B, H, discount, idxs=starts)`.

        Raises:
            ValueError: for concrete `starts` (not traced) that are not a 1-D integer array with values
                in `[0, N - H]`. Traced starts cannot be checked: out-of-range values are clamped by the
                gathers and give meaningless windows.
        """
        if not isinstance(starts, jax.core.Tracer):
            values = np.asarray(starts)
            if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
                raise ValueError(f"starts must be a 1-D integer array, got shape {values.shape} dtype {values.dtype}")
            if values.size and (values.min() < 0 or values.max() > self.num_starts - 1):
                raise ValueError(
                    f"starts must lie in [0, {self.num_starts - 1}] for horizon_length {self.horizon_length}"
                )
        return _windows(self, jnp.asarray(starts, jnp.int32))

    def sample(self, key: jax.Array, batch_size: int) -> Dict[str, jax.Array]:
        """`windows(start_rows(key, batch_size))`: `B` windows with uniform starts in `[0, N - H]`.

        Pure and jittable (`batch_size` static). Raises `ValueError` for `batch_size < 1`.
        """
        return _windows(self, self.start_rows(key, batch_size))


@jax.jit
def _windows(sampler: DeviceWindowSampler, starts: jax.Array) -> Dict[str, jax.Array]:
    """Gather the windows at `starts` `(B,)` int32 (see `DeviceWindowSampler.windows`)."""
    H = sampler.horizon_length
    rows = starts[:, None] + jnp.arange(H, dtype=jnp.int32)[None, :]  # (B, H)
    next_rows = jnp.minimum(rows + 1, sampler.size - 1)  # (B, H)
    take = lambda x, i: jnp.take(x, i, axis=0, mode="clip")  # noqa: E731
    return dict(
        observations=take(sampler.observations, starts),  # (B, *ob)
        full_observations=take(sampler.observations, rows),  # (B, H, *ob)
        actions=take(sampler.actions, rows),  # (B, H, A)
        next_observations=take(sampler.next_observations, rows),  # (B, H, *ob)
        next_actions=take(sampler.actions, next_rows),  # (B, H, A)
        rewards=take(sampler.rewards, starts),  # (B, H)
        masks=take(sampler.masks, starts),  # (B, H)
        terminals=take(sampler.terminals, starts),  # (B, H)
        valid=take(sampler.valid, starts),  # (B, H)
    )


def _sampled_update(carry, step):
    """One offline step of `offline_updates`: draw `B` windows with `fold_in(key, step)`, then `agent.update`."""
    agent, sampler, key = carry
    agent, info = agent.update(sampler.sample(jax.random.fold_in(key, step), agent.config["batch_size"]))
    return (agent, sampler, key), info


@functools.partial(jax.jit, static_argnames="num_steps")
def offline_updates(agent, sampler, key: jax.Array, first_step, num_steps: int):
    """`num_steps` offline gradient steps in one `lax.scan` (`utils.flax_utils.scan_updates`); `num_steps` static.

    Step `t = first_step .. first_step + num_steps - 1` (1-based, as `main.py` counts) runs `agent.update` on
    `sampler.sample(fold_in(key, t), agent.config['batch_size'])`: the batches depend on `key` and `t` only,
    not on how steps are grouped into calls, so an exact resume needs the key and the step. `sampler`: a
    `DeviceWindowSampler` or `utils.goal_windows.DeviceGoalWindows`. Works under `jax.vmap` over
    `(agent, key)` with the sampler shared (`in_axes=(0, None, 0, None)`). Returns `(agent, info)`, the
    LAST step's info. Raises `ValueError` for `num_steps < 1`.
    """
    steps = jnp.asarray(first_step, jnp.int32) + jnp.arange(_check_count(num_steps, "num_steps"), dtype=jnp.int32)
    (agent, _, _), info = scan_updates(_sampled_update, (agent, sampler, key), steps, reduce="last")
    return agent, info


def _same_state(a, b) -> bool:
    """Equality of two generator states (nested dicts; MT19937 holds an array)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _rng_state(rng: np.random.Generator) -> Dict:
    """A copy of the JSON-able state of `rng` (`utils.seeding.generator_state` format)."""
    return copy.deepcopy(rng.bit_generator.state)


class _Failure:
    """An exception raised in the producer thread, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


class PrefetchingSampler:
    """Host sampling in a background thread, `k` batches stacked per item, copied to the device ahead.

    The fallback for datasets that do not fit on the device. The thread draws with the dataset's own
    generator (`dataset.sample_sequence(B, H, discount)`, `dataset.rng`), so the batches and their
    order are those of `k` consecutive steps of the one-step host loop with the same generator. It
    stacks `k` of them to `(k, B, ...)`, `jax.device_put`s them and keeps at most `depth` items
    ready. Run them with `scan_updates(agent, batch)`.

    Use as an iterator (`next(prefetcher)`) and close it (`close()`, or a `with` block). While it is
    open the thread owns `dataset.rng`: draw nothing else from it. For a run state written between
    items, save `generator_state()` (the generator's state before the next item the consumer will
    get) in place of `generator_state(dataset.rng)`, which is ahead by the prefetched items.
    `close()` sets `dataset.rng` back to `generator_state()`, so after it the dataset continues
    exactly where the consumer stopped, whatever the thread had drawn.

    An exception raised in the thread (e.g. a `ValueError` of the sampler) is raised again, the same
    object, by the `next()` that would have returned its item and every one after it.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        horizon_length: int,
        discount: float,
        steps_per_item: int,
        *,
        depth: int = 2,
        keys: Optional[Iterable[str]] = None,
        device=None,
        draw=None,
    ):
        """Start the thread.

        Args:
            dataset: the `Dataset` to draw from (with its own generator).
            batch_size: `B >= 1` windows per step.
            horizon_length: `H`, `1 <= H <= N`.
            discount: gamma of the reward sums.
            steps_per_item: `k >= 1` batches stacked per item.
            depth: items kept ready, >= 1.
            keys: the batch keys to stack and copy (default: all of `sample_sequence`'s; pass
                the agent's batch keys, to copy only what the update reads).
            device: a `jax.Device` for `jax.device_put` (default JAX's default device).
            draw: `() -> batch` drawing one batch with `dataset.rng` in place of `sample_sequence` (another
                kind of window, e.g. `utils.goal_windows.GoalWindowSource.sample`); `keys` must be given then.

        Raises:
            ValueError: `B`, `k` or `depth` < 1; `H < 1`, `H > N` or an empty dataset; an unknown key.
        """
        self.dataset = dataset
        self.batch_size = _check_count(batch_size, "batch_size")
        self.steps_per_item = _check_count(steps_per_item, "steps_per_item")
        self.keys = tuple(SEQUENCE_KEYS if keys is None else keys)
        if draw is None:
            self.horizon_length = _check_horizon(dataset, horizon_length)
            self.discount = discount
            unknown = sorted(set(self.keys) - set(SEQUENCE_KEYS))
            if unknown:
                raise ValueError(f"keys {unknown} are not keys of sample_sequence {SEQUENCE_KEYS}")
            draw = functools.partial(dataset.sample_sequence, self.batch_size, self.horizon_length, self.discount)
        self._draw_one = draw
        self.device = device
        self._queue = queue.Queue(maxsize=_check_count(depth, "depth"))
        self._stop = threading.Event()
        self._next_state = _rng_state(dataset.rng)  # before the next item the consumer gets
        self._failure: Optional[_Failure] = None
        self._closed = False
        self._thread = threading.Thread(target=self._produce, name="PrefetchingSampler", daemon=True)
        self._thread.start()

    # ---- producer (background thread) ----
    def _draw(self) -> Dict[str, Any]:
        batches = [self._draw_one() for _ in range(self.steps_per_item)]
        stacked = {key: np.stack([b[key] for b in batches]) for key in self.keys}  # (k, B, ...)
        return jax.device_put(stacked, self.device)

    def _put(self, item) -> bool:
        """Put `item` in the queue unless stopped first; True if it went in."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self):
        try:
            while not self._stop.is_set():
                before = _rng_state(self.dataset.rng)
                batch = self._draw()
                after = _rng_state(self.dataset.rng)
                if not self._put((before, after, batch)):
                    return
        except BaseException as error:  # noqa: BLE001 - carried to the consumer and raised there
            self._put(_Failure(error))

    # ---- consumer ----
    def __iter__(self):
        return self

    def __next__(self) -> Dict[str, jax.Array]:
        """The next stacked batch: dict of device arrays `(k, B, ...)` (keys and dtypes of `sample_sequence`).

        Raises:
            RuntimeError: the sampler is closed.
            BaseException: whatever the producer thread raised (the same exception object).
        """
        if self._closed:
            raise RuntimeError("PrefetchingSampler is closed")
        if self._failure is not None:
            raise self._failure.error
        while True:
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the PrefetchingSampler thread stopped without an item") from None
        if isinstance(item, _Failure):
            self._failure = item
            raise item.error
        before, after, batch = item
        if not _same_state(before, self._next_state):  # cannot happen unless something else draws from dataset.rng
            raise RuntimeError("dataset.rng was used by something else while the PrefetchingSampler owned it")
        self._next_state = after
        return batch

    def generator_state(self) -> Dict:
        """The dataset generator's state before the next item `next()` will return.

        `utils.seeding.generator_state`-compatible (a copy of `rng.bit_generator.state`): restoring it into
        the dataset's generator (`utils.seeding.set_generator_state`) continues the identical sequence of
        batches. Before the first `next()` it is the state at construction.
        """
        return copy.deepcopy(self._next_state)

    def close(self, timeout: float = 60.0):
        """Stop and join the thread, drop the prefetched items, and set `dataset.rng` back to
        `generator_state()`. Idempotent.

        Raises:
            RuntimeError: the thread did not stop within `timeout` seconds (`dataset.rng` untouched).
        """
        if self._closed:
            return
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the PrefetchingSampler thread did not stop within {timeout} s")
        self._closed = True
        self.dataset.rng.bit_generator.state = copy.deepcopy(self._next_state)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


class ChunkWindows:
    """The windows of the chunked agents (docs/batch_contract.md) over one dataset: an `AgentSpec.windows`.

    `sample(B)` draws `B` windows of `horizon_length` steps with the dataset's own generator
    (`Dataset.sample_sequence`); `fits_on_device()` and `on_device()` give the device sampler of the same
    windows (`DeviceWindowSampler`).
    """

    keys = SEQUENCE_KEYS

    def __init__(self, dataset: Dataset, config):
        self.dataset = dataset
        self.horizon_length, self.discount = int(config["horizon_length"]), float(config["discount"])

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        return self.dataset.sample_sequence(batch_size, self.horizon_length, self.discount)

    def fits_on_device(self) -> bool:
        return fits_on_device(self.dataset, self.horizon_length)

    def on_device(self) -> DeviceWindowSampler:
        return DeviceWindowSampler.create(self.dataset, self.horizon_length, self.discount)
