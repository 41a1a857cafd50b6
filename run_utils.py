"""The drivers' kit: what main.py and main_online.py share, written once.

* Command line: `define_common_flags` (every flag with its help text), `parse_flags`
  (absl `flags_parser`: a bad flag, an unknown `--agent.KEY` or a stray word ends the run with
  one `error:` line and exit status 2), `RunConfig` (the typed run settings, built and
  checked once from the flags), `run_cli`.
* Errors: `InputError` is a bad input found before training (flags, agent config, data
  files, rendering); `run_cli` prints it as one line. Anything raised once training has
  started keeps its traceback.
* Setup: `setup_runs` -> one `Run` per seed (envs, datasets, agent, run directory,
  `flags.json` with the resolved agent config and the task that runs, CSV/wandb logger).
* Loop pieces: `sample_windows` (the one place batches are drawn, with `horizon_length`
  and `discount` read from the agent config), `sample_mixed_batch`,
  `Run.evaluate`, `Run.write_state`, `OnlineCollector`; the loop's per-step schedule (checkpoint,
  then evaluation, then run state) is `seed_group.SeedGroup`'s.

Random streams come from `utils.seeding` (one split of `--seed`, no aliasing).
"""

import contextlib
import dataclasses
import difflib
import importlib.util
import json
import os
import re
import shutil
import sys
import time
from typing import Dict, List, Optional

import jax
import numpy as np
from absl import flags, logging

import presets
import run_state
from agents import agents
from evaluation import ActionQueue, Policy, evaluate
from log_utils import Logger, get_exp_name, make_run_dir, setup_wandb, write_json
from utils import seeding
from utils.datasets import Dataset, ReplayBuffer
from utils.flax_utils import CheckpointError, save_agent

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.abspath(__file__))
AGENT_FILES = {"acfql": os.path.join(ROOT, "agents", "acfql.py"), "acrlpd": os.path.join(ROOT, "agents", "acrlpd.py")}
# The drivers: their default agent and the flags only they have.
DRIVERS = {"main": "acfql", "main_online": "acrlpd"}
DEFAULT_ENV = "cube-double-play-singletask-task2-v0"


class InputError(Exception):
    """A bad input found before training: a flag, the agent config, a data file, rendering.

    `run_cli` prints it as one `error: <message>` line and exits with status 2.
    """


@contextlib.contextmanager
def input_errors():
    """Turn the input errors raised inside the block into `InputError`.

    `ValueError` (bad value, config or data file), `FileNotFoundError` (missing dataset),
    `ImportError` (missing optional extra) and `CheckpointError` become one-line errors.
    Use it only around setup: errors raised during training must keep their traceback.
    """
    try:
        yield
    except InputError:
        raise
    except (ValueError, FileNotFoundError, ImportError, CheckpointError) as e:
        raise InputError(str(e)) from e


def _exit_with_error(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# ------------------------------------------------------------------------------------------------ flags


def define_flags(driver: str, flag_values=FLAGS):
    """Define every flag of `driver` (`'main'` or `'main_online'`) in `flag_values`.

    Call once at import time of a driver (tests pass their own `flags.FlagValues()`).
    """
    from ml_collections import config_flags

    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {sorted(DRIVERS)}, got {driver!r}.")
    default_agent, default_env = AGENT_FILES[DRIVERS[driver]], DEFAULT_ENV
    fv = {"flag_values": flag_values}
    if driver == "main":
        flags.DEFINE_integer(
            "offline_steps", 1000000, "Number of offline gradient steps (0: skip the offline phase).", **fv
        )
    else:
        flags.DEFINE_float(
            "offline_ratio",
            0.5,
            "Fraction of each batch drawn from the offline data (the rest "
            "from the replay buffer); floor(offline_ratio * batch_size) rows, exact for odd batch "
            "sizes.",
            **fv,
        )
    methods = "|".join(presets.METHODS[driver])
    flags.DEFINE_string(
        "method",
        None,
        f"Paper method by name ({methods}): sets the flags and agent keys that "
        "define it and the paper's per-domain values for --env_name (presets.py); flags passed "
        "explicitly win, except one that turns the run into another method (an error).",
        **fv,
    )
    flags.DEFINE_integer(
        "num_seeds",
        1,
        "Train this many independent runs in one process, seeds --seed .. --seed+num_seeds-1: the agents are "
        "stacked and updated by one jitted step (see --seed_batching); each seed keeps its own environments, "
        "samplers, random streams, evaluation and run directory (<run_name>_sd<seed> when --run_name is given).",
        **fv,
    )
    flags.DEFINE_enum(
        "seed_batching",
        "auto",
        ["auto", "vmap", "map"],
        "With --num_seeds > 1: how one compiled update covers the seeds. vmap: batched matrix products (fills a "
        "GPU); map: the seeds one after another inside the call (lax.map: single-seed kernels, bit-identical to "
        "single-seed runs; what a CPU wants); auto: vmap on an accelerator, map on CPU.",
        **fv,
    )
    if driver == "main":
        flags.DEFINE_integer(
            "updates_per_dispatch",
            1,
            "Offline gradient steps per host call (one lax.scan). 1: host sampling, one step per call (the "
            "reference loop). k > 1: windows are sampled on the device from a device-resident copy of the dataset "
            "(host sampling with a prefetching thread when it does not fit); a dispatch never runs past a "
            "logging, evaluation, checkpoint, state or shard step.",
            **fv,
        )
        flags.DEFINE_enum(
            "offline_sampler",
            "auto",
            ["auto", "device", "host"],
            "With --updates_per_dispatch > 1: where offline windows are drawn. device: on the device from a "
            "device-resident copy of the dataset (other random numbers than host, same distribution); host: the "
            "dataset's own generator in a prefetching thread (exactly the batches of --updates_per_dispatch=1); "
            "auto: device when the dataset fits in half the free device memory, else host.",
            **fv,
        )
    flags.DEFINE_string("run_group", "Debug", "wandb group and sub-folder of --save_dir for this run.", **fv)
    flags.DEFINE_string(
        "run_name",
        None,
        "Name of the run directory (<save_dir>/<run_group>/<run_name>) and of the wandb run; an existing one is "
        "an error. Default: <timestamp>_<env_name>_sd<seed>_<8 random hex digits>, unique across hosts.",
        **fv,
    )
    flags.DEFINE_integer(
        "seed",
        0,
        "Random seed in [0, 2**32); every random stream of the run (agent, samplers, "
        "environments, evaluation) is derived from it (utils/seeding.py).",
        **fv,
    )
    flags.DEFINE_string(
        "env_name",
        default_env,
        "Environment (and dataset) name, e.g. cube-double-play-singletask-task2-v0 or lift-mh-low_dim.",
        **fv,
    )
    flags.DEFINE_bool(
        "resume",
        False,
        "With --run_name: continue that run from its latest complete state (<run_dir>/state/), exactly as if it had "
        "never stopped; start it fresh when it has none. A finished run (DONE.json) is left alone.",
        **fv,
    )
    flags.DEFINE_integer(
        "state_interval",
        50000,
        "Write the full run state (agent, replay buffer, every random stream, loggers) every this many steps of "
        "each phase and at the end of each phase (0: only at phase ends and on SIGTERM/SIGUSR1).",
        **fv,
    )
    flags.DEFINE_integer("keep_states", 2, "Number of complete run states kept in <run_dir>/state/ (>= 1).", **fv)
    flags.DEFINE_string(
        "sweep_info",
        None,
        "JSON written by scripts/sweep.py: the sweep's name and this run's swept values (recorded in flags.json "
        "and the wandb config).",
        **fv,
    )
    flags.DEFINE_string("save_dir", "exp/", "Root directory of run outputs (CSV logs, flags.json, checkpoints).", **fv)
    flags.DEFINE_integer("online_steps", 1000000, "Number of online environment steps.", **fv)
    flags.DEFINE_integer("buffer_size", 2000000, "Replay buffer capacity in transitions.", **fv)
    flags.DEFINE_integer("log_interval", 5000, "Log training metrics every this many steps.", **fv)
    flags.DEFINE_integer(
        "eval_interval",
        100000,
        "Evaluate every this many steps of each phase (0: only at the end of each phase).",
        **fv,
    )
    flags.DEFINE_integer("eval_episodes", 50, "Number of evaluation episodes (success rate = mean over them).", **fv)
    flags.DEFINE_integer(
        "eval_envs",
        10,
        "Evaluation episodes run on this many environments in lockstep (gymnasium vector env), one batched "
        "policy call per chunk boundary for all of them; the statistics equal those of one-by-one evaluation "
        "with the same seeds. 1: one environment, episodes one after the other.",
        **fv,
    )
    flags.DEFINE_enum(
        "eval_env_mode",
        "auto",
        ["auto", "sync", "async"],
        "How the --eval_envs environments step: sync (in this process), async (one subprocess each), auto "
        "(evaluation.make_eval_vector_env's rule: async where the machine has cores to spare).",
        **fv,
    )
    flags.DEFINE_integer(
        "video_episodes",
        0,
        "Number of extra rendered evaluation episodes (logged to wandb); "
        "needs a headless OpenGL backend (MUJOCO_GL=egl or osmesa), checked at start-up.",
        **fv,
    )
    flags.DEFINE_integer("video_frame_skip", 3, "Keep every this-many-th frame in evaluation videos.", **fv)
    flags.DEFINE_integer(
        "save_interval",
        -1,
        "Save an agent checkpoint every this many steps (<= 0: only at the end of each phase).",
        **fv,
    )
    flags.DEFINE_integer("start_training", 5000, "Online environment step at which gradient updates start.", **fv)
    flags.DEFINE_integer(
        "utd_ratio",
        1,
        "Update-to-data ratio: gradient steps per online environment step, "
        "run as one lax.scan over UTD stacked batches.",
        **fv,
    )
    flags.DEFINE_integer(
        "horizon_length",
        5,
        "Action chunk length h (1: no chunking, plain single-step RL); "
        "copied into the agent config, which owns it from then on.",
        **fv,
    )
    flags.DEFINE_bool(
        "sparse",
        False,
        "Sparse reward r -> -(r != 0), applied to the offline data and to every "
        "online reward (the paper uses it for scene and puzzle-3x3).",
        **fv,
    )
    flags.DEFINE_enum(
        "success_timing",
        "post",
        ["post", "pre"],
        "OGBench: when reward and success are computed, "
        "online and in the offline relabelling alike. post: from the state after the step (ogbench "
        "1.1.2, the paper's numbers); pre: from the state before it (ogbench 1.2.2's default).",
        **fv,
    )
    flags.DEFINE_enum(
        "dataset_success_timing",
        "pre",
        ["pre", "post"],
        "OGBench: the state the offline rewards "
        "and masks of transition t are relabelled from. pre: s_t (ogbench's loader in every version, "
        "so the paper's data); post: s_{t+1} (agrees with --success_timing=post online).",
        **fv,
    )
    flags.DEFINE_bool(
        "stop_reward_at_mask_zero",
        False,
        "Corrected chunk reward sums: stop each window's "
        "discounted sum after the first step whose mask is 0 (False: the reference's sums, which "
        "keep adding). Applied to the offline data and the online replay buffer alike.",
        **fv,
    )
    flags.DEFINE_float("dataset_proportion", 1.0, "Use only the first this fraction of the offline dataset.", **fv)
    flags.DEFINE_integer(
        "dataset_replace_interval",
        1000,
        "With --ogbench_dataset_dir holding several npz shards: load the next shard every this many steps (0: never).",
        **fv,
    )
    flags.DEFINE_string(
        "ogbench_dataset_dir",
        None,
        "Dataset directory: OGBench npz files (default "
        "~/.ogbench/data; a directory of shards is cycled, see --dataset_replace_interval), or "
        "for robomimic a root used in place of ~/.robomimic.",
        **fv,
    )
    flags.DEFINE_string(
        "dataset_path",
        None,
        "Explicit path of one dataset file, an OGBench npz or a robomimic hdf5 (overrides --ogbench_dataset_dir).",
        **fv,
    )
    flags.DEFINE_enum(
        "wandb_mode",
        "disabled",
        ["online", "offline", "disabled"],
        "wandb mode: online needs an account and network; offline writes locally; disabled logs to CSV only.",
        **fv,
    )
    flags.DEFINE_string("wandb_project", "qc", "wandb project name.", **fv)
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars.", **fv)
    try:  # ml_collections applies the --agent.KEY overrides of sys.argv here, at definition time
        config_flags.DEFINE_config_file(
            "agent",
            default_agent,
            "Agent config file; override keys with --agent.KEY=VALUE (e.g. --agent.actor_num_samples=32).",
            lock_config=False,
            **fv,
        )
    except Exception as e:  # noqa: BLE001 - every failure here is a bad command line
        if os.environ.get("QC_DEBUG"):
            raise
        _exit_with_error(_config_flag_message(e, sys.argv, driver))


def _load_get_config(path: str):
    spec = importlib.util.spec_from_file_location(f"_qc_agent_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def _agent_file(argv: List[str], driver: str) -> str:
    for arg in argv[1:]:
        m = re.match(r"^--?agent=(.*)$", arg)
        if m:
            return m.group(1)
    return AGENT_FILES[DRIVERS[driver]]


def _expanded_argv(argv: List[str]) -> List[str]:
    """`argv` with `--flagfile=FILE` contents spliced in (as absl reads them); `argv` when that fails."""
    try:
        return flags.FLAGS.read_flags_from_files(list(argv), force_gnu=False)
    except Exception:  # noqa: BLE001 - an unreadable flagfile is reported by the caller's own error
        return list(argv)


def _config_flag_message(error: Exception, argv: List[str], driver: str) -> str:
    """One line for a failure while ml_collections builds `--agent` (its file and `--agent.*` overrides)."""
    argv = _expanded_argv(argv)
    if isinstance(error, flags.Error):  # a value of the wrong type
        return str(error)
    path = _agent_file(argv, driver)
    try:
        _load_get_config(path)
    except Exception as e:  # noqa: BLE001 - the config file itself is broken
        return f"--agent={path}: cannot load the agent config file ({type(e).__name__}: {e})."
    unknown = _unknown_agent_key_message(argv, driver)
    if unknown is not None and isinstance(error, (AttributeError, KeyError)):
        return unknown
    overrides = [a for a in argv[1:] if re.match(r"^--?(?:no)?agent\.", a)]
    return (
        f"bad --agent override among {overrides} ({type(error).__name__}: {error}); the form is "
        "--agent.KEY=VALUE with KEY one of the agent's config keys (e.g. --agent.actor_hidden_dims=(256,256))."
    )


def _unknown_agent_key_message(argv: List[str], driver: str) -> Optional[str]:
    """The message for the first `--agent.KEY` that the driver's agent config does not have.

    `argv` is already expanded (`_expanded_argv`).
    """
    try:
        own = _load_get_config(_agent_file(argv, driver))
    except Exception:  # noqa: BLE001 - the config file itself is broken: let absl's message stand
        return None
    own_name = own.get("agent_name", "this")
    for arg in argv[1:]:
        m = re.match(r"^--?(?:no)?agent\.([A-Za-z0-9_]+)", arg)
        if m is None or m.group(1) in own:
            continue
        key = m.group(1)
        message = f"--agent.{key}: the {own_name} agent has no config key {key!r}"
        for name, path in AGENT_FILES.items():
            if name != own_name and key in _load_get_config(path):
                driver = "main_online.py" if name == "acrlpd" else "main.py"
                message += f" (it is a key of the {name} agent, which {driver} runs)"
        close = difflib.get_close_matches(key, list(own.keys()), n=1)
        if close:
            message += f"; did you mean --agent.{close[0]}?"
        else:
            message += f"; its keys are {sorted(own.keys())}."
        return message
    return None


def _leftover_message(argv: List[str], leftovers: List[str], flag_values) -> str:
    """Name the stray words; after a boolean flag, show its accepted forms."""

    def boolean_name(token):
        """The flag name when `token` is a boolean flag written without '=' (`--x`, `--nox`), else None."""
        if not token.startswith("-") or "=" in token:
            return None
        name = token.lstrip("-")
        for candidate in (name, name[2:] if name.startswith("no") else None):
            if candidate and candidate in flag_values and flag_values[candidate].boolean:
                return candidate
        return None

    def consumes_next(token):
        """True for a non-boolean flag written without '=': absl takes the next word as its value."""
        name = token.lstrip("-")
        return token.startswith("-") and "=" not in token and name in flag_values and not flag_values[name].boolean

    hints, taken = [], set()
    for word in leftovers:
        candidates = [i for i in range(1, len(argv)) if argv[i] == word and i not in taken]
        after_boolean = [i for i in candidates if i > 1 and boolean_name(argv[i - 1])]
        free = [i for i in candidates if not (i > 1 and consumes_next(argv[i - 1]))]
        index = (after_boolean or free or candidates or [None])[0]
        if index is None:  # the word came from a --flagfile
            continue
        taken.add(index)
        previous = argv[index - 1] if index > 1 else ""
        base = boolean_name(previous)
        if base is not None:
            value = word.lower() if word.lower() in ("true", "false", "1", "0") else "false"
            hints.append(
                f"{previous} {word}: a boolean takes its value after '=': --{base}={value} (or --{base} / --no{base})"
            )
    words = " ".join(repr(w) for w in leftovers)
    message = f"unexpected word(s) on the command line: {words}"
    if hints:
        return message + ". " + "; ".join(hints) + "."
    return message + ". Every flag takes its value after '=' (--name=value; booleans also --name / --noname)."


def parse_flags(argv: List[str], driver: str, flag_values=FLAGS) -> List[str]:
    """Parse `argv` into `flag_values` or end with one `error:` line and exit status 2.

    Drivers pass `functools.partial(parse_flags, driver=...)` to `app.run` as `flags_parser`.

    Ends the run for: an unknown flag or a value of the wrong type (absl's message); an unknown
    `--agent.KEY` (naming the key, the agent that has it and the closest valid key); any word
    left over after parsing, e.g. `--sparse False` (absl reads `--sparse` as true and leaves
    `False` over), with the accepted forms `--sparse=false` / `--nosparse`.
    """
    try:
        rest = flag_values(argv)
    except Exception as e:  # noqa: BLE001 - absl's flags.Error, ml_collections' errors, unreadable flagfiles
        if os.environ.get("QC_DEBUG"):
            raise
        _exit_with_error(_config_flag_message(e, argv, driver))
    try:  # ml_collections defers a config file that failed to load to its first use: use it now
        flag_values.agent.to_dict()
    except Exception as e:  # noqa: BLE001
        if os.environ.get("QC_DEBUG"):
            raise
        _exit_with_error(_config_flag_message(e, argv, driver))
    expanded = _expanded_argv(argv)
    if len(rest) > 1:
        _exit_with_error(_leftover_message(expanded, rest[1:], flag_values))
    # ml_collections joins repeated tuple overrides ((16,16) then 512 -> (16,16,512)) and keeps the last
    # of repeated scalars: both silently differ from what the user meant.
    keys = [m.group(1) for a in expanded[1:] if (m := re.match(r"^--?(?:no)?agent\.([^=]+)", a))]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        _exit_with_error(f"--agent.{repeated[0]} is given {keys.count(repeated[0])} times; give each --agent key once.")
    return rest


def run_cli(main_fn):
    """Wrap a driver's `main`: an `InputError` prints `error: <message>` and exits with 2.

    Only input errors found before training get this form; every other exception keeps its
    traceback. `QC_DEBUG=1` re-raises input errors too (with the traceback).
    """

    def wrapped(argv):
        try:
            return main_fn(argv)
        except RunFinished as e:
            print(f"{e} has finished (DONE.json); nothing to resume.", file=sys.stderr)
            return 0
        except InputError as e:
            if os.environ.get("QC_DEBUG"):
                raise
            _exit_with_error(str(e))

    return wrapped


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The run's settings, built and checked once from the flags (`from_flags`).

    `agent` is the agent config as a plain dict with `horizon_length` set; it owns
    `horizon_length` and `discount` from then on (the drivers read them only from there).
    `offline_steps` is 0 and `offline_ratio` None for main_online.py, which has no such flags.
    """

    driver: str
    env_name: str
    seed: int
    run_group: str
    run_name: Optional[str]
    resume: bool
    state_interval: int
    keep_states: int
    sweep_info: Optional[str]
    save_dir: str
    online_steps: int
    buffer_size: int
    log_interval: int
    eval_interval: int
    eval_episodes: int
    eval_envs: int
    eval_env_mode: str
    video_episodes: int
    video_frame_skip: int
    save_interval: int
    start_training: int
    utd_ratio: int
    sparse: bool
    success_timing: str
    dataset_success_timing: str
    stop_reward_at_mask_zero: bool
    dataset_proportion: float
    dataset_replace_interval: int
    ogbench_dataset_dir: Optional[str]
    dataset_path: Optional[str]
    wandb_mode: str
    wandb_project: str
    progress: bool
    agent: Dict
    offline_steps: int = 0
    offline_ratio: Optional[float] = None
    num_seeds: int = 1
    seed_batching: str = "auto"
    updates_per_dispatch: int = 1
    offline_sampler: str = "auto"
    method: Optional[str] = None
    # With --method: each preset setting -> "preset" or "command line" (recorded in flags.json).
    setting_sources: Dict = dataclasses.field(default_factory=dict)

    @property
    def horizon_length(self) -> int:
        return self.agent["horizon_length"]

    @property
    def flag_values(self) -> Dict:
        """Every setting but the agent config, plus `horizon_length` (for `flags.json`)."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("agent", "setting_sources")}
        return {**values, "horizon_length": self.horizon_length}

    @classmethod
    def from_flags(cls, flag_values, driver: str) -> "RunConfig":
        """Build from parsed absl flags; raises `InputError` for every bad value."""
        with input_errors():
            skip = ("driver", "agent", "setting_sources")
            names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
            values = {name: getattr(flag_values, name) for name in names if name in flag_values}
            config = flag_values.agent.copy_and_resolve_references().to_dict()
            # --agent.horizon_length alone counts as --horizon_length; both must agree.
            agent_h, flag_h = config.get("horizon_length"), flag_values.horizon_length
            if agent_h is not None and flag_values["horizon_length"].present and agent_h != flag_h:
                raise ValueError(
                    f"--agent.horizon_length={agent_h} disagrees with --horizon_length={flag_h}; set only "
                    "--horizon_length."
                )
            if agent_h is None:
                config["horizon_length"] = flag_h
            sources = {}
            if values.get("method") is not None:
                sources = _apply_method(driver, flag_values, values, config)
            from envs.env_utils import warn_if_dense_on_sparse_domain

            warn_if_dense_on_sparse_domain(values["env_name"], values["sparse"])
            run_config = cls(driver=driver, agent=config, setting_sources=sources, **values)
            run_config.validate()
        return run_config

    def validate(self):
        """Raise `ValueError` naming the flag for every out-of-range value or impossible run."""
        seeding.check_seed(self.seed)
        if self.num_seeds < 1:
            raise ValueError(f"--num_seeds={self.num_seeds} must be >= 1.")
        if self.seed + self.num_seeds > seeding.SEED_LIMIT:
            raise ValueError(
                f"--seed={self.seed} --num_seeds={self.num_seeds}: the last seed, {self.seed + self.num_seeds - 1}, "
                "is outside [0, 2**32)."
            )
        if self.updates_per_dispatch < 1:
            raise ValueError(f"--updates_per_dispatch={self.updates_per_dispatch} must be >= 1.")
        if self.offline_sampler == "device" and self.updates_per_dispatch == 1 and self.offline_steps > 0:
            raise ValueError(
                "--offline_sampler=device needs --updates_per_dispatch > 1 (with 1 the offline phase is the "
                "reference's host loop); pass e.g. --updates_per_dispatch=100, or drop --offline_sampler."
            )
        checks = [
            ("offline_steps", self.offline_steps >= 0, "must be >= 0"),
            ("online_steps", self.online_steps >= 0, "must be >= 0"),
            ("buffer_size", self.buffer_size >= 1, "must be >= 1"),
            ("log_interval", self.log_interval >= 1, "must be >= 1"),
            ("eval_interval", self.eval_interval >= 0, "must be >= 0"),
            ("eval_episodes", self.eval_episodes >= 0, "must be >= 0"),
            ("eval_envs", self.eval_envs >= 1, "must be >= 1"),
            ("video_episodes", self.video_episodes >= 0, "must be >= 0"),
            ("video_frame_skip", self.video_frame_skip >= 1, "must be >= 1"),
            ("start_training", self.start_training >= 0, "must be >= 0"),
            ("utd_ratio", self.utd_ratio >= 1, "must be >= 1"),
            ("horizon_length", isinstance(self.horizon_length, int) and self.horizon_length >= 1, "must be >= 1"),
            ("dataset_proportion", 0.0 < self.dataset_proportion <= 1.0, "must be in (0, 1]"),
            ("dataset_replace_interval", self.dataset_replace_interval >= 0, "must be >= 0"),
        ]
        if self.offline_ratio is not None:
            checks.append(("offline_ratio", 0.0 <= self.offline_ratio <= 1.0, "must be in [0, 1]"))
        for name, ok, why in checks:
            if not ok:
                value = self.horizon_length if name == "horizon_length" else getattr(self, name)
                raise ValueError(f"--{name}={value} {why}.")
        agent_name = self.agent.get("agent_name")
        if agent_name not in agents:
            raise ValueError(f"--agent.agent_name={agent_name!r} is not one of {sorted(agents)}.")
        agents[agent_name].check_config(self.agent)
        # A run that can never take a gradient step is a mistake, not a result. Online updates start at
        # step max(start_training, 1), and main_online.py's also wait until the replay buffer holds one
        # window (h rows, one per step) unless every row comes from the offline data.
        first_update = max(self.start_training, 1)
        waits_for_window = self.driver == "main_online" and self.offline_ratio < 1.0
        if waits_for_window:
            first_update = max(first_update, self.horizon_length)
        if self.offline_steps == 0 and self.online_steps < first_update:
            offline = f"--offline_steps={self.offline_steps}, " if self.driver == "main" else ""
            window = f", the first full window of --horizon_length={self.horizon_length}" if waits_for_window else ""
            raise ValueError(
                f"this run takes no gradient step: {offline}--online_steps={self.online_steps}, but the first "
                f"online update is at step {first_update} (the largest of --start_training={self.start_training}, "
                f"1{window})."
            )
        if self.resume and not self.run_name:
            raise ValueError("--resume needs --run_name (the run to continue).")
        if self.state_interval < 0:
            raise ValueError(f"--state_interval={self.state_interval} must be >= 0.")
        if self.keep_states < 1:
            raise ValueError(f"--keep_states={self.keep_states} must be >= 1.")
        if self.sweep_info is not None:
            try:
                info = json.loads(self.sweep_info)
            except json.JSONDecodeError as e:
                raise ValueError(f"--sweep_info is not JSON: {e}") from None
            if not isinstance(info, dict):
                raise ValueError("--sweep_info must be a JSON object.")
        if self.run_name is not None and (
            not self.run_name.strip() or "/" in self.run_name or os.sep in self.run_name or self.run_name in (".", "..")
        ):
            raise ValueError(f"--run_name={self.run_name!r} must be a plain directory name (no '/').")
        if os.path.exists(self.save_dir) and not os.path.isdir(self.save_dir):
            raise ValueError(f"--save_dir={self.save_dir} is a file, not a directory.")
        if self.driver == "main_online" and self.buffer_size < self.horizon_length and self.offline_ratio < 1.0:
            raise ValueError(
                f"--buffer_size={self.buffer_size} can never hold one window of --horizon_length="
                f"{self.horizon_length} rows, so no online batch can be drawn."
            )


def _apply_method(driver: str, flag_values, values: Dict, config: Dict) -> Dict:
    """Fill `values` and `config` from `--method`'s preset; return each setting's source.

    Explicitly passed flags (`present`) and `--agent.KEY` overrides win (presets.resolve
    raises for one that changes the method).
    """
    method_agent = "acfql" if driver == "main" else "acrlpd"
    if config.get("agent_name") != method_agent:
        raise ValueError(
            f"--method={values['method']} runs the {method_agent} agent, but the agent config is "
            f"{config.get('agent_name')!r} (--agent={flag_values['agent'].config_filename}); drop --agent or --method."
        )
    explicit = {name: getattr(flag_values, name) for name in ("horizon_length", "sparse") if flag_values[name].present}
    for key, value in flag_values["agent"].override_values.items():
        explicit[f"agent.{key}"] = value
    if "agent.horizon_length" in explicit:  # counts as --horizon_length (from_flags checked they agree)
        explicit["horizon_length"] = explicit.pop("agent.horizon_length")
    resolved, sources = presets.resolve(driver, values["method"], values["env_name"], explicit)
    for name, value in resolved.items():
        if name.startswith("agent."):
            config[name[len("agent.") :]] = value
        elif name == "horizon_length":
            config["horizon_length"] = value
        else:
            values[name] = value
    logging.info(
        "--method=%s: %s",
        values["method"],
        ", ".join(f"{k}={v} ({sources[k]})" for k, v in {**explicit, **resolved}.items() if k in sources),
    )
    return sources


# ------------------------------------------------------------------------------------------------ setup


@dataclasses.dataclass
class Run:
    """Everything both drivers build for one seed before their loops (`setup_runs`).

    Attributes:
        cfg: the run settings.
        agent: the freshly created agent (`agent.config` is the resolved config).
        env_data: `envs.env_utils.EnvAndDatasets` (envs, datasets, reward transform, shards).
        train_dataset: the offline `Dataset` (its generator is the `dataset` stream).
        run_dir: the run directory; logger: CSV/wandb logger.
        action_dim: size of one environment action; example: one transition (leading axis 1).
        resume_meta: the state being continued (`--resume`), else None.

    Run state (`run_state.py`): `start_step` gives the step each phase starts after, `write_state`
    writes the full state (on the schedule of `seed_group.SeedGroup.write_state_if_due`), and `finish`
    marks the run done (`DONE.json`). The drivers hold their runs in a `seed_group.SeedGroup` (one run
    per seed of `--num_seeds`).
    """

    cfg: RunConfig
    agent: object
    env_data: object
    train_dataset: Dataset
    run_dir: str
    logger: Logger
    action_dim: int
    example: Dict
    resume_meta: Optional[Dict] = None
    # How offline windows are drawn ("host" or "device"; offline_dispatch.py) and, while a prefetching
    # thread owns the dataset's generator, a function giving the state of its next batch for run states.
    sampler_in_use: str = "host"
    sampler_state_fn: Optional[object] = None
    eval_vector_env: Optional[object] = None  # --eval_envs > 1: built at the first evaluation

    # ---- run state -------------------------------------------------------------------------------

    def start_step(self, phase: str) -> int:
        """The last step of `phase` already done: 0 for a fresh run, else taken from the resumed state."""
        meta = self.resume_meta
        if meta is None:
            return 0
        if phase == "offline":
            return meta["step_in_phase"] if meta["phase"] == "offline" else self.cfg.offline_steps
        return meta["step_in_phase"] if meta["phase"] == "online" else 0

    def restore_offline(self, meta: Dict):
        """Agent, offline sampler (and the shard in use) as the state left them."""
        self.agent = meta["agent"]
        shard_index = meta.get("shard_index")
        if shard_index and self.env_data.next_shard is not None:
            self.env_data.next_shard.index = shard_index - 1
            self.train_dataset = Dataset.create(
                **self.env_data.next_shard(),
                rng=self.train_dataset.rng,
                stop_reward_at_mask_zero=self.train_dataset.stop_reward_at_mask_zero,
            )
        run_state.set_generator_state(self.train_dataset.rng, meta["dataset_rng"])

    def replay_buffer(self, with_offline_data: bool, dataset: Dataset) -> ReplayBuffer:
        """The online replay buffer: restored from the resumed state in the online phase, else new."""
        meta = self.resume_meta
        if meta is not None and meta["phase"] == "online":
            buffer = ReplayBuffer(
                meta["buffer_arrays"],
                rng=seeding.numpy_rng(self.cfg.seed, "replay_buffer"),
                stop_reward_at_mask_zero=self.cfg.stop_reward_at_mask_zero,
                size=meta["buffer"]["size"],
                pointer=meta["buffer"]["pointer"],
            )
            run_state.set_generator_state(buffer.rng, meta["buffer_rng"])
            return buffer
        self.train_dataset = dataset
        return make_replay_buffer(self, with_offline_data)

    def collector(self) -> "OnlineCollector":
        """The online collector (`collector` stream), restored from the resumed state in the online phase."""
        collector = OnlineCollector(
            self.env_data.env, self.action_dim, self.env_data.reward_fn, seeding.jax_key(self.cfg.seed, "collector")
        )
        meta = self.resume_meta
        if meta is not None and meta["phase"] == "online":
            collector.restore(meta["collector"])
        return collector

    def write_state(self, agent, step_in_phase: int, phase: str, buffer=None, collector=None) -> str:
        """Write this run's full state now (`run_state.write_state`, no pruning); returns its directory.

        Any step is a safe point: online, the collector saves an episode in progress as its actions
        (`OnlineCollector.state`). The schedule is the group's (`seed_group.SeedGroup.write_state_if_due`).
        """
        meta = {
            "global_step": self.global_step(step_in_phase, phase),
            "phase": phase,
            "step_in_phase": step_in_phase,
            "dataset_rng": self.sampler_state(),
            "offline_sampler": self.sampler_in_use,
            "shard_index": None if self.env_data.next_shard is None else self.env_data.next_shard.index,
            "csv_rows": run_state.csv_row_counts(self.run_dir),
            "wandb_run_id": None if self.logger.wandb_run is None else self.logger.wandb_run.id,
        }
        if phase == "online":
            meta["buffer_rng"] = run_state.generator_state(buffer.rng)
            meta["collector"] = collector.state()
        return run_state.write_state(self.run_dir, meta, agent, buffer if phase == "online" else None, keep=None)

    def sampler_state(self) -> Dict:
        """The offline sampler's generator state for a run state (the next batch it will give)."""
        if self.sampler_state_fn is not None:
            return self.sampler_state_fn()
        return run_state.generator_state(self.train_dataset.rng)

    def close_envs(self):
        """Close the evaluation vector env (its subprocesses in async mode)."""
        if self.eval_vector_env is not None:
            self.eval_vector_env.close()
            self.eval_vector_env = None

    def finish(self):
        """Mark the run done (`DONE.json`: a sweep skips it) and close the logger."""
        write_json(
            os.path.join(self.run_dir, "DONE.json"),
            {"offline_steps": self.cfg.offline_steps, "online_steps": self.cfg.online_steps},
        )
        self.logger.close()

    def phase_steps(self, phase: str) -> int:
        return self.cfg.offline_steps if phase == "offline" else self.cfg.online_steps

    def global_step(self, step_in_phase: int, phase: str) -> int:
        """Offline step i logs as i, online step i as `offline_steps + i`."""
        return step_in_phase + (self.cfg.offline_steps if phase == "online" else 0)

    def evaluate(self, agent, step: int) -> Dict:
        """Evaluate `agent` at global `step` and log it to this run's `eval` CSV (`evaluate_and_log`).

        With `--eval_envs` > 1 the episodes run on `eval_vector_env` (built at the first evaluation;
        a seed group shares one: every episode is reset with its own seed, so the env instance
        does not matter).
        """
        if self.cfg.eval_envs > 1 and self.cfg.eval_episodes > 0 and self.eval_vector_env is None:
            from evaluation import make_eval_vector_env

            self.eval_vector_env = make_eval_vector_env(
                self.env_data.make_eval_env, min(self.cfg.eval_envs, self.cfg.eval_episodes), self.cfg.eval_env_mode
            )
        return evaluate_and_log(
            agent,
            self.env_data.eval_env,
            self.cfg,
            self.logger,
            step=step,
            action_dim=self.action_dim,
            vector_env=self.eval_vector_env,
        )


def trajectory_lengths(terminals: np.ndarray) -> np.ndarray:
    """Rows per trajectory from a 0/1 `terminals` column (the last trajectory may be unterminated)."""
    ends = np.flatnonzero(np.asarray(terminals) > 0)
    bounds = np.concatenate([[-1], ends, [len(terminals) - 1] if len(terminals) and not terminals[-1] else []])
    return np.diff(bounds).astype(int)


def check_dataset_windows(dataset: Dataset, horizon_length: int, what: str = "the offline dataset") -> bool:
    """`ValueError` when `dataset` cannot yield one window of `horizon_length` rows.

    Logs a warning (and returns False) when every trajectory is shorter than `horizon_length`:
    then every window crosses a trajectory end and every critic target has `valid = 0`.
    """
    if dataset.size < horizon_length:
        raise ValueError(
            f"{what} has {dataset.size} rows, fewer than --horizon_length={horizon_length}: no window can be drawn."
        )
    lengths = trajectory_lengths(dataset["terminals"])
    if len(lengths) and lengths.max() < horizon_length:
        logging.warning(
            "Every trajectory of %s is shorter than --horizon_length=%d (longest: %d rows): every critic "
            "target has valid = 0, so the critic never learns.",
            what,
            horizon_length,
            lengths.max(),
        )
        return False
    return True


def check_dataset_fits_env(dataset: Dataset, env, env_name: str, what: str = "the offline dataset"):
    """`ValueError` when the dataset's observation or action rows do not have the env's shapes."""
    for field, space in (("observations", env.observation_space), ("actions", env.action_space)):
        got, want = tuple(dataset[field].shape[1:]), tuple(space.shape)
        if got != want:
            raise ValueError(
                f"{what}: its {field} have shape {got} per row, but {env_name} has {want}; the dataset "
                "belongs to another env."
            )


def check_replay_buffer_memory(cfg: RunConfig, dataset: Dataset):
    """`ValueError` when the replay buffer `--buffer_size` asks for would not fit in this machine's memory."""
    if cfg.online_steps == 0:
        return
    rows = max(cfg.buffer_size, dataset.size + 1) if cfg.driver == "main" else cfg.buffer_size
    row_bytes = sum(int(np.asarray(dataset[k][0]).nbytes) for k in dataset)
    need = rows * row_bytes * cfg.num_seeds  # one buffer per seed
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not available on this OS: no check
        return
    if need > memory:
        seeds = f" x {cfg.num_seeds} seeds" if cfg.num_seeds > 1 else ""
        raise ValueError(
            f"--buffer_size={cfg.buffer_size}: the replay buffer needs about {need / 2**30:.1f} GiB ({rows} rows of "
            f"{row_bytes} bytes{seeds}), more than this machine's {memory / 2**30:.1f} GiB of memory."
        )


def check_rendering(env_name: str, env) -> None:
    """`ValueError` unless `env` can render a frame (needed for `--video_episodes`).

    Robomimic envs are built without a renderer; MuJoCo envs need a headless OpenGL backend.
    """
    from envs.env_utils import is_robomimic_env

    if is_robomimic_env(env_name):
        raise ValueError(
            f"--video_episodes: robomimic envs ({env_name}) are built without a renderer; pass --video_episodes=0."
        )
    try:
        frame = env.render()
    except Exception as e:  # noqa: BLE001 - mujoco.FatalError, GLFW and PyOpenGL errors alike
        raise ValueError(
            f"--video_episodes: rendering failed ({type(e).__name__}: {e}). Set MUJOCO_GL=egl (GPU) or "
            "MUJOCO_GL=osmesa (CPU, needs libosmesa) before starting, or pass --video_episodes=0."
        ) from e
    if frame is None:
        raise ValueError(
            "--video_episodes: the environment returned no frame (no render mode); pass --video_episodes=0."
        )


# Settings that may differ between a run and its resumption.
RESUME_MAY_CHANGE = (
    "resume",
    "progress",
    "state_interval",
    "keep_states",
    "wandb_mode",
    "sweep_info",
    "run_name",
    "num_seeds",
    "seed_batching",
    "updates_per_dispatch",
    "offline_sampler",
    "eval_envs",
    "eval_env_mode",
)
# Flags holding paths: compared after normalisation (`exp` and `exp/` are one directory).
PATH_FLAGS = ("save_dir", "dataset_path", "ogbench_dataset_dir")
# Agent config keys filled in by create(): not set by the user.
FILLED_KEYS = ("ob_dims", "action_dim", "target_entropy")


def _comparable(values: Dict, path_keys=()) -> Dict:
    values = json.loads(json.dumps(values))
    for k in path_keys:
        if values.get(k):
            values[k] = os.path.normpath(os.path.abspath(os.path.expanduser(values[k])))
    return values


class RunFinished(Exception):
    """`--resume` of a run that has finished (its `DONE.json` exists): nothing to do."""


def setup_run(cfg: RunConfig, agent_config: Dict, metadata: Dict, resume_meta: Optional[Dict] = None):
    """Create `<save_dir>/<run_group>/<exp_name>/`, write `flags.json`, return `(run_dir, logger)`.

    `flags.json`: `flags` (every setting), `agent` (the config the agent was built with:
    `horizon_length`, `ob_dims`, `action_dim` filled in) and `metadata` entries (ogbench
    version, reward timing, the task id that runs). With `--resume` the run directory of `--run_name`
    is used as it is (`resume_meta`: the state being continued, whose CSV rows and wandb id are kept).
    """
    parent = os.path.join(cfg.save_dir, cfg.run_group)
    if cfg.resume:
        exp_name = cfg.run_name
        run_dir = os.path.join(parent, exp_name)
        os.makedirs(run_dir, exist_ok=True)
    elif cfg.run_name:
        exp_name = cfg.run_name
        try:
            run_dir = make_run_dir(parent, exp_name)
        except FileExistsError:
            raise ValueError(
                f"--run_name={exp_name}: {os.path.join(parent, exp_name)} exists already (another run's files are "
                "never overwritten); choose another --run_name or --run_group."
            ) from None
    else:
        for _ in range(10):  # a name collision needs the same second and the same 32 random bits
            exp_name = get_exp_name(cfg.env_name, cfg.seed)
            try:
                run_dir = make_run_dir(parent, exp_name)
                break
            except FileExistsError:
                continue
        else:
            raise RuntimeError(f"could not create a new run directory in {parent}")
    record = {"flags": cfg.flag_values, "agent": dict(agent_config), **metadata}
    if cfg.sweep_info is not None:
        record["sweep"] = json.loads(cfg.sweep_info)
        if "seed" in record["sweep"]:  # a seed group launched by a sweep: each run records its own seed
            record["sweep"]["seed"] = cfg.seed
    if cfg.method is not None:
        record["method"] = {"name": cfg.method, "sources": cfg.setting_sources}
    write_json(os.path.join(run_dir, "flags.json"), record)
    run_id = (resume_meta or {}).get("wandb_run_id")
    if run_id and cfg.wandb_mode == "offline":
        logging.warning("wandb offline mode cannot continue run %s; this part of the run gets a new wandb run.", run_id)
        run_id = None
    wandb_run = setup_wandb(cfg.wandb_project, cfg.run_group, exp_name, record, cfg.wandb_mode, run_dir, run_id=run_id)
    logging.info("Run directory: %s", run_dir)
    return run_dir, Logger(run_dir, wandb_run, resume=resume_meta is not None)


def _resume_point(cfg: RunConfig) -> Optional[str]:
    """The state to continue with `--resume` (None: start fresh); `RunFinished` for a finished run.

    Raises `ValueError` when the existing run was started with other settings.
    """
    if not cfg.resume:
        return None
    run_dir = os.path.join(cfg.save_dir, cfg.run_group, cfg.run_name)
    if os.path.isfile(os.path.join(run_dir, "DONE.json")):
        raise RunFinished(run_dir)
    flags_path = os.path.join(run_dir, "flags.json")
    if os.path.isfile(flags_path):
        with open(flags_path) as f:
            record = json.load(f)
        old, new = _comparable(record.get("flags", {}), PATH_FLAGS), _comparable(cfg.flag_values, PATH_FLAGS)
        changed = [
            f"--{k}" for k in sorted(set(old) | set(new)) if k not in RESUME_MAY_CHANGE and old.get(k) != new.get(k)
        ]
        before = [old.get(k[2:]) for k in changed]
        now = [new.get(k[2:]) for k in changed]
        old_agent, new_agent = _comparable(record.get("agent", {})), _comparable(cfg.agent)
        for k in sorted(new_agent):
            if k not in FILLED_KEYS and new_agent[k] is not None and old_agent.get(k) != new_agent[k]:
                changed.append(f"--agent.{k}")
                before.append(old_agent.get(k))
                now.append(new_agent[k])
        if changed:
            raise ValueError(
                f"--resume: {run_dir} was started with other settings ({', '.join(changed)}: {before} then, {now} "
                "now); resume it with the same flags, or start another --run_name."
            )
    return run_dir


def seed_configs(cfg: RunConfig) -> List[RunConfig]:
    """One `RunConfig` per seed of `--num_seeds`: seed `cfg.seed + s`, run name `<run_name>_sd<seed>`.

    With `num_seeds == 1` this is `[cfg]` (the run name is kept as given).
    """
    if cfg.num_seeds == 1:
        return [cfg]
    if cfg.run_name and re.search(r"_sd\d+$", cfg.run_name):
        logging.warning(
            "--run_name=%s already ends in _sd<seed>; with --num_seeds=%d the runs are %s_sd<seed>. To resume one "
            "seed of a group, pass --num_seeds=1 --seed=<its seed> and its directory name.",
            cfg.run_name,
            cfg.num_seeds,
            cfg.run_name,
        )
    configs = []
    for s in range(cfg.num_seeds):
        seed = cfg.seed + s
        name = None if cfg.run_name is None else f"{cfg.run_name}_sd{seed}"
        configs.append(dataclasses.replace(cfg, seed=seed, run_name=name))
    return configs


def _group_resume_states(configs: List[RunConfig], agents_: List, datasets: List[Dataset]) -> List[Optional[Dict]]:
    """The states to continue, one per seed, all at one step: the newest step every seed has whole.

    None for every seed when a fresh start is due (no such step). Locks every run directory.
    """
    finished = [
        c.run_name for c in configs if os.path.isfile(os.path.join(c.save_dir, c.run_group, c.run_name, "DONE.json"))
    ]
    if finished and len(finished) < len(configs):
        raise ValueError(
            f"--resume: runs {finished} of this seed group have finished and the others have not; resume each "
            "unfinished run alone (--num_seeds=1 --seed=<its seed> --run_name=<its name>)."
        )
    if finished:
        raise RunFinished(", ".join(os.path.join(c.save_dir, c.run_group, c.run_name) for c in configs))
    dirs = [_resume_point(c) for c in configs]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        run_state.lock_run_dir(d)
    if len(configs) == 1:
        metas = [run_state.read_latest_usable_state(dirs[0], agents_[0], datasets[0])]
    else:
        metas = [None] * len(configs)
        common = set.intersection(*[set(run_state.state_steps(d)) for d in dirs])
        for step in sorted(common, reverse=True):
            candidate = [
                run_state.read_usable_state(d, step, a, ds) for d, a, ds in zip(dirs, agents_, datasets, strict=True)
            ]
            if all(m is not None for m in candidate):
                metas = candidate
                break
    for d, meta in zip(dirs, metas, strict=True):
        if meta is not None:
            run_state.truncate_csvs(d, meta["csv_rows"])
            logging.info("Resuming from %s (%s step %d)", meta["path"], meta["phase"], meta["step_in_phase"])
        else:
            logging.warning("--resume: %s has no complete run state; starting it fresh.", d)
            shutil.rmtree(os.path.join(d, "state"), ignore_errors=True)  # a fresh start
    return metas


def setup_runs(cfg: RunConfig) -> List[Run]:
    """Build envs and datasets, check them, create the agents, write the run directories.

    One `Run` per seed of `--num_seeds` (`seed_configs`): the offline data is loaded once and shared
    (read-only arrays); each seed gets its own environments, samplers and agent, seeded from its own
    seed. Every input error (missing or bad data file, a dataset with no window of `horizon_length`,
    rendering that cannot work) is raised as `InputError` before training starts.
    """
    from envs.env_utils import envs_for_seed, make_env_and_datasets

    configs = seed_configs(cfg)
    with input_errors():
        try:
            env_data = make_env_and_datasets(
                cfg.env_name,
                dataset_path=cfg.dataset_path,
                dataset_dir=cfg.ogbench_dataset_dir,
                dataset_proportion=cfg.dataset_proportion,
                sparse=cfg.sparse,
                seed=cfg.seed,
                success_timing=cfg.success_timing,
                dataset_success_timing=cfg.dataset_success_timing,
            )
        except (AttributeError, RuntimeError) as e:
            if "MUJOCO_GL" not in os.environ:
                raise
            raise ValueError(
                f"creating the environment failed with MUJOCO_GL={os.environ['MUJOCO_GL']} ({type(e).__name__}: "
                f"{e}); unset MUJOCO_GL, or install the library it needs (osmesa: libosmesa6, egl: libegl1)."
            ) from e
        data_files = [d["path"] for d in env_data.metadata.get("datasets", []) if d.get("role", "train") == "train"]
        what = f"dataset {data_files[0]}" if data_files else "the offline dataset"
        try:
            first_dataset = Dataset.create(
                **env_data.train_dataset,
                rng=seeding.numpy_rng(cfg.seed, "dataset"),
                stop_reward_at_mask_zero=cfg.stop_reward_at_mask_zero,
            )
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from e
        check_dataset_fits_env(first_dataset, env_data.env, cfg.env_name, what)
        check_dataset_windows(first_dataset, cfg.horizon_length, what)
        check_replay_buffer_memory(cfg, first_dataset)
        if cfg.video_episodes > 0:
            check_rendering(cfg.env_name, env_data.eval_env)
        example = first_dataset.sample(1, idxs=np.zeros(1, dtype=int))
        env_datas, datasets, agents_ = [], [], []
        for c in configs:
            if c is configs[0]:
                env_datas.append(env_data)
                datasets.append(first_dataset)
            else:
                env_datas.append(envs_for_seed(env_data, c.env_name, c.seed, c.success_timing))
                datasets.append(
                    Dataset(
                        dict(first_dataset),
                        rng=seeding.numpy_rng(c.seed, "dataset"),
                        stop_reward_at_mask_zero=cfg.stop_reward_at_mask_zero,
                    )
                )
            agents_.append(
                agents[cfg.agent["agent_name"]].create(
                    seeding.jax_key(c.seed, "agent"), example["observations"], example["actions"], cfg.agent
                )
            )
        metas = _group_resume_states(configs, agents_, datasets) if cfg.resume else [None] * len(configs)
        group = None
        if len(configs) > 1:
            group = {"first_seed": cfg.seed, "num_seeds": cfg.num_seeds, "seeds": [c.seed for c in configs]}
        runs = []
        for c, data, dataset, agent, meta in zip(configs, env_datas, datasets, agents_, metas, strict=True):
            metadata = dict(data.metadata, **({"seed_group": group} if group else {}))
            run_dir, logger = setup_run(c, agent.config, metadata, meta)
            run = Run(
                cfg=c,
                agent=agent,
                env_data=data,
                train_dataset=dataset,
                run_dir=run_dir,
                logger=logger,
                action_dim=int(example["actions"].shape[-1]),
                example=example,
                resume_meta=meta,
            )
            if meta is not None:
                run.restore_offline(meta)
            runs.append(run)
    if group:
        names = [os.path.basename(r.run_dir) for r in runs]
        for run in runs:
            record_path = os.path.join(run.run_dir, "flags.json")
            with open(record_path) as f:
                record = json.load(f)
            record["seed_group"] = dict(group, run_names=names)
            write_json(record_path, record)
    return runs


# ------------------------------------------------------------------------------------------------ loop


def make_replay_buffer(run: Run, with_offline_data: bool) -> ReplayBuffer:
    """The online replay buffer: `replay_buffer` stream, `--stop_reward_at_mask_zero` like the dataset.

    `with_offline_data` (main.py): a copy of the offline dataset as its oldest rows, capacity
    `max(--buffer_size, rows + 1)`; else (main_online.py) empty, capacity `--buffer_size`.
    """
    rng = seeding.numpy_rng(run.cfg.seed, "replay_buffer")
    stop = run.cfg.stop_reward_at_mask_zero
    if with_offline_data:
        return ReplayBuffer.create_from_initial_dataset(
            dict(run.train_dataset),
            size=max(run.cfg.buffer_size, run.train_dataset.size + 1),
            rng=rng,
            stop_reward_at_mask_zero=stop,
        )
    example = {
        k: run.example[k][0] for k in ("observations", "actions", "rewards", "terminals", "masks", "next_observations")
    }
    return ReplayBuffer.create(example, size=run.cfg.buffer_size, rng=rng, stop_reward_at_mask_zero=stop)


def sample_windows(source: Dataset, agent_config, batch_size: int) -> Dict:
    """`batch_size` windows of `horizon_length` rows, discounted with the agent's `discount`.

    The one place the drivers draw batches: the chunk contract (`h`, `gamma`) is read from the
    agent config, so the sampler and the critic's `gamma^h` can never disagree.
    """
    return source.sample_sequence(
        batch_size, sequence_length=agent_config["horizon_length"], discount=agent_config["discount"]
    )


def should_evaluate(step: int, phase_steps: int, eval_interval: int) -> bool:
    """True at each multiple of `eval_interval` and at the last step of a phase (once each)."""
    # Difference from the reference: it evaluated at offline step `offline_steps - 1` (one step
    # before the end) and could evaluate twice around the end of the offline phase.
    return step == phase_steps or (eval_interval > 0 and step % eval_interval == 0)


def should_save(step: int, phase_steps: int, save_interval: int) -> bool:
    """True at each multiple of `save_interval` (when > 0) and at the last step of a phase."""
    return step == phase_steps or (save_interval > 0 and step % save_interval == 0)


def save_checkpoint(agent, run_dir: str, step: int, phase: str) -> str:
    """Save `agent` to `<run_dir>/checkpoints/agent_<step>.msgpack` (no pickle)."""
    path = os.path.join(run_dir, "checkpoints", f"agent_{step}.msgpack")
    return save_agent(agent, path, metadata={"step": int(step), "phase": phase})


def evaluate_and_log(
    agent, eval_env, cfg: RunConfig, logger: Logger, step: int, action_dim: int, vector_env=None
) -> Dict:
    """Run `evaluation.evaluate` and log its stats under `eval` at `step`.

    The evaluation's policy key and reset seeds are the `evaluation` stream of `cfg.seed` at
    `step` (`utils.seeding.evaluation_streams`), never the training streams. With `vector_env`
    the evaluation episodes run on it in lockstep (the same per-episode results); video episodes
    always run on `eval_env`. Returns the stats (`success` is the success rate).
    """
    start = time.time()
    stats, _, renders = evaluate(
        agent,
        eval_env,
        num_eval_episodes=cfg.eval_episodes,
        num_video_episodes=cfg.video_episodes,
        video_frame_skip=cfg.video_frame_skip,
        action_dim=action_dim,
        seed=cfg.seed,
        step=step,
        progress=cfg.progress,
        vector_env=vector_env,
    )
    stats["time"] = time.time() - start
    logger.log(stats, "eval", step=step)
    if renders and logger.wandb_run is not None:
        import wandb

        video = np.concatenate(renders, axis=0).transpose(0, 3, 1, 2)  # (T, 3, H, W)
        logger.wandb_run.log({"eval/video": wandb.Video(video, fps=15)}, step=step)
    logging.info("step %d: eval success %.3f", step, stats.get("success", float("nan")))
    return stats


def episode_stats(info: Dict) -> Dict:
    """Success, return and length of a finished training episode (for the `env` CSV)."""
    stats = {"success": float(info.get("success", np.nan))}
    for k, v in info.get("episode", {}).items():
        stats[f"episode.{k}"] = float(v)
    return stats


def stack_for_utd(batch: Dict, utd_ratio: int) -> Dict:
    """Reshape a batch of `utd_ratio * B` rows to `(utd_ratio, B, ...)` for `batch_update`."""
    return jax.tree_util.tree_map(lambda x: x.reshape((utd_ratio, -1) + x.shape[1:]), batch)


class OnlineCollector:
    """Steps the training environment with open-loop chunks and writes transitions to a buffer.

    Args:
        env: training env (gymnasium API).
        action_dim: size of one environment action.
        reward_fn: the online reward transform of the env (`envs` applies the same one to the
            offline data: sparse rewards, robomimic's -1 shift).
        rng: the collector's own JAX key stream (`collector` stream of the run's seed).
        reset_seed: seed of the first `env.reset`; None (the drivers) continues the env's own
            stream, seeded once by `envs.env_utils.make_env_and_datasets` (`env` stream).

    `step(agent, buffer)` executes one action of the current chunk (a new chunk is asked of
    `agent` when the queue is empty), adds `(observations, actions, rewards, terminals, masks,
    next_observations)` with `terminals = terminated or truncated` (trajectory end) and
    `masks = 1 - terminated` (no bootstrap only on a true termination), resets the env and the
    chunk queue at episode ends, and returns the final `info` of a finished episode (else None).

    Run states (`state`/`restore`) can be taken at any step, mid-episode too: the state holds the
    env's random generator as it was before the episode's reset, the actions executed since, the
    rest of the current chunk and the current observation. `restore` resets the env from that
    generator state and replays the actions (MuJoCo is deterministic), then checks that the replay
    arrives at the saved observation exactly.
    """

    def __init__(self, env, action_dim: int, reward_fn, rng, reset_seed: Optional[int] = None):
        self.env = env
        self.reward_fn = reward_fn
        self.policy = Policy(None, rng)  # evaluation's policy wrapper; the agent is set at each step
        self.queue = ActionQueue(self.policy, action_dim)
        self.reset_seed = reset_seed
        self.observation = None  # None: the env is reset at the start of the next step
        self._episode_start = None  # (env generator state before the reset, the reset's seed)
        self._episode_actions: List[np.ndarray] = []

    def state(self) -> Dict:
        """JSON-able state at any step: policy key, env generator, and the episode in progress (if any)."""
        state = {
            "policy_key": run_state.key_to_list(self.policy.rng),
            "env_rng": run_state.generator_state(self.env.unwrapped.np_random),
            "reset_seed": self.reset_seed,
            "episode": None,
        }
        if self.observation is not None:
            start_rng, start_seed = self._episode_start
            state["episode"] = {
                "start_env_rng": start_rng,
                "reset_seed": start_seed,
                "actions": [np.asarray(a, dtype=np.float32).tolist() for a in self._episode_actions],
                "queue": [np.asarray(a, dtype=np.float32).tolist() for a in self.queue._queue],
                "observation": np.asarray(self.observation).tolist(),
                "observation_dtype": str(np.asarray(self.observation).dtype),
            }
        return state

    def restore(self, state: Dict):
        """Continue from `state`; an episode in progress is replayed. `RuntimeError` when the replay
        does not reproduce the saved observation (a simulator that is not deterministic here)."""
        self.policy.rng = run_state.key_from_list(state["policy_key"])
        self.reset_seed = state["reset_seed"]
        self.observation = None
        self._episode_start, self._episode_actions = None, []
        self.queue.reset()
        episode = state.get("episode")
        if episode is not None:
            run_state.set_generator_state(self.env.unwrapped.np_random, episode["start_env_rng"])
            self._episode_start = (episode["start_env_rng"], episode["reset_seed"])
            observation, _ = self.env.reset(seed=episode["reset_seed"])
            for action in episode["actions"]:
                action = np.asarray(action, dtype=np.float32)
                observation, _, terminated, truncated, _ = self.env.step(action)
                self._episode_actions.append(action)
                if terminated or truncated:
                    raise RuntimeError("replaying the saved episode ended it early; the simulator is not deterministic")
            saved = np.asarray(episode["observation"], dtype=episode["observation_dtype"])
            if not np.array_equal(np.asarray(observation), saved):
                raise RuntimeError(
                    "replaying the saved episode did not reproduce its observation (largest difference "
                    f"{np.max(np.abs(np.asarray(observation, dtype=np.float64) - saved)):.3g}); the simulator is not "
                    "deterministic on this machine, so this run state cannot be continued exactly."
                )
            self.observation = observation
            self.queue._queue = [np.asarray(a, dtype=np.float32) for a in episode["queue"]]
        run_state.set_generator_state(self.env.unwrapped.np_random, state["env_rng"])

    def step(self, agent, buffer) -> Optional[Dict]:
        self.policy.agent = agent
        if self.observation is None:
            self._episode_start = (run_state.generator_state(self.env.unwrapped.np_random), self.reset_seed)
            self._episode_actions = []
            self.observation, _ = self.env.reset(seed=self.reset_seed)
            self.reset_seed = None  # seeds the first reset only; later resets continue the env's stream
        action = self.queue(self.observation)
        next_observation, reward, terminated, truncated, info = self.env.step(action)
        self._episode_actions.append(np.asarray(action, dtype=np.float32))
        done = bool(terminated or truncated)
        buffer.add_transition(
            dict(
                observations=self.observation,
                actions=np.asarray(action, dtype=np.float32),
                rewards=np.float32(self.reward_fn(reward)),
                terminals=np.float32(done),
                masks=np.float32(1.0 - float(terminated)),
                next_observations=next_observation,
            )
        )
        if done:
            self.observation = None
            self.queue.reset()
            return info
        self.observation = next_observation
        return None


def mixed_batch_sizes(batch_size: int, offline_ratio: float):
    """`(n_offline, n_online)` with `n_offline = floor(offline_ratio * batch_size)`.

    The two always add up to `batch_size` (odd sizes too: 255 at ratio 0.5 -> 127 + 128).
    Raises `ValueError` when `offline_ratio` is outside [0, 1].
    """
    if not 0.0 <= offline_ratio <= 1.0:
        raise ValueError(f"--offline_ratio={offline_ratio} must be in [0, 1].")
    # Difference from the reference: it drew batch_size // 2 rows from each source, one row short
    # for odd batch sizes.
    n_offline = int(np.floor(offline_ratio * batch_size + 1e-9))
    return n_offline, batch_size - n_offline


def sample_mixed_batch(offline_dataset, replay_buffer, agent_config, utd_ratio: int, offline_ratio: float) -> Dict:
    """`(utd_ratio, batch_size, ...)` windows; in every UTD slice the first `n_offline` rows come
    from `offline_dataset` and the other `n_online` from `replay_buffer` (RLPD's symmetric
    sampling at `offline_ratio=0.5`; see `mixed_batch_sizes`). `batch_size`,
    `horizon_length` and `discount` are read from `agent_config`.
    """
    n_offline, n_online = mixed_batch_sizes(agent_config["batch_size"], offline_ratio)
    parts = []
    for source, n in ((offline_dataset, n_offline), (replay_buffer, n_online)):
        if n > 0:
            parts.append(stack_for_utd(sample_windows(source, agent_config, n * utd_ratio), utd_ratio))  # (U, n, ..)
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=1), *parts)  # (U, B, ...)


__all__ = [
    "InputError",
    "input_errors",
    "define_flags",
    "parse_flags",
    "run_cli",
    "RunConfig",
    "Run",
    "setup_run",
    "check_dataset_windows",
    "check_rendering",
    "trajectory_lengths",
    "sample_windows",
    "make_replay_buffer",
    "should_evaluate",
    "should_save",
    "save_checkpoint",
    "evaluate_and_log",
    "episode_stats",
    "stack_for_utd",
    "OnlineCollector",
    "mixed_batch_sizes",
    "sample_mixed_batch",
]
