"""Several seeds in one process (`--num_seeds=S`): S ordinary runs updated by one vmapped, jitted step.

The drivers' loops run on a `SeedGroup` of `S >= 1` runs (`run_utils.Run`, one per seed
`seed .. seed + S - 1`). Each seed keeps everything a single-seed run has: its run directory
(`flags.json` with its own seed, CSVs, checkpoints, run states, `DONE.json`), its training and
evaluation environments, its offline sampler and replay buffer, its random streams
(`utils.seeding` of its own seed) and its evaluation. Only the agents are shared in one array:
stacked on a leading seed axis `(S, ...)` and updated by `jax.vmap` of the agent's own update, so
S small MLP updates fill the accelerator that one would leave idle (`--seed_batching`: on CPU the
seeds run one after another inside the one compiled call instead, `lax.map`, which keeps the
single-seed speed per seed).

`S = 1` is the plain single-seed loop (the agent is not stacked, `agent.update` is called as
before), so the default run is unchanged.

A seed's directory is an ordinary run: plots read it, `--resume` continues it (alone, with
`--seed=<its seed>`, or with the group), a sweep skips it when finished. The group writes its
run states at the same steps for every seed and prunes old ones only after all seeds have written,
so a group always resumes from a step that every seed has.

Where the time goes: `TimeSplit` accumulates the loop's wall-clock time by section (updates,
sampling, environment steps, evaluation, logging, checkpoints) and every training log row carries
it under `time/`.
"""

import contextlib
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

import run_state
import run_utils
from utils.datasets import Dataset

# ------------------------------------------------------------------------------------------------ timing

TIME_SECTIONS = ("updates", "sampling", "env_steps", "evaluation", "logging", "checkpoints")


class TimeSplit:
    """Wall-clock seconds of the loop by section (`TIME_SECTIONS`), from construction on.

    `with split("updates"): ...` adds the block's duration to its section. Device work is
    asynchronous: the host may run one update ahead of the device (so the next batch is sampled, and
    the next update dispatched, while the device computes), and before dispatching one more it waits
    for the oldest (`throttle`); that wait, and every full `wait` before logging, evaluation and
    checkpoints, is counted as `updates`. So the time the host spends waiting for the device is
    `updates`, and device work that overlaps host sampling is not counted twice.

    `metrics()` -> `time/<section>_s` (cumulative seconds), `time/<section>_frac` (share of the
    wall-clock time since this process started its loop; a resumed run starts again from 0) and
    `time/total_s`; `time/other_frac` is what no section
    covers (the loop itself, progress bars, run setup after a resume).
    """

    def __init__(self):
        self.start = time.perf_counter()
        self.seconds = {name: 0.0 for name in TIME_SECTIONS}
        self._pending = []

    @contextlib.contextmanager
    def __call__(self, section: str):
        if section not in self.seconds:
            raise ValueError(f"unknown time section {section!r}; sections are {TIME_SECTIONS}.")
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[section] += time.perf_counter() - begin

    def dispatched(self, outputs):
        """Remember the newest device outputs (`throttle` and `wait` block on them)."""
        self._pending.append(outputs)

    def throttle(self, ahead: int = 1):
        """Before a dispatch: block on the oldest dispatched updates until at most `ahead` remain."""
        while len(self._pending) > ahead:
            with self("updates"):
                jax.block_until_ready(self._pending.pop(0))

    def wait(self):
        """Block until every dispatched device work is done (counted as `updates`)."""
        if self._pending:
            with self("updates"):
                jax.block_until_ready(self._pending)
            self._pending = []

    def metrics(self) -> Dict[str, float]:
        total = max(time.perf_counter() - self.start, 1e-9)
        out = {"time/total_s": total}
        for name, seconds in self.seconds.items():
            out[f"time/{name}_s"] = seconds
            out[f"time/{name}_frac"] = seconds / total
        out["time/other_frac"] = max(0.0, 1.0 - sum(self.seconds.values()) / total)
        return out


# ------------------------------------------------------------------------------------------------ stacking


def stack_agents(agents: List):
    """Stack agents of one config on a new leading axis: every array leaf `(S, ...)`.

    The static parts (config, network definition, optimizer) are taken from the first agent; they
    are the same for every seed of a group (one config), only the arrays differ.
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

    `vmap` turns the S seeds' matrix products into batched ones (one kernel for all seeds: what fills a
    GPU); `map` runs the seeds one after another inside one compiled call (`lax.map`), with exactly the
    kernels of a single-seed run: on CPU, where batched products gain nothing, this keeps the
    single-seed speed per seed and gives each seed the single-seed run's numbers bit for bit.
    Raises `ValueError` for another mode.
    """
    if mode not in SEED_BATCHING:
        raise ValueError(f"--seed_batching={mode!r} must be one of {SEED_BATCHING}.")
    if mode == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    return mode


def per_seed(fn, mode: str, in_axes=0):
    """`fn` applied to every seed along the leading axis of its `in_axes == 0` arguments, by `jax.vmap`
    (`mode='vmap'`) or `jax.lax.map` (`'map'`); the other arguments (`in_axes` None) are shared."""
    if mode == "vmap":
        return jax.vmap(fn, in_axes=in_axes)

    def mapped(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        stacked = tuple(a for a, ax in zip(args, axes, strict=True) if ax == 0)

        def one(xs):
            it = iter(xs)
            return fn(*[next(it) if ax == 0 else a for a, ax in zip(args, axes, strict=True)])

        return jax.lax.map(one, stacked)

    return mapped


@functools.partial(jax.jit, static_argnames="mode")
def _group_update(agents, batches, mode):
    return per_seed(lambda agent, batch: agent.update(batch), mode)(agents, batches)


@functools.partial(jax.jit, static_argnames="mode")
def _group_batch_update(agents, batches, mode):
    return per_seed(lambda agent, batch: agent.batch_update(batch), mode)(agents, batches)


class SeedPolicy:
    """`sample_actions(observations, rng)` of seed `index` of a stacked agent, without unstacking it.

    The online collector calls it only at chunk boundaries; the slice is taken inside one jitted call.
    """

    def __init__(self, stacked, index: int):
        self.stacked, self.index = stacked, jnp.int32(index)

    def sample_actions(self, observations, rng):
        return _sample_seed(self.stacked, self.index, observations, rng)


def _stack_batches(batches: List[Dict]) -> Dict:
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


# ------------------------------------------------------------------------------------------------ the group


class SeedGroup:
    """The S runs of one process and their (stacked) agent; see the module docstring.

    Attributes:
        runs: one `run_utils.Run` per seed, in seed order.
        agent: the agent (S = 1) or the stacked agents (every leaf `(S, ...)`).
        cfg: the first run's settings (every setting but `seed` and `run_name` is the group's).
        split: the `TimeSplit` of this process.
    """

    def __init__(self, runs: List[run_utils.Run], preemption=None):
        self.runs = runs
        self.num_seeds = len(runs)
        self.cfg = runs[0].cfg
        self.preemption = preemption
        self.agent = runs[0].agent if self.num_seeds == 1 else stack_agents([r.agent for r in runs])
        mode = getattr(self.cfg, "seed_batching", "auto") if self.cfg is not None else "auto"
        self.seed_batching = resolve_seed_batching(mode)
        self.split = TimeSplit()
        self._state_pending = False
        self.buffers: Optional[List] = None
        self.collectors: Optional[List] = None

    # ---- agents ------------------------------------------------------------------------------------

    @property
    def agent_config(self) -> Dict:
        return self.runs[0].agent.config

    def agent_for(self, s: int):
        """Seed `s`'s agent as an ordinary (unstacked) agent: for evaluation and checkpoints."""
        return self.agent if self.num_seeds == 1 else agent_slice(self.agent, s)

    def policy_for(self, s: int):
        """Seed `s`'s acting policy (`sample_actions`), cheap to build at every step."""
        return self.agent if self.num_seeds == 1 else SeedPolicy(self.agent, s)

    def update(self, batch) -> Dict:
        """One gradient step per seed on `batch` (`(B, ...)`, or `(S, B, ...)` for S > 1); returns the info."""
        self.split.throttle()
        with self.split("updates"):
            if self.num_seeds == 1:
                self.agent, info = self.agent.update(batch)
            else:
                self.agent, info = _group_update(self.agent, batch, self.seed_batching)
        self.split.dispatched(info)
        return info

    def batch_update(self, stacked) -> Dict:
        """UTD gradient steps per seed in one `lax.scan` (`(U, B, ...)`, or `(S, U, B, ...)`)."""
        self.split.throttle()
        with self.split("updates"):
            if self.num_seeds == 1:
                self.agent, info = self.agent.batch_update(stacked)
            else:
                self.agent, info = _group_batch_update(self.agent, stacked, self.seed_batching)
        self.split.dispatched(info)
        return info

    def set_stacked_agent(self, agent, info):
        """After an update done elsewhere (the offline dispatch): keep `agent`, remember `info`."""
        self.agent = agent
        self.split.dispatched(info)

    # ---- data ---------------------------------------------------------------------------------------

    def shard_due(self, step: int) -> bool:
        """True when the next dataset shard is loaded before `step` (every `--dataset_replace_interval`)."""
        interval = self.cfg.dataset_replace_interval
        return self.runs[0].env_data.next_shard is not None and interval > 0 and step % interval == 0

    def maybe_next_shard(self, step: int):
        """Every seed moves to the next dataset shard at the same steps (loaded once, shared arrays).

        The new shard keeps drawing from each seed's `dataset` stream generator (no new seed).
        """
        if not self.shard_due(step):
            return
        first = self.runs[0]
        with self.split("sampling"):
            fields = first.env_data.next_shard()
            shared = None
            for run in self.runs:
                if shared is None:
                    run.train_dataset = Dataset.create(
                        **fields, rng=run.train_dataset.rng, stop_reward_at_mask_zero=self.cfg.stop_reward_at_mask_zero
                    )
                    shared = dict(run.train_dataset)
                else:
                    run.train_dataset = Dataset(
                        shared, rng=run.train_dataset.rng, stop_reward_at_mask_zero=self.cfg.stop_reward_at_mask_zero
                    )

    def _stacked(self, sample_one) -> Dict:
        with self.split("sampling"):
            batches = [sample_one(s, run) for s, run in enumerate(self.runs)]
            return batches[0] if self.num_seeds == 1 else _stack_batches(batches)

    def sample_offline(self) -> Dict:
        """B offline windows per seed from its own sampler: `(B, ...)` or `(S, B, ...)`."""
        cfg = self.agent_config
        return self._stacked(lambda s, run: run_utils.sample_windows(run.train_dataset, cfg, cfg["batch_size"]))

    def sample_replay(self, utd: int) -> Dict:
        """`utd` batches per seed from its replay buffer: `(U, B, ...)` or `(S, U, B, ...)`."""
        cfg = self.agent_config

        def one(s, run):
            batch = run_utils.sample_windows(self.buffers[s], cfg, cfg["batch_size"] * utd)
            return run_utils.stack_for_utd(batch, utd)

        return self._stacked(one)

    def sample_mixed(self) -> Dict:
        """main_online.py's batches (offline and replay rows, `--offline_ratio`) per seed."""
        cfg, utd, ratio = self.agent_config, self.cfg.utd_ratio, self.cfg.offline_ratio
        return self._stacked(
            lambda s, run: run_utils.sample_mixed_batch(run.train_dataset, self.buffers[s], cfg, utd, ratio)
        )

    # ---- online -------------------------------------------------------------------------------------

    def start_online(self, with_offline_data: bool):
        """Each seed's replay buffer and collector (restored when resuming in the online phase)."""
        self.buffers = [run.replay_buffer(with_offline_data, run.train_dataset) for run in self.runs]
        self.collectors = [run.collector() for run in self.runs]

    @property
    def replay_size(self) -> int:
        return self.buffers[0].size  # one transition per seed per step: the same for every seed

    def collect(self, step_in_phase: int):
        """One environment step per seed with its own policy; finished episodes are logged to its `env` CSV."""
        for s, run in enumerate(self.runs):
            with self.split("env_steps"):
                info = self.collectors[s].step(self.policy_for(s), self.buffers[s])
            if info is not None:
                with self.split("logging"):
                    run.logger.log(run_utils.episode_stats(info), "env", step=run.global_step(step_in_phase, "online"))

    # ---- per-step bookkeeping -------------------------------------------------------------------------

    def start_step(self, phase: str) -> int:
        return self.runs[0].start_step(phase)

    def log_update(self, info: Dict, prefix: str, step: int, rate_key: str, rate: float):
        """Log an update's info to each seed's `<prefix>` CSV with the rate and the time split."""
        self.split.wait()
        with self.split("logging"):
            info = jax.device_get(info)
            extra = {f"time/{rate_key}": rate, **self.split.metrics()}
            for s, run in enumerate(self.runs):
                row = info if self.num_seeds == 1 else {k: np.asarray(v)[s] for k, v in info.items()}
                run.logger.log({**row, **extra}, prefix, step=step)

    def end_of_step(self, step_in_phase: int, phase: str):
        """Checkpoint, then evaluate each seed on their schedules (`run_utils.should_save`, `should_evaluate`).

        The checkpoint comes first, so an evaluation that fails never loses the phase's work.
        """
        phase_steps = self.runs[0].phase_steps(phase)
        save = run_utils.should_save(step_in_phase, phase_steps, self.cfg.save_interval)
        evaluate = run_utils.should_evaluate(step_in_phase, phase_steps, self.cfg.eval_interval)
        if not (save or evaluate):
            return
        self.split.wait()
        for s, run in enumerate(self.runs):
            if s > 0 and run.eval_vector_env is None:
                run.eval_vector_env = self.runs[0].eval_vector_env  # one vector env serves every seed
            agent = self.agent_for(s)
            step = run.global_step(step_in_phase, phase)
            if save:
                with self.split("checkpoints"):
                    run_utils.save_checkpoint(agent, run.run_dir, step=step, phase=phase)
            if evaluate:
                with self.split("evaluation"):
                    run.evaluate(agent, step)

    # ---- run states -----------------------------------------------------------------------------------

    def write_state_if_due(self, step_in_phase: int, phase: str):
        """Write every seed's run state when due; after SIGTERM/SIGUSR1 write it and exit with status 3.

        Due: every `--state_interval` steps of a phase, at the end of the offline phase when an online
        phase follows, and at any step after a preemption signal (every step is a safe point: an
        episode in progress is saved as its actions and replayed on resume). Never at the run's last
        step (`finish` marks the run done instead).
        """
        if os.environ.get("QC_TEST_SIGNAL_AT") == f"{phase}:{step_in_phase}":  # tests: a preemption signal here
            os.kill(os.getpid(), signal.SIGTERM)
        cfg = self.cfg
        if cfg.state_interval > 0 and step_in_phase % cfg.state_interval == 0:
            self._state_pending = True
        end_of_offline = phase == "offline" and step_in_phase == cfg.offline_steps
        if end_of_offline and cfg.online_steps > 0:
            self._state_pending = True
        last = (phase == "online" and step_in_phase == cfg.online_steps) or (end_of_offline and cfg.online_steps == 0)
        preempted = self.preemption is not None and self.preemption.raised
        if (self._state_pending or preempted) and not last:
            self.split.wait()
            with self.split("checkpoints"):
                self.write_states(step_in_phase, phase)
            self._state_pending = False
            if preempted:
                self._exit_preempted(step_in_phase, phase)
        kill_at = os.environ.get("QC_TEST_KILL_AT")  # tests: SIGKILL at "<phase>:<step>", after this step
        if kill_at == f"{phase}:{step_in_phase}":
            os.kill(os.getpid(), signal.SIGKILL)

    def write_states(self, step_in_phase: int, phase: str):
        """Every seed's state at this step; old states are pruned only once all seeds have written."""
        paths = []
        for s, run in enumerate(self.runs):
            buffer = self.buffers[s] if phase == "online" else None
            collector = self.collectors[s] if phase == "online" else None
            paths.append(run.write_state(self.agent_for(s), step_in_phase, phase, buffer, collector))
        for run in self.runs:
            run_state.prune_states(run.run_dir, self.cfg.keep_states)
        logging.info("Run state written: %s", ", ".join(paths))

    def _exit_preempted(self, step_in_phase: int, phase: str):
        for signum in run_state.PREEMPTION_SIGNALS:  # a further signal must not turn status 3 into 143
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
            run_state.EXIT_PREEMPTED,
            how,
        )
        for run in self.runs:
            run.logger.close()
        sys.exit(run_state.EXIT_PREEMPTED)

    def finish(self):
        """Mark every seed's run done (`DONE.json`), close the loggers and the evaluation envs."""
        for run in self.runs:
            run.finish()
        self.runs[0].close_envs()


def setup_group(cfg: run_utils.RunConfig, preemption=None) -> SeedGroup:
    """Build the runs of seeds `cfg.seed .. cfg.seed + cfg.num_seeds - 1` (`run_utils.setup_runs`)."""
    return SeedGroup(run_utils.setup_runs(cfg), preemption=preemption)
