"""Online RL with offline data mixed into every batch (RLPD, RLPD-AC, QC-RLPD; any agent of `main_online.py`).

Loop outline:
  1. Build the envs, the offline dataset, the agent and the run directory (`runner.setup`), with the
     same reward transform (--sparse, robomimic's -1 shift) for offline data and online rewards; with
     --num_seeds=S, one run per seed, the agents stacked (`runner.seed_group`).
  2. Start from an empty replay buffer of --buffer_size transitions.
  3. Steps 1..online_steps: one environment step per iteration; chunks of h = --horizon_length
     actions run open-loop by an action queue that calls the policy only when it is empty.
  4. From --start_training on (and once the buffer holds h transitions), utd_ratio batches of B
     windows, floor(--offline_ratio * B) of each from the offline data and the rest from the replay
     buffer, and utd_ratio gradient steps in one lax.scan (agent.batch_update).
  5. Evaluation (open-loop chunks) at every multiple of --eval_interval and at the end; checkpoints at
     every multiple of --save_interval and at the end.

Example (QC-RLPD on cube-double):
  python main_online.py --method=qc-rlpd --env_name=cube-double-play-singletask-task2-v0
"""

import functools
import os
import time

from absl import app, flags, logging

from runner import cli, resume
from runner.config import RunConfig
from runner.flags import define_flags
from runner.seed_group import SeedGroup
from runner.setup import setup_runs
from utils.progress import progress
from utils.startup import quiet_startup

FLAGS = flags.FLAGS
quiet_startup(dm_control=False)  # only the families whose envs use dm_control import it
define_flags("main_online")


def main(_):
    preemption = resume.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    cfg = RunConfig.from_flags(FLAGS, driver="main_online")
    group = SeedGroup(setup_runs(cfg), preemption)  # one run per seed; group.agent: the agent (stacked for S > 1)
    agent, timer = group.agent, group.timer
    group.start_online(with_offline_data=False)
    batch_update = group.batch_update_fn()  # ACRLPDAgent.batch_update for one seed
    h = cfg.window_length  # rows one window spans (the agent's SPEC.window_length)

    # ---- act -> sample -> update -> log -> save/evaluate -> run state -----------------------------------------
    first = group.start_step("online")
    start = time.time()
    steps = range(first + 1, cfg.online_steps + 1)
    bar = progress(steps, initial=first, total=cfg.online_steps, desc="online", disable=not cfg.progress, unit="steps")
    for i in bar:
        if group.shard_due(i):
            group.next_shard()
        group.collect(agent, i)
        if i >= cfg.start_training and (group.replay_size >= h or cfg.offline_ratio == 1.0):
            batch = group.sample_mixed()
            with timer("updates"):
                agent, info = batch_update(agent, batch)
            timer.dispatched(info)
            if i % cfg.log_interval == 0:
                rate = (i - first) / (time.time() - start)
                group.log_update(info, "online_agent", i, "env_steps_per_second", rate)
        group.save_and_evaluate(agent, i, "online")
        group.write_state_if_due(agent, i, "online")
    group.record_speed("online", first, cfg.online_steps, time.time() - start)  # flags.json `speed.online`
    group.finish()
    logging.info("Done. Logs and checkpoints in %s", ", ".join(os.path.abspath(r.run_dir) for r in group.runs))


if __name__ == "__main__":
    app.run(cli.run_cli(main), flags_parser=functools.partial(cli.parse_flags, driver="main_online"))
