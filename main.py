"""Offline-to-online RL with action chunks (QC, QC-FQL, BFN, BFN-n, FQL, FQL-n; any agent of `main.py`).

Loop outline:
  1. Build the envs, the offline dataset, the agent and the run directory (`runner.setup`); with
     --num_seeds=S, one run per seed, the agents stacked (`runner.seed_group`).
  2. Offline phase, steps 1..offline_steps: sample B windows of h = --horizon_length steps from the
     offline data, take one gradient step (agent.update), log, checkpoint and evaluate on their
     intervals, write a run state when due. --updates_per_dispatch=k takes up to k steps per call
     (runner.dispatch). With several dataset shards the next is loaded every --dataset_replace_interval.
  3. A replay buffer is created from the offline dataset.
  4. Online phase, steps 1..online_steps: one environment step (chunks run open-loop by an action
     queue that calls the policy only when empty); from --start_training on, utd_ratio * B windows
     from the replay buffer and utd_ratio gradient steps in one lax.scan (agent.batch_update).
  5. Evaluation (open-loop chunks, --eval_episodes episodes) at every multiple of --eval_interval of
     each phase and at the end of each phase. Steps are logged as offline step i -> i, online step
     i -> offline_steps + i.

Call chains, one seed, --updates_per_dispatch=1: a batch is `sampler.sample` (runner/dispatch.py) ->
`run.windows.sample` (the agent's window source, held by the run from setup; utils/device_sampler.py
`ChunkWindows` by default) -> `Dataset.sample_sequence` (utils/datasets.py); an update is `update` (=
`ACFQLAgent.update`) -> `_update` -> `network.apply_loss_fn` -> `loss_fn` -> `total_loss` -> `critic_loss`.
"""

import functools
import os
import time

from absl import app, flags, logging

from runner import cli, dispatch, resume
from runner.config import RunConfig
from runner.flags import define_flags
from runner.seed_group import SeedGroup
from runner.setup import setup_runs
from utils.progress import progress
from utils.startup import quiet_startup

FLAGS = flags.FLAGS
quiet_startup(dm_control=False)  # only the families whose envs use dm_control import it
define_flags("main")


def main(_):
    preemption = resume.PreemptionFlag().install()  # before setup: a signal then stops at the first step
    cfg = RunConfig.from_flags(FLAGS, driver="main")
    group = SeedGroup(setup_runs(cfg), preemption)  # one run per seed; group.agent: the agent (stacked for S > 1)
    agent, timer = group.agent, group.timer
    bar = functools.partial(progress, disable=not cfg.progress, smoothing=0.1, unit="steps")

    # ---- Offline phase: sample -> update -> log -> save/evaluate -> run state ---------------------------------
    sampler = dispatch.offline_sampler(group)
    update = sampler.update_fn()  # ACFQLAgent.update for one seed and --updates_per_dispatch=1
    step = first = group.start_step("offline")
    start, offline_bar = time.time(), bar(initial=step, total=cfg.offline_steps, desc="offline")
    while step < cfg.offline_steps:
        n = dispatch.dispatch_size(step, cfg)  # 1 unless --updates_per_dispatch > 1
        batch = sampler.sample(step + 1, n)
        with timer("updates"):
            agent, info = update(agent, batch)
        timer.dispatched(info)
        step += n
        offline_bar.update(n)
        if step % cfg.log_interval == 0:
            group.log_update(info, "offline_agent", step, "steps_per_second", (step - first) / (time.time() - start))
        group.save_and_evaluate(agent, step, "offline")
        group.write_state_if_due(agent, step, "offline")
    offline_bar.close()
    sampler.close()
    group.record_speed("offline", first, step, time.time() - start)  # flags.json `speed.offline`

    # ---- Online phase: act -> sample -> update -> log -> save/evaluate -> run state ---------------------------
    if cfg.online_steps > 0:
        group.start_online(with_offline_data=True)
        batch_update = group.batch_update_fn()  # ACFQLAgent.batch_update for one seed
        first = group.start_step("online")
        start = time.time()
        for i in bar(range(first + 1, cfg.online_steps + 1), initial=first, total=cfg.online_steps, desc="online"):
            group.collect(agent, i)
            if i >= cfg.start_training:
                batch = group.sample_replay(cfg.utd_ratio)
                with timer("updates"):
                    agent, info = batch_update(agent, batch)
                timer.dispatched(info)
                if i % cfg.log_interval == 0:
                    rate = (i - first) / (time.time() - start)
                    group.log_update(info, "online_agent", cfg.offline_steps + i, "env_steps_per_second", rate)
            group.save_and_evaluate(agent, i, "online")
            group.write_state_if_due(agent, i, "online")
        group.record_speed("online", first, cfg.online_steps, time.time() - start)
    group.finish()
    logging.info("Done. Logs and checkpoints in %s", ", ".join(os.path.abspath(r.run_dir) for r in group.runs))


if __name__ == "__main__":
    app.run(cli.run_cli(main), flags_parser=functools.partial(cli.parse_flags, driver="main"))
