"""Gymnasium wrappers shared by training and evaluation environments."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import gymnasium
import numpy as np

# Info keys the reference drops from OGBench infos (large per-step privileged/proprioceptive state).
OGBENCH_INFO_FILTERS = (".*privileged.*", ".*proprio.*")


class EpisodeMonitor(gymnasium.Wrapper):
    """Adds episode statistics to the info of an episode's last step, and optionally drops info keys.

    On the step that ends an episode (terminated or truncated), `info['episode']` is
    `{'return': sum of rewards, 'length': steps, 'duration': wall-clock seconds since reset}`.
    `info['success']` (set by OGBench envs on every step) is passed through untouched, so the last
    step's value is the episode's success. Rewards summed here are the env's own (dense) rewards;
    a driver running with `--sparse` transforms them itself.

    Args:
        env: the environment.
        filter_regexes: info keys matching any of these (`re.match`) are removed from step and reset
            infos, e.g. `OGBENCH_INFO_FILTERS`. The keys 'success' and 'episode' are never removed.
    """

    _PROTECTED = ("success", "episode")

    def __init__(self, env: gymnasium.Env, filter_regexes: Sequence[str] = ()):
        super().__init__(env)
        self._filters = [re.compile(r) for r in filter_regexes]
        self._reset_stats()

    def _reset_stats(self):
        self._return = 0.0
        self._length = 0
        self._start = time.perf_counter()

    def _filter(self, info: dict) -> dict:
        if not self._filters:
            return info
        return {k: v for k, v in info.items() if k in self._PROTECTED or not any(f.match(k) for f in self._filters)}

    def reset(self, **kwargs):
        self._reset_stats()
        ob, info = self.env.reset(**kwargs)
        return ob, self._filter(info)

    def step(self, action):
        ob, reward, terminated, truncated, info = self.env.step(action)
        info = self._filter(info)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            info["episode"] = {
                "return": self._return,
                "length": self._length,
                "duration": time.perf_counter() - self._start,
            }
        return ob, reward, terminated, truncated, info


class GlobalNumpySeeding(gymnasium.Wrapper):
    """Runs every seeded `reset` with numpy's global legacy RNG seeded from the reset seed, then restores it.

    ogbench's locomotion envs draw their start and goal noise from the global `np.random` (`maze.py`'s
    `add_noise`), which `reset(seed=s)` does not seed; so without this, the same `s` gives other start and
    goal positions depending on what drew from the global RNG before, in this process. Here `reset(seed=s)`
    seeds the global RNG with `SeedSequence(s, spawn_key=(GLOBAL_NUMPY_SPAWN_KEY,))` around the inner reset and
    puts the caller's global state back afterwards, so a reset depends on `s` (and the options) only, in any
    process (the workers of an async vector env too). `reset()` without a seed and `step` are left alone.
    """

    GLOBAL_NUMPY_SPAWN_KEY = 1

    def reset(self, *, seed=None, options=None):
        if seed is None:
            return self.env.reset(seed=seed, options=options)
        saved = np.random.get_state()
        sequence = np.random.SeedSequence(int(seed), spawn_key=(self.GLOBAL_NUMPY_SPAWN_KEY,))
        np.random.seed(int(sequence.generate_state(1)[0]))
        try:
            return self.env.reset(seed=seed, options=options)
        finally:
            np.random.set_state(saved)
