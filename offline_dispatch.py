"""main.py's offline phase with `--updates_per_dispatch=k > 1`: k gradient steps per host call.

Each host call ("dispatch") runs up to `k` offline steps in one `lax.scan`
(`utils.device_sampler`), for every seed of a `seed_group.SeedGroup` (`seed_group.per_seed`):

* `device` sampler (the dataset fits in device memory, `utils.device_sampler.fits_on_device`): the
  windows are drawn on the device from a device-resident copy of the dataset, offline step `t` of
  seed `s` with the key `fold_in(jax_key(s, "device_sampler"), t)`. Same batch contract and
  distribution as the host sampler; other random numbers, so other (equally distributed) batches.
  The batches do not depend on `k`: `k = 10` and `k = 100` give the same run.
* `host` sampler (it does not fit, or `--offline_sampler=host`): the host draws the windows with
  the dataset's own generator in a background thread (`utils.device_sampler.PrefetchingSampler`),
  exactly the batches of the one-step loop (`--updates_per_dispatch=1`), copied to the device ahead of time.

A dispatch never runs past a step where something happens: a log row, an evaluation, a checkpoint,
a run state, the end of the phase, and it starts at a dataset shard switch. So the CSVs, checkpoints
and evaluations are at the same steps as with `k = 1`, and the logged info is the last step's.
"""

import functools
import time
from typing import Dict, List, Optional

import jax
import numpy as np
import tqdm
from absl import logging

import run_utils
import seed_group
from agents.common import UPDATE_KEYS
from utils import device_sampler, seeding


def _next_multiple_distance(step: int, interval: int) -> Optional[int]:
    """Steps from `step` to the next multiple of `interval` after it (None for `interval <= 0`)."""
    if interval <= 0:
        return None
    return (step // interval + 1) * interval - step


def dispatch_size(done: int, cfg) -> int:
    """Steps in the dispatch that follows offline step `done`: at most `--updates_per_dispatch`.

    It ends at the next step where the loop must stop (log, evaluation, checkpoint, run state, the
    phase's end) and before the next dataset shard switch (a switch happens before its step, so a
    dispatch may start with it but never contain it later).
    """
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
    """`--offline_sampler`, with `auto` resolved: `device` when the offline dataset fits in device
    memory (`utils.device_sampler.fits_on_device`), else `host` (the prefetching thread)."""
    choice = group.cfg.offline_sampler
    if choice != "auto":
        return choice
    run = group.runs[0]
    h = group.agent_config["horizon_length"]
    return "device" if device_sampler.fits_on_device(run.train_dataset, h) else "host"


@functools.lru_cache(maxsize=None)
def _device_fn(num_seeds: int, num_steps: int, mode: str):
    fn = functools.partial(device_sampler.offline_updates, num_steps=num_steps)
    if num_seeds == 1:
        return jax.jit(fn)
    return jax.jit(seed_group.per_seed(fn, mode, in_axes=(0, None, 0, None)))


@functools.lru_cache(maxsize=None)
def _scan_fn(num_seeds: int, mode: str):
    if num_seeds == 1:
        return device_sampler.scan_updates
    return jax.jit(seed_group.per_seed(device_sampler.scan_updates, mode))


class _Prefetchers:
    """One `PrefetchingSampler` per seed (one step per item), reopened at shard switches."""

    def __init__(self, group):
        self.group = group
        self.samplers: List = []

    def open(self):
        cfg = self.group.agent_config
        self.samplers = [
            device_sampler.PrefetchingSampler(
                run.train_dataset, cfg["batch_size"], cfg["horizon_length"], cfg["discount"], 1, keys=UPDATE_KEYS
            )
            for run in self.group.runs
        ]
        for run, sampler in zip(self.group.runs, self.samplers, strict=True):
            run.sampler_state_fn = sampler.generator_state

    def close(self):
        for run, sampler in zip(self.group.runs, self.samplers, strict=True):
            sampler.close()
            run.sampler_state_fn = None
        self.samplers = []

    def take(self, num_steps: int) -> Dict:
        """`(n, B, ...)` (or `(S, n, B, ...)`) device batches: the next `n` steps of every seed."""
        per_seed = []
        for sampler in self.samplers:
            items = [next(sampler) for _ in range(num_steps)]  # each (1, B, ...)
            per_seed.append({k: jax.numpy.concatenate([item[k] for item in items]) for k in items[0]})
        if len(per_seed) == 1:
            return per_seed[0]
        return {k: jax.numpy.stack([b[k] for b in per_seed]) for k in per_seed[0]}


def check_resume_sampler(group, kind: str):
    """`run_utils.InputError` when resuming an offline phase with a sampler that draws other batches than before.

    `host` (the one-step loop and the prefetching thread alike: the dataset's generator) and `device`
    draw different batches.
    """
    meta = group.runs[0].resume_meta
    if meta is None or meta["phase"] != "offline":
        return
    before = meta.get("offline_sampler", "host")
    if before != kind:
        raise run_utils.InputError(
            f"--resume: this run's offline phase sampled windows with the {before} sampler and would now use the "
            f"{kind} sampler, which draws other batches; resume with the --offline_sampler (and "
            "--updates_per_dispatch) it was started with."
        )


def run_offline_phase(group, first: int, start: float):
    """Offline steps `first + 1 .. offline_steps` in dispatches of up to `--updates_per_dispatch` steps."""
    cfg = group.cfg
    kind = sampler_kind(group)
    check_resume_sampler(group, kind)
    for run in group.runs:
        run.sampler_in_use = kind
    logging.info(
        "Offline phase: up to %d steps per dispatch, windows sampled %s.",
        cfg.updates_per_dispatch,
        "on the device"
        if kind == "device"
        else "on the host by a prefetching thread"
        + (" (the dataset does not fit on the device)" if cfg.offline_sampler == "auto" else ""),
    )
    if group.num_seeds == 1:
        keys = seeding.jax_key(group.runs[0].cfg.seed, "device_sampler")
    else:
        keys = jax.numpy.stack([seeding.jax_key(run.cfg.seed, "device_sampler") for run in group.runs])
    sampler, prefetchers = None, _Prefetchers(group)
    bar = tqdm.tqdm(
        initial=first,
        total=cfg.offline_steps,
        desc="offline",
        disable=not cfg.progress,
        smoothing=0.1,
        dynamic_ncols=True,
    )
    done = first
    try:
        while done < cfg.offline_steps:
            n = dispatch_size(done, cfg)
            shard_before = group.runs[0].train_dataset
            if kind == "host" and prefetchers.samplers and group.shard_due(done + 1):
                prefetchers.close()  # the dataset generator goes back to where the consumer stopped
            group.maybe_next_shard(done + 1)
            if kind == "device":
                if sampler is None or group.runs[0].train_dataset is not shard_before:
                    with group.split("sampling"):
                        sampler = device_sampler.DeviceWindowSampler.create(
                            group.runs[0].train_dataset,
                            group.agent_config["horizon_length"],
                            group.agent_config["discount"],
                        )
                group.split.throttle()
                with group.split("updates"):
                    agent, info = _device_fn(group.num_seeds, n, group.seed_batching)(
                        group.agent, sampler, keys, np.int32(done + 1)
                    )
                group.set_stacked_agent(agent, info)
            else:
                if not prefetchers.samplers:
                    prefetchers.open()
                with group.split("sampling"):
                    batches = prefetchers.take(n)
                group.split.throttle()
                with group.split("updates"):
                    agent, info = _scan_fn(group.num_seeds, group.seed_batching)(group.agent, batches)
                group.set_stacked_agent(agent, info)
            done += n
            bar.update(n)
            if done % cfg.log_interval == 0:
                rate = (done - first) / (time.time() - start)
                group.log_update(info, "offline_agent", done, "steps_per_second", rate)
            group.end_of_step(done, phase="offline")
            group.write_state_if_due(done, "offline")
    finally:
        bar.close()
        if prefetchers.samplers:
            prefetchers.close()
