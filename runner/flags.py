"""Every flag of the drivers, with its help text (`define_flags`); `python main.py --helpfull` lists them."""

import os
import sys

from absl import flags

import agents
from runner import cli
from runner.resume import RENAMED

FLAGS = flags.FLAGS
DRIVERS = ("main", "main_online")
DEFAULT_ENV = "cube-double-play-singletask-task2-v0"


def check_renamed(flag_values=FLAGS):
    """`ValueError` where a flag and its old name (`runner.resume.RENAMED`) are both on the command line: absl would
    keep the last silently."""
    for old, new in RENAMED.items():
        if flag_values[old].present and flag_values[new].present > flag_values[old].present:
            raise ValueError(f"--{old} is the old name of --{new}, and both are given: pass only --{new}.")


def define_flags(driver: str, flag_values=FLAGS):
    """Define every flag of `driver` (`'main'` or `'main_online'`) in `flag_values`.

    Call once at import time of a driver (tests pass their own `flags.FlagValues()`).
    """
    from ml_collections import config_flags

    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {sorted(DRIVERS)}, got {driver!r}.")
    default_agent, default_env = cli.default_agent_file(driver, cli.expanded_argv(sys.argv)), DEFAULT_ENV
    fv = {"flag_values": flag_values}
    if driver == "main":
        flags.DEFINE_integer("offline_steps", 1000000, "Number of offline gradient steps (0: skip the offline "
            "phase).", **fv)  # fmt: skip
    else:
        flags.DEFINE_float("offline_ratio", 0.5, "Fraction of each batch drawn from the offline data (the rest from "
            "the replay buffer); floor(offline_ratio * batch_size) rows, exact for odd batch sizes.", **fv)  # fmt: skip
    methods = "|".join(sorted(m for spec in agents.for_driver(driver) for m in spec.methods))
    flags.DEFINE_string(
        "method",
        None,
        f"Paper method by name ({methods}): sets the flags and agent keys that define it and the paper's "
        "per-domain values for --env_name; explicit flags win, except one that makes it another method (an error).",
        **fv,
    )
    flags.DEFINE_integer("num_seeds", 1, "Train this many independent runs in one process, seeds --seed .. "
        "--seed+num_seeds-1: the agents are stacked and updated by one jitted step (see --seed_batching); each seed "
        "keeps its own environments, samplers, random streams, evaluation and run directory (<run_name>_sd<seed> "
        "when --run_name is given).", **fv)  # fmt: skip
    flags.DEFINE_enum("seed_batching", "auto", ["auto", "vmap", "map"], "With --num_seeds > 1: how the seeds are "
        "updated. vmap: the agents stacked, one batched update (fills a GPU); map: each seed's own update one after "
        "another (single-seed kernels, bit-identical to single-seed runs; what a CPU wants); auto: vmap on an "
        "accelerator, map on CPU.", **fv)  # fmt: skip
    flags.DEFINE_enum("donate_agent", "auto", ["auto", "true", "false"], "Donate the agent to each update: XLA "
        "writes the new agent into the old one's buffers, so a device holds one agent, not two (results are the "
        "same). auto: true on an accelerator; false on CPU, where the compiler adds copies for it and host memory "
        "is not the limit.", **fv)  # fmt: skip
    if driver == "main":
        flags.DEFINE_integer("updates_per_dispatch", 1, "Offline gradient steps per host call (one lax.scan). 1: "
            "host sampling, one step per call (the reference loop). k > 1: windows are sampled on the device from a "
            "device-resident copy of the dataset (host sampling with a prefetching thread when it does not fit); a "
            "dispatch never runs past a logging, evaluation, checkpoint, state or shard step; one cut short there "
            "costs k steps of compute (pick k dividing the intervals).", **fv)  # fmt: skip
        flags.DEFINE_enum("offline_sampler", "auto", ["auto", "device", "host"], "With --updates_per_dispatch > 1: "
            "where offline windows are drawn. device: on the device from a device-resident copy of the dataset "
            "(other random numbers than host, same distribution); host: the dataset's own generator in a prefetching "
            "thread (exactly the batches of --updates_per_dispatch=1); auto: device when the dataset fits in half "
            "the free device memory, else host.", **fv)  # fmt: skip
    flags.DEFINE_string("run_group", "Debug", "wandb group and sub-folder of --save_dir for this run.", **fv)
    flags.DEFINE_string("run_name", None, "Name of the run directory (<save_dir>/<run_group>/<run_name>) and of the "
        "wandb run; an existing one is an error. Default: <timestamp>_<env_name>_sd<seed>_<8 random hex digits>, "
        "unique across hosts.", **fv)  # fmt: skip
    flags.DEFINE_integer("seed", 0, "Random seed in [0, 2**32); every random stream of the run (agent, samplers, "
        "environments, evaluation) is derived from it (utils/seeding.py).", **fv)  # fmt: skip
    flags.DEFINE_string("env_name", default_env, "Environment (and dataset) name of a benchmark family of envs/, "
        "e.g. cube-double-play-singletask-task2-v0 or lift-mh-low_dim (envs/README.md).", **fv)  # fmt: skip
    flags.DEFINE_bool("resume", False, "With --run_name: continue that run from its latest complete state "
        "(<run_dir>/state/), exactly as if it had never stopped (from the start when it has none). A run that does "
        "not exist is an error (see --start_if_missing); a finished one (DONE.json) is left alone when the settings "
        "are the same.", **fv)  # fmt: skip
    flags.DEFINE_bool("start_if_missing", False, "With --resume: start the run when it does not exist yet (what a "
        "sweep or a SLURM requeue wants).", **fv)  # fmt: skip
    flags.DEFINE_bool("accept_changed_data", False, "With --resume: continue although a data file changed since the "
        "run started (size or sha256); flags.json keeps the earlier records under dataset_history.", **fv)  # fmt: skip
    flags.DEFINE_bool("accept_changed_agent", False, "With --resume: continue although the agent's file changed "
        "since the run started (sha256); flags.json keeps the earlier record under agent_source_history.",
        **fv)  # fmt: skip
    flags.DEFINE_bool("accept_changed_family", False, "With --resume: continue although the benchmark family's file "
        "(envs/<family>.py: its envs, data and success test) changed since the run started (sha256); flags.json keeps "
        "the earlier record under family_source_history.", **fv)  # fmt: skip
    flags.DEFINE_integer("state_interval", 50000, "Write the full run state (agent, replay buffer, every random "
        "stream, loggers) every this many steps of each phase and at the end of each phase (0: only at phase ends "
        "and on SIGTERM/SIGUSR1).", **fv)  # fmt: skip
    flags.DEFINE_integer("keep_states", 2, "Number of complete run states kept in <run_dir>/state/ (>= 1).", **fv)
    flags.DEFINE_string("sweep_info", None, "JSON written by scripts/sweep.py: the sweep's name and this run's swept "
        "values (recorded in flags.json and the wandb config).", **fv)  # fmt: skip
    flags.DEFINE_string("save_dir", "exp/", "Root directory of run outputs (CSV logs, flags.json, checkpoints).", **fv)
    flags.DEFINE_integer("online_steps", 1000000, "Number of online environment steps.", **fv)
    flags.DEFINE_integer("buffer_size", 2000000, "Replay buffer capacity in transitions.", **fv)
    flags.DEFINE_integer("log_interval", 5000, "Log training metrics every this many steps.", **fv)
    flags.DEFINE_integer("eval_interval", 100000, "Evaluate every this many steps of each phase (0: only at the end "
        "of each phase).", **fv)  # fmt: skip
    flags.DEFINE_integer("eval_episodes", 50, "Number of evaluation episodes (success rate = mean over them).", **fv)
    flags.DEFINE_integer("eval_envs", 1, "Evaluation episodes run on this many environments in lockstep (gymnasium "
        "vector env), one batched policy call per chunk boundary for all of them; the statistics equal those of "
        "one-by-one evaluation with the same seeds. 1 (default): one environment, episodes one after the other; each "
        "further env costs about 0.17 GB, and on a few cores batching brings no speed (docs/benchmarks.md).",
        **fv)  # fmt: skip
    flags.DEFINE_enum("eval_env_mode", "auto", ["auto", "sync", "async"], "How the --eval_envs environments step: "
        "sync (in this process), async (one subprocess each), auto (evaluation.make_eval_vector_env's rule: async "
        "where the machine has cores to spare).", **fv)  # fmt: skip
    flags.DEFINE_integer("video_episodes", 0, "Extra evaluation episodes rendered into "
        "<run_dir>/videos/eval_<step>.mp4 at every evaluation (and logged to wandb when it is on); needs a headless "
        "OpenGL backend (MUJOCO_GL=egl or osmesa), checked at start-up.", **fv)  # fmt: skip
    flags.DEFINE_integer("video_frame_skip", 3, "Keep every this-many-th frame in evaluation videos.", **fv)
    flags.DEFINE_string("action_chunk_eval_sizes", "0", "Comma-separated: at each evaluation also run the policy "
        "executing only the first n actions of each chunk (0: the whole chunk; the DQC release's 'DQC-naive' is a QC "
        "chunk cut this way); logged as ac<n>/... columns.", **fv)  # fmt: skip
    flags.DEFINE_string("best_of_n_eval_values", "0", "Comma-separated: at each evaluation also act with N best-of-N "
        "samples (0: the agent's own); logged as bfn<N>/... columns. Agents whose sample_actions takes best_of_n "
        "(DQC).", **fv)  # fmt: skip
    flags.DEFINE_float("eval_temperature", 0.0, "Scale of the policy's noise at evaluation, for agents whose "
        "sample_actions takes a temperature (IQL, ReBRAC): 0 acts with the mean action, as the FQL release "
        "evaluates; 1 with the noise of online data collection (this repository's evaluation before 2026-12-03). "
        "Other agents accept only 0.", **fv)  # fmt: skip
    flags.DEFINE_integer("save_interval", -1, "Save an agent checkpoint every this many steps (<= 0: only at the end "
        "of each phase).", **fv)  # fmt: skip
    flags.DEFINE_integer("start_training", 5000, "Online environment step at which gradient updates start.", **fv)
    flags.DEFINE_integer("utd_ratio", 1, "Update-to-data ratio: gradient steps per online environment step, run as "
        "one lax.scan over UTD stacked batches.", **fv)  # fmt: skip
    flags.DEFINE_string("compilation_cache_dir", None, "Folder of JAX's persistent compilation cache: a resumed or "
        "requeued run, another seed or another sweep point of the same shapes then starts without compiling; safe to "
        "share between processes. Default: $JAX_COMPILATION_CACHE_DIR when set, else $XDG_CACHE_HOME/qc/jax_cache "
        "(~/.cache/qc/jax_cache). 'none' turns it off.", **fv)  # fmt: skip
    flags.DEFINE_integer("horizon_length", 5, "Action chunk length h (1: no chunking, plain single-step RL); copied "
        "into the agent config, which owns it from then on. Not passed: the agent's own default where its config "
        "has one (IQL, ReBRAC, IFQL: 1), else 5.", **fv)  # fmt: skip
    flags.DEFINE_bool("sparse", False, "Sparse reward r -> -(r != 0), applied to the offline data and to every "
        "online reward (the paper uses it for scene and puzzle-3x3).", **fv)  # fmt: skip
    flags.DEFINE_enum("success_timing", "post", ["post", "pre"], "OGBench: when reward and success are computed, "
        "online and in the offline relabelling alike. post: from the state after the step (ogbench 1.1.2, the "
        "paper's numbers); pre: from the state before it (ogbench 1.2.2's default).", **fv)  # fmt: skip
    flags.DEFINE_enum("dataset_success_timing", "pre", ["pre", "post"], "OGBench: the state the offline rewards and "
        "masks of transition t are relabelled from. pre: s_t (ogbench's loader in every version, so the paper's "
        "data); post: s_{t+1} (agrees with --success_timing=post online).", **fv)  # fmt: skip
    flags.DEFINE_bool("stop_reward_at_mask_zero", False, "Corrected chunk reward sums: stop each window's discounted "
        "sum after the first step whose mask is 0 (False: the reference's sums, which keep adding). Applied to the "
        "offline data and the online replay buffer alike.", **fv)  # fmt: skip
    flags.DEFINE_float("dataset_proportion", 1.0, "Use only the first this fraction of the offline dataset.", **fv)
    flags.DEFINE_integer("dataset_replace_interval", 1000, "With --dataset_dir holding several npz shards: "
        "load the next shard every this many steps (0: never).", **fv)  # fmt: skip
    flags.DEFINE_string("dataset_dir", None, "The family's data folder: OGBench npz files (default ~/.ogbench/data; "
        "a directory of shards is cycled, see --dataset_replace_interval), or for robomimic a root used in place of "
        "~/.robomimic. Its old name --ogbench_dataset_dir still works.", **fv)  # fmt: skip
    for old, new in RENAMED.items():
        flags.DEFINE_alias(old, new, **fv)
    flags.DEFINE_string("dataset_path", None, "Explicit path of one dataset file, an OGBench npz or a robomimic hdf5 "
        "(overrides --dataset_dir).", **fv)  # fmt: skip
    flags.DEFINE_enum("wandb_mode", "disabled", ["online", "offline", "disabled"], "wandb mode: online needs an "
        "account and network; offline writes locally; disabled logs to CSV only.", **fv)  # fmt: skip
    flags.DEFINE_string("wandb_project", "qc", "wandb project name.", **fv)
    flags.DEFINE_bool("progress", True, "Show progress: a bar on a terminal, a plain line every tenth of a phase in "
        "a log file.", **fv)  # fmt: skip
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
        cli.exit_with_error(cli.config_flag_message(e, sys.argv, driver))
