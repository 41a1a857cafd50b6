"""Online RL with offline data mixed into every batch (RLPD, RLPD-AC, QC-RLPD).

Loop outline:
  1. Build the training and evaluation envs and the offline dataset (envs/), with the same
     reward transform (--sparse, robomimic's -1 shift) for offline data and online rewards.
  2. Start from an empty replay buffer of --buffer_size transitions.
  3. Steps 1..online_steps: one environment step per iteration; chunks of h = --horizon_length
     actions are executed open-loop by an action queue that calls the policy only when it is
     empty and is cleared at every episode end.
  4. From --start_training on (and once the buffer holds h transitions), every step draws
     utd_ratio batches of B windows; in each, floor(--offline_ratio * B) windows come from the
     offline data and the rest from the replay buffer, and utd_ratio gradient steps run in one
     lax.scan (agent.batch_update).
  5. Evaluation (open-loop chunks) at every multiple of --eval_interval and at the end;
     checkpoints at every multiple of --save_interval and at the end.

Example (QC-RLPD on cube-double):
  python main_online.py --env_name=cube-double-play-singletask-task2-v0 --horizon_length=5 --agent.bc_alpha=0.01
"""

import os
import time

import jax
import tqdm
from absl import app, flags, logging

from utils import run_utils
from utils.datasets import ReplayBuffer

FLAGS = flags.FLAGS
run_utils.define_common_flags(default_agent="agents/acrlpd.py", default_env="cube-double-play-singletask-task2-v0")
flags.DEFINE_float("offline_ratio", 0.5, "Fraction of each batch drawn from the offline data (the rest from the "
                   "replay buffer); floor(offline_ratio * batch_size) rows, exact for odd batch sizes.")


def main(_):
    run_utils.mixed_batch_sizes(1, FLAGS.offline_ratio)  # validates --offline_ratio
    run = run_utils.setup_experiment(FLAGS)
    agent, config, train_dataset = run.agent, run.config, run.train_dataset
    h = FLAGS.horizon_length

    example_transition = {k: run.example[k][0] for k in
                          ("observations", "actions", "rewards", "terminals", "masks", "next_observations")}
    replay_buffer = ReplayBuffer.create(example_transition, size=FLAGS.buffer_size, seed=FLAGS.seed + 1)
    collector = run_utils.OnlineCollector(
        run.env, lambda: agent, run.action_dim, run.env_data.reward_fn, jax.random.PRNGKey(FLAGS.seed + 1),
        seed=FLAGS.seed,
    )
    start = time.time()
    for i in tqdm.trange(1, FLAGS.online_steps + 1, desc="online", disable=not FLAGS.progress,
                         smoothing=0.1, dynamic_ncols=True):
        train_dataset = run_utils.maybe_next_shard(run.env_data, FLAGS, i, train_dataset)
        episode_info = collector.step(replay_buffer)
        if episode_info is not None:
            run.logger.log(run_utils.episode_stats(episode_info), "env", step=i)
        if i >= FLAGS.start_training and replay_buffer.size >= h:
            batch = run_utils.sample_mixed_batch(
                train_dataset, replay_buffer, config.batch_size, FLAGS.utd_ratio, FLAGS.offline_ratio,
                sequence_length=h, discount=config.discount,
            )
            agent, info = agent.batch_update(batch)
            if i % FLAGS.log_interval == 0:
                run_utils.log_update_info(run.logger, info, "online_agent", i, "env_steps_per_second",
                                          i / (time.time() - start))
        run_utils.end_of_step(agent, FLAGS, run, i, FLAGS.online_steps, step=i, phase="online")
    run.logger.close()
    logging.info("Done. Logs and checkpoints in %s", os.path.abspath(run.run_dir))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main))
