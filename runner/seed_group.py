"""The runs of one driver process (`--num_seeds=S`, S >= 1) and what the loop does for each of them.

A `SeedGroup` holds one `runner.setup.Run` per seed and does, for every seed, what the drivers' loop
asks: draw batches, step the environment, log, save, evaluate, write run states. The agent itself is
the loop's variable: for S = 1 it is the ordinary agent and `update_fn()` is its own `update`; for
S > 1 the agents are stacked on a leading seed axis and one jitted call updates them all
(`--seed_batching=vmap`), or the agents stay separate and one step per seed runs with the single-seed
kernels (`map`, each seed bit-identical to its single-seed run).
docs/outputs.md, "Several seeds in one process", tells the whole story.
"""

import os
import signal
import sys
from typing import Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from log_utils import TimeSplit
from runner import batches, resume
from runner.setup import episode_stats, save_checkpoint
from utils.datasets import Dataset

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


@jax.jit
def _sample_seed(stacked, index, observations, rng):
    return _slice(stacked, index).sample_actions(observations, rng)


SEED_BATCHING = ("auto", "vmap", "map")


def resolve_seed_batching(mode: str) -> str:
    """`vmap` or `map` for `--seed_batching=mode`; `auto` is `vmap` on an accelerator, `map` on CPU.

    Raises `ValueError` for another mode.
    """
    if mode not in SEED_BATCHING:
        raise ValueError(f"--seed_batching={mode!r} must be one of {SEED_BATCHING}.")
    if mode == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    return mode


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
            one = [a[s] if i == 0 else (jax.tree_util.tree_map(lambda x, s=s: x[s], a) if ax == 0 else a)
                   for i, (a, ax) in enumerate(zip(args, axes, strict=True))]  # fmt: skip
            outs.append(fn(*one))
        infos = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[info for _, info in outs])
        return tuple(agent for agent, _ in outs), infos

    return looped


_group_update = jax.jit(per_seed(lambda agent, batch: agent.update(batch), "vmap"))
_group_batch_update = jax.jit(per_seed(lambda agent, batch: agent.batch_update(batch), "vmap"))


class SeedPolicy:
    """`sample_actions(observations, rng)` of seed `index` of a stacked agent, without unstacking it."""

    def __init__(self, stacked, index: int):
        self.stacked, self.index = stacked, jnp.int32(index)

    def sample_actions(self, observations, rng):
        return _sample_seed(self.stacked, self.index, observations, rng)


def should_evaluate(step: int, phase_steps: int, eval_interval: int) -> bool:
    """True at each multiple of `eval_interval` and at the last step of a phase (once each)."""
    # Difference from the reference: it evaluated at offline step `offline_steps - 1` (one step
    # before the end) and could evaluate twice around the end of the offline phase.
    return step == phase_steps or (eval_interval > 0 and step % eval_interval == 0)


def should_save(step: int, phase_steps: int, save_interval: int) -> bool:
    """True at each multiple of `save_interval` (when > 0) and at the last step of a phase."""
    return step == phase_steps or (save_interval > 0 and step % save_interval == 0)


# ------------------------------------------------------------------------------------------------ the group


class SeedGroup:
    """The S runs of one process.

    Attributes:
        runs: one `runner.setup.Run` per seed, in seed order.
        agent: the initial (or resumed) agent: the run's own for S = 1, else the stacked agents.
        cfg: the first run's settings (every setting but `seed` and `run_name` is the group's).
        timer: the `log_utils.TimeSplit` of this process.
    """

    def __init__(self, runs: List, preemption=None):
        self.runs = runs
        self.num_seeds = len(runs)
        self.cfg = runs[0].cfg
        self.preemption = preemption
        mode = getattr(self.cfg, "seed_batching", "auto") if self.cfg is not None else "auto"
        self.seed_batching = resolve_seed_batching(mode)
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

    @property
    def agent_config(self) -> Dict:
        return self.runs[0].agent.config

    def agent_for(self, agent, s: int):
        """Seed `s`'s agent from the loop's `agent` (stacked or a tuple for S > 1): for evaluation and checkpoints."""
        if self.num_seeds == 1:
            return agent
        return agent_slice(agent, s) if self.seed_batching == "vmap" else agent[s]

    def policy_for(self, agent, s: int):
        """Seed `s`'s acting policy (`sample_actions`), cheap to build at every step."""
        if self.num_seeds == 1:
            return agent
        return SeedPolicy(agent, s) if self.seed_batching == "vmap" else agent[s]

    def update_fn(self):
        """`(agent, batch) -> (agent, info)`, one gradient step per seed: the agent's own `update` for S = 1."""
        if self.num_seeds == 1:
            return type(self.agent).update
        if self.seed_batching == "vmap":
            return _group_update
        return per_seed(lambda agent, batch: agent.update(batch), "map")

    def batch_update_fn(self):
        """`(agent, (U, B, ...) batches) -> (agent, info)` per seed: the agent's own `batch_update` for S = 1."""
        if self.num_seeds == 1:
            return type(self.agent).batch_update
        if self.seed_batching == "vmap":
            return _group_batch_update
        return per_seed(lambda agent, batch: agent.batch_update(batch), "map")

    # ---- data ---------------------------------------------------------------------------------------

    def shard_due(self, step: int) -> bool:
        """True when the next dataset shard is loaded before `step` (every `--dataset_replace_interval`)."""
        interval = self.cfg.dataset_replace_interval
        return self.runs[0].env_data.next_shard is not None and interval > 0 and step % interval == 0

    def next_shard(self):
        """Every seed moves to the next dataset shard (loaded once, shared arrays), keeping its own generator."""
        with self.timer("sampling"):
            fields = self.runs[0].env_data.next_shard()
            shared = None
            for run in self.runs:
                stop = self.cfg.stop_reward_at_mask_zero
                if shared is None:
                    run.train_dataset = Dataset.create(
                        **fields, rng=run.train_dataset.rng, stop_reward_at_mask_zero=stop
                    )
                    shared = dict(run.train_dataset)
                else:
                    run.train_dataset = Dataset(shared, rng=run.train_dataset.rng, stop_reward_at_mask_zero=stop)

    def _stacked(self, sample_one) -> Dict:
        with self.timer("sampling"):
            batches = [sample_one(s, run) for s, run in enumerate(self.runs)]
            if self.num_seeds == 1:
                return batches[0]
            return {k: np.stack([b[k] for b in batches]) for k in batches[0]}

    def sample_offline(self) -> Dict:
        """B offline windows per seed from its own sampler: `(B, ...)` or `(S, B, ...)`."""
        size = self.agent_config["batch_size"]
        return self._stacked(lambda s, run: run.windows().sample(size))

    def sample_replay(self, utd: int) -> Dict:
        """`utd` batches per seed from its replay buffer: `(U, B, ...)` or `(S, U, B, ...)`."""
        cfg = self.agent_config

        def one(s, run):
            return batches.stack_for_utd(batches.sample_windows(self.buffers[s], cfg, cfg["batch_size"] * utd), utd)

        return self._stacked(one)

    def sample_mixed(self) -> Dict:
        """main_online.py's batches (offline and replay rows, `--offline_ratio`) per seed."""
        cfg, utd, ratio = self.agent_config, self.cfg.utd_ratio, self.cfg.offline_ratio
        return self._stacked(
            lambda s, run: batches.sample_mixed_batch(run.train_dataset, self.buffers[s], cfg, utd, ratio)
        )

    # ---- online -------------------------------------------------------------------------------------

    def start_online(self, with_offline_data: bool):
        """Each seed's replay buffer and collector (restored when resuming in the online phase)."""
        self.buffers = [run.replay_buffer(with_offline_data, run.train_dataset) for run in self.runs]
        self.collectors = [run.collector() for run in self.runs]

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
                    run.logger.log(episode_stats(info), "env", step=run.global_step(step_in_phase, "online"))

    # ---- logging, checkpoints, evaluation -----------------------------------------------------------

    def start_step(self, phase: str) -> int:
        return self.runs[0].start_step(phase)

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
        phase_steps = self.runs[0].phase_steps(phase)
        save = should_save(step_in_phase, phase_steps, self.cfg.save_interval)
        evaluate = should_evaluate(step_in_phase, phase_steps, self.cfg.eval_interval)
        if not (save or evaluate):
            return
        self.timer.wait()
        for s, run in enumerate(self.runs):
            if s > 0 and run.eval_vector_env is None:
                run.eval_vector_env = self.runs[0].eval_vector_env  # one vector env serves every seed
            seed_agent = self.agent_for(agent, s)
            step = run.global_step(step_in_phase, phase)
            if save:
                with self.timer("checkpoints"):
                    save_checkpoint(seed_agent, run.run_dir, step=step, phase=phase)
            if evaluate:
                with self.timer("evaluation"):
                    run.evaluate(seed_agent, step)

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
        """Every seed's state at this step; old states are pruned only once all seeds have written."""
        paths = []
        for s, run in enumerate(self.runs):
            buffer = self.buffers[s] if phase == "online" else None
            collector = self.collectors[s] if phase == "online" else None
            paths.append(run.write_state(self.agent_for(agent, s), step_in_phase, phase, buffer, collector))
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
        """Mark every seed's run done (`DONE.json`), close the loggers and the evaluation envs."""
        for run in self.runs:
            run.finish()
        self.runs[0].close_envs()
        resume.release_run_dirs()
