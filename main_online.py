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

--num_seeds=S runs S seeds in this process with one jitted update for all of them (seed_group.py);
each seed writes its own ordinary run directory.

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
import seed_group

FLAGS = flags.FLAGS
run_utils.define_flags("main_online")


def main(_):
    preemption = run_state.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    cfg = run_utils.RunConfig.from_flags(FLAGS, driver="main_online")
    group = seed_group.setup_group(cfg, preemption)

    group.start_online(with_offline_data=False)
    h = group.agent_config["horizon_length"]
    first = group.start_step("online")
    start = time.time()
    for i in tqdm.trange(first + 1, cfg.online_steps + 1, initial=first, total=cfg.online_steps, desc="online",
                         disable=not cfg.progress, smoothing=0.1, dynamic_ncols=True):  # fmt: skip
        group.maybe_next_shard(i)
        group.collect(i)
        if i >= cfg.start_training and (group.replay_size >= h or cfg.offline_ratio == 1.0):
            info = group.batch_update(group.sample_mixed())
            if i % cfg.log_interval == 0:
                rate = (i - first) / (time.time() - start)
                group.log_update(info, "online_agent", i, "env_steps_per_second", rate)
        group.end_of_step(i, phase="online")
        group.write_state_if_due(i, "online")
    group.finish()
    logging.info("Done. Logs and checkpoints in %s", ", ".join(os.path.abspath(r.run_dir) for r in group.runs))


if __name__ == "__main__":
    app.run(run_utils.run_cli(main), flags_parser=functools.partial(run_utils.parse_flags, driver="main_online"))
