"""main.py's offline batches: `--updates_per_dispatch=k` gradient steps per host call (docs/outputs.md,
section 5; the windows: docs/batch_contract.md, section 10).

`offline_sampler(group)` gives the loop its `sample(first_step, n)` and the matching `update_fn()`:
k = 1, the reference loop (the run's window source on the host, the agent's own `update`); k > 1 on the
device (`utils.device_sampler.offline_updates_traced`) or with a prefetching host thread (exactly k = 1's
batches). `dispatch_size` says how many steps the next call takes: never past a step where something happens;
every size runs the same compiled program (the count is a device scalar, `utils.flax_utils.loop_updates`).
"""

import functools
from typing import Dict, List, NamedTuple, Optional

import jax
import numpy as np
from absl import logging

import agents
from runner.cli import InputError
from runner.seed_group import per_seed, stack_seeds
from utils import device_sampler, seeding
from utils.flax_utils import loop_updates


def _next_multiple_distance(step: int, interval: int) -> Optional[int]:
    """Steps from `step` to the next multiple of `interval` after it (None for `interval <= 0`)."""
    if interval <= 0:
        return None
    return (step // interval + 1) * interval - step


def dispatch_size(done: int, cfg) -> int:
    """Steps in the dispatch after offline step `done`: at most `--updates_per_dispatch`, ending at the next
    log, evaluation, checkpoint, run state or phase end, and before the next dataset shard switch (a switch
    happens before its step: a dispatch may start with it, never contain it)."""
    limits = [cfg.updates_per_dispatch, cfg.offline_steps - done]
    for interval in (cfg.log_interval, cfg.eval_interval, cfg.save_interval, cfg.state_interval):
        distance = _next_multiple_distance(done, interval)
        if distance is not None:
            limits.append(distance)
    switch = _next_multiple_distance(done + 1, cfg.dataset_replace_interval)
    if switch is not None:
        limits.append(switch)  # steps done+1 .. done+switch: the switch step itself is the next dispatch's first
    return max(1, min(limits))


def sampler_kind(group) -> str:
    """`host` for `--updates_per_dispatch=1`; else `--offline_sampler`, with `auto` resolved: `device`
    when the offline windows fit in device memory (the window source's `fits_on_device()`), else `host`."""
    cfg = group.cfg
    if cfg.updates_per_dispatch == 1 or cfg.offline_sampler == "host":
        return "host"
    if cfg.offline_sampler == "device":
        return "device"
    return "device" if group.runs[0].windows.fits_on_device() else "host"


def check_resume_sampler(group, kind: str):
    """`InputError` when resuming an offline phase with a sampler that draws other batches than before
    (`host`, the one-step loop and the prefetching thread alike, against `device`)."""
    meta = group.runs[0].resume_meta
    if meta is None or meta["phase"] != "offline":
        return
    before = meta.get("offline_sampler", "host")
    if before != kind:
        raise InputError(
            f"--resume: this run's offline phase sampled windows with the {before} sampler and would now use the "
            f"{kind} sampler, which draws other batches; resume with the --offline_sampler (and "
            "--updates_per_dispatch) it was started with."
        )


class DeviceBatches(NamedTuple):
    """What a device-sampled dispatch needs: the windows are drawn inside the update. `first_step` and
    `num_steps` are int32 device scalars (copied in explicitly, the dispatch's only host-to-device copy), so
    every dispatch size runs the same compiled program."""

    sampler: device_sampler.DeviceWindowSampler
    keys: jax.Array  # the seeds' device_sampler keys: (2,) or (S, 2)
    first_step: jax.Array
    num_steps: jax.Array


# The k-step updates donate the agent (argument 0) as `runner.seed_group.donating` does; never the sampler.
@functools.lru_cache(maxsize=None)
def _device_fn(num_seeds: int, max_steps: int, mode: str, donate: bool):
    steps = functools.partial(device_sampler.offline_updates_traced, max_steps=max_steps)
    donated, axes = 0 if donate else (), (0, None, 0, None, None)
    if num_seeds == 1 or mode == "map":
        fn = jax.jit(steps, donate_argnums=donated)
        return fn if num_seeds == 1 else per_seed(fn, mode, in_axes=axes)
    return jax.jit(per_seed(steps, mode, in_axes=axes), donate_argnums=donated)


class HostBatches(NamedTuple):
    """A dispatch of the prefetching host sampler: `batches` `(k, B, ...)` (`(S, k, B, ...)` for S seeds), of which
    the first `num_steps` (an int32 device scalar) are used; the rest repeat the last one, so that every dispatch
    size runs the same compiled program."""

    batches: Dict
    num_steps: jax.Array


def _host_updates(agent, batches, num_steps, max_steps: int):
    """`agent.update` on the first `num_steps` of `batches` `(max_steps, B, ...)`: the last step's info."""

    def step(agent, i):
        take = lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False)  # noqa: E731
        return agent.update(jax.tree_util.tree_map(take, batches))

    return loop_updates(step, agent, num_steps, max_steps)


@functools.lru_cache(maxsize=None)
def _host_fn(num_seeds: int, max_steps: int, mode: str, donate: bool):
    steps, donated = functools.partial(_host_updates, max_steps=max_steps), 0 if donate else ()
    if num_seeds == 1 or mode == "map":
        fn = jax.jit(steps, donate_argnums=donated)
        return fn if num_seeds == 1 else per_seed(fn, mode, in_axes=(0, 0, None))
    return jax.jit(per_seed(steps, mode, in_axes=(0, 0, None)), donate_argnums=donated)


class OfflineSampler:
    """The offline batches of a `runner.seed_group.SeedGroup` and the update that consumes them."""

    def __init__(self, group, kind: str):
        self.group, self.kind, self.k = group, kind, group.cfg.updates_per_dispatch
        self._prefetchers: List = []
        self._device = None
        group.sampler_kind = kind
        if kind == "device":
            keys = [seeding.jax_key(run.cfg.seed, "device_sampler") for run in group.runs]
            self._keys = keys[0] if len(keys) == 1 else jax.numpy.stack(keys)

    def sample(self, first_step: int, n: int):
        """The windows of offline steps `first_step .. first_step + n - 1` of every seed, after moving to
        the next dataset shard when one is due: `(B, ...)` (k = 1), `HostBatches` (host, k > 1), a
        `DeviceBatches` (device); a leading seed axis `S` for several seeds."""
        group, size = self.group, self.group.agent_config["batch_size"]
        if group.shard_due(first_step):
            self._close_prefetchers()  # the dataset generator goes back to where the consumer stopped
            group.next_shard()
            self._device = None
        with group.timer("sampling"):
            if self.kind == "device":
                if self._device is None:
                    self._device = group.runs[0].windows.on_device()
                first, count = jax.device_put((np.int32(first_step), np.int32(n)))  # explicit, as written above
                return DeviceBatches(self._device, self._keys, first, count)
            if self.k == 1:
                return stack_seeds([run.windows.sample(size) for run in group.runs])
            if not self._prefetchers:
                batch_keys = agents.get(group.agent_config["agent_name"]).batch_keys  # only what the update reads
                self._prefetchers = [
                    device_sampler.PrefetchingSampler(
                        run.train_dataset,
                        size,
                        None,
                        None,
                        1,
                        keys=batch_keys,
                        draw=functools.partial(run.windows.sample, size),
                    )
                    for run in group.runs
                ]
                group.prefetch_states = lambda: [p.generator_state() for p in self._prefetchers]
            per_seed_batches = []
            for prefetcher in self._prefetchers:
                items = [next(prefetcher) for _ in range(n)]  # each (1, B, ...)
                items += items[-1:] * (self.k - n)  # always (k, B, ...): one program for every dispatch size
                per_seed_batches.append({k: jax.numpy.concatenate([item[k] for item in items]) for k in items[0]})
            if len(per_seed_batches) == 1:
                batches = per_seed_batches[0]
            else:
                batches = {k: jax.numpy.stack([b[k] for b in per_seed_batches]) for k in per_seed_batches[0]}
            return HostBatches(batches, jax.device_put(np.int32(n)))

    def update_fn(self):
        """`(agent, batch) -> (agent, info)` for `sample`'s batches; the agent's own `update` for k = 1, one seed."""
        group = self.group
        if self.kind == "device":
            return lambda agent, b: _device_fn(group.num_seeds, self.k, group.seed_batching, group.donate)(
                agent, b.sampler, b.keys, b.first_step, b.num_steps
            )
        if self.k == 1:
            return group.update_fn()
        host = _host_fn(group.num_seeds, self.k, group.seed_batching, group.donate)
        return lambda agent, b: host(agent, b.batches, b.num_steps)

    def _close_prefetchers(self):
        for prefetcher in self._prefetchers:
            prefetcher.close()
        self._prefetchers, self.group.prefetch_states = [], None

    def close(self):
        self._close_prefetchers()


def offline_sampler(group) -> OfflineSampler:
    """The offline sampler of `group` (`--updates_per_dispatch`, `--offline_sampler`), checked against a
    resumed run's."""
    kind = sampler_kind(group)
    check_resume_sampler(group, kind)
    if group.cfg.updates_per_dispatch > 1:
        where = "on the device" if kind == "device" else "on the host by a prefetching thread"
        logging.info(
            "Offline phase: up to %d steps per dispatch, windows sampled %s.", group.cfg.updates_per_dispatch, where
        )
    return OfflineSampler(group, kind)
