"""Pieces shared by the two drivers (main.py, main_online.py), written once.

* :func:`define_common_flags`: the flags both drivers take, each with its help text.
* :func:`validate_common_flags`: a clear error for every bad value, before anything runs.
* :func:`setup_run`: run directory, ``flags.json``, CSV/wandb :class:`log_utils.Logger`.
* :func:`should_evaluate` / :func:`should_save`: the evaluation and checkpoint schedule.
* :class:`OnlineCollector`: one environment step with open-loop chunk execution
  (:class:`evaluation.ActionQueue`), the online reward transform and the replay-buffer write.
* :func:`evaluate_and_log`, :func:`save_checkpoint`, :func:`stack_for_utd`.
"""

import os
import sys
import time
from typing import Callable, Dict, Optional

import jax
import numpy as np
from absl import flags, logging

from evaluation import ActionQueue, evaluate, make_policy_fn
from log_utils import Logger, get_exp_name, setup_wandb, write_json
from utils.flax_utils import save_agent


def define_common_flags(default_agent: str, default_env: str):
    """Define the flags both drivers share (call once at import time of a driver)."""
    from ml_collections import config_flags

    flags.DEFINE_string("run_group", "Debug", "wandb group and sub-folder of --save_dir for this run.")
    flags.DEFINE_integer("seed", 0, "Random seed of the agent, the datasets' samplers and the environments.")
    flags.DEFINE_string("env_name", default_env, "Environment (and dataset) name, e.g. "
                        "cube-double-play-singletask-task2-v0 or lift-mh-low_dim.")
    flags.DEFINE_string("save_dir", "exp/", "Root directory of run outputs (CSV logs, flags.json, checkpoints).")
    flags.DEFINE_integer("online_steps", 1000000, "Number of online environment steps.")
    flags.DEFINE_integer("buffer_size", 2000000, "Replay buffer capacity in transitions.")
    flags.DEFINE_integer("log_interval", 5000, "Log training metrics every this many steps.")
    flags.DEFINE_integer("eval_interval", 100000, "Evaluate every this many steps of each phase (0: only at "
                         "the end of each phase).")
    flags.DEFINE_integer("eval_episodes", 50, "Number of evaluation episodes (success rate = mean over them).")
    flags.DEFINE_integer("video_episodes", 0, "Number of extra rendered evaluation episodes (logged to wandb).")
    flags.DEFINE_integer("video_frame_skip", 3, "Keep every this-many-th frame in evaluation videos.")
    flags.DEFINE_integer("save_interval", -1, "Save an agent checkpoint every this many steps (<= 0: only at "
                         "the end of each phase).")
    flags.DEFINE_integer("start_training", 5000, "Online environment step at which gradient updates start.")
    flags.DEFINE_integer("utd_ratio", 1, "Update-to-data ratio: gradient steps per online environment step, "
                         "run as one lax.scan over UTD stacked batches.")
    flags.DEFINE_integer("horizon_length", 5, "Action chunk length h (1: no chunking, plain single-step RL).")
    flags.DEFINE_bool("sparse", False, "Sparse reward r -> -(r != 0), applied to the offline data and to every "
                      "online reward (the paper uses it for scene and puzzle-3x3).")
    flags.DEFINE_float("dataset_proportion", 1.0, "Use only the first this fraction of the offline dataset.")
    flags.DEFINE_integer("dataset_replace_interval", 1000, "With --ogbench_dataset_dir holding several npz "
                         "shards: load the next shard every this many steps (0: never).")
    flags.DEFINE_string("ogbench_dataset_dir", None, "Dataset directory: OGBench npz files (default "
                        "~/.ogbench/data; a directory of shards is cycled, see --dataset_replace_interval), or "
                        "for robomimic a root used in place of ~/.robomimic.")
    flags.DEFINE_string("dataset_path", None, "Explicit path of one dataset file, an OGBench npz or a robomimic "
                        "hdf5 (overrides --ogbench_dataset_dir).")
    flags.DEFINE_enum("wandb_mode", "disabled", ["online", "offline", "disabled"], "wandb mode: online needs an "
                      "account and network; offline writes locally; disabled logs to CSV only.")
    flags.DEFINE_string("wandb_project", "qc", "wandb project name.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars.")
    config_flags.DEFINE_config_file("agent", default_agent, "Agent config file; override keys with "
                                    "--agent.KEY=VALUE (e.g. --agent.actor_num_samples=32).", lock_config=False)


def run_cli(main_fn):
    """Wrap a driver's ``main`` so that a bad input ends with its message, not a stack trace.

    ``ValueError`` (bad flag, config or data file), ``FileNotFoundError`` (missing dataset or
    checkpoint) and ``ImportError`` (missing optional extra) print ``error: <message>`` and exit
    with status 2. Set ``QC_DEBUG=1`` to get the full traceback instead.
    """

    def wrapped(argv):
        try:
            return main_fn(argv)
        except (ValueError, FileNotFoundError, ImportError) as e:
            if os.environ.get("QC_DEBUG"):
                raise
            print(f"error: {e}\n(set QC_DEBUG=1 for the full traceback)", file=sys.stderr)
            sys.exit(2)

    return wrapped


def validate_common_flags(FLAGS):
    """Raise ``ValueError`` naming the flag for every out-of-range value."""
    checks = [
        ("online_steps", FLAGS.online_steps >= 0, "must be >= 0"),
        ("buffer_size", FLAGS.buffer_size >= 1, "must be >= 1"),
        ("log_interval", FLAGS.log_interval >= 1, "must be >= 1"),
        ("eval_interval", FLAGS.eval_interval >= 0, "must be >= 0"),
        ("eval_episodes", FLAGS.eval_episodes >= 0, "must be >= 0"),
        ("video_episodes", FLAGS.video_episodes >= 0, "must be >= 0"),
        ("video_frame_skip", FLAGS.video_frame_skip >= 1, "must be >= 1"),
        ("start_training", FLAGS.start_training >= 0, "must be >= 0"),
        ("utd_ratio", FLAGS.utd_ratio >= 1, "must be >= 1"),
        ("horizon_length", FLAGS.horizon_length >= 1, "must be >= 1"),
        ("dataset_proportion", 0.0 < FLAGS.dataset_proportion <= 1.0, "must be in (0, 1]"),
        ("dataset_replace_interval", FLAGS.dataset_replace_interval >= 0, "must be >= 0"),
    ]
    for name, ok, why in checks:
        if not ok:
            raise ValueError(f"--{name}={getattr(FLAGS, name)} {why}.")


def agent_config(FLAGS) -> Dict:
    """A copy of ``--agent`` with ``horizon_length`` taken from ``--horizon_length``.

    Raises ``ValueError`` when ``--agent.horizon_length`` was also given and disagrees.
    """
    config = FLAGS.agent.copy_and_resolve_references()
    from agents import agents  # imported here: run_utils must not pull every agent into the tests

    if config.get("agent_name") not in agents:
        raise ValueError(f"--agent.agent_name={config.get('agent_name')!r} is not one of {sorted(agents)}.")
    if config.get("horizon_length") not in (None, FLAGS.horizon_length):
        raise ValueError(
            f"--agent.horizon_length={config.horizon_length} disagrees with --horizon_length="
            f"{FLAGS.horizon_length}; set only --horizon_length."
        )
    config.horizon_length = FLAGS.horizon_length
    return config


def setup_run(FLAGS, extra_metadata: Optional[Dict] = None):
    """Create ``<save_dir>/<run_group>/<exp_name>/``, write ``flags.json`` and return ``(run_dir, logger)``.

    ``flags.json`` holds every flag value, the resolved agent config and ``extra_metadata``
    (e.g. the ogbench version and its reward/success timing).
    """
    exp_name = get_exp_name(FLAGS.env_name, FLAGS.seed)
    run_dir = os.path.join(FLAGS.save_dir, FLAGS.run_group, exp_name)
    os.makedirs(run_dir, exist_ok=True)
    flag_values = {k: getattr(FLAGS, k) for k in FLAGS if k != "agent" and not k.startswith("helpfull")}
    flag_values = {k: v for k, v in flag_values.items() if isinstance(v, (str, int, float, bool, type(None)))}
    metadata = {"flags": flag_values, "agent": FLAGS.agent.to_dict(), **(extra_metadata or {})}
    write_json(os.path.join(run_dir, "flags.json"), metadata)
    wandb_run = setup_wandb(FLAGS.wandb_project, FLAGS.run_group, exp_name, metadata, FLAGS.wandb_mode, run_dir)
    logging.info("Run directory: %s", run_dir)
    return run_dir, Logger(run_dir, wandb_run)


def setup_experiment(FLAGS):
    """Everything both drivers build before their loops, in one place.

    Validates the flags, warns about dense rewards on sparse domains, builds the envs and the
    offline dataset (envs/), writes the run directory and ``flags.json`` and creates the agent.
    Returns a namespace with ``config, env_data, env, eval_env, train_dataset, run_dir, logger,
    agent, action_dim, example`` (``example``: one sampled transition, arrays of leading size 1).
    """
    from types import SimpleNamespace

    from agents import agents
    from envs.env_utils import make_env_and_datasets, run_metadata, warn_if_dense_on_sparse_domain
    from utils.datasets import Dataset

    validate_common_flags(FLAGS)
    warn_if_dense_on_sparse_domain(FLAGS.env_name, FLAGS.sparse)
    config = agent_config(FLAGS)
    env_data = make_env_and_datasets(
        FLAGS.env_name, dataset_path=FLAGS.dataset_path, dataset_dir=FLAGS.ogbench_dataset_dir,
        dataset_proportion=FLAGS.dataset_proportion, sparse=FLAGS.sparse, seed=FLAGS.seed,
    )
    train_dataset = Dataset.create(**env_data.train_dataset, seed=FLAGS.seed)
    run_dir, logger = setup_run(FLAGS, extra_metadata=run_metadata(FLAGS.env_name))
    example = train_dataset.sample(1)
    agent = agents[config.agent_name].create(FLAGS.seed, example["observations"], example["actions"], config)
    return SimpleNamespace(
        config=config, env_data=env_data, env=env_data.env, eval_env=env_data.eval_env,
        train_dataset=train_dataset, run_dir=run_dir, logger=logger, agent=agent,
        action_dim=int(example["actions"].shape[-1]), example=example,
    )


def maybe_next_shard(env_data, FLAGS, step: int, dataset):
    """The next dataset shard at every multiple of ``--dataset_replace_interval``, else ``dataset``."""
    from utils.datasets import Dataset

    if env_data.next_shard is None or FLAGS.dataset_replace_interval <= 0 or step % FLAGS.dataset_replace_interval:
        return dataset
    return Dataset.create(**env_data.next_shard(), seed=FLAGS.seed + step)


def end_of_step(agent, FLAGS, run, step_in_phase: int, phase_steps: int, step: int, phase: str):
    """Evaluate and checkpoint on their schedules (:func:`should_evaluate`, :func:`should_save`)."""
    if should_evaluate(step_in_phase, phase_steps, FLAGS.eval_interval):
        evaluate_and_log(agent, run.eval_env, FLAGS, run.logger, step=step, action_dim=run.action_dim)
    if should_save(step_in_phase, phase_steps, FLAGS.save_interval):
        save_checkpoint(agent, run.run_dir, step=step, phase=phase)


def should_evaluate(step: int, phase_steps: int, eval_interval: int) -> bool:
    """True at each multiple of ``eval_interval`` and at the last step of a phase (once each)."""
    # Difference from the reference: it evaluated at offline step ``offline_steps - 1`` (one step
    # before the end) and could evaluate twice around the end of the offline phase.
    return step == phase_steps or (eval_interval > 0 and step % eval_interval == 0)


def should_save(step: int, phase_steps: int, save_interval: int) -> bool:
    """True at each multiple of ``save_interval`` (when > 0) and at the last step of a phase."""
    return step == phase_steps or (save_interval > 0 and step % save_interval == 0)


def save_checkpoint(agent, run_dir: str, step: int, phase: str) -> str:
    """Save ``agent`` to ``<run_dir>/checkpoints/agent_<step>.msgpack`` (no pickle)."""
    path = os.path.join(run_dir, "checkpoints", f"agent_{step}.msgpack")
    return save_agent(agent, path, metadata={"step": int(step), "phase": phase})


def evaluate_and_log(agent, eval_env, FLAGS, logger: Logger, step: int, action_dim: int) -> Dict:
    """Run :func:`evaluation.evaluate` and log its stats under ``eval`` at ``step``.

    The evaluation's key stream is seeded from ``--seed`` and ``step`` and never touches the
    training stream. Returns the stats (``success`` is the success rate).
    """
    start = time.time()
    stats, _, renders = evaluate(
        agent, eval_env, num_eval_episodes=FLAGS.eval_episodes, num_video_episodes=FLAGS.video_episodes,
        video_frame_skip=FLAGS.video_frame_skip, action_dim=action_dim, seed=FLAGS.seed * 1000003 + step,
        progress=FLAGS.progress,
    )
    stats["time"] = time.time() - start
    logger.log(stats, "eval", step=step)
    if renders and logger.wandb_run is not None:
        import wandb

        video = np.concatenate(renders, axis=0).transpose(0, 3, 1, 2)  # (T, 3, H, W)
        logger.wandb_run.log({"eval/video": wandb.Video(video, fps=15)}, step=step)
    logging.info("step %d: eval success %.3f", step, stats.get("success", float("nan")))
    return stats


def log_update_info(logger: Logger, info: Dict, prefix: str, step: int, rate_key: str, rate: float):
    """Fetch an update's metrics from the device, add ``time/<rate_key>`` and log them under ``prefix``."""
    info = jax.device_get(info)
    info[f"time/{rate_key}"] = rate
    logger.log(info, prefix, step=step)


def episode_stats(info: Dict) -> Dict:
    """Success, return and length of a finished training episode (for the ``env`` CSV)."""
    stats = {"success": float(info.get("success", np.nan))}
    for k, v in info.get("episode", {}).items():
        stats[f"episode.{k}"] = float(v)
    return stats


def stack_for_utd(batch: Dict, utd_ratio: int) -> Dict:
    """Reshape a batch of ``utd_ratio * B`` rows to ``(utd_ratio, B, ...)`` for ``batch_update``."""
    return jax.tree_util.tree_map(lambda x: x.reshape((utd_ratio, -1) + x.shape[1:]), batch)


class OnlineCollector:
    """Steps the training environment with open-loop chunks and writes transitions to a buffer.

    Args:
        env: training env (gymnasium API).
        agent_fn: ``() -> agent``; the current agent is read at every policy call.
        action_dim: size of one environment action.
        reward_fn: the online reward transform of the env (``envs`` applies the same one to the
            offline data: sparse rewards, robomimic's -1 shift).
        rng: the collector's own JAX key stream.
        seed: seed of the first ``env.reset``.

    ``step(buffer)`` executes one action, adds ``(observations, actions, rewards, terminals,
    masks, next_observations)`` with ``terminals = terminated or truncated`` (trajectory end) and
    ``masks = 1 - terminated`` (no bootstrap only on a true termination), resets the env and the
    chunk queue at episode ends, and returns the final ``info`` of a finished episode (else None).
    """

    def __init__(self, env, agent_fn: Callable, action_dim: int, reward_fn: Callable, rng, seed: int):
        self.env = env
        self.agent_fn = agent_fn
        self.reward_fn = reward_fn
        self._rng = rng

        def policy_fn(observation):
            self._rng, key = jax.random.split(self._rng)
            return np.asarray(self.agent_fn().sample_actions(observation, rng=key))

        self.queue = ActionQueue(policy_fn, action_dim)
        self.observation, _ = env.reset(seed=seed)
        self.num_episodes = 0

    def step(self, buffer) -> Optional[Dict]:
        action = self.queue(self.observation)
        next_observation, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        buffer.add_transition(dict(
            observations=self.observation,
            actions=np.asarray(action, dtype=np.float32),
            rewards=np.float32(self.reward_fn(reward)),
            terminals=np.float32(done),
            masks=np.float32(1.0 - float(terminated)),
            next_observations=next_observation,
        ))
        if done:
            self.observation, _ = self.env.reset()
            self.queue.reset()
            self.num_episodes += 1
            return info
        self.observation = next_observation
        return None



def mixed_batch_sizes(batch_size: int, offline_ratio: float):
    """``(n_offline, n_online)`` with ``n_offline = floor(offline_ratio * batch_size)``.

    The two always add up to ``batch_size`` (odd sizes too: 255 at ratio 0.5 -> 127 + 128).
    Raises ``ValueError`` when ``offline_ratio`` is outside [0, 1].
    """
    if not 0.0 <= offline_ratio <= 1.0:
        raise ValueError(f"--offline_ratio={offline_ratio} must be in [0, 1].")
    # Difference from the reference: it drew batch_size // 2 rows from each source, one row short
    # for odd batch sizes.
    n_offline = int(np.floor(offline_ratio * batch_size + 1e-9))
    return n_offline, batch_size - n_offline


def sample_mixed_batch(offline_dataset, replay_buffer, batch_size: int, utd_ratio: int, offline_ratio: float,
                       sequence_length: int, discount: float) -> Dict:
    """``(utd_ratio, batch_size, ...)`` windows; in every UTD slice the first ``n_offline`` rows come
    from ``offline_dataset`` and the other ``n_online`` from ``replay_buffer`` (RLPD's symmetric
    sampling at ``offline_ratio=0.5``; see :func:`mixed_batch_sizes`).
    """
    n_offline, n_online = mixed_batch_sizes(batch_size, offline_ratio)
    parts = []
    for source, n in ((offline_dataset, n_offline), (replay_buffer, n_online)):
        if n > 0:
            batch = source.sample_sequence(n * utd_ratio, sequence_length=sequence_length, discount=discount)
            parts.append(stack_for_utd(batch, utd_ratio))  # (U, n, ...)
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=1), *parts)  # (U, B, ...)


__all__ = [
    "define_common_flags", "run_cli", "setup_experiment", "maybe_next_shard", "end_of_step",
    "validate_common_flags", "agent_config", "setup_run", "should_evaluate",
    "should_save", "save_checkpoint", "evaluate_and_log", "stack_for_utd", "OnlineCollector",
    "make_policy_fn", "log_update_info", "episode_stats", "mixed_batch_sizes", "sample_mixed_batch",
]
