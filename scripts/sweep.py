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
`--env_name`: `...-singletask[-taskN]-v0` -> `...-singletask-task{N}-v0`) take integers and ranges (`0-3`). The runs
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

Executors. `local`: at most `--max_parallel` runs at once as subprocesses of this script, one log per run
(`<save_dir>/<sweep>/logs/<name>.log`), a summary at the end, exit status 1 if a run failed. `slurm`: one job array
through submitit (`--partition`, `--gpus_per_job`, `--cpus_per_job`, `--mem_gb`, `--time_min`,
`--array_parallelism`); SLURM sends SIGUSR1 `--slurm_signal_delay_s` seconds before the time limit, the driver
writes its state and exits with status 3, and the job requeues itself (`SweepRun.checkpoint`), at most
`--max_requeues` times per run.

Bad inputs (grid syntax, an unknown driver or flag, duplicate run names, no runs) end with one `error:` line and exit
status 2.
"""

import argparse
import concurrent.futures
import dataclasses
import datetime
import fcntl
import importlib.util
import itertools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import submitit

# Make the repository root importable when run as `python scripts/sweep.py`.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import agents  # noqa: E402
from runner import methods  # noqa: E402

DRIVERS = {"main.py": "main", "main_online.py": "main_online"}
DONE_FILE = "DONE.json"
EXIT_STATE_SAVED = 3  # the drivers' exit status after SIGTERM/SIGUSR1: state written, run not finished
PREEMPT_SIGNAL = "USR1"  # SLURM's warning signal: the drivers and the submitit job both handle it
# Flags every run gets from the sweep itself; they may appear neither in --grid nor after --.
SWEEP_FLAGS = ("seed", "run_group", "run_name", "resume", "sweep_info", "save_dir")
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
_OGBENCH_TASK_RE = re.compile(r"^(?P<base>.+?)-(?P<type>play|noisy)-singletask(?:-task(?P<task>\d+))?-(?P<v>v\d+)$")


class InputError(Exception):
    """A bad input: reported as one `error:` line with exit status 2."""


class RunFailed(Exception):
    """A run's driver exited with a failure status (or exhausted its relaunches)."""

    def __init__(self, name: str, returncode: int, log_path: str, why: str = ""):
        self.name, self.returncode, self.log_path = name, returncode, log_path
        super().__init__(f"run {name}: the driver exited with status {returncode}{why}; its output is in {log_path}")


# ------------------------------------------------------------------------------------------------ grid


@dataclasses.dataclass(frozen=True)
class Axis:
    """One `--grid` axis: the driver flag `key` (without `--`) and its values as written."""

    key: str
    values: Tuple[str, ...]


def split_values(text: str) -> List[str]:
    """The values of one `--grid` list: split on `;` when it has one, else on commas outside brackets.

    `'1,5'` -> `['1', '5']`; `'(256,256),(512,512)'` -> `['(256,256)', '(512,512)']`;
    `'(256,256);(512,512)'` -> the same. Spaces around values are dropped. Raises `InputError` for an
    empty value, unbalanced brackets or a repeated value.
    """
    if ";" in text:
        values = text.split(";")
    else:
        values, depth, current = [], 0, ""
        for ch in text:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    break
            if ch == "," and depth == 0:
                values.append(current)
                current = ""
            else:
                current += ch
        if depth != 0:
            raise InputError(f"unbalanced brackets in the grid values {text!r} (separate values with ';' instead)")
        values.append(current)
    values = [v.strip() for v in values]
    if any(not v for v in values):
        raise InputError(f"empty value in the grid values {text!r}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise InputError(f"the grid values {text!r} list {repeated[0]!r} twice")
    return values


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


def parse_int_list(text: str, flag: str, low: int, high: int) -> List[int]:
    """`'0,1,2'` or ranges `'0-3'` (inclusive), each in `[low, high]`, no repeats."""
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
    bad = [n for n in numbers if not low <= n <= high]
    if bad:
        raise InputError(f"--{flag}={text}: {bad[0]} is not in [{low}, {high}]")
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise InputError(f"--{flag}={text}: {repeated[0]} is listed twice")
    return numbers


def with_task(env_name: str, task: int) -> str:
    """`cube-double-play-singletask[-taskN]-v0` -> `cube-double-play-singletask-task{task}-v0`."""
    m = _OGBENCH_TASK_RE.match(env_name)
    if m is None:
        raise InputError(
            f"--tasks needs an OGBench single-task --env_name (<domain>-play-singletask[-taskN]-v0), got {env_name}"
        )
    return f"{m['base']}-{m['type']}-singletask-task{task}-{m['v']}"


def env_short_name(env_name: str) -> str:
    """`cube-double-play-singletask-task2-v0` -> `cube-double-t2` (`-noisy` kept); others lose `-v0`."""
    m = _OGBENCH_TASK_RE.match(env_name)
    if m is None:
        return re.sub(r"-v\d+$", "", env_name)
    name = m["base"] + ("-noisy" if m["type"] == "noisy" else "")
    return name + (f"-t{m['task']}" if m["task"] else "")


def sanitize(text: str) -> str:
    """Every run of characters outside `[A-Za-z0-9._=-]` becomes one `-` (none at either end)."""
    return re.sub(f"[^{NAME_CHARS}]+", "-", text).strip("-")


def name_part(key: str, value: str) -> str:
    """A swept value in a run name: `h5`, `N32`, `qc-fql` (method), else `key=value` (`agent.` dropped)."""
    if key == "method":
        return sanitize(value)
    if key in SHORT_KEYS:
        return SHORT_KEYS[key] + sanitize(value)
    return f"{key.removeprefix('agent.')}={sanitize(value)}"


def typed(value: str):
    """A grid value as recorded in `--sweep_info`: an int, float or bool when it reads as one, else the text."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value
    return value


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


def agent_keys(driver: str, fixed: Sequence[str]) -> set:
    """The config keys of the agent the runs build (`--agent=FILE` after `--`, else the driver's default)."""
    path = flag_value(fixed, "agent") or agents.CONFIG_FILES[agents.default_agent(driver).name]
    try:
        spec = importlib.util.spec_from_file_location("_sweep_agent_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return set(module.get_config().keys())
    except Exception as e:  # noqa: BLE001 - any failure to load is a bad --agent file
        raise InputError(f"--agent={path}: cannot load the agent config file ({type(e).__name__}: {e})") from None


def check_flags(driver: str, axes: Sequence[Axis], fixed: Sequence[str]):
    """`InputError` for a swept or fixed flag the driver does not have, or a conflict between them."""
    own, absl_own = driver_flags(driver)
    keys = agent_keys(driver, fixed)
    script = next(f for f, d in DRIVERS.items() if d == driver)

    def known(name: str) -> bool:
        for prefix in ("agent.", "noagent."):
            if name.startswith(prefix):
                return name[len(prefix) :] in keys
        everything = own | absl_own
        return name in everything or (name.startswith("no") and name[2:] in everything)

    for axis in axes:
        if not known(axis.key):
            raise InputError(f"--grid={axis.key}=...: {script} has no flag --{axis.key}")
    fixed_names = flag_names(fixed)
    for name in fixed_names:
        if not known(name):
            raise InputError(f"{script} has no flag --{name} (after --)")
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
        if axis.key == "method":
            for value in axis.values:
                if value not in methods.method_names(driver):
                    accepted = "|".join(methods.method_names(driver))
                    raise InputError(f"--grid=method=...: {value!r} is not a method of {script} ({accepted})")


# ------------------------------------------------------------------------------------------------ runs


class SweepRun(submitit.helpers.Checkpointable):
    """One run of the sweep: the driver as a subprocess with `--resume`, its output appended to `log_path`.

    The same object runs locally (called from the local executor's threads) and as a submitit job. Protocol:

    * `DONE.json` in `run_dir` already (for a seed group, in every directory of `run_dirs`): nothing to do
      (`status: skipped`).
    * The driver exits 0: `status: finished`.
    * It exits 3 (its state is written) while no preemption was signalled to this wrapper: it is relaunched
      in place with `--resume` (a requeue within the same job), at most `max_requeues` times in all (then
      `RunFailed`). When this process got SIGTERM too (a SLURM job being preempted, cancelled or at its time
      limit), it is not relaunched: `status: stopped` (SLURM requeues a preempted job itself).
    * Any other status: `RunFailed` (a failed submitit job; the local summary lists it).
    * `checkpoint()` (submitit calls it on SIGUSR1, SLURM's warning before the time limit or a preemption):
      forwards SIGUSR1 to the driver, waits up to `signal_grace_s` for it to write its state and exit, and returns
      a `DelayedSubmission` of itself with one more requeue counted, which submitit pickles and requeues
      (`scontrol requeue`); the requeued job starts the driver again with `--resume`. After `max_requeues`
      requeues it returns None: the job ends, not requeued.
    """

    RELAUNCH_DELAY_S = 1.0  # pause before an in-place relaunch

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        run_dir: str,
        log_path: str,
        cwd: str,
        max_requeues: int = 10,
        signal_grace_s: float = 240.0,
        env: Optional[Dict[str, str]] = None,
        run_dirs: Optional[Sequence[str]] = None,
        group_name: Optional[str] = None,
    ):
        """`run_dirs`: a seed group's run directories (`--num_seeds`), one per seed, `run_dir` the first one's;
        default `[run_dir]`. `group_name`: the seed group a single-seed run belongs to when its group was split
        (some seeds finished), so that a job of the whole group still queued is recognised."""
        self.name = name
        self.command = list(command)
        self.run_dir = run_dir
        self.run_dirs = list(run_dirs) if run_dirs else [run_dir]
        self.group_name = group_name
        self.log_path = log_path
        self.cwd = cwd
        self.max_requeues = max_requeues
        self.signal_grace_s = signal_grace_s
        self.env = dict(env or {})
        self.requeues = 0
        self.launches = 0
        self._init_runtime()

    def _init_runtime(self):
        self._proc: Optional[subprocess.Popen] = None
        self._exited = threading.Event()
        self._returncode: Optional[int] = None
        self._signalled = False  # checkpoint() was called: a preemption or the time limit
        self._stopping = False  # the local executor is stopping: no relaunch
        self._terminated = False  # this process got SIGTERM (a SLURM job: preemption, scancel, time limit)
        self.pass_fds: Tuple[int, ...] = ()  # local: the sweep's lock, held while the driver lives
        self.new_session = False  # local: Ctrl-C reaches the sweep only, which stops the drivers with SIGTERM

    def __getstate__(self):
        runtime = ("pass_fds", "new_session")
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in runtime}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def done_path(self) -> str:
        return os.path.join(self.run_dir, DONE_FILE)

    @property
    def done_paths(self) -> List[str]:
        return [os.path.join(d, DONE_FILE) for d in self.run_dirs]

    @property
    def seed_names(self) -> List[str]:
        """The names of the run directories this process trains (one per seed; `[name]` for a single seed)."""
        return [os.path.basename(os.path.normpath(d)) for d in self.run_dirs]

    def is_done(self) -> bool:
        """Whether every run of this process is finished (`DONE.json` in each run directory)."""
        return all(os.path.exists(p) for p in self.done_paths)

    def note(self, message: str):
        """Append `[sweep <time>] message` to the run's log."""
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        with open(self.log_path, "a") as f:
            f.write(f"[sweep {datetime.datetime.now().isoformat(timespec='seconds')}] {message}\n")

    def _run_driver(self) -> int:
        self.launches += 1
        self.note(f"launch {self.launches} (requeues so far: {self.requeues}): {shlex.join(self.command)}")
        self._exited.clear()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=self.pass_fds,
                start_new_session=self.new_session,
            )
        if self._stopping:  # stop() came while the driver was starting
            self.signal_driver(signal.SIGTERM)

        def wait():
            self._returncode = self._proc.wait()
            self._exited.set()

        threading.Thread(target=wait, name=f"wait-{self.name}", daemon=True).start()
        # Short waits: a signal handler (submitit's, on the main thread) runs between them.
        while not self._exited.wait(0.5):
            pass
        self.note(f"the driver exited with status {self._returncode}")
        return self._returncode

    def signal_driver(self, signum: int) -> bool:
        """Send `signum` to the running driver; False when none is running."""
        if self._proc is None or self._exited.is_set():
            return False
        try:
            os.kill(self._proc.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def stop(self):
        """Local executor: no relaunch from now on, and SIGTERM to the driver (it writes its state, exits 3)."""
        self._stopping = True
        self.signal_driver(signal.SIGTERM)

    def __call__(self) -> Dict:
        if self.is_done():
            if len(self.run_dirs) == 1:
                self.note(f"{self.done_path} exists: the run is finished, nothing to do")
            else:
                self.note(f"{', '.join(self.done_paths)} exist: the seed group is finished, nothing to do")
            return {"name": self.name, "status": "skipped", "returncode": 0, "requeues": self.requeues}
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.getsignal(signal.SIGTERM) if main_thread else None

        def on_sigterm(signum, frame):  # a SLURM job: remember it, then what was there (submitit logs it)
            self._terminated = True
            if callable(previous):
                previous(signum, frame)

        if main_thread:
            signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return self._run_until_done()
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous)

    def _run_until_done(self) -> Dict:
        while True:
            if self._stopping:
                return {"name": self.name, "status": "stopped", "returncode": None, "requeues": self.requeues}
            rc = self._run_driver()
            if rc == 0:
                return {"name": self.name, "status": "finished", "returncode": 0, "requeues": self.requeues}
            if self._signalled or self._stopping:  # stopped from outside: its state is written (exit 3) or not
                return {"name": self.name, "status": "stopped", "returncode": rc, "requeues": self.requeues}
            if rc == EXIT_STATE_SAVED and self._terminated:
                self.note(
                    "SIGTERM to this job too (preemption, scancel or the time limit): not relaunched here; SLURM "
                    "requeues a preempted job itself, else run the sweep command again to resume"
                )
                return {"name": self.name, "status": "stopped", "returncode": rc, "requeues": self.requeues}
            if rc != EXIT_STATE_SAVED:
                raise RunFailed(self.name, rc, self.log_path)
            if self.requeues >= self.max_requeues:
                raise RunFailed(self.name, rc, self.log_path, f" after {self.requeues} relaunches (--max_requeues)")
            self.requeues += 1
            self.note(
                f"exit status {rc} without a preemption signal to the sweep: relaunching with --resume "
                f"({self.requeues}/{self.max_requeues})"
            )
            time.sleep(self.RELAUNCH_DELAY_S)

    def checkpoint(self, *args, **kwargs) -> Optional[submitit.helpers.DelayedSubmission]:
        self._signalled = True
        if self.signal_driver(getattr(signal, f"SIG{PREEMPT_SIGNAL}")):
            self.note(f"SIG{PREEMPT_SIGNAL}: forwarded to the driver; waiting up to {self.signal_grace_s:g} s")
            if not self._exited.wait(self.signal_grace_s):
                self.note("the driver is still writing: requeued anyway (it resumes from its latest complete state)")
        if self.requeues >= self.max_requeues:
            self.note(f"not requeued: requeued {self.requeues} times already (--max_requeues)")
            return None
        self.requeues += 1
        self.note(f"requeued ({self.requeues}/{self.max_requeues}): the next job continues with --resume")
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


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
    tasks = parse_int_list(args.tasks, "tasks", 1, 5) if args.tasks else None
    if tasks is not None and "env_name" in keys:
        raise InputError("--tasks and --grid=env_name=... together: list the env names with their tasks instead")
    check_flags(driver, axes, fixed)
    sweep = args.sweep_name
    from runner.flags import DEFAULT_ENV

    base_env = flag_value(fixed, "env_name") or DEFAULT_ENV
    if tasks is not None:
        with_task(base_env, 1)  # raises for an env without tasks
        fixed = without_flag(fixed, "env_name")
    python = sys.executable
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
            "--resume",
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
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InputError(
            f"run name {duplicates[0]} is given to {names.count(duplicates[0])} runs (values that differ only in "
            f"characters outside [{NAME_CHARS}]?); make the grid values distinct"
        )
    assert len({r.name for r in runs}) == len(runs)
    too_long = [n for n in names if len(n) > MAX_NAME_LENGTH]
    if too_long:
        raise InputError(f"run name {too_long[0]} is longer than {MAX_NAME_LENGTH} characters; sweep fewer flags")
    return runs


# ------------------------------------------------------------------------------------------------ executors


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run_local(runs: List[SweepRun], skipped: List[SweepRun], args) -> int:
    """Run at most `--max_parallel` runs at once; print a summary; 1 if a run failed, 128+signal if stopped."""
    group_dir = os.path.join(args.save_dir, args.sweep_name)
    os.makedirs(os.path.join(group_dir, "logs"), exist_ok=True)
    lock_fd = os.open(os.path.join(group_dir, ".sweep.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise InputError(
            f"sweep {args.sweep_name} is running already on this machine ({group_dir}/.sweep.lock is held by it or "
            "by one of its runs)"
        ) from None
    gpus = [g.strip() for g in args.local_gpus.split(",") if g.strip()] if args.local_gpus else []
    busy = {g: 0 for g in gpus}
    lock = threading.Lock()
    shared = args.max_parallel > max(1, len(gpus))

    def task(run: SweepRun):
        with lock:
            gpu = min(gpus, key=lambda g: busy[g]) if gpus else None
            if gpu is not None:
                busy[gpu] += 1
        if gpu is not None:
            run.env["CUDA_VISIBLE_DEVICES"] = gpu
        if shared and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
            run.env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # runs share a device: no 75% preallocation each
        run.pass_fds, run.new_session = (lock_fd,), True
        start[run.name] = time.time()
        print(f"started {run.name} (log: {run.log_path})", flush=True)
        try:
            return run()
        finally:
            if gpu is not None:
                with lock:
                    busy[gpu] -= 1

    results: Dict[str, Tuple[str, int]] = {}
    start: Dict[str, float] = {}
    stopped_by = None
    main_thread = threading.current_thread() is threading.main_thread()
    # SIGINT gets its own handler too: a sweep started from a non-interactive shell in the background inherits
    # SIGINT as ignored, and Python then never raises KeyboardInterrupt.
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main_thread else None

    def on_sigterm(signum, frame):
        raise _Stop(signum)

    if previous is not None:
        for signum in previous:
            signal.signal(signum, on_sigterm)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.max_parallel)
    futures = {pool.submit(task, r): r for r in runs}
    try:
        pending = set(futures)
        while pending:
            finished, pending = concurrent.futures.wait(pending, timeout=0.5)
            for fut in finished:
                run = futures[fut]
                took = _duration(time.time() - start[run.name])
                try:
                    result = fut.result()
                    results[run.name] = (result["status"], 0)
                    print(f"[{len(results)}/{len(runs)}] {result['status']} {run.name} ({took})", flush=True)
                except RunFailed as e:
                    results[run.name] = ("failed", e.returncode)
                    print(f"[{len(results)}/{len(runs)}] FAILED {run.name}: {e}", flush=True)
    except (KeyboardInterrupt, _Stop) as e:
        stopped_by = e.signum if isinstance(e, _Stop) else signal.SIGINT
        print("stopping: SIGTERM to every running driver (each writes its state)...", file=sys.stderr, flush=True)
        for fut, run in futures.items():
            fut.cancel()
            run.stop()
        try:
            for fut, run in futures.items():
                if fut.cancelled():
                    continue
                try:
                    result = fut.result()
                    results.setdefault(run.name, (result["status"], result["returncode"]))
                except RunFailed as failure:
                    results.setdefault(run.name, ("failed", failure.returncode))
        except (KeyboardInterrupt, _Stop):
            print("not waiting any longer: the drivers finish writing their states on their own", file=sys.stderr)
    finally:
        pool.shutdown(wait=stopped_by is None, cancel_futures=True)
        if previous is not None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        os.close(lock_fd)
    finished = [r.name for r in runs if results.get(r.name, ("",))[0] in ("finished", "skipped")]
    failed = [r for r in runs if results.get(r.name, ("",))[0] == "failed"]
    stopped = [r.name for r in runs if results.get(r.name, ("",))[0] == "stopped"]
    not_started = [r.name for r in runs if r.name not in results]
    print(
        f"sweep {args.sweep_name}: {len(finished)} finished, {len(failed)} failed, {len(skipped)} skipped "
        f"(finished before)" + (f", {len(stopped) + len(not_started)} stopped or not started" if stopped_by else "")
    )
    if finished:
        print("  finished: " + ", ".join(finished))
    for run in failed:
        print(f"  failed: {run.name} (exit status {results[run.name][1]}; log: {run.log_path})")
    if skipped:
        print("  skipped: " + ", ".join(r.name for r in skipped))
    if stopped_by is not None:
        if stopped or not_started:
            print("  stopped or not started: " + ", ".join(stopped + not_started))
        print(f"  run the same command (--sweep_name={args.sweep_name}) to continue them")
        return 128 + int(stopped_by)
    return 1 if failed else 0


def slurm_parameters(args, num_runs: int) -> Dict:
    """The `SlurmExecutor.update_parameters` keywords of the sweep (see `make_slurm_executor`)."""
    params = dict(
        job_name=f"sweep-{args.sweep_name}",
        time=args.time_min,
        cpus_per_task=args.cpus_per_job,
        mem=f"{int(args.mem_gb)}GB" if args.mem_gb == int(args.mem_gb) else f"{int(args.mem_gb * 1024)}MB",
        signal_delay_s=args.slurm_signal_delay_s,
        array_parallelism=min(args.array_parallelism, num_runs),
        stderr_to_stdout=True,
        # The job's own submitit process listens for SLURM's warning signal (not submitit's default USR2, which
        # would kill the driver), and the job may be requeued (by the job itself or by SLURM on preemption).
        setup=[f"export SUBMITIT_PREEMPT_SIGNAL={PREEMPT_SIGNAL}", *args.slurm_setup],
        additional_parameters={"signal": f"{PREEMPT_SIGNAL}@{args.slurm_signal_delay_s}", "requeue": True},
    )
    if args.gpus_per_job > 0:
        params["gpus_per_node"] = args.gpus_per_job
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(args, key):
            params[key] = getattr(args, key)
    return params


def make_slurm_executor(args, folder: str, num_runs: int):
    """A `submitit.SlurmExecutor` with the sweep's parameters (needs `srun` on PATH, as submitit checks)."""
    try:
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=args.max_requeues)
    except RuntimeError as e:
        raise InputError(f"--executor=slurm: {e} (no srun on PATH)") from None
    executor.update_parameters(**slurm_parameters(args, num_runs))
    return executor


def sbatch_preview(args, folder: str, num_runs: int) -> str:
    """The sbatch script submitit would write for the job array, made without SLURM."""
    from submitit.slurm import slurm as submitit_slurm

    command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(folder)}"
    params = slurm_parameters(args, num_runs)
    map_count = num_runs if num_runs > 1 else None
    return submitit_slurm._make_sbatch_string(command=command, folder=folder, map_count=map_count, **params)


def queued_jobs(jobs_path: str) -> Dict[str, str]:
    """Run name -> job id of this sweep's earlier SLURM jobs that are still queued or running (`squeue`)."""
    if not os.path.exists(jobs_path):
        return {}
    with open(jobs_path) as f:
        submitted = json.load(f)
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    command = ["squeue", "--noheader", "--array", "--format=%i"] + ([f"--user={user}"] if user else [])
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(
            f"cannot tell whether the jobs in {jobs_path} are still queued ({shlex.join(command)}: {e}); pass "
            "--ignore_queued to submit anyway"
        ) from None
    active = set(out.split())
    return {name: job for name, job in submitted.items() if job in active}


def queued_as(run: SweepRun, queued: Dict[str, str]) -> Optional[str]:
    """The name in `queued` (job name -> id) of a job that trains one of `run`'s seeds, or None."""
    for name in [run.name, *run.seed_names, *([run.group_name] if run.group_name else [])]:
        if name in queued:
            return name
    return None


def run_slurm(runs: List[SweepRun], args) -> int:
    """Submit the runs as one job array; print the job ids and where the outputs go."""
    group_dir = os.path.abspath(os.path.join(args.save_dir, args.sweep_name))
    folder = os.path.join(group_dir, "slurm")
    jobs_path = os.path.join(folder, "jobs.json")
    os.makedirs(os.path.join(group_dir, "logs"), exist_ok=True)
    for run in runs:  # absolute paths: the job runs wherever SLURM puts it
        run.log_path, run.run_dir = os.path.abspath(run.log_path), os.path.abspath(run.run_dir)
        run.run_dirs = [os.path.abspath(d) for d in run.run_dirs]
    executor = make_slurm_executor(args, folder, len(runs))
    if SweepRun.__module__ != "__main__":  # imported (tests): pickle the class itself, not a module reference
        import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[SweepRun.__module__])
    try:
        jobs = executor.submit_array(runs)
    except Exception as e:  # noqa: BLE001 - sbatch's own message (bad partition, account, limits)
        raise InputError("sbatch failed: " + " ".join(str(e).split())) from None
    submitted = {}
    if os.path.exists(jobs_path):
        with open(jobs_path) as f:
            submitted = json.load(f)
    submitted.update({run.name: job.job_id for run, job in zip(runs, jobs, strict=True)})
    with open(jobs_path + ".tmp", "w") as f:
        json.dump(submitted, f, indent=1)
    os.replace(jobs_path + ".tmp", jobs_path)
    for run, job in zip(runs, jobs, strict=True):
        print(f"submitted {run.name} as job {job.job_id}")
    print(
        f"sweep {args.sweep_name}: {len(runs)} runs submitted; run directories {group_dir}/<run>, driver logs "
        f"{group_dir}/logs/<run>.log, submitit logs {folder}; run the same command to relaunch unfinished runs"
    )
    return 0


# ------------------------------------------------------------------------------------------------ command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _int_at_least(low: int):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {value!r}") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {number}")
        return number

    return parse


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


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
        type=_int_at_least(1),
        default=1,
        metavar="S",
        help="Train up to S seeds in one driver process (the driver's --num_seeds, agents vmapped): the --seeds of "
        "each grid point and task are cut, in the order given, into groups of S (the last may be smaller), each of "
        "consecutive seeds, one process (and SLURM array task) per group, named <run>_sd<first>-<last>. Every seed "
        "still gets its own run directory <run>_sd<seed>, as with one seed per process (default: 1).",
    )
    add(
        "--tasks",
        help="OGBench task numbers (1-5): each run's --env_name becomes ...-singletask-task{N}-v0 (the --env_name "
        "after -- gives the domain and dataset type).",
    )
    add(
        "--sweep_name",
        default=None,
        help="Name of the sweep: the runs' --run_group (wandb group) and directory <save_dir>/<sweep_name>/. "
        "Default: sweep_<timestamp>; give the same name again to resume a sweep.",
    )
    add("--save_dir", default="exp/", help="Root directory of the runs' outputs, passed to every run (default: exp/).")
    add("--executor", choices=("local", "slurm"), default="local", help="Where the runs execute (default: local).")
    add("--dry_run", action="store_true", help="Print each run's command (one a line, shell-quoted) and exit.")
    add(
        "--max_requeues",
        type=_int_at_least(0),
        default=10,
        help="Most relaunches of one run with --resume (SLURM requeues after a preemption or the time limit, and "
        "relaunches after an exit status 3 the sweep did not cause) before it counts as failed (default: 10).",
    )
    local = parser.add_argument_group("local executor")
    local.add_argument("--max_parallel", type=_int_at_least(1), default=1, help="Most runs at once (default: 1).")
    local.add_argument(
        "--local_gpus",
        help="Comma-separated GPU ids: each run gets the least busy one as CUDA_VISIBLE_DEVICES. When more runs "
        "than GPUs run at once, JAX's GPU memory preallocation is turned off (XLA_PYTHON_CLIENT_PREALLOCATE=false).",
    )
    slurm = parser.add_argument_group("slurm executor (submitit)")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's default).")
    slurm.add_argument("--account", help="SLURM account to charge (default: yours).")
    slurm.add_argument("--qos", help="SLURM quality of service.")
    slurm.add_argument("--constraint", help="SLURM node feature constraint (e.g. a GPU type).")
    slurm.add_argument("--gpus_per_job", type=_int_at_least(0), default=1, help="GPUs per run (default: 1).")
    slurm.add_argument("--cpus_per_job", type=_int_at_least(1), default=8, help="CPU cores per run (default: 8).")
    slurm.add_argument("--mem_gb", type=_positive_float, default=32.0, help="Host memory per run in GB (default: 32).")
    slurm.add_argument(
        "--time_min",
        type=_int_at_least(1),
        default=1440,
        help="Time limit of one job in minutes (default: 1440); a run that needs longer is requeued and resumes.",
    )
    slurm.add_argument(
        "--array_parallelism",
        type=_int_at_least(1),
        default=64,
        help="Most array jobs running at once (sbatch --array=0-N%%K; default: 64).",
    )
    slurm.add_argument(
        "--slurm_signal_delay_s",
        type=_int_at_least(0),
        default=300,
        help="SLURM sends SIGUSR1 this many seconds before the time limit (sbatch --signal=USR1@S; SLURM may send "
        "it up to 60 s earlier): the driver writes its state, then the job requeues itself (default: 300).",
    )
    slurm.add_argument(
        "--slurm_setup",
        action="append",
        default=[],
        metavar="COMMAND",
        help="Shell command run in the job before the run (repeatable), e.g. 'module load cuda/12.4'.",
    )
    slurm.add_argument(
        "--ignore_queued",
        action="store_true",
        help="Submit unfinished runs even when this sweep's earlier jobs may still be queued or running "
        "(by default those runs are skipped, checked with squeue).",
    )
    return parser


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
    if args.slurm_signal_delay_s >= args.time_min * 60:
        raise InputError(f"--slurm_signal_delay_s={args.slurm_signal_delay_s} is not below --time_min={args.time_min}")
    if os.path.exists(args.save_dir) and not os.path.isdir(args.save_dir):
        raise InputError(f"--save_dir={args.save_dir} is a file, not a directory")
    args.driver_path = resolve_driver(args.driver)
    runs = build_runs(args, fixed)
    skipped = [r for r in runs if r.is_done()]
    todo = [r for r in runs if not r.is_done()]
    for run in skipped:
        print(f"skip (finished, {', '.join(run.done_paths)}): {run.name}", file=sys.stderr)
    queued = {}
    if args.executor == "slurm" and not args.dry_run and not args.ignore_queued:
        queued = queued_jobs(os.path.join(args.save_dir, args.sweep_name, "slurm", "jobs.json"))
        # A job trains the runs it is named after: one seed (its name), or a seed group (the group's name). A run
        # is busy when a queued job has its name, its seed group's name, or the name of one of its seeds.
        as_job = {run.name: queued_as(run, queued) for run in todo}
        for run in [r for r in todo if as_job[r.name]]:
            job_name = as_job[run.name]
            which = "" if job_name == run.name else f" ({job_name})"
            print(f"skip (queued or running as job {queued[job_name]}{which}): {run.name}", file=sys.stderr)
        todo = [r for r in todo if not as_job[r.name]]
    if args.dry_run:
        for run in todo:
            print(shlex.join(run.command))
        if args.executor == "slurm" and todo:
            folder = os.path.join(os.path.abspath(os.path.join(args.save_dir, args.sweep_name)), "slurm")
            print("sbatch script of the job array:\n" + sbatch_preview(args, folder, len(todo)), file=sys.stderr)
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
