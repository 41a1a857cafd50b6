"""Offline-to-online RL with action chunks (QC, QC-FQL, BFN, BFN-n, FQL, FQL-n).

Loop outline:
  1. Build the training and evaluation envs and the offline dataset (envs/); --sparse and the
     action clipping are applied to the dataset by the same code that transforms online rewards.
  2. Offline phase, steps 1..offline_steps: each step samples B windows of h = --horizon_length
     steps (run_utils.sample_windows: h and discount read from the agent config) and takes one gradient step
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

import functools
import os
import time

import tqdm
from absl import app, flags, logging

import run_state
import run_utils

FLAGS = flags.FLAGS
run_utils.define_flags("main")


def main(_):
    preemption = run_state.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    run = run_utils.setup_experiment(run_utils.RunConfig.from_flags(FLAGS, driver="main"))
    run.preemption = preemption
    cfg, agent, train_dataset = run.cfg, run.agent, run.train_dataset

    # ---- Offline phase -----------------------------------------------------------------------
    first = run.start_step("offline")
    start = time.time()
    for i in tqdm.trange(first + 1, cfg.offline_steps + 1, initial=first, total=cfg.offline_steps, desc="offline",
                         disable=not cfg.progress, smoothing=0.1, dynamic_ncols=True):  # fmt: skip
        train_dataset = run_utils.maybe_next_shard(run, i, train_dataset)
        batch = run_utils.sample_windows(train_dataset, agent.config, agent.config["batch_size"])
        agent, info = agent.update(batch)
        if i % cfg.log_interval == 0:
            rate = (i - first) / (time.time() - start)
            run_utils.log_update_info(run.logger, info, "offline_agent", i, "steps_per_second", rate)
        run.end_of_step(agent, i, phase="offline")
        run.write_state_if_due(agent, i, "offline", train_dataset)

    # ---- Online phase ------------------------------------------------------------------------
    if cfg.online_steps > 0:
        replay_buffer = run.replay_buffer(with_offline_data=True, dataset=train_dataset)
        collector = run.collector()
        utd = cfg.utd_ratio
        first = run.start_step("online")
        start = time.time()
        for i in tqdm.trange(first + 1, cfg.online_steps + 1, initial=first, total=cfg.online_steps, desc="online",
                             disable=not cfg.progress, smoothing=0.1, dynamic_ncols=True):  # fmt: skip
            step = run.global_step(i, "online")
            episode_info = collector.step(agent, replay_buffer)
            if episode_info is not None:
                run.logger.log(run_utils.episode_stats(episode_info), "env", step=step)
            if i >= cfg.start_training:
                batch = run_utils.sample_windows(replay_buffer, agent.config, agent.config["batch_size"] * utd)
                agent, info = agent.batch_update(run_utils.stack_for_utd(batch, utd))
                if i % cfg.log_interval == 0:
                    rate = (i - first) / (time.time() - start)
                    run_utils.log_update_info(run.logger, info, "online_agent", step, "env_steps_per_second", rate)
            run.end_of_step(agent, i, phase="online")
            run.write_state_if_due(agent, i, "online", train_dataset, replay_buffer, collector)
    run.finish()
    logging.info("Done. Logs and checkpoints in %s", os.path.abspath(run.run_dir))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main), flags_parser=functools.partial(run_utils.parse_flags, driver="main"))
