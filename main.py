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

from agents import agents
from envs.env_utils import make_env_and_datasets, run_metadata, warn_if_dense_on_sparse_domain
from utils import run_utils
from utils.datasets import Dataset, ReplayBuffer

FLAGS = flags.FLAGS
run_utils.define_common_flags(default_agent="agents/acfql.py", default_env="cube-double-play-singletask-task2-v0")
flags.DEFINE_integer("offline_steps", 1000000, "Number of offline gradient steps (0: skip the offline phase).")


def main(_):
    run_utils.validate_common_flags(FLAGS)
    if FLAGS.offline_steps < 0:
        raise ValueError(f"--offline_steps={FLAGS.offline_steps} must be >= 0.")
    warn_if_dense_on_sparse_domain(FLAGS.env_name, FLAGS.sparse)
    config = run_utils.agent_config(FLAGS)

    # ---- Environments and data -------------------------------------------------------------
    env_data = make_env_and_datasets(
        FLAGS.env_name, dataset_path=FLAGS.dataset_path, dataset_dir=FLAGS.ogbench_dataset_dir,
        dataset_proportion=FLAGS.dataset_proportion, sparse=FLAGS.sparse, seed=FLAGS.seed,
    )
    env, eval_env = env_data.env, env_data.eval_env
    train_dataset = Dataset.create(**env_data.train_dataset, seed=FLAGS.seed)
    run_dir, logger = run_utils.setup_run(FLAGS, extra_metadata=run_metadata(FLAGS.env_name))

    example = train_dataset.sample(1)
    action_dim = example["actions"].shape[-1]
    agent = agents[config.agent_name].create(FLAGS.seed, example["observations"], example["actions"], config)
    discount, h = config.discount, FLAGS.horizon_length

    # ---- Offline phase -----------------------------------------------------------------------
    start = time.time()
    for i in tqdm.trange(1, FLAGS.offline_steps + 1, desc="offline", disable=not FLAGS.progress,
                         smoothing=0.1, dynamic_ncols=True):
        if env_data.next_shard is not None and FLAGS.dataset_replace_interval > 0 \
                and i % FLAGS.dataset_replace_interval == 0:
            train_dataset = Dataset.create(**env_data.next_shard(), seed=FLAGS.seed + i)
        batch = train_dataset.sample_sequence(config.batch_size, sequence_length=h, discount=discount)
        agent, info = agent.update(batch)
        if i % FLAGS.log_interval == 0:
            info = jax.device_get(info)
            info["time/steps_per_second"] = i / (time.time() - start)
            logger.log(info, "offline_agent", step=i)
        if run_utils.should_evaluate(i, FLAGS.offline_steps, FLAGS.eval_interval):
            run_utils.evaluate_and_log(agent, eval_env, FLAGS, logger, step=i, action_dim=action_dim)
        if run_utils.should_save(i, FLAGS.offline_steps, FLAGS.save_interval):
            run_utils.save_checkpoint(agent, run_dir, step=i, phase="offline")

    # ---- Online phase ------------------------------------------------------------------------
    if FLAGS.online_steps > 0:
        replay_buffer = ReplayBuffer.create_from_initial_dataset(
            dict(train_dataset), size=max(FLAGS.buffer_size, train_dataset.size + 1), seed=FLAGS.seed,
        )
        online_rng = jax.random.PRNGKey(FLAGS.seed + 1)
        collector = run_utils.OnlineCollector(
            env, lambda: agent, action_dim, env_data.reward_fn, online_rng, seed=FLAGS.seed,
        )
        start = time.time()
        for i in tqdm.trange(1, FLAGS.online_steps + 1, desc="online", disable=not FLAGS.progress,
                             smoothing=0.1, dynamic_ncols=True):
            step = FLAGS.offline_steps + i
            episode_info = collector.step(replay_buffer)
            if episode_info is not None:
                logger.log(run_utils.episode_stats(episode_info), "env", step=step)
            if i >= FLAGS.start_training:
                batch = replay_buffer.sample_sequence(
                    config.batch_size * FLAGS.utd_ratio, sequence_length=h, discount=discount,
                )
                agent, info = agent.batch_update(run_utils.stack_for_utd(batch, FLAGS.utd_ratio))
                if i % FLAGS.log_interval == 0:
                    info = jax.device_get(info)
                    info["time/env_steps_per_second"] = i / (time.time() - start)
                    logger.log(info, "online_agent", step=step)
            if run_utils.should_evaluate(i, FLAGS.online_steps, FLAGS.eval_interval):
                run_utils.evaluate_and_log(agent, eval_env, FLAGS, logger, step=step, action_dim=action_dim)
            if run_utils.should_save(i, FLAGS.online_steps, FLAGS.save_interval):
                run_utils.save_checkpoint(agent, run_dir, step=step, phase="online")
    logger.close()
    logging.info("Done. Logs and checkpoints in %s", os.path.abspath(run_dir))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main))
