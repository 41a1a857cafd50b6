"""The paper's protocol by domain: data, then one sweep of `--method` runs with the paper's evaluation.

Usage:
    python scripts/reproduce.py --domain=puzzle-3x3 --tasks=1,2 --methods=qc-fql --seeds=0 \\
        --offline_steps=100000 --online_steps=0 [--dry_run] [sweep options: --executor=slurm ...]

What it does:
1. Data. The domain's `play` dataset (`~/.ogbench/data/<domain>-play-v0.npz`) is used when it is there. Otherwise
   the official file is downloaded (`python -m envs.download_datasets`); where the network does not reach it, the
   local generator makes it at the published size (`python -m envs.generate_dataset`, one worker per CPU core).
   Each run records which it got (`flags.json` `datasets`: official or generated, sha256). `--data_seed=S` (S > 0)
   asks for another draw of the data: `<domain>-play-v0-drawS.npz`, generated with seed S at the published size
   beside the others (made once, then reused), read by every run through `--dataset_path`; its sweep is named
   `..._drawS`, so runs on two draws never share a folder. A draw is the file's sha256, not its seed alone: the
   same seed writes other bytes on another kind of CPU (docs/datasets.md).
2. Runs. One `scripts/sweep.py` sweep named `repro_<domain>_off<offline>_on<online>` (e.g.
   `repro_puzzle-3x3_off100k_on0`) over `--grid=method=...`, `--tasks` and `--seeds`, with the paper's evaluation
   (`--eval_episodes=50`, every `--eval_interval` steps, 100000 by default, and at the end of each phase) and a
   run state every `--state_interval` steps. The same command again resumes unfinished runs and skips finished
   ones. Online-only methods (RLPD, RLPD-AC, QC-RLPD) run in a second sweep with `main_online.py`
   (`--online_steps` environment steps).

`--check_speed` runs nothing: it times the paper-size update of each method on this machine (the method's agent
and settings for the domain, `--agent.*` overrides after `--` applied; random batches of the run's shapes) and says
how long the runs take, with the data's generation where the file is missing, and with `--hours_left` whether that
fits (exit status 1 when it does not). Under two minutes on a 2-core CPU (compiling the update takes most of it).

Options not listed under --help (`--executor`, `--partition`, `--max_parallel`, ...) are passed to
`scripts/sweep.py`; flags after `--` go to every run. Compare the finished runs with the released curves with
`python scripts/plot_curves.py exp/repro_<...> --compare` (docs/results.md).
"""

import argparse
import math
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

import sweep  # noqa: E402
from runner import methods  # noqa: E402

# The paper's OGBench domains (docs/settings.md); cube-quadruple trains on the 100M shard set instead.
DOMAINS = ("scene", "puzzle-3x3", "cube-double", "cube-triple")
EVAL_INTERVAL = 100_000  # the paper's evaluation interval (steps)
# --check_speed's estimates, from the first row of docs/results.md (scene task 2, QC-FQL, 2026-12-04, an idle
# 2-core AVX-512 CPU): generating scene-play-v0 (1000 + 100 episodes) took 17 minutes with two workers, about 0.5
# episodes/s per worker (a loaded machine is several times slower; docs/results.md, section 3); one evaluation of
# 50 episodes took 56 s (its eval.csv `time`).
GENERATION_EPISODES_PER_S_PER_WORKER = 0.5
PUBLISHED_EPISODES = 1100
EVALUATION_S = 60.0


def steps_text(steps: int) -> str:
    """`100000` -> `100k`, `1000000` -> `1M`, `0` -> `0`: the step budget in a sweep name."""
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if steps >= size and steps % size == 0:
            return f"{steps // size}{unit}"
    return str(steps)


def make_parser() -> argparse.ArgumentParser:
    parser = sweep._Parser(
        prog="python scripts/reproduce.py",
        description="Run the paper's protocol for one domain (data, methods, tasks, seeds, step budget) as a sweep.",
    )
    add = parser.add_argument
    add("--domain", required=True, choices=DOMAINS, help="OGBench domain of the paper.")
    add("--tasks", default="1-5", help="Task numbers, a list or ranges (default: 1-5).")
    add("--methods", default="qc,qc-fql", help="Comma-separated --method names (default: qc,qc-fql).")
    add("--seeds", default="0-3", help="Seeds, a list or ranges (default: 0-3, the paper's four).")
    add("--offline_steps", type=sweep.int_at_least(0), default=1_000_000, help="Offline gradient steps (paper: 1M).")
    add("--online_steps", type=sweep.int_at_least(0), default=1_000_000, help="Online env steps (paper: 1M).")
    add("--state_interval", type=sweep.int_at_least(1), default=5000, help="Steps between run states (default: 5000).")
    add(
        "--eval_interval",
        type=sweep.int_at_least(1),
        default=EVAL_INTERVAL,
        help=f"Steps between evaluations (50 episodes), one more at each phase's end (paper: {EVAL_INTERVAL}).",
    )
    add(
        "--data_seed",
        type=sweep.int_at_least(0),
        default=0,
        help="The data draw: the generator seed of the domain's file (default 0: <domain>-play-v0.npz, or the "
        "official file where downloaded; S > 0: <domain>-play-v0-drawS.npz, generated at the published size).",
    )
    add("--sweep_name", default=None, help="Default: repro_<domain>_off<offline>_on<online>.")
    add("--dry_run", action="store_true", help="Say what would be done for the data and print every run's command.")
    add(
        "--check_speed",
        action="store_true",
        help="Run nothing: time each method's paper-size update here and estimate the runs' hours (module doc).",
    )
    add("--hours_left", type=float, default=None, help="--check_speed: hours left; the verdict says if the runs fit.")
    add("--speed_steps", type=sweep.int_at_least(1), default=20,
        help="--check_speed: updates timed after two warm-up updates (default: 20).")  # fmt: skip
    return parser


def dataset_path(domain: str, data_seed: int = 0) -> str:
    """Where the runs of draw `data_seed` read the domain's `play` dataset: `~/.ogbench/data/<domain>-play-v0.npz`
    (draw 0, where the drivers look by default), `~/.ogbench/data/<domain>-play-v0-draw<S>.npz` (draw S > 0)."""
    suffix = "" if data_seed == 0 else f"-draw{data_seed}"
    return os.path.join(os.path.expanduser("~/.ogbench/data"), f"{domain}-play-v0{suffix}.npz")


def ensure_dataset(domain: str, dry_run: bool, data_seed: int = 0) -> None:
    """Put draw `data_seed`'s file in place (`dataset_path`). Draw 0: download the official file, or generate it
    with seed 0 where the host cannot be reached. Draw S > 0: generate it with seed S (no official file is
    another draw). `InputError` when the generator fails."""
    name, path = f"{domain}-play-v0", dataset_path(domain, data_seed)
    if os.path.isfile(path):
        print(f"data: {path} is there; runs record its source and sha256", file=sys.stderr)
        return
    download = [sys.executable, "-m", "envs.download_datasets", f"--env_names={name}"]
    generate = [sys.executable, "-m", "envs.generate_dataset", f"--env_name={name}", f"--seed={data_seed}"]
    generate += [f"--save_path={path}"] if data_seed else []
    generate.append(f"--num_workers={os.cpu_count() or 1}")
    if dry_run:
        if data_seed:
            print(f"data: would run {' '.join(generate[1:])}", file=sys.stderr)
        else:
            print(f"data: would run {' '.join(download[1:])}; without network: {' '.join(generate[1:])}",
                  file=sys.stderr)  # fmt: skip
        return
    if data_seed == 0 and subprocess.run(download, cwd=ROOT).returncode == 0:
        return
    print(f"data: no download; generating {name} at the published size", file=sys.stderr)
    if subprocess.run(generate, cwd=ROOT).returncode != 0:
        raise sweep.InputError(f"generating {name} failed (its error is above)")


def methods_by_driver(text: str) -> Dict[str, List[str]]:
    """`--methods` -> `{driver: [method, ...]}`; `InputError` for a name that is no method."""
    by_driver = {}
    for method in [m.strip() for m in text.split(",") if m.strip()]:
        driver = next((d for d in ("main", "main_online") if method in methods.method_names(d)), None)
        if driver is None:
            known = methods.method_names("main") + methods.method_names("main_online")
            raise sweep.InputError(f"--methods: {method} is not a method (one of {', '.join(known)})")
        by_driver.setdefault(driver, []).append(method)
    return by_driver


def sweep_argvs(args, sweep_options: List[str], run_flags: List[str]) -> List[List[str]]:
    """The `scripts/sweep.py` command line(s): one per driver the methods need."""
    by_driver = methods_by_driver(args.methods)
    budget = f"off{steps_text(args.offline_steps)}_on{steps_text(args.online_steps)}"
    draw = f"_draw{args.data_seed}" if args.data_seed else ""  # draw 0 keeps the name its runs were made under
    name = args.sweep_name or f"repro_{args.domain}_{budget}{draw}"
    data = [f"--dataset_path={dataset_path(args.domain, args.data_seed)}"] if args.data_seed else []
    argvs = []
    for driver, names in by_driver.items():
        phase = [f"--offline_steps={args.offline_steps}"] if driver == "main" else []
        argvs.append(
            [f"--driver={driver}.py", f"--grid=method={','.join(names)}", f"--tasks={args.tasks}"]
            + [f"--seeds={args.seeds}", f"--sweep_name={name}" + ("" if driver == "main" else "_online")]
            + (["--dry_run"] if args.dry_run else [])
            + sweep_options
            + ["--", f"--env_name={args.domain}-play-singletask-v0", *phase, f"--online_steps={args.online_steps}"]
            + ["--eval_episodes=50", f"--eval_interval={args.eval_interval}", f"--state_interval={args.state_interval}"]
            + data
            + run_flags
        )
    return argvs


def time_update(driver: str, method: str, env_name: str, run_flags: Sequence[str], steps: int) -> Dict:
    """Gradient steps/s of `method`'s update as `driver` would run it on `env_name` (`--method`'s agent and paper
    settings, then `run_flags`), on random batches of the run's shapes: `{"steps_per_second", "config", "utd"}`
    (`config`: the agent's, `utd`: the run's `--utd_ratio`).

    The update is the drivers' own one-seed call (`SeedGroup.update_fn`), timed over `steps` calls after two
    warm-up calls (scripts/bench_agents.py's `_timed`). `InputError` for flags the driver would refuse.
    """
    import numpy as np
    import ogbench

    import agents
    from bench_agents import _timed
    from bench_reference import make_batches
    from runner import cli
    from runner.config import config_from_argv
    from runner.seed_group import SeedGroup
    from utils.startup import quiet_startup

    quiet_startup()  # before the env: its start-up messages say nothing about the speed
    try:
        cfg = config_from_argv(driver, [f"--method={method}", f"--env_name={env_name}", *run_flags])
    except cli.InputError as e:  # the driver's own one-line message
        raise sweep.InputError(f"--method={method}: {e}") from None
    env = ogbench.make_env_and_datasets(env_name, env_only=True)
    ob_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    spec = agents.get(cfg.agent["agent_name"])
    agent = spec.agent_class.create(cfg.seed, np.zeros((1, ob_dim), np.float32), np.zeros((1, action_dim), np.float32),
                                    cfg.agent)  # fmt: skip
    shapes = argparse.Namespace(seed=0, batch=cfg.agent["batch_size"], h=cfg.window_length, obs_dim=ob_dim,
                                action_dim=action_dim, num_batches=4)  # fmt: skip
    batches = make_batches(shapes)
    missing = sorted(set(spec.batch_keys) - set(batches[0]))
    if missing:
        raise sweep.InputError(f"--check_speed: {method}'s update reads {', '.join(missing)}, not timed here")
    group = SeedGroup([argparse.Namespace(agent=agent, cfg=None)])
    update, state = group.update_fn(), {"agent": group.agent, "i": 0}

    def step():
        state["agent"], info = update(state["agent"], batches[state["i"] % len(batches)])
        state["i"] += 1
        return info

    return {"steps_per_second": steps / _timed(step, steps), "config": dict(agent.config), "utd": cfg.utd_ratio}


def training_hours(
    rate: float, runs: int, offline_steps: int, online_steps: int, utd: int = 1, eval_interval: int = EVAL_INTERVAL
) -> Dict[str, float]:
    """Hours `runs` runs need at `rate` gradient steps/s, one after another (runs in parallel share the cores):
    `{"training", "evaluation"}`. Training: each run's offline steps and `utd` gradient steps per online step
    (the environment steps are not counted: online, a lower bound); evaluation: `EVALUATION_S` per evaluation,
    every `eval_interval` steps of a phase and at its end."""
    evaluations = math.ceil(offline_steps / eval_interval) + math.ceil(online_steps / eval_interval)
    return {
        "training": runs * (offline_steps + utd * online_steps) / rate / 3600,
        "evaluation": runs * evaluations * EVALUATION_S / 3600,
    }


def generation_hours(workers: int) -> float:
    """Hours to generate a domain's published data (`PUBLISHED_EPISODES`) with `workers` workers at
    `GENERATION_EPISODES_PER_S_PER_WORKER`; the download, where the network reaches it, is faster."""
    return PUBLISHED_EPISODES / (GENERATION_EPISODES_PER_S_PER_WORKER * workers) / 3600


def check_speed(args, run_flags: List[str]) -> int:
    """`--check_speed`: print each method's gradient steps/s here, the hours its runs need and, with
    `--hours_left`, whether they all fit. Returns 0, or 1 when they do not fit."""
    from log_utils import cpu_info

    tasks = sweep.parse_int_list(args.tasks, "tasks", 1, 5)
    runs = len(tasks) * len(sweep.parse_int_list(args.seeds, "seeds", 0, 2**32 - 1))
    env_name = f"{args.domain}-play-singletask-task{tasks[0]}-v0"  # every task of a domain has the same shapes
    workers, cpu = os.cpu_count() or 1, cpu_info()
    avx512 = {True: "with AVX-512", False: "without AVX-512", None: "AVX-512 unknown"}[cpu["avx512"]]
    machine = f"{cpu['model'] or 'unknown CPU'}, {workers} cores, {avx512}"
    total = 0.0
    for driver, names in methods_by_driver(args.methods).items():
        offline = args.offline_steps if driver == "main" else 0
        for method in names:
            start = time.perf_counter()
            timed = time_update(driver, method, env_name, run_flags, args.speed_steps)
            rate, config = timed["steps_per_second"], timed["config"]
            layers, width = len(config["actor_hidden_dims"]), config["actor_hidden_dims"][0]
            print(
                f"speed: {method} on {args.domain}: {rate:.3g} gradient steps/s ({layers}x{width} MLPs, batch "
                f"{config['batch_size']}; {args.speed_steps} updates after 2 warm-up ones, "
                f"{time.perf_counter() - start:.0f} s with compiling; {machine})"
            )
            hours = training_hours(rate, runs, offline, args.online_steps, timed["utd"], args.eval_interval)
            total += hours["training"] + hours["evaluation"]
            online = " (online: gradient steps only, a lower bound)" if args.online_steps else ""
            print(
                f"time: {runs} run(s) of {offline} offline and {args.online_steps} online steps: training "
                f"{hours['training']:.2f} h{online}, evaluations {hours['evaluation']:.2f} h"
            )
    if not os.path.isfile(dataset_path(args.domain, args.data_seed)):
        data = generation_hours(workers)
        total += data
        print(
            f"data: {dataset_path(args.domain, args.data_seed)} is missing; generating it takes about {data:.2f} h "
            f"({PUBLISHED_EPISODES} episodes at {GENERATION_EPISODES_PER_S_PER_WORKER:g} episodes/s per worker, "
            f"{workers} workers: the rate of docs/results.md's first row, an idle 2-core CPU)"
        )
    print(f"total: about {total:.2f} h")
    if args.hours_left is None:
        return 0
    fits = total <= args.hours_left
    print(f"verdict: {'fits' if fits else 'does not fit'} in {args.hours_left:g} h ({total:.2f} h needed)")
    return 0 if fits else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, run_flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    try:
        args, sweep_options = make_parser().parse_known_args(own)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if args.check_speed:
            return check_speed(args, run_flags)
        argvs = sweep_argvs(args, sweep_options, run_flags)
        ensure_dataset(args.domain, args.dry_run, args.data_seed)
    except sweep.InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = 0
    for sweep_argv in argvs:
        status = max(status, sweep.main(sweep_argv))
    return status


if __name__ == "__main__":
    sys.exit(main())
