"""Offline-to-online RL with action chunks (QC, QC-FQL, BFN, BFN-n, FQL, FQL-n).

Loop outline:
  1. Build the training and evaluation envs and the offline dataset (envs/); --sparse and the
     action clipping are applied to the dataset by the same code that transforms online rewards.
  2. Offline phase, steps 1..offline_steps: each step samples B windows of h = --horizon_length
     steps (Dataset.sample_sequence, discount = --agent.discount) and takes one gradient step
     (agent.update). With several dataset shards, the next shard is loaded every
     --dataset_replace_interval steps.
  3. A replay buffer is created from the offline dataset.
  4. Online phase, steps 1..online_steps: one environment step per iteration. Chunks are executed
     open-loop by an action queue that calls the policy only when it is empty and is cleared at
     every episode end. From --start_training on, every step samples utd_ratio * B windows from
     the replay buffer and runs utd_ratio gradient steps in one lax.scan (agent.batch_update).
  5. Evaluation (open-loop chunks, --eval_episodes episodes) at every multiple of
     --eval_interval of each phase and once at the end of each phase; checkpoints at every
     multiple of --save_interval and at the end of each phase. Steps are logged as
     offline step i -> i, online step i -> offline_steps + i.

Example (QC on cube-double, paper settings):
  python main.py --env_name=cube-double-play-singletask-task2-v0 --horizon_length=5 \
      --agent.actor_type=best-of-n --agent.actor_num_samples=32
"""

import os
import time

import jax
import tqdm
from absl import app, flags, logging

from utils import run_utils
from utils.datasets import ReplayBuffer

FLAGS = flags.FLAGS
run_utils.define_common_flags(default_agent="agents/acfql.py", default_env="cube-double-play-singletask-task2-v0")
flags.DEFINE_integer("offline_steps", 1000000, "Number of offline gradient steps (0: skip the offline phase).")


def main(_):
    if FLAGS.offline_steps < 0:
        raise ValueError(f"--offline_steps={FLAGS.offline_steps} must be >= 0.")
    run = run_utils.setup_experiment(FLAGS)
    agent, config, train_dataset = run.agent, run.config, run.train_dataset
    discount, h = config.discount, FLAGS.horizon_length

    # ---- Offline phase -----------------------------------------------------------------------
    start = time.time()
    for i in tqdm.trange(1, FLAGS.offline_steps + 1, desc="offline", disable=not FLAGS.progress,
                         smoothing=0.1, dynamic_ncols=True):
        train_dataset = run_utils.maybe_next_shard(run.env_data, FLAGS, i, train_dataset)
        batch = train_dataset.sample_sequence(config.batch_size, sequence_length=h, discount=discount)
        agent, info = agent.update(batch)
        if i % FLAGS.log_interval == 0:
            run_utils.log_update_info(run.logger, info, "offline_agent", i, "steps_per_second",
                                      i / (time.time() - start))
        run_utils.end_of_step(agent, FLAGS, run, i, FLAGS.offline_steps, step=i, phase="offline")

    # ---- Online phase ------------------------------------------------------------------------
    if FLAGS.online_steps > 0:
        replay_buffer = ReplayBuffer.create_from_initial_dataset(
            dict(train_dataset), size=max(FLAGS.buffer_size, train_dataset.size + 1), seed=FLAGS.seed,
        )
        collector = run_utils.OnlineCollector(
            run.env, lambda: agent, run.action_dim, run.env_data.reward_fn, jax.random.PRNGKey(FLAGS.seed + 1),
            seed=FLAGS.seed,
        )
        start = time.time()
        for i in tqdm.trange(1, FLAGS.online_steps + 1, desc="online", disable=not FLAGS.progress,
                             smoothing=0.1, dynamic_ncols=True):
            step = FLAGS.offline_steps + i
            episode_info = collector.step(replay_buffer)
            if episode_info is not None:
                run.logger.log(run_utils.episode_stats(episode_info), "env", step=step)
            if i >= FLAGS.start_training:
                batch = replay_buffer.sample_sequence(
                    config.batch_size * FLAGS.utd_ratio, sequence_length=h, discount=discount,
                )
                agent, info = agent.batch_update(run_utils.stack_for_utd(batch, FLAGS.utd_ratio))
                if i % FLAGS.log_interval == 0:
                    run_utils.log_update_info(run.logger, info, "online_agent", step, "env_steps_per_second",
                                              i / (time.time() - start))
            run_utils.end_of_step(agent, FLAGS, run, i, FLAGS.online_steps, step=step, phase="online")
    run.logger.close()
    logging.info("Done. Logs and checkpoints in %s", os.path.abspath(run.run_dir))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main))
