"""The paper's protocol by domain: data, then one sweep of `--method` runs with the paper's evaluation.

Usage:
    python scripts/reproduce.py --domain=puzzle-3x3 --tasks=1,2 --methods=qc-fql --seeds=0 \\
        --offline_steps=100000 --online_steps=0 [--dry_run] [sweep options: --executor=slurm ...]

What it does:
1. Data. The domain's `play` dataset (`~/.ogbench/data/<domain>-play-v0.npz`) is used when it is there. Otherwise
   the official file is downloaded (`python -m envs.download_datasets`); where the network does not reach it, the
   local generator makes it at the published size (`python -m envs.generate_dataset`, one worker per CPU core).
   Each run records which it got (`flags.json` `datasets`: official or generated, sha256).
2. Runs. One `scripts/sweep.py` sweep named `repro_<domain>_off<offline>_on<online>` (e.g.
   `repro_puzzle-3x3_off100k_on0`) over `--grid=method=...`, `--tasks` and `--seeds`, with the paper's evaluation
   (`--eval_episodes=50`, every `--eval_interval=100000` steps and at the end of each phase) and a run state every
   `--state_interval` steps. The same command again resumes unfinished runs and skips finished ones. Online-only
   methods (RLPD, RLPD-AC, QC-RLPD) run in a second sweep with `main_online.py` (`--online_steps` environment steps).

Options not listed under --help (`--executor`, `--partition`, `--max_parallel`, ...) are passed to
`scripts/sweep.py`; flags after `--` go to every run. Compare the finished runs with the released curves with
`python scripts/plot_curves.py exp/repro_<...> --compare` (docs/results.md).
"""

import argparse
import os
import subprocess
import sys
from typing import List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

import sweep  # noqa: E402
from runner import methods  # noqa: E402

# The paper's OGBench domains (docs/settings.md); cube-quadruple trains on the 100M shard set instead.
DOMAINS = ("scene", "puzzle-3x3", "cube-double", "cube-triple")


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
    add("--sweep_name", default=None, help="Default: repro_<domain>_off<offline>_on<online>.")
    add("--dry_run", action="store_true", help="Say what would be done for the data and print every run's command.")
    return parser


def ensure_dataset(domain: str, dry_run: bool) -> None:
    """Put `<domain>-play-v0.npz` in place: download it, or generate it where the host cannot be reached."""
    name = f"{domain}-play-v0"
    path = os.path.join(os.path.expanduser("~/.ogbench/data"), f"{name}.npz")  # where the drivers read it
    if os.path.isfile(path):
        print(f"data: {path} is there; runs record its source and sha256", file=sys.stderr)
        return
    download = [sys.executable, "-m", "envs.download_datasets", f"--env_names={name}"]
    generate = [sys.executable, "-m", "envs.generate_dataset", f"--env_name={name}", "--seed=0"]
    generate.append(f"--num_workers={os.cpu_count() or 1}")
    if dry_run:
        print(f"data: would run {' '.join(download[1:])}; without network: {' '.join(generate[1:])}", file=sys.stderr)
        return
    if subprocess.run(download, cwd=ROOT).returncode == 0:
        return
    print(f"data: no download; generating {name} at the published size", file=sys.stderr)
    if subprocess.run(generate, cwd=ROOT).returncode != 0:
        raise sweep.InputError(f"generating {name} failed (its error is above)")


def sweep_argvs(args, sweep_options: List[str], run_flags: List[str]) -> List[List[str]]:
    """The `scripts/sweep.py` command line(s): one per driver the methods need."""
    by_driver = {}
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        driver = next((d for d in ("main", "main_online") if method in methods.method_names(d)), None)
        if driver is None:
            known = methods.method_names("main") + methods.method_names("main_online")
            raise sweep.InputError(f"--methods: {method} is not a method (one of {', '.join(known)})")
        by_driver.setdefault(driver, []).append(method)
    budget = f"off{steps_text(args.offline_steps)}_on{steps_text(args.online_steps)}"
    name = args.sweep_name or f"repro_{args.domain}_{budget}"
    argvs = []
    for driver, names in by_driver.items():
        phase = [f"--offline_steps={args.offline_steps}"] if driver == "main" else []
        argvs.append(
            [f"--driver={driver}.py", f"--grid=method={','.join(names)}", f"--tasks={args.tasks}"]
            + [f"--seeds={args.seeds}", f"--sweep_name={name}" + ("" if driver == "main" else "_online")]
            + (["--dry_run"] if args.dry_run else [])
            + sweep_options
            + ["--", f"--env_name={args.domain}-play-singletask-v0", *phase, f"--online_steps={args.online_steps}"]
            + ["--eval_episodes=50", "--eval_interval=100000", f"--state_interval={args.state_interval}"]
            + run_flags
        )
    return argvs


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, run_flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    try:
        args, sweep_options = make_parser().parse_known_args(own)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        argvs = sweep_argvs(args, sweep_options, run_flags)
        ensure_dataset(args.domain, args.dry_run)
    except sweep.InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = 0
    for sweep_argv in argvs:
        status = max(status, sweep.main(sweep_argv))
    return status


if __name__ == "__main__":
    sys.exit(main())
