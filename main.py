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

Throughput: --num_seeds=S runs S seeds in this process with one jitted update for all of them
(seed_group.py: vmap on an accelerator, lax.map on CPU; each seed writes its own ordinary run
directory), and --updates_per_dispatch=k runs the offline phase k gradient steps per host call with
windows sampled on the device (offline_dispatch.py).
"""

import functools
import os
import time

import tqdm
from absl import app, flags, logging

import offline_dispatch
import run_state
import run_utils
import seed_group

FLAGS = flags.FLAGS
run_utils.define_flags("main")


def main(_):
    preemption = run_state.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    cfg = run_utils.RunConfig.from_flags(FLAGS, driver="main")
    group = seed_group.setup_group(cfg, preemption)
    bar = functools.partial(tqdm.trange, disable=not cfg.progress, smoothing=0.1, dynamic_ncols=True)

    # ---- Offline phase -----------------------------------------------------------------------
    first = group.start_step("offline")
    start = time.time()
    if cfg.updates_per_dispatch > 1 and first < cfg.offline_steps:
        offline_dispatch.run_offline_phase(group, first, start)
    else:
        offline_dispatch.check_resume_sampler(group, "host")
        for i in bar(first + 1, cfg.offline_steps + 1, initial=first, total=cfg.offline_steps, desc="offline"):
            group.maybe_next_shard(i)
            info = group.update(group.sample_offline())
            if i % cfg.log_interval == 0:
                rate = (i - first) / (time.time() - start)
                group.log_update(info, "offline_agent", i, "steps_per_second", rate)
            group.end_of_step(i, phase="offline")
            group.write_state_if_due(i, "offline")

    # ---- Online phase ------------------------------------------------------------------------
    if cfg.online_steps > 0:
        group.start_online(with_offline_data=True)
        utd = cfg.utd_ratio
        first = group.start_step("online")
        start = time.time()
        for i in bar(first + 1, cfg.online_steps + 1, initial=first, total=cfg.online_steps, desc="online"):
            group.collect(i)
            if i >= cfg.start_training:
                info = group.batch_update(group.sample_replay(utd))
                if i % cfg.log_interval == 0:
                    rate = (i - first) / (time.time() - start)
                    step = group.runs[0].global_step(i, "online")
                    group.log_update(info, "online_agent", step, "env_steps_per_second", rate)
            group.end_of_step(i, phase="online")
            group.write_state_if_due(i, "online")
    group.finish()
    logging.info("Done. Logs and checkpoints in %s", ", ".join(os.path.abspath(r.run_dir) for r in group.runs))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main), flags_parser=functools.partial(run_utils.parse_flags, driver="main"))
