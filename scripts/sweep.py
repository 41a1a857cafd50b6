"""Sweep launcher: a grid of `main.py` / `main_online.py` runs, locally or as a SLURM job array (submitit).

Usage:
    python scripts/sweep.py --driver=main.py --grid=horizon_length=1,5 --grid=agent.actor_num_samples=4,32 \\
        --seeds=0,1 --executor=local --dry_run -- --env_name=cube-double-play-singletask-task2-v0
    python scripts/sweep.py --driver=main.py --grid=method=qc,qc-fql,bfn-n,bfn,fql-n,fql --tasks=1,2,3,4,5 \\
        --seeds=0,1,2,3 --sweep_name=paper_cube_double --executor=slurm --partition=gpu \\
        -- --env_name=cube-double-play-singletask-v0

Grid. `--grid=KEY=V1,V2,...` (repeatable) sweeps the driver flag `--KEY` (any flag of the driver, `method` and
`agent.KEY` keys included) over the values. Values are separated by `;` when the list contains a `;`, else by the
commas outside brackets, so a value that contains commas can be written either way:
`--grid='agent.actor_hidden_dims=(256,256),(512,512)'` or `--grid='agent.actor_hidden_dims=(256,256);(512,512)'`
(use `;` for a value with a comma outside brackets). `--seeds` and `--tasks` (which rewrites the task number of
`--env_name` by its family's `with_task`, which says which tasks exist; OGBench's 1-5:
`...-singletask[-taskN]-v0` -> `...-singletask-task{N}-v0`) take integers and ranges (`0-3`). The runs
are the cartesian product of the `--grid` axes in the order given, then the tasks, then the seeds (the last varies
fastest). Everything after `--` is passed to every run unchanged.

Each run is
`python <driver> <fixed flags> <grid flags> --seed=S --run_group=<sweep> --run_name=<name> --resume
--sweep_info=<JSON> --save_dir=<save_dir>`: its directory is `<save_dir>/<sweep>/<name>/`, its name is readable
(`cube-double-t2_h5_N32_sd0`: the env's short form, the swept values, the seed), and `--sweep_info`
(`{"sweep": ..., "swept": {flag: value}, "seed": S}`) is recorded in its `flags.json` and wandb config.

Seed groups. With `--seeds_per_process=S` (S > 1) the seeds of each grid point and task are cut, in the order of
`--seeds`, into groups of at most S consecutive seeds (`0-7` and S=3: 0-2, 3-5, 6-7); each group is one driver process
`... --seed=<first> --num_seeds=<size> --run_name=<name without _sd<seed>> ...` (agents vmapped), named
`<name>_sd<first>-<last>` (its log and SLURM array task), which writes the same run directories `<name>_sd<seed>/`
as one process per seed would. A group is finished when all of its runs are; when only some are, the others run
one seed per process (the commands of S=1). A group of one seed is an ordinary run.

Finished runs (`<run_dir>/DONE.json`) are skipped; running the same command again (same `--sweep_name`) relaunches
the others with `--resume`, so they continue from their latest saved state.

Executors. Each run is a `SweepRun` (scripts/sweeping/run.py). `local` (scripts/sweeping/local.py): at most
`--max_parallel` runs at once as subprocesses of this script, one log per run (`<save_dir>/<sweep>/logs/<name>.log`),
a summary at the end, exit status 1 if a run failed. `slurm` (scripts/sweeping/slurm.py): one job array through submitit
(`--partition`, `--gpus_per_job`, `--cpus_per_job`, `--mem_gb`, `--time_min`, `--array_parallelism`, any other
option with `--sbatch`), checked against the cluster before it is submitted; SLURM sends SIGUSR1
`--slurm_signal_delay_s` seconds before the time limit, the driver writes its state and exits with status 3, and the
job requeues itself (`SweepRun.checkpoint`), at most `--max_requeues` times per run, requeues by SLURM itself included.

Bad inputs (grid syntax, an unknown driver or flag, duplicate run names, no runs) end with one `error:` line and exit
status 2.
"""

import argparse
import collections
import dataclasses
import datetime
import importlib.util
import itertools
import json
import math
import os
import re
import shlex
import sys
from typing import List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

import envs  # noqa: E402
from runner import methods  # noqa: E402
from sweeping import local, slurm  # noqa: E402
from sweeping import values as grid_values  # noqa: E402
from sweeping.local import run_local  # noqa: E402,F401 - part of this module's interface (tests)
from sweeping.run import DONE_FILE, InputError, RunFailed, SweepRun, int_at_least  # noqa: E402,F401
from sweeping.slurm import make_slurm_executor, run_slurm, sbatch_preview  # noqa: E402,F401
from sweeping.values import typed  # noqa: E402,F401 - part of this module's interface
from utils.startup import ArgumentParser  # noqa: E402

DRIVERS = {"main.py": "main", "main_online.py": "main_online"}
# Flags every run gets from the sweep itself; they may appear neither in --grid nor after --.
SWEEP_FLAGS = ("seed", "run_group", "run_name", "resume", "start_if_missing", "sweep_info", "save_dir")
# How every run continues from its latest state, or starts when it has none. Once the drivers have
# --start_if_missing (--resume of a run that does not exist becomes an error), this is
# ("--resume", "--start_if_missing").
RESUME_FLAGS = ("--resume", "--start_if_missing")
# Short forms of common swept flags in run names (`h5`, `N32`); other flags are written `key=value`.
SHORT_KEYS = {
    "horizon_length": "h",
    "agent.actor_num_samples": "N",
    "agent.alpha": "alpha",
    "agent.bc_alpha": "bc",
    "utd_ratio": "utd",
    "agent.flow_steps": "fs",
    "agent.batch_size": "bs",
}
NAME_CHARS = "A-Za-z0-9._=-"
MAX_NAME_LENGTH = 200
_KEY_RE = re.compile(r"^(?:--)?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)$", re.S)


# ------------------------------------------------------------------------------------------------ grid


@dataclasses.dataclass(frozen=True)
class Axis:
    """One `--grid` axis: the driver flag `key` (without `--`) and its values as written."""

    key: str
    values: Tuple[str, ...]


def split_values(text: str) -> List[str]:
    """`sweeping.values.split_values` (`'1,5'` -> `['1', '5']`, `'(256,256);(512,512)'` -> two values), its
    `ValueError` an `InputError`."""
    try:
        return grid_values.split_values(text)
    except ValueError as e:
        raise InputError(str(e)) from None


def parse_grid(spec: str) -> Axis:
    """`KEY=V1,V2,...` (or `--KEY=...`) -> `Axis`; see `split_values` for the separators."""
    m = _KEY_RE.match(spec)
    if m is None:
        raise InputError(
            f"--grid={spec}: the form is --grid=KEY=V1,V2,... with KEY a flag of the driver (e.g. "
            "--grid=horizon_length=1,5 or --grid=agent.actor_num_samples=4,32)"
        )
    key = m.group(1)
    if key == "num_seeds":
        raise InputError(f"--grid={spec}: the sweep sets --num_seeds; use its --seeds_per_process")
    if key in SWEEP_FLAGS:
        what = "--seeds" if key == "seed" else "the sweep's own flags"
        raise InputError(f"--grid={spec}: --{key} is set by the sweep for every run (use {what})")
    return Axis(key, tuple(split_values(m.group(2))))


def parse_int_list(text: str, flag: str, low: int, high: Optional[int]) -> List[int]:
    """`'0,1,2'` or ranges `'0-3'` (inclusive), each in `[low, high]` (`high` None: no upper bound), no repeats."""
    numbers = []
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if m is None:
            raise InputError(f"--{flag}={text}: {item!r} is not an integer or a range A-B")
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last < first:
            raise InputError(f"--{flag}={text}: the range {item!r} is empty")
        numbers += range(first, last + 1)
    bad = [n for n in numbers if n < low or (high is not None and n > high)]
    if bad:
        raise InputError(f"--{flag}={text}: {bad[0]} is not in [{low}, {high}]" if high is not None else
                         f"--{flag}={text}: {bad[0]} is below {low}")  # fmt: skip
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise InputError(f"--{flag}={text}: {repeated[0]} is listed twice")
    return numbers


def with_task(env_name: str, task: int, flag: str = "--tasks") -> str:
    """The env name of task `task` of `env_name`'s domain and data (its family's `with_task`, e.g.
    `cube-double-play-singletask[-taskN]-v0` -> `cube-double-play-singletask-task{task}-v0`); `InputError` for an
    unknown name, a family or env without numbered tasks, or a task it does not have (its message, after `flag`
    where it does not name --tasks)."""
    try:
        name = envs.parse(env_name)
        return envs.family(name).with_task(name, task)
    except ValueError as e:
        raise InputError(str(e) if str(e).startswith("--tasks") else f"{flag}: {e}") from None


def env_short_name(env_name: str) -> str:
    """The env's name in run names (`EnvName.short`: `cube-double-play-singletask-task2-v0` -> `cube-double-t2`);
    an unknown name loses its `-v<N>` only."""
    try:
        return envs.parse(env_name).short
    except ValueError:
        return re.sub(r"-v\d+$", "", env_name)


def sanitize(text: str) -> str:
    """Characters outside `[A-Za-z0-9._=-]` dropped at either end and every run of them inside made one `-`:
    `(256,256)` -> `256-256`, while a value's own sign stays (`-1` -> `-1`, never `1`)."""
    text = re.sub(f"^[^{NAME_CHARS}]+|[^{NAME_CHARS}]+$", "", text)
    return re.sub(f"[^{NAME_CHARS}]+", "-", text)


def name_part(key: str, value: str) -> str:
    """A swept value in a run name: `h5`, `N32`, `qc-fql` (method), else `key=value` (`agent.` dropped)."""
    if key == "method":
        return sanitize(value)
    if key in SHORT_KEYS:
        return SHORT_KEYS[key] + sanitize(value)
    return f"{key.removeprefix('agent.')}={sanitize(value)}"


def flag_value(flags_list: Sequence[str], name: str) -> Optional[str]:
    """The value of `--name=V` (or `--name V`) in `flags_list`, the last one if repeated; None when absent."""
    value = None
    for i, word in enumerate(flags_list):
        m = re.match(rf"^--?{re.escape(name)}(?:=(.*))?$", word, re.S)
        if m:
            if m.group(1) is not None:
                value = m.group(1)
            elif i + 1 < len(flags_list):
                value = flags_list[i + 1]
    return value


def flag_names(flags_list: Sequence[str]) -> List[str]:
    """The names of the flags in `flags_list` (`--x=1`, `--x 1`, `--nox`, `-x`), in order."""
    return [m.group(1) for w in flags_list if (m := re.match(r"^--?([A-Za-z_][A-Za-z0-9_.]*)(?:=|$)", w))]


def without_flag(flags_list: Sequence[str], name: str) -> List[str]:
    """`flags_list` without `--name=V` / `--name V`."""
    out, skip = [], False
    for word in flags_list:
        if skip:
            skip = False
            continue
        m = re.match(rf"^--?{re.escape(name)}(=.*)?$", word, re.S)
        if m:
            skip = m.group(1) is None
            continue
        out.append(word)
    return out


# ------------------------------------------------------------------------------------------------ flag checks


def driver_flags(driver: str) -> Tuple[set, set]:
    """`(flag names of the driver, absl's own flags)`, from `runner.flags.define_flags` in a fresh `FlagValues`."""
    from absl import flags
    from absl import logging as _absl_logging  # noqa: F401 - defines absl's logging flags (--v, --logtostderr)

    fv = flags.FlagValues()
    argv = sys.argv
    sys.argv = argv[:1]  # ml_collections reads --agent.KEY overrides from sys.argv while defining --agent
    try:
        from runner.flags import define_flags

        define_flags(driver, flag_values=fv)
    finally:
        sys.argv = argv
    own = {name for name in fv if not name.startswith("agent.")}
    absl_own = set(flags.FLAGS) | {"flagfile", "undefok", "help", "helpshort", "helpfull", "helpxml"}
    return own, absl_own - own


def agent_file(driver: str, fixed: Sequence[str], method: Optional[str] = None) -> str:
    """The agent config file the runs build: `--agent=FILE` after `--`, else the agent of `method` (a swept
    `--method` value) or of `--method` after `--`, else the driver's default."""
    from runner.cli import default_agent_file

    argv = ["sweep", *fixed, *([f"--method={method}"] if method else [])]
    return flag_value(fixed, "agent") or default_agent_file(driver, argv)


def agent_keys(path: str) -> set:
    """The config keys of the agent config file `path`; `InputError` when it cannot be loaded."""
    try:
        spec = importlib.util.spec_from_file_location("_sweep_agent_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return set(module.get_config().keys())
    except Exception as e:  # noqa: BLE001 - any failure to load is a bad --agent file
        raise InputError(f"--agent={path}: cannot load the agent config file ({type(e).__name__}: {e})") from None


def check_flags(driver: str, axes: Sequence[Axis], fixed: Sequence[str]):
    """`InputError` for a swept or fixed flag the driver does not have, or a conflict between them. An `--agent.*`
    key must be a key of the agent of every swept `--method` value (each builds its own agent)."""
    own, absl_own = driver_flags(driver)
    script = next(f for f, d in DRIVERS.items() if d == driver)
    swept_methods = [None]
    for axis in axes:
        if axis.key == "method":
            for value in axis.values:
                if value not in methods.method_names(driver):
                    accepted = "|".join(methods.method_names(driver))
                    raise InputError(f"--grid=method=...: {value!r} is not a method of {script} ({accepted})")
            swept_methods = list(axis.values)
    files = {m: agent_file(driver, fixed, m) for m in swept_methods}
    keys_of = {path: agent_keys(path) for path in dict.fromkeys(files.values())}  # each file loaded once

    def unknown(name: str) -> Optional[str]:
        """Why `--name` is not a flag of every run, or None when it is."""
        for prefix in ("agent.", "noagent."):
            if name.startswith(prefix):
                key = name[len(prefix) :]
                lacking = [(m, path) for m, path in files.items() if key not in keys_of[path]]
                if not lacking:
                    return None
                m, path = lacking[0]
                if m is None:
                    return f"{script} has no flag --{name}"
                return f"the agent of --method={m} ({os.path.relpath(path)}) has no key {key}"
        everything = own | absl_own
        if name in everything or (name.startswith("no") and name[2:] in everything):
            return None
        return f"{script} has no flag --{name}"

    for axis in axes:
        if why := unknown(axis.key):
            raise InputError(f"--grid={axis.key}=...: {why}")
    fixed_names = flag_names(fixed)
    for name in fixed_names:
        if why := unknown(name):
            raise InputError(f"{why} (after --)")
        if name == "num_seeds":
            raise InputError(
                "--num_seeds (after --): the sweep sets it; use --seeds_per_process=S to train S seeds in one process"
            )
        base = name[2:] if name.startswith("no") and name[2:] in SWEEP_FLAGS else name
        if base in SWEEP_FLAGS:
            hint = ": pass --save_dir to the sweep itself" if base == "save_dir" else ""
            raise InputError(f"--{name} (after --) is set by the sweep for every run{hint}")
    for axis in axes:
        if axis.key in fixed_names or f"no{axis.key}" in fixed_names:
            raise InputError(f"--{axis.key} is both swept (--grid) and fixed (after --)")


# ------------------------------------------------------------------------------------------------ runs


def seed_groups(seeds: List[int], per_process: int, text: str) -> List[List[int]]:
    """`seeds` cut, in order, into groups of `per_process` (the last may be smaller), each of consecutive seeds.

    A process trains seeds `--seed .. --seed+num_seeds-1`, so `InputError` for a group that is not `s, s+1, ...`.
    """
    groups = [seeds[i : i + per_process] for i in range(0, len(seeds), per_process)]
    for group in groups:
        if group != list(range(group[0], group[0] + len(group))):
            raise InputError(
                f"--seeds={text} with --seeds_per_process={per_process}: the seeds {','.join(map(str, group))} would "
                f"share one process, which trains consecutive seeds (s, s+1, ...); list the seeds so that each "
                f"{per_process} in a row are consecutive (e.g. --seeds=0-{2 * per_process - 1})"
            )
    return groups


def build_runs(args, fixed: List[str]) -> List[SweepRun]:
    """Expand the grid into `SweepRun`s (product of the axes in order, then tasks, then seeds).

    With `--seeds_per_process` > 1, one `SweepRun` per seed group (`seed_groups`), except that a group with some
    runs finished and others not becomes one single-seed run per seed (the driver resumes no partly finished group).
    """
    driver = DRIVERS[os.path.basename(args.driver)]
    axes = [parse_grid(g) for g in args.grid]
    keys = [a.key for a in axes]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise InputError(f"--grid={repeated[0]}=... is given twice; list all its values in one --grid")
    seeds = parse_int_list(args.seeds, "seeds", 0, 2**32 - 1)
    groups = seed_groups(seeds, args.seeds_per_process, args.seeds)
    tasks = parse_int_list(args.tasks, "tasks", 1, None) if args.tasks else None  # which exist: the family's
    if tasks is not None and "env_name" in keys:
        raise InputError("--tasks and --grid=env_name=... together: list the env names with their tasks instead")
    check_flags(driver, axes, fixed)
    size = math.prod(len(a.values) for a in axes) * len(tasks or [None]) * len(seeds)
    if size > LARGE_SWEEP and not args.dry_run and args.confirm_runs != size:
        raise InputError(
            f"this sweep would start {size} runs (more than {LARGE_SWEEP}); look at it with --dry_run, then pass "
            f"--confirm_runs={size} to start it"
        )
    if size >= 100:  # where checking them takes a while: say first what it is checking
        print(f"sweep {args.sweep_name}: {size} runs of {driver}.py ({size // len(seeds)} setting(s) x "
              f"{len(seeds)} seed(s)); checking them with the driver", file=sys.stderr, flush=True)  # fmt: skip
    sweep = args.sweep_name
    from runner.flags import DEFAULT_ENV

    base_env = flag_value(fixed, "env_name") or DEFAULT_ENV
    if tasks is not None:
        for task in tasks:  # the family's with_task says which tasks exist (OGBench: 1-5; none: no numbered tasks)
            with_task(base_env, task, f"--tasks={args.tasks}")
        fixed = without_flag(fixed, "env_name")
    python = slurm.job_python(args) if args.executor == "slurm" else sys.executable
    driver_path = args.driver_path
    cwd = os.getcwd()

    def make_run(swept, run_flags, name, seed, num_seeds, run_name, run_dirs=None, group_name=None):
        """One driver process: seeds `seed .. seed+num_seeds-1` of the grid point `swept`."""
        info = {"sweep": sweep, "swept": {k: typed(v) for k, v in swept.items()}, "seed": seed}
        command = [
            python,
            driver_path,
            *fixed,
            *run_flags,
            f"--seed={seed}",
            *([f"--num_seeds={num_seeds}"] if num_seeds > 1 else []),
            f"--run_group={sweep}",
            f"--run_name={run_name}",
            *RESUME_FLAGS,
            "--sweep_info=" + json.dumps(info, separators=(",", ":")),
            f"--save_dir={args.save_dir}",
        ]
        return SweepRun(
            name=name,
            command=command,
            run_dir=(run_dirs or [os.path.join(args.save_dir, sweep, name)])[0],
            log_path=os.path.join(args.save_dir, sweep, "logs", f"{name}.log"),
            cwd=cwd,
            max_requeues=args.max_requeues,
            signal_grace_s=max(10.0, args.slurm_signal_delay_s - 30.0),
            run_dirs=run_dirs,
            group_name=group_name,
            expect_gpus=args.executor == "slurm" and args.expect_gpus,
        )

    runs, names = [], []  # names: every run's and seed group's name, whether launched or not
    for combo in itertools.product(*[a.values for a in axes], tasks or [None]):
        *values, task = combo
        swept = dict(zip(keys, values, strict=True))
        env_name = swept.get("env_name", base_env)
        run_flags = [f"--{k}={v}" for k, v in swept.items()]
        if task is not None:
            env_name = with_task(base_env, task)
            swept = {"env_name": env_name, **swept}
            run_flags = [f"--env_name={env_name}"] + run_flags
        parts = [sanitize(env_short_name(env_name))] + [name_part(k, v) for k, v in swept.items() if k != "env_name"]
        parts = [p for p in parts if p]
        for group in groups:
            # The driver names a group member's directory <run_name>_sd<seed>: the single-seed run's name.
            single_names = ["_".join(parts + [f"sd{seed}"]) for seed in group]
            names += single_names
            if len(group) == 1:
                runs.append(make_run(swept, run_flags, single_names[0], group[0], 1, single_names[0]))
                continue
            group_name = "_".join(parts + [f"sd{group[0]}-{group[-1]}"])
            names.append(group_name)
            run_dirs = [os.path.join(args.save_dir, sweep, n) for n in single_names]
            finished = [
                n for n, d in zip(single_names, run_dirs, strict=True) if os.path.exists(os.path.join(d, DONE_FILE))
            ]
            if not finished or len(finished) == len(group):
                runs.append(make_run(swept, run_flags, group_name, group[0], len(group), "_".join(parts), run_dirs))
                continue
            print(
                f"seed group {group_name}: {', '.join(finished)} finished, the others run one seed per process",
                file=sys.stderr,
            )
            for seed, name in zip(group, single_names, strict=True):
                runs.append(make_run(swept, run_flags, name, seed, 1, name, group_name=group_name))
    if not runs:
        raise InputError("the sweep has no runs")
    counts = collections.Counter(names)
    duplicates = sorted(n for n, c in counts.items() if c > 1)
    if duplicates:
        raise InputError(
            f"run name {duplicates[0]} is given to {counts[duplicates[0]]} runs (values that differ only in "
            f"characters outside [{NAME_CHARS}]?); make the grid values distinct"
        )
    assert len({r.name for r in runs}) == len(runs)
    too_long = [n for n in names if len(n) > MAX_NAME_LENGTH]
    if too_long:
        raise InputError(f"run name {too_long[0]} is longer than {MAX_NAME_LENGTH} characters; sweep fewer flags")
    return runs


# ------------------------------------------------------------------------------------------------ command line


_Parser = ArgumentParser  # one `error:` line (utils.startup); scripts/reproduce.py builds its parser with it


LARGE_SWEEP = 1000  # runs: more need --confirm_runs


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python scripts/sweep.py",
        usage="%(prog)s --driver=main.py [--grid=KEY=V1,V2 ...] [--seeds=0,1] [--tasks=1-5] [options] "
        "-- [flags for every run]",
        description="Launch a grid of main.py / main_online.py runs locally or as a SLURM job array; finished "
        "runs are skipped and unfinished ones resumed when the same command runs again.",
    )
    add = parser.add_argument
    add("--driver", required=True, help="The driver every run executes: main.py or main_online.py.")
    add(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="Sweep the driver flag --KEY (e.g. horizon_length, method, agent.actor_num_samples) over the values; "
        "repeatable (one axis each). Values are split on ';' when the list has one, else on the commas outside "
        "brackets: 'agent.actor_hidden_dims=(256,256),(512,512)' or '...=(256,256);(512,512)'.",
    )
    add("--seeds", default="0", help="Seeds of every grid point: a list and ranges, e.g. 0,1 or 0-3 (default: 0).")
    add(
        "--seeds_per_process",
        type=int_at_least(1),
        default=1,
        metavar="S",
        help="Train up to S seeds in one driver process (the driver's --num_seeds, agents vmapped): the --seeds of "
        "each grid point and task are cut, in the order given, into groups of S (the last may be smaller), each of "
        "consecutive seeds, one process (and SLURM array task) per group, named <run>_sd<first>-<last>. Every seed "
        "still gets its own run directory <run>_sd<seed>, as with one seed per process (default: 1).",
    )
    add(
        "--tasks",
        help="Task numbers, those the --env_name's family has (OGBench: 1-5): each run's --env_name becomes that "
        "task's (OGBench: ...-singletask-task{N}-v0; the --env_name after -- gives the domain and dataset type).",
    )
    add(
        "--sweep_name",
        default=None,
        help="Name of the sweep: the runs' --run_group (wandb group) and directory <save_dir>/<sweep_name>/. "
        "Default: sweep_<timestamp>; give the same name again to resume a sweep.",
    )
    add(
        "--save_dir",
        default="exp/",
        type=os.path.expanduser,
        help="Root directory of the runs' outputs, passed to every run (default: exp/).",
    )
    add("--executor", choices=("local", "slurm"), default="local", help="Where the runs execute (default: local).")
    add("--dry_run", action="store_true", help="Print each run's command (one a line, shell-quoted) and exit.")
    add(
        "--confirm_runs",
        type=int,
        default=None,
        metavar="N",
        help=f"A sweep of more than {LARGE_SWEEP} runs starts only with --confirm_runs=N, N its number of runs (the "
        "first line of every sweep, --dry_run included, says it).",
    )
    add(
        "--max_requeues",
        type=int_at_least(0),
        default=10,
        help="Most relaunches of one run with --resume (SLURM requeues after a preemption or the time limit, and "
        "relaunches after an exit status 3 the sweep did not cause) before it counts as failed (default: 10).",
    )
    local.add_arguments(parser)
    slurm.add_arguments(parser)
    return parser


def check_with_driver(driver: str, runs: List[SweepRun]):
    """Ask the driver's own parser about every run before anything starts (`--dry_run` too).

    Raises `InputError` for a run the driver would refuse (a grid value of the wrong type or range, a
    contradiction with `--method`, ...), and for finished runs whose recorded settings (`flags.json`) differ
    from what the sweep would launch now: their results would stand for settings they were not made with.
    """
    from runner import cli, resume, setup
    from runner.config import config_from_argv
    from utils.progress import progress

    differ, parsed = [], {}
    # Seeds, run names and the sweep record change no check: each setting is parsed once, then only they change.
    per_run = {f"--{k}=": k for k in ("seed", "run_name", "sweep_info")}
    for run in progress(runs, desc="checking runs", unit="runs", delay=3, disable=len(runs) < 100):
        setting = tuple(a for a in run.command[2:] if not a.startswith(tuple(per_run)))
        if setting not in parsed:
            try:
                parsed[setting] = config_from_argv(driver, run.command[2:])
            except cli.InputError as e:
                raise InputError(f"run {run.name}: the driver would refuse it: {e}") from None
        own = {per_run[p]: a[len(p) :] for a in run.command[2:] for p in per_run if a.startswith(p)}
        cfg = parsed[setting].replace(**{**own, "seed": int(own["seed"])})
        try:
            cfg.check_seeds()
        except ValueError as e:
            raise InputError(f"run {run.name}: the driver would refuse it: {e}") from None
        try:
            resume.check_group_members(setup.seed_configs(cfg))
        except ValueError as e:
            raise InputError(f"run {run.name}: {str(e).removeprefix('--resume: ')}") from None
        for seed_cfg in setup.seed_configs(cfg):
            run_dir = resume.run_dir_of(seed_cfg)
            if not os.path.isfile(os.path.join(run_dir, DONE_FILE)):
                continue
            try:
                changed = resume.changed_settings(resume.read_record(run_dir), seed_cfg.flag_values, seed_cfg.agent)
            except ValueError as e:
                raise InputError(str(e)) from None
            if changed:
                differ.append(f"{os.path.basename(run_dir)} ({'; '.join(changed)})")
    if differ:
        listed = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise InputError(
            f"{len(differ)} finished run(s) of this sweep were made with other settings than it would launch now: "
            f"{listed}; choose another --sweep_name, or remove those run directories to run them again"
        )


def resolve_driver(driver: str) -> str:
    """The driver's path: as given when it exists, else in the repository root; `InputError` if unknown."""
    if os.path.basename(driver) not in DRIVERS:
        raise InputError(f"--driver={driver}: unknown driver (one of {', '.join(DRIVERS)})")
    if os.path.isfile(driver):
        return driver
    path = os.path.join(ROOT, os.path.basename(driver))
    if os.path.isfile(path):
        return path
    raise InputError(f"--driver={driver}: no such file")


def run(args, fixed: List[str]) -> int:
    """The command: expand, skip finished runs, print or launch; raises `InputError` for bad inputs."""
    if args.sweep_name is None:
        args.sweep_name = datetime.datetime.now().strftime("sweep_%Y%m%d_%H%M%S")
    if not re.fullmatch(f"[{NAME_CHARS}]+", args.sweep_name) or args.sweep_name in (".", ".."):
        raise InputError(f"--sweep_name={args.sweep_name}: use only the characters [{NAME_CHARS}]")
    slurm.check_args(args)
    if os.path.exists(args.save_dir) and not os.path.isdir(args.save_dir):
        raise InputError(f"--save_dir={args.save_dir} is a file, not a directory")
    args.driver_path = resolve_driver(args.driver)
    runs = build_runs(args, fixed)
    check_with_driver(DRIVERS[os.path.basename(args.driver)], runs)
    skipped = [r for r in runs if r.is_done()]
    todo = [r for r in runs if not r.is_done()]
    for run in skipped:
        print(f"skip (finished, {', '.join(run.done_paths)}): {run.name}", file=sys.stderr)
    queued = {}
    if args.executor == "slurm" and not args.dry_run:
        slurm.check_environment(args)
        if not args.ignore_queued:
            todo, queued = slurm.skip_queued(todo, args)
    if args.dry_run:
        for run in todo:
            print(shlex.join(run.command))
        if args.executor == "slurm" and todo:
            slurm.dry_run(args, len(todo))
        return 0
    how = f"at most {args.max_parallel} at once" if args.executor == "local" else "one SLURM job array"
    per_process = f" (processes of up to {args.seeds_per_process} seeds)" if args.seeds_per_process > 1 else ""
    print(
        f"sweep {args.sweep_name}: {len(runs)} runs{per_process}, {len(skipped)} finished before, "
        + (f"{len(runs) - len(skipped) - len(todo)} queued or running, " if queued else "")
        + f"{len(todo)} to run ({how}); "
        f"outputs in {os.path.join(args.save_dir, args.sweep_name)}/",
        flush=True,
    )
    if not todo:
        print(f"sweep {args.sweep_name}: nothing to do, every run is finished or queued")
        return 0
    if args.executor == "local":
        return run_local(todo, skipped, args)
    return run_slurm(todo, args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: the sweep's flags, then `--`, then the flags of every run; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, fixed = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    try:
        args = make_parser().parse_args(own)
    except SystemExit as e:  # --help (0) or a bad option (2, its error line printed)
        return int(e.code or 0)
    try:
        return run(args, fixed)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
