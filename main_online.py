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

import functools
import os
import time

import tqdm
from absl import app, flags, logging

import run_state
import run_utils

FLAGS = flags.FLAGS
run_utils.define_flags("main_online")


def main(_):
    preemption = run_state.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    run = run_utils.setup_experiment(run_utils.RunConfig.from_flags(FLAGS, driver="main_online"))
    run.preemption = preemption
    cfg, agent, train_dataset = run.cfg, run.agent, run.train_dataset

    replay_buffer = run.replay_buffer(with_offline_data=False, dataset=train_dataset)
    collector = run.collector()
    h = agent.config["horizon_length"]
    first = run.start_step("online")
    start = time.time()
    for i in tqdm.trange(first + 1, cfg.online_steps + 1, initial=first, total=cfg.online_steps, desc="online",
                         disable=not cfg.progress, smoothing=0.1, dynamic_ncols=True):  # fmt: skip
        train_dataset = run_utils.maybe_next_shard(run, i, train_dataset)
        episode_info = collector.step(agent, replay_buffer)
        if episode_info is not None:
            run.logger.log(run_utils.episode_stats(episode_info), "env", step=i)
        if i >= cfg.start_training and (replay_buffer.size >= h or cfg.offline_ratio == 1.0):
            batch = run_utils.sample_mixed_batch(
                train_dataset, replay_buffer, agent.config, cfg.utd_ratio, cfg.offline_ratio
            )
            agent, info = agent.batch_update(batch)
            if i % cfg.log_interval == 0:
                rate = (i - first) / (time.time() - start)
                run_utils.log_update_info(run.logger, info, "online_agent", i, "env_steps_per_second", rate)
        run.end_of_step(agent, i, phase="online")
        run.write_state_if_due(agent, i, "online", train_dataset, replay_buffer, collector)
    run.finish()
    logging.info("Done. Logs and checkpoints in %s", os.path.abspath(run.run_dir))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main), flags_parser=functools.partial(run_utils.parse_flags, driver="main_online"))
