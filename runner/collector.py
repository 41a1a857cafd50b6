"""Online collection: the training environment stepped with open-loop chunks into each seed's replay buffer."""

from typing import Dict, List, Optional

import jax
import numpy as np

from evaluation import ActionQueue
from utils import seeding
from utils.datasets import ReplayBuffer
from utils.vector_eval import executed_length_stats

BUFFER_KEYS = ("observations", "actions", "rewards", "terminals", "masks", "next_observations")


class OnlineCollector:
    """Steps the training env with open-loop chunks into a buffer (`step(agent, buffer)`: one action).

    A new chunk comes from `agent.collect_actions(observation, rng=key)` when the agent has it (exploration
    online), else `agent.sample_actions`; `key` is split off the collector's own stream `rng`. The buffer
    gets `terminals = terminated or truncated`, `masks = 1 - terminated` and `reward_fn(reward)` (the env's
    transform, as offline); `step` returns a finished episode's final `info` (with `executed_length`, the
    `executed_length_stats` of its chunks, when the agent picks how many actions to execute). `reset_seed` seeds
    the first reset only. `state()` / `restore(state)` work at any step: an episode in progress is saved as its
    actions and replayed (docs/outputs.md, "Resume and preemption").
    """

    def __init__(self, env, action_dim: int, reward_fn, rng, reset_seed: Optional[int] = None):
        self.env, self.reward_fn, self.rng, self.reset_seed = env, reward_fn, rng, reset_seed
        self.agent = None  # set at every step
        self.queue = ActionQueue(self._policy, action_dim)
        self.observation = None  # None: the env is reset at the start of the next step
        self._episode_start = None  # (env generator state before the reset, the reset's seed)
        self._episode_actions: List[np.ndarray] = []

    def _policy(self, observation):
        self.rng, key = jax.random.split(self.rng)
        act = getattr(self.agent, "collect_actions", None) or self.agent.sample_actions
        return act(observation, rng=key)

    def state(self) -> Dict:
        """JSON-able: policy key, env generator and the episode in progress (if any)."""
        state = {
            "policy_key": seeding.key_to_list(self.rng),
            "env_rng": seeding.generator_state(self.env.unwrapped.np_random),
            "reset_seed": self.reset_seed,
            "episode": None,
        }
        if self.observation is not None:
            start_rng, start_seed = self._episode_start
            state["episode"] = {
                "start_env_rng": start_rng,
                "reset_seed": start_seed,
                "actions": [np.asarray(a, dtype=np.float32).tolist() for a in self._episode_actions],
                "queue": [np.asarray(a, dtype=np.float32).tolist() for a in self.queue._queue],
                "observation": np.asarray(self.observation).tolist(),
                "observation_dtype": str(np.asarray(self.observation).dtype),
            }
            if self.queue.lengths:  # the agent picks its chunks' lengths: the episode's so far
                state["episode"]["executed_lengths"] = {"lengths": self.queue.lengths, "horizon": self.queue.horizon}
        return state

    def restore(self, state: Dict):
        """Continue from `state`, replaying an episode in progress; `RuntimeError` when the replay does not
        reproduce the saved observation (a simulator that is not deterministic here)."""
        self.rng = seeding.key_from_list(state["policy_key"])
        self.reset_seed = state["reset_seed"]
        self.observation = None
        self._episode_start, self._episode_actions = None, []
        self.queue.reset()
        self.queue.lengths = []
        episode = state.get("episode")
        if episode is not None:
            seeding.set_generator_state(self.env.unwrapped.np_random, episode["start_env_rng"])
            self._episode_start = (episode["start_env_rng"], episode["reset_seed"])
            observation, _ = self.env.reset(seed=episode["reset_seed"])
            for action in episode["actions"]:
                action = np.asarray(action, dtype=np.float32)
                observation, _, terminated, truncated, _ = self.env.step(action)
                self._episode_actions.append(action)
                if terminated or truncated:
                    raise RuntimeError("replaying the saved episode ended it early; the simulator is not deterministic")
            saved = np.asarray(episode["observation"], dtype=episode["observation_dtype"])
            if not np.array_equal(np.asarray(observation), saved):
                raise RuntimeError(
                    "replaying the saved episode did not reproduce its observation (largest difference "
                    f"{np.max(np.abs(np.asarray(observation, dtype=np.float64) - saved)):.3g}); the simulator is not "
                    "deterministic on this machine, so this run state cannot be continued exactly."
                )
            self.observation = observation
            self.queue._queue = [np.asarray(a, dtype=np.float32) for a in episode["queue"]]
            executed = episode.get("executed_lengths") or {"lengths": [], "horizon": None}
            self.queue.lengths, self.queue.horizon = list(executed["lengths"]), executed["horizon"]
        seeding.set_generator_state(self.env.unwrapped.np_random, state["env_rng"])

    def step(self, agent, buffer) -> Optional[Dict]:
        self.agent = agent
        if self.observation is None:
            self._episode_start = (seeding.generator_state(self.env.unwrapped.np_random), self.reset_seed)
            self._episode_actions = []
            self.observation, _ = self.env.reset(seed=self.reset_seed)
            self.reset_seed = None  # seeds the first reset only; later resets continue the env's stream
        action = self.queue(self.observation)
        next_observation, reward, terminated, truncated, info = self.env.step(action)
        self._episode_actions.append(np.asarray(action, dtype=np.float32))
        done = bool(terminated or truncated)
        buffer.add_transition(
            dict(
                observations=self.observation,
                actions=np.asarray(action, dtype=np.float32),
                rewards=np.float32(self.reward_fn(reward)),
                terminals=np.float32(done),
                masks=np.float32(1.0 - float(terminated)),
                next_observations=next_observation,
            )
        )
        if done:
            self.observation = None
            self.queue.reset()
            if self.queue.lengths:
                info = {**info, "executed_length": executed_length_stats(self.queue.lengths, self.queue.horizon)}
                self.queue.lengths = []
            return info
        self.observation = next_observation
        return None


def make_collector(run) -> OnlineCollector:
    """`run`'s collector (`collector` stream), restored from the resumed state in the online phase."""
    collector = OnlineCollector(
        run.env_data.env, run.action_dim, run.env_data.reward_fn, seeding.jax_key(run.cfg.seed, "collector")
    )
    meta = run.resume_meta
    if meta is not None and meta["phase"] == "online":
        collector.restore(meta["collector"])
    return collector


def make_replay_buffer(run, with_offline_data: bool) -> ReplayBuffer:
    """`run`'s replay buffer (`replay_buffer` stream, `--stop_reward_at_mask_zero` as the dataset's): restored
    from the resumed state in the online phase; else with the offline data as its oldest rows (main.py,
    capacity `max(--buffer_size, rows + 1)`) or empty (main_online.py, capacity `--buffer_size`)."""
    rng, stop, meta = (
        seeding.numpy_rng(run.cfg.seed, "replay_buffer"),
        run.cfg.stop_reward_at_mask_zero,
        run.resume_meta,
    )
    if meta is not None and meta["phase"] == "online":
        info = meta["buffer"]
        buffer = ReplayBuffer(
            meta["buffer_arrays"], rng=rng, stop_reward_at_mask_zero=stop, size=info["size"], pointer=info["pointer"]
        )
        seeding.set_generator_state(buffer.rng, meta["buffer_rng"])
        return buffer
    if with_offline_data:
        rows = run.train_dataset.size
        return ReplayBuffer.create_from_initial_dataset(
            dict(run.train_dataset), size=max(run.cfg.buffer_size, rows + 1), rng=rng, stop_reward_at_mask_zero=stop
        )
    example = {k: run.example[k][0] for k in BUFFER_KEYS}
    return ReplayBuffer.create(example, size=run.cfg.buffer_size, rng=rng, stop_reward_at_mask_zero=stop)


def episode_stats(info: Dict) -> Dict:
    """Success, return and length of a finished training episode (for the `env` CSV), and its chunks'
    `executed_length.*` when the agent picks how many actions to execute."""
    stats = {"success": float(info.get("success", np.nan))}
    for k, v in info.get("episode", {}).items():
        stats[f"episode.{k}"] = float(v)
    return {**stats, **info.get("executed_length", {})}
