"""The runs of one driver process (`--num_seeds=S`) and the loop's work for each: batches, environment steps,
logging, checkpoints, evaluation, run states. The agent is the loop's variable: for S = 1 the agent itself;
for S > 1 stacked on a leading seed axis (`--seed_batching=vmap`) or a tuple updated one seed after another
with the single-seed kernels (`map`, each seed bit-identical to its single-seed run). docs/outputs.md,
"Several seeds in one process", tells the story.
"""

import functools
import os
import signal
import sys
import time
from typing import Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

import agents
from agents import common
from evaluation import evaluate, make_eval_vector_env
from log_utils import TimeSplit, record_speed, write_json, write_video
from runner import resume
from runner.collector import episode_stats, make_collector, make_replay_buffer
from utils import seeding
from utils.datasets import Dataset
from utils.flax_utils import save_agent

# ------------------------------------------------------------------------------------------------ stacking


def stack_agents(agents: List):
    """Stack agents of one config on a new leading axis: every array leaf `(S, ...)`.

    The static parts (config, network definition, optimizer) are the first agent's: they are the same
    for every seed of a group (one config), only the arrays differ.
    """
    treedef = jax.tree_util.tree_structure(agents[0])
    leaves = [jax.tree_util.tree_leaves(a) for a in agents]
    if any(len(ls) != len(leaves[0]) for ls in leaves):
        raise ValueError("the agents of a seed group must have the same structure")
    return jax.tree_util.tree_unflatten(treedef, [jnp.stack(column) for column in zip(*leaves, strict=True)])


@jax.jit
def _slice(stacked, index):
    return jax.tree_util.tree_map(lambda x: x[index], stacked)


def agent_slice(stacked, index: int):
    """Seed `index`'s agent from a stacked one: the same structure with the leading axis taken."""
    return _slice(stacked, jnp.int32(index))


@functools.partial(jax.jit, static_argnames="method")
def _act_seed(stacked, index, observations, rng, method="sample_actions"):
    return getattr(_slice(stacked, index), method)(observations, rng)


def _entry(s: int, x):
    """Entry `s` of `x`'s leading axis; a device array's by a static slice (`x[s]` would copy `s` to the device)."""
    return jax.lax.index_in_dim(x, s, keepdims=False) if isinstance(x, jax.Array) else x[s]


def per_seed(fn, mode: str, in_axes=0):
    """`fn` applied to every seed: the arguments with `in_axes == 0` hold one entry per seed, the others
    (`None`) are shared; returns `(agents, info)` with the info stacked on a leading seed axis.

    `vmap`: `jax.vmap(fn)` over stacked agents (every leaf `(S, ...)`), one batched computation.
    `map`: the agents stay separate (a tuple) and `fn` runs once per seed, with exactly the kernels of a
    single-seed run, so each seed's numbers equal its single-seed run's bit for bit.
    """
    if mode == "vmap":
        return jax.vmap(fn, in_axes=in_axes)

    def looped(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        agents = args[0]
        outs = []
        for s in range(len(agents)):
            one = [a[s] if i == 0 else (jax.tree_util.tree_map(functools.partial(_entry, s), a) if ax == 0 else a)
                   for i, (a, ax) in enumerate(zip(args, axes, strict=True))]  # fmt: skip
            outs.append(fn(*one))
        infos = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[info for _, info in outs])
        return tuple(agent for agent, _ in outs), infos

    return looped


def distinct_buffers(tree):
    """`tree` with every array that appears in it more than once copied (a target network created as its
    online network's arrays): XLA donates each buffer once, and `donating` updates donate the whole agent."""
    seen = set()

    def one(x):
        if isinstance(x, jax.Array):
            if id(x) in seen:
                return jnp.copy(x)
            seen.add(id(x))
        return x

    return jax.tree_util.tree_map(one, tree)


@functools.lru_cache(maxsize=None)
def donating(method: str, mode: Optional[str] = None, donate: bool = True):
    """`(agent, batch) -> agent.<method>(batch)` (`update` or `batch_update`) jitted with the agent donated
    (`donate_argnums=0`; `donate=False`: not): XLA writes the new parameters, optimizer states and targets into
    the old agent's buffers, so a device holds one agent, not two. The loop rebinds its agent; the one passed in
    is deleted. `mode`: None for one seed, else `per_seed`'s (stacked agents for `vmap`, a tuple for `map`). One
    jitted function per arguments (cached)."""

    def call(agent, batch):
        return getattr(agent, method)(batch)

    if mode == "map":
        return per_seed(donating(method, None, donate), "map")
    return jax.jit(call if mode is None else per_seed(call, "vmap"), donate_argnums=0 if donate else ())


def donate_agent(cfg) -> bool:
    """`--donate_agent` resolved: `auto` donates on an accelerator, not on CPU (and for a `cfg` without it)."""
    value = getattr(cfg, "donate_agent", "auto")
    return value == "true" or (value == "auto" and jax.default_backend() != "cpu")


class SeedPolicy:
    """The acting methods of seed `index` of a stacked agent (`sample_actions`, and `collect_actions` when the
    agent has it), without unstacking it."""

    def __init__(self, stacked, index: int):
        self.stacked, self.index = stacked, jnp.int32(index)
        if hasattr(stacked, "collect_actions"):
            self.collect_actions = functools.partial(_act_seed, stacked, self.index, method="collect_actions")

    def sample_actions(self, observations, rng):
        return _act_seed(self.stacked, self.index, observations, rng)


def should_evaluate(step: int, phase_steps: int, eval_interval: int) -> bool:
    """True at each multiple of `eval_interval` and at the last step of a phase (once each)."""
    # Difference from the reference: it evaluated at offline step `offline_steps - 1` (one step
    # before the end) and could evaluate twice around the end of the offline phase.
    return step == phase_steps or (eval_interval > 0 and step % eval_interval == 0)


def should_save(step: int, phase_steps: int, save_interval: int) -> bool:
    """True at each multiple of `save_interval` (when > 0) and at the last step of a phase."""
    return step == phase_steps or (save_interval > 0 and step % save_interval == 0)


def global_step(cfg, step_in_phase: int, phase: str) -> int:
    """Offline step i logs as i, online step i as `offline_steps + i`."""
    return step_in_phase + (cfg.offline_steps if phase == "online" else 0)


# ------------------------------------------------------------------------------------------------ batches


def sample_windows(source, agent_config, batch_size: int) -> Dict:
    """`batch_size` windows of `horizon_length` rows of a replay buffer or dataset, discounted with the agent's
    `discount` (the chunk contract of docs/batch_contract.md, read from the agent config, so that the sampler
    and the critic's `gamma^h` can never disagree)."""
    return source.sample_sequence(batch_size, agent_config["horizon_length"], agent_config["discount"])


def stack_for_utd(batch: Dict, utd_ratio: int) -> Dict:
    """Reshape a batch of `utd_ratio * B` rows to `(utd_ratio, B, ...)` for `batch_update`."""
    return jax.tree_util.tree_map(lambda x: x.reshape((utd_ratio, -1) + x.shape[1:]), batch)


def mixed_batch_sizes(batch_size: int, offline_ratio: float):
    """`(n_offline, n_online)`, `n_offline = floor(offline_ratio * batch_size)`: they add up to `batch_size`
    (255 at ratio 0.5 -> 127 + 128). `ValueError` for `offline_ratio` outside [0, 1]."""
    if not 0.0 <= offline_ratio <= 1.0:
        raise ValueError(f"--offline_ratio={offline_ratio} must be in [0, 1].")
    # Difference from the reference: it drew batch_size // 2 rows from each source, one row short
    # for odd batch sizes.
    n_offline = int(np.floor(offline_ratio * batch_size + 1e-9))
    return n_offline, batch_size - n_offline


def sample_mixed_batch(offline_dataset, replay_buffer, agent_config, utd_ratio: int, offline_ratio: float) -> Dict:
    """main_online.py's `(utd_ratio, batch_size, ...)` windows: in every UTD slice the first `n_offline` rows
    from `offline_dataset`, the other `n_online` from `replay_buffer` (`mixed_batch_sizes`; RLPD's symmetric
    sampling at `offline_ratio=0.5`)."""
    n_offline, n_online = mixed_batch_sizes(agent_config["batch_size"], offline_ratio)
    parts = []
    for source, n in ((offline_dataset, n_offline), (replay_buffer, n_online)):
        if n > 0:
            parts.append(stack_for_utd(sample_windows(source, agent_config, n * utd_ratio), utd_ratio))  # (U, n, ..)
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=1), *parts)  # (U, B, ...)


def stack_seeds(batches: List[Dict]) -> Dict:
    """One batch per seed -> the batch of one seed, or the batches stacked on a leading seed axis `S`."""
    return batches[0] if len(batches) == 1 else {k: np.stack([b[k] for b in batches]) for k in batches[0]}


# ------------------------------------------------------------------------------------------------ the group


class SeedGroup:
    """The S runs of one process: `runs` (one `runner.setup.Run` per seed), `agent` (the run's own for S = 1,
    else stacked or a tuple), `cfg` (the first run's settings: all but `seed` and `run_name` are the group's),
    `timer` (`log_utils.TimeSplit`); `sampler_kind` and `prefetch_states` are set by
    `runner.dispatch.OfflineSampler` (`host`/`device`, and the prefetching threads' generator states)."""

    def __init__(self, runs: List, preemption=None):
        self.runs = runs
        self.num_seeds = len(runs)
        self.cfg = runs[0].cfg
        self.preemption = preemption
        mode = getattr(self.cfg, "seed_batching", "auto") if self.cfg is not None else "auto"  # absl checked it
        self.seed_batching = mode if mode != "auto" else ("map" if jax.default_backend() == "cpu" else "vmap")
        self.donate = donate_agent(self.cfg)
        for run in runs if self.donate else ():  # donated updates: no array in the agent twice
            run.agent = distinct_buffers(run.agent)
        if self.num_seeds == 1:
            self.agent = runs[0].agent
        elif self.seed_batching == "vmap":
            self.agent = stack_agents([r.agent for r in runs])
        else:
            self.agent = tuple(r.agent for r in runs)
        self.timer = TimeSplit()
        self._state_pending = False
        self.buffers: Optional[List] = None
        self.collectors: Optional[List] = None
        self.eval_vector_env = None  # --eval_envs > 1: built at the first evaluation, shared by the seeds
        self.sampler_kind, self.prefetch_states = "host", None

    @property
    def agent_config(self) -> Dict:
        return self.runs[0].agent.config

    @property
    def batch_keys(self):
        """The batch keys the agent's update reads (its `AgentSpec.batch_keys`)."""
        return agents.get(self.agent_config["agent_name"]).batch_keys

    def agent_for(self, agent, s: int):
        """Seed `s`'s agent from the loop's `agent` (stacked or a tuple for S > 1): for evaluation and checkpoints."""
        if self.num_seeds == 1:
            return agent
        return agent_slice(agent, s) if self.seed_batching == "vmap" else agent[s]

    def policy_for(self, agent, s: int):
        """Seed `s`'s acting policy (`sample_actions`, `collect_actions`), cheap to build at every step."""
        if self.num_seeds == 1:
            return agent
        return SeedPolicy(agent, s) if self.seed_batching == "vmap" else agent[s]

    def update_fn(self):
        """`(agent, batch) -> (agent, info)`, one gradient step per seed (the agent's own `update`), the agent
        donated where `--donate_agent` says (`donating`): the caller uses only the agent it returns."""
        return self._donating("update")

    def batch_update_fn(self):
        """`(agent, (U, B, ...) batches) -> (agent, info)` per seed (the agent's own `batch_update`), the agent
        donated as in `update_fn`."""
        return self._donating("batch_update")

    def _donating(self, method: str):
        update = donating(method, None if self.num_seeds == 1 else self.seed_batching, self.donate)
        keys = self.batch_keys  # only what the update reads crosses to the device
        return lambda agent, batch: update(agent, {k: batch[k] for k in keys})

    def start_step(self, phase: str) -> int:
        """The last step of `phase` already done: 0 for a fresh run, else taken from the resumed state."""
        meta = self.runs[0].resume_meta
        if meta is None:
            return 0
        if meta["phase"] == phase:
            return meta["step_in_phase"]
        return self.cfg.offline_steps if phase == "offline" else 0

    # ---- data ---------------------------------------------------------------------------------------

    def shard_due(self, step: int) -> bool:
        """True when the next dataset shard is loaded before `step` (every `--dataset_replace_interval`)."""
        interval = self.cfg.dataset_replace_interval
        return self.runs[0].env_data.next_shard is not None and interval > 0 and step % interval == 0

    def next_shard(self):
        """Every seed moves to the next dataset shard (loaded once, shared arrays), keeping its own generator."""
        with self.timer("sampling"):
            fields, stop = self.runs[0].env_data.next_shard(), self.cfg.stop_reward_at_mask_zero
            first = Dataset.create(**fields, rng=self.runs[0].train_dataset.rng, stop_reward_at_mask_zero=stop)
            for run in self.runs:
                if run is not self.runs[0]:
                    run.train_dataset = Dataset(dict(first), rng=run.train_dataset.rng, stop_reward_at_mask_zero=stop)
                else:
                    run.train_dataset = first
                run.windows = agents.window_source(run.train_dataset, run.agent.config)

    def sample_replay(self, utd: int) -> Dict:
        """`utd` batches per seed from its replay buffer: `(U, B, ...)` or `(S, U, B, ...)`."""
        cfg = self.agent_config
        with self.timer("sampling"):
            return stack_seeds(
                [stack_for_utd(sample_windows(b, cfg, cfg["batch_size"] * utd), utd) for b in self.buffers]
            )

    def sample_mixed(self) -> Dict:
        """main_online.py's batches (offline and replay rows, `--offline_ratio`) per seed."""
        cfg, utd, ratio = self.agent_config, self.cfg.utd_ratio, self.cfg.offline_ratio
        with self.timer("sampling"):
            pairs = zip(self.runs, self.buffers, strict=True)
            return stack_seeds([sample_mixed_batch(r.train_dataset, b, cfg, utd, ratio) for r, b in pairs])

    # ---- online -------------------------------------------------------------------------------------

    def start_online(self, with_offline_data: bool):
        """Each seed's replay buffer and collector (restored when resuming in the online phase)."""
        self.buffers = [make_replay_buffer(run, with_offline_data) for run in self.runs]
        self.collectors = [make_collector(run) for run in self.runs]

    @property
    def replay_size(self) -> int:
        return self.buffers[0].size  # one transition per seed per step: the same for every seed

    def collect(self, agent, step_in_phase: int):
        """One environment step per seed with its own policy; finished episodes are logged to its `env` CSV."""
        for s, run in enumerate(self.runs):
            with self.timer("env_steps"):
                info = self.collectors[s].step(self.policy_for(agent, s), self.buffers[s])
            if info is not None:
                with self.timer("logging"):
                    run.logger.log(episode_stats(info), "env", step=global_step(run.cfg, step_in_phase, "online"))

    # ---- logging, checkpoints, evaluation -----------------------------------------------------------

    def record_speed(self, phase: str, first: int, last: int, seconds: float):
        """At the end of `phase`: this process's steps `first` -> `last` of it in `seconds` (the loop's wall time)
        into every seed's `flags.json` (`log_utils.record_speed`, `speed.<phase>`). Gradient steps: one per
        offline step; online, `--utd_ratio` per step from `--start_training` on. A group's rate is the group's
        (its seeds train together)."""
        updates = last - first
        if phase == "online":
            updates = self.cfg.utd_ratio * max(0, last - max(first, self.cfg.start_training - 1))
        for run in self.runs:
            record_speed(run.run_dir, phase, first, last, seconds, updates)

    def log_update(self, info: Dict, prefix: str, step: int, rate_key: str, rate: float):
        """Log an update's info to each seed's `<prefix>` CSV with the rate and the time split."""
        self.timer.wait()
        with self.timer("logging"):
            info = jax.device_get(info)
            extra = {f"time/{rate_key}": rate, **self.timer.metrics()}
            for s, run in enumerate(self.runs):
                row = info if self.num_seeds == 1 else {k: np.asarray(v)[s] for k, v in info.items()}
                run.logger.log({**row, **extra}, prefix, step=step)

    def save_and_evaluate(self, agent, step_in_phase: int, phase: str):
        """Checkpoint, then evaluate each seed on their schedules (`should_save`, `should_evaluate`).

        The checkpoint comes first, so an evaluation that fails never loses the phase's work.
        """
        phase_steps = self.cfg.offline_steps if phase == "offline" else self.cfg.online_steps
        save = should_save(step_in_phase, phase_steps, self.cfg.save_interval)
        evaluate_now = should_evaluate(step_in_phase, phase_steps, self.cfg.eval_interval)
        if not (save or evaluate_now):
            return
        self.timer.wait()
        for s, run in enumerate(self.runs):
            seed_agent = self.agent_for(agent, s)
            step = global_step(run.cfg, step_in_phase, phase)
            if save:
                with self.timer("checkpoints"):
                    path = os.path.join(run.run_dir, "checkpoints", f"agent_{step}.msgpack")
                    save_agent(seed_agent, path, metadata={"step": int(step), "phase": phase})
            if evaluate_now:
                with self.timer("evaluation"):
                    self.evaluate(run, seed_agent, step)

    def evaluate(self, run, agent, step: int) -> Dict:
        """Evaluate `agent` at global `step` and log it to `run`'s `eval` CSV (`evaluate_and_log`); with
        `--eval_envs` > 1 on `eval_vector_env` (every episode is reset with its own seed, so one vector env
        serves every seed)."""
        cfg, env_data = run.cfg, run.env_data
        episodes = cfg.eval_episodes * max(getattr(env_data, "num_tasks", 0), 1)
        if cfg.eval_envs > 1 and self.eval_vector_env is None:
            self.eval_vector_env = make_eval_vector_env(
                env_data.make_eval_env, min(cfg.eval_envs, episodes), cfg.eval_env_mode
            )
        return evaluate_and_log(
            agent,
            env_data.eval_env,
            cfg,
            run.logger,
            step=step,
            action_dim=run.action_dim,
            chunk=run.chunk_length,
            vector_env=self.eval_vector_env,
            task_names=getattr(env_data, "task_names", None) or None,
        )

    # ---- run states -----------------------------------------------------------------------------------

    def write_state_if_due(self, agent, step_in_phase: int, phase: str):
        """Write every seed's run state when due; after SIGTERM/SIGUSR1 write it and exit with status 3.

        Due: every `--state_interval` steps of a phase, at the end of the offline phase when an online
        phase follows, and at any step after a preemption signal. Never at the run's last step
        (`finish` marks the run done instead).
        """
        cfg = self.cfg
        if cfg.state_interval > 0 and step_in_phase % cfg.state_interval == 0:
            self._state_pending = True
        end_of_offline = phase == "offline" and step_in_phase == cfg.offline_steps
        if end_of_offline and cfg.online_steps > 0:
            self._state_pending = True
        last = (phase == "online" and step_in_phase == cfg.online_steps) or (end_of_offline and cfg.online_steps == 0)
        preempted = self.preemption is not None and self.preemption.raised
        if (self._state_pending or preempted) and not last:
            self.timer.wait()
            with self.timer("checkpoints"):
                self.write_states(agent, step_in_phase, phase)
            self._state_pending = False
            if preempted:
                self._exit_preempted(step_in_phase, phase)

    def write_states(self, agent, step_in_phase: int, phase: str):
        """Every seed's full state at this step (`resume.write_state`); old states are pruned only once all seeds
        have written. Any step is a safe point: online, the collector saves an episode in progress as its actions."""
        paths = []
        dataset_states = self.prefetch_states() if self.prefetch_states is not None else None
        for s, run in enumerate(self.runs):
            meta = {
                "global_step": global_step(run.cfg, step_in_phase, phase),
                "phase": phase,
                "step_in_phase": step_in_phase,
                "dataset_rng": dataset_states[s] if dataset_states else seeding.generator_state(run.train_dataset.rng),
                "offline_sampler": self.sampler_kind,
                "shard_index": None if run.env_data.next_shard is None else run.env_data.next_shard.index,
                "csv_rows": resume.csv_row_counts(run.run_dir),
                "wandb_run_id": None if run.logger.wandb_run is None else run.logger.wandb_run.id,
            }
            buffer = None
            if phase == "online":
                buffer = self.buffers[s]
                meta.update(buffer_rng=seeding.generator_state(buffer.rng), collector=self.collectors[s].state())
            paths.append(resume.write_state(run.run_dir, meta, self.agent_for(agent, s), buffer, keep=None))
        for run in self.runs:
            resume.prune_states(run.run_dir, self.cfg.keep_states)
        logging.info("Run state written: %s", ", ".join(paths))

    def _exit_preempted(self, step_in_phase: int, phase: str):
        for signum in (*resume.PREEMPTION_SIGNALS, signal.SIGINT):  # a further signal must not change status 3
            signal.signal(signum, signal.SIG_IGN)
        names = [os.path.basename(os.path.normpath(r.run_dir)) for r in self.runs]
        if self.num_seeds == 1:
            how = f"--resume --run_name={names[0]} --run_group={self.cfg.run_group}"
        else:
            how = (
                f"--resume --num_seeds={self.num_seeds} --seed={self.runs[0].cfg.seed} with the same --run_name "
                f"(runs {', '.join(names)} in --run_group={self.cfg.run_group})"
            )
        logging.warning(
            "Signal %s: state written at %s step %d; exiting with status %d (continue with %s).",
            self.preemption.signum,
            phase,
            step_in_phase,
            resume.EXIT_PREEMPTED,
            how,
        )
        for run in self.runs:
            run.logger.close()
        sys.exit(resume.EXIT_PREEMPTED)

    def finish(self):
        """Mark every seed's run done (`DONE.json`: a sweep skips it), close the loggers and the evaluation envs."""
        for run in self.runs:
            done = {"offline_steps": run.cfg.offline_steps, "online_steps": run.cfg.online_steps}
            write_json(os.path.join(run.run_dir, "DONE.json"), done)
            run.logger.close()
        if self.eval_vector_env is not None:
            self.eval_vector_env.close()
            self.eval_vector_env = None
        resume.release_run_dirs()


def evaluate_and_log(
    agent, eval_env, cfg, logger, step: int, action_dim: int, chunk: int, vector_env=None, task_names=None
) -> Dict:
    """`evaluation.evaluate` of `agent` at `step` (the `evaluation` stream of `cfg.seed`), logged under `eval`;
    returns the row. With `vector_env` the evaluation episodes run in lockstep, videos always on `eval_env`;
    goal-conditioned (`task_names`): every task. `--action_chunk_eval_sizes` and `--best_of_n_eval_values` add
    evaluations executing only the first n actions of each `chunk` (`ac<n>/...`; cuts not shorter than the
    chunk are skipped) or acting with N samples (`bfn<N>/...`), as the DQC release's. An agent whose
    `sample_actions` takes a `temperature` acts with `--eval_temperature`."""
    from runner.config import parse_eval_values

    takes_temperature = common.sample_actions_takes(type(agent), "temperature")

    sizes = [0] + [n for n in parse_eval_values(cfg.action_chunk_eval_sizes, "x") if 0 < n < chunk]
    samples = [0] + [n for n in parse_eval_values(cfg.best_of_n_eval_values, "x") if n > 0]
    start = time.time()
    row, first = {}, None
    for size in dict.fromkeys(sizes):
        for n in dict.fromkeys(samples):
            prefix = (f"ac{size}" if size else "") + ("-" if size and n else "") + (f"bfn{n}" if n else "")
            stats, _, renders = evaluate(
                agent,
                eval_env,
                num_eval_episodes=cfg.eval_episodes,
                num_video_episodes=0 if prefix else cfg.video_episodes,
                video_frame_skip=cfg.video_frame_skip,
                action_dim=action_dim,
                seed=cfg.seed,
                step=step,
                progress=cfg.progress,
                vector_env=vector_env,
                task_names=task_names,
                action_chunk_eval_size=size or None,
                best_of_n=n or None,
                temperature=cfg.eval_temperature if takes_temperature else None,
            )
            row.update({f"{prefix}/{k}" if prefix else k: v for k, v in stats.items()})
            if not prefix:
                first = stats
                if renders:  # the video episodes one after another, every --video_frame_skip-th frame
                    path = os.path.join(logger.save_dir, "videos", f"eval_{step}.mp4")
                    write_video(path, np.concatenate(renders))
                    if logger.wandb_run is not None:
                        import wandb

                        logger.wandb_run.log({"eval/video": wandb.Video(path, format="mp4")}, step=step)
    row["time"] = time.time() - start
    logger.log(row, "eval", step=step)
    first = first if first is not None else row
    seed = f" (seed {cfg.seed})" if getattr(cfg, "num_seeds", 1) > 1 else ""  # a group logs one line per seed
    logging.info("step %d: eval success %.3f%s", step, first.get("success", float("nan")), seed)
    return row
