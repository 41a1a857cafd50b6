"""Offline windows on the device and `k` gradient steps per host call (`--updates_per_dispatch`).

`DeviceWindowSampler` draws `Dataset.sample_sequence`'s windows inside a jitted update, `offline_updates`
runs `k` steps of them in one scan, `PrefetchingSampler` is the host fallback for data that do not fit, and
`ChunkWindows` is the default window source of an agent (`AgentSpec.windows`). docs/batch_contract.md,
section 10, tells how they relate to the host batches and to the random streams.
"""

import copy
import functools
import os
import queue
import threading
from typing import Any, Dict, Iterable, Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.datasets import Dataset
from utils.flax_utils import loop_updates, scan_updates

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
ROW_KEYS = ("observations", "next_observations", "actions")  # per-row fields copied to the device
TABLE_KEYS = ("rewards", "masks", "terminals", "valid")  # per-start (N - H + 1, H) float32 tables
TABLE_CHUNK = 1 << 16  # start rows per sample_sequence call while the tables are built (bounds host memory)


def _check_count(value, name: str) -> int:
    """`value` as an int; `ValueError` naming `name` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_horizon(dataset: Dataset, horizon_length) -> int:
    """`horizon_length` as an int; `ValueError` unless `1 <= H <= dataset.size`."""
    H = _check_count(horizon_length, "horizon_length")
    if dataset.size == 0:
        raise ValueError(f"cannot sample from an empty {type(dataset).__name__} (size 0)")
    if H > dataset.size:
        raise ValueError(f"horizon_length {H} is longer than the data ({dataset.size} rows)")
    return H


def _time_order(dataset: Dataset, keys) -> Dict[str, np.ndarray]:
    """The fields `keys` with rows in time order: a `Dataset`'s arrays as they are, a `ReplayBuffer`'s rows
    held gathered from its circular storage."""
    if type(dataset)._physical is Dataset._physical:
        return {key: dataset[key] for key in keys}
    rows = dataset._physical(np.arange(dataset.size))  # (N,) storage rows, oldest first
    return {key: dataset[key][rows] for key in keys}


def _unsupported_dtypes(dataset: Dataset) -> Dict[str, np.dtype]:
    """Row fields whose dtype JAX would change on the device (float64 without `jax_enable_x64`)."""
    return {
        k: dataset[k].dtype for k in ROW_KEYS if jax.dtypes.canonicalize_dtype(dataset[k].dtype) != dataset[k].dtype
    }


def window_tables(dataset: Dataset, horizon_length: int, discount: float, chunk: int = TABLE_CHUNK):
    """`rewards, masks, terminals, valid`, each `(N - H + 1, H)` float32: row `i` is what
    `dataset.sample_sequence(..., idxs=[i])` returns, computed by that very code `chunk` starts at a time on
    a copy with zero-width observations and actions (so a gather from the tables is bit-identical to it)."""
    H, chunk = _check_horizon(dataset, horizon_length), _check_count(chunk, "chunk")
    empty = np.zeros((dataset.size, 0), np.float32)  # (N, 0): gathering windows of it costs nothing
    scalars = _time_order(dataset, ("rewards", "masks", "terminals"))
    proxy = Dataset.create(
        observations=empty, next_observations=empty, actions=empty,
        stop_reward_at_mask_zero=dataset.stop_reward_at_mask_zero, **scalars,
    )  # fmt: skip
    num_starts = dataset.size - H + 1
    tables = {key: np.empty((num_starts, H), np.float32) for key in TABLE_KEYS}
    for low in range(0, num_starts, chunk):
        idxs = np.arange(low, min(low + chunk, num_starts))  # (C,)
        batch = proxy.sample_sequence(len(idxs), H, discount, idxs=idxs)
        for key in TABLE_KEYS:
            tables[key][low : low + len(idxs)] = batch[key]  # (C, H)
    return tables


def estimate_nbytes(dataset: Dataset, horizon_length: int) -> int:
    """Device bytes a `DeviceWindowSampler` of `dataset` would hold: the row fields and the four tables."""
    H, n = _check_horizon(dataset, horizon_length), dataset.size
    rows = sum(int(np.prod(dataset[key].shape[1:], dtype=np.int64)) * dataset[key].dtype.itemsize for key in ROW_KEYS)
    return n * rows + len(TABLE_KEYS) * (n - H + 1) * H * 4


def available_memory(device=None) -> int:
    """Bytes free on `device` (default `jax.devices()[0]`): `bytes_limit - bytes_in_use` of its memory statistics
    (GPU, TPU), else the free host memory (CPU, whose device memory is host memory; page cache not counted)."""
    device = device if device is not None else jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends without statistics raise or return None
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def fits_on_device(dataset: Dataset, horizon_length: int, device=None, fraction: float = 0.5) -> bool:
    """True when JAX holds every row field at its dtype and `estimate_nbytes` is at most `fraction` of
    `available_memory(device)` (the rest is left for the agent and XLA). `ValueError` for `fraction` outside
    `(0, 1]` or a bad `H`."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    if _unsupported_dtypes(dataset):
        _check_horizon(dataset, horizon_length)
        return False
    return estimate_nbytes(dataset, horizon_length) <= fraction * available_memory(device)


class DeviceWindowSampler(flax.struct.PyTreeNode):
    """A device-resident dataset that returns `Dataset.sample_sequence`'s windows bit for bit.

    A pytree (the arrays are leaves, the rest static), so it can be an argument of jitted functions and be
    shared by `jax.vmap` (`in_axes=None`). `N` = `size` rows in time order, `H` = `horizon_length`:
    `observations`, `next_observations` `(N, *ob)` and `actions` `(N, A)` at their stored dtypes, and
    `rewards`, `masks`, `terminals`, `valid` `(N - H + 1, H)` float32 (`window_tables`).
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
        """Copy `dataset` (a `ReplayBuffer` too: its rows held, in time order) to `device` with its window
        tables. `ValueError` for a bad `H` or a row field JAX would change (cast float64 data first)."""
        H = _check_horizon(dataset, horizon_length)
        bad = _unsupported_dtypes(dataset)
        if bad:
            raise ValueError(
                f"fields {bad} cannot live on the device at their stored dtype without jax_enable_x64; cast "
                "them (e.g. to float32) in the dataset so host and device batches agree, or sample on the host."
            )
        tables, rows = window_tables(dataset, H, discount, chunk=chunk), _time_order(dataset, ROW_KEYS)
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
        return self.size - self.horizon_length + 1

    @property
    def nbytes(self) -> int:
        return int(sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(self)))

    def start_rows(self, key: jax.Array, batch_size: int) -> jax.Array:
        """`(B,)` int32 start rows drawn uniformly from `[0, N - H]` (`batch_size` static)."""
        batch_size = _check_count(batch_size, "batch_size")
        return jax.random.randint(key, (batch_size,), 0, self.num_starts, dtype=jnp.int32)

    def windows(self, starts) -> Dict[str, jax.Array]:
        """`dataset.sample_sequence(B, H, discount, idxs=starts)` for `(B,)` starts in `[0, N - H]`, value for
        value. Concrete starts are checked (`ValueError`); traced ones are clamped by the gathers."""
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
        """`B` windows with uniform starts drawn with `key` (pure, jittable)."""
        return _windows(self, self.start_rows(key, batch_size))


@jax.jit
def _windows(sampler: DeviceWindowSampler, starts: jax.Array) -> Dict[str, jax.Array]:
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


@functools.partial(jax.jit, static_argnames="max_steps")
def offline_updates_traced(agent, sampler, key: jax.Array, first_step, num_steps, max_steps: int):
    """`offline_updates` with `num_steps` an int32 array in `1..max_steps`, not static: one compiled program runs any
    number of steps (`utils.flax_utils.loop_updates`), so the loop's dispatches of different sizes
    (`runner.dispatch.dispatch_size`) never compile again. The same steps and batches, the LAST step's info; under
    `jax.vmap` `num_steps` is shared (`in_axes=(0, None, 0, None, None)`)."""
    first = jnp.asarray(first_step, jnp.int32)

    def step(agent, i):
        (agent, _, _), info = _sampled_update((agent, sampler, key), first + i)
        return agent, info

    return loop_updates(step, agent, num_steps, _check_count(max_steps, "max_steps"))


def _same_state(a, b) -> bool:
    """Equality of two generator states (nested dicts; MT19937 holds an array)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


class _Failure:
    """An exception raised in the producer thread, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


class PrefetchingSampler:
    """Host batches drawn ahead by a background thread, `k` stacked per item `(k, B, ...)`, copied to the device.

    The thread draws `steps_per_item` batches per item with the dataset's own generator, either
    `dataset.sample_sequence(batch_size, horizon_length, discount)` or `draw()` (another window source; give
    `keys` then), so the items are exactly the batches of the one-step loop, in order; at most `depth` items
    wait. Only `keys` (default: all of `sample_sequence`'s) are stacked and copied. While it is open the
    thread owns `dataset.rng`; `generator_state()` is the generator's state before the next item `next()`
    returns (for run states), and `close()` (idempotent, also at the end of a `with` block) stops the thread
    and sets `dataset.rng` back to it. An exception of the thread is raised again by every later `next()`.
    `ValueError` for `B`, `k`, `depth` < 1, a bad `H` or an unknown key.
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
        self.dataset, self.device = dataset, device
        self.batch_size = _check_count(batch_size, "batch_size")
        self.steps_per_item = _check_count(steps_per_item, "steps_per_item")
        self.keys = tuple(SEQUENCE_KEYS if keys is None else keys)
        if draw is None:
            H = _check_horizon(dataset, horizon_length)
            unknown = sorted(set(self.keys) - set(SEQUENCE_KEYS))
            if unknown:
                raise ValueError(f"keys {unknown} are not keys of sample_sequence {SEQUENCE_KEYS}")
            draw = functools.partial(dataset.sample_sequence, self.batch_size, H, discount)
        self._draw_one = draw
        self._queue = queue.Queue(maxsize=_check_count(depth, "depth"))
        self._stop = threading.Event()
        self._next_state = copy.deepcopy(dataset.rng.bit_generator.state)  # before the consumer's next item
        self._failure: Optional[_Failure] = None
        self._closed = False
        self._thread = threading.Thread(target=self._produce, name="PrefetchingSampler", daemon=True)
        self._thread.start()

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
                before = copy.deepcopy(self.dataset.rng.bit_generator.state)
                batches = [self._draw_one() for _ in range(self.steps_per_item)]
                stacked = {key: np.stack([b[key] for b in batches]) for key in self.keys}  # (k, B, ...)
                after = copy.deepcopy(self.dataset.rng.bit_generator.state)
                if not self._put((before, after, jax.device_put(stacked, self.device))):
                    return
        except BaseException as error:  # noqa: BLE001 - carried to the consumer and raised there
            self._put(_Failure(error))

    def __iter__(self):
        return self

    def __next__(self) -> Dict[str, Any]:
        """The next stacked batch `(k, B, ...)` of device arrays; `RuntimeError` once closed."""
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
        """The dataset generator's state before the next item (`utils.seeding.generator_state` format)."""
        return copy.deepcopy(self._next_state)

    def close(self, timeout: float = 60.0):
        """Stop and join the thread, drop the prefetched items, set `dataset.rng` to `generator_state()`.
        `RuntimeError` (and `dataset.rng` untouched) when the thread does not stop within `timeout` s."""
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
    """The chunked agents' window source over one dataset (the default `AgentSpec.windows`): `sample(B)` is
    `Dataset.sample_sequence(B, horizon_length, discount)` with the dataset's generator; `on_device()` gives
    the `DeviceWindowSampler` of the same windows, `fits_on_device()` says whether to use it."""

    keys = SEQUENCE_KEYS

    def __init__(self, dataset: Dataset, config, batch_keys=None):
        self.dataset, self.batch_keys = dataset, batch_keys  # what `sample` gives (default: every key)
        self.horizon_length, self.discount = int(config["horizon_length"]), float(config["discount"])

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        return self.dataset.sample_sequence(batch_size, self.horizon_length, self.discount, keys=self.batch_keys)

    def fits_on_device(self) -> bool:
        return fits_on_device(self.dataset, self.horizon_length)

    def on_device(self) -> DeviceWindowSampler:
        return DeviceWindowSampler.create(self.dataset, self.horizon_length, self.discount)
