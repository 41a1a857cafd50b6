"""The SLURM side of scripts/sweep.py: the job array's options and script, checks against the cluster, submission.

A sweep's runs (`sweeping.run.SweepRun`) go to SLURM as one job array through submitit. Before submitting, where SLURM
answers (`sinfo`), a request no node of the partition can hold is refused and the whole job script is checked with
`sbatch --test-only`. The job script ignores SIGUSR1 in its batch shell, checks that the interpreter fixed into it
exists on the node, and runs each run with SLURM's warning signal and requeueing (docs/sweeps.md).
"""

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import submitit

import sweeping.run
from sweeping.run import PREEMPT_SIGNAL, InputError, SweepRun, int_at_least, positive_float
from utils.files import atomic_write

# sbatch options the sweep writes itself, and the sweep flag that sets each (None: not settable).
OWN_OPTIONS = {
    "job-name": None,
    "time": "--time_min",
    "cpus-per-task": "--cpus_per_job",
    "mem": "--mem_gb",
    "array": "--array_parallelism",
    "signal": "--slurm_signal_delay_s",
    "requeue": None,
    "no-requeue": None,
    "output": None,
    "error": None,
    "open-mode": None,
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "constraint": "--constraint",
    "gpus-per-node": "--gpus_per_job",
    "wrap": None,
    "test-only": None,
    "parsable": None,
    # One run is one process on one node: more tasks would start the same run several times at once.
    "nodes": None,
    "ntasks": None,
    "ntasks-per-node": None,
    # SLURM takes one way of sizing memory and CPUs; the sweep's is --mem and --cpus-per-task.
    "mem-per-cpu": "--mem_gb",
    "mem-per-gpu": "--mem_gb",
    "cpus-per-gpu": "--cpus_per_job",
}
_ALTERNATIVES = {"mem-per-cpu": "--mem", "mem-per-gpu": "--mem", "cpus-per-gpu": "--cpus-per-task"}
GPU_OPTIONS = ("gpus", "gpus-per-task", "gpus-per-socket", "gres", "tres-per-task", "tres-per-node")
# What the job script relies on (docs/sweeps.md, section 9): the submitting shell's environment, its working
# directory and user, and a submission that returns. Options that take one of them away are refused, naming what
# the job would lose (--export only when its list leaves out ALL).
INHERITED = "PATH and the venv, JAX_PLATFORMS, CUDA_VISIBLE_DEVICES, XLA_*, WANDB_*"
BREAKS_CONTRACT = {
    "export": f"the job would not inherit this shell's environment ({INHERITED}); keep ALL in the list, e.g. "
    "--sbatch=--export=ALL,VAR=value",
    "get-user-env": f"the job would start from the login environment, not this shell's ({INHERITED})",
    "chdir": "the sweep fixes each run's working directory (this shell's) and its relative paths",
    "uid": "the job would run as another user, who cannot write this user's run folders and locks",
    "gid": "the job would run in another group, which may not write this user's run folders and locks",
    "wait": "sbatch would not return until the whole array has ended",
}
# Options that keep the contract but may change what the job gets: allowed, with one warning line each.
CHANGES_CONTRACT = {
    "export-file": f"variables in that file replace this shell's of the same name ({INHERITED} included)",
}
# Options that are nothing without a value (a bare `#SBATCH --gres` line).
VALUE_OPTIONS = GPU_OPTIONS + ("exclude", "nodelist", "reservation", "wckey", "licenses", "comment", "cluster")
_OPTION_RE = re.compile(r"^(?:--)?([a-z][a-z0-9-]*)(?:[= ](.*))?$", re.S)


def add_arguments(parser: argparse.ArgumentParser):
    """The sweep's `slurm executor` flags."""
    slurm = parser.add_argument_group("slurm executor (submitit)")
    add = slurm.add_argument
    add("--partition", help="SLURM partition (default: the cluster's default).")
    add("--account", help="SLURM account to charge (default: yours).")
    add("--qos", help="SLURM quality of service.")
    add("--constraint", help="SLURM node feature constraint (e.g. a GPU type).")
    add(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="Any other sbatch option for the job array, written as an #SBATCH line (repeatable), e.g. "
        "--sbatch=--gres=gpu:a100:1 --sbatch=--exclude=node[01-03] --sbatch=--reservation=R --sbatch=--wckey=W. "
        "GPUs asked for here replace --gpus_per_job. Checked with sbatch --test-only before submitting where SLURM "
        "answers. No wckey is set unless given here.",
    )
    add(
        "--gpus_per_job",
        type=int_at_least(0),
        default=None,
        help="GPUs per run (sbatch --gpus-per-node; default: 1, or none when --sbatch asks for GPUs). A job that "
        "asked for GPUs stops at start-up with one error line when JAX sees none.",
    )
    add("--cpus_per_job", type=int_at_least(1), default=8, help="CPU cores per run (default: 8).")
    add("--mem_gb", type=positive_float, default=32.0, help="Host memory per run in GB (default: 32).")
    add(
        "--time_min",
        type=int_at_least(1),
        default=1440,
        help="Time limit of one job in minutes (default: 1440); a run that needs longer is requeued and resumes.",
    )
    add(
        "--array_parallelism",
        type=int_at_least(1),
        default=64,
        help="Most array jobs running at once (sbatch --array=0-N%%K; default: 64).",
    )
    add(
        "--slurm_signal_delay_s",
        type=int_at_least(0),
        default=300,
        help="SLURM sends SIGUSR1 this many seconds before the time limit (sbatch --signal=USR1@S; SLURM may send "
        "it up to 60 s earlier): the driver writes its state, then the job requeues itself (default: 300). It must "
        "cover an evaluation in progress plus a state write (docs/sweeps.md).",
    )
    add(
        "--slurm_setup",
        action="append",
        default=[],
        metavar="COMMAND",
        help="Shell command run in the job before the run (repeatable), e.g. 'module load cuda/12.4'.",
    )
    add(
        "--python",
        default=None,
        metavar="PATH",
        help="The Python interpreter the jobs run (an absolute path that exists on the compute nodes; default: the "
        "one running this sweep). The job stops with an error line when it does not exist there.",
    )
    add(
        "--ignore_queued",
        action="store_true",
        help="Submit unfinished runs even when this sweep's earlier jobs may still be queued or running "
        "(by default those runs are skipped, checked with squeue).",
    )


# ------------------------------------------------------------------------------------------------ options


def parse_sbatch_options(options: List[str]) -> Dict[str, object]:
    """`--sbatch` values -> `{option: value}` (True for a flag such as `--exclusive`), in order.

    `--gres=gpu:a100:1`, `gres=gpu:a100:1` and `--gres gpu:a100:1` are the same. `InputError` for a short option
    (`-A`), an option the sweep writes itself (it names the sweep flag to use instead) or one given twice.
    """
    parsed: Dict[str, object] = {}
    for text in options:
        m = _OPTION_RE.match(text.strip())
        if m is None or text.strip().startswith("-") and not text.strip().startswith("--"):
            raise InputError(
                f"--sbatch={text}: write one long sbatch option, e.g. --sbatch=--gres=gpu:a100:1 or "
                "--sbatch=--exclusive"
            )
        key, value = m.group(1), m.group(2)
        if key in OWN_OPTIONS:
            instead = f"; use the sweep's {OWN_OPTIONS[key]}" if OWN_OPTIONS[key] else ""
            if key in _ALTERNATIVES:
                raise InputError(f"--sbatch={text}: the sweep writes {_ALTERNATIVES[key]}, which SLURM does not take "
                                 f"beside --{key}{instead}")  # fmt: skip
            raise InputError(f"--sbatch={text}: the sweep writes --{key} itself{instead}")
        if key in BREAKS_CONTRACT and not (key == "export" and "ALL" in (value or "").upper().split(",")):
            raise InputError(f"--sbatch={text}: {BREAKS_CONTRACT[key]}")
        if key in CHANGES_CONTRACT:
            print(f"warning: --sbatch={text}: {CHANGES_CONTRACT[key]}", file=sys.stderr)
        if key in VALUE_OPTIONS and not (value or "").strip():
            raise InputError(f"--sbatch={text}: --{key} needs a value, e.g. --sbatch=--{key}=...")
        if key in parsed:
            raise InputError(f"--sbatch: --{key} is given twice")
        parsed[key] = True if value is None else value.strip()
    return parsed


def asks_for_gpus(options: Dict[str, object]) -> bool:
    """Whether the `--sbatch` options request GPUs (`--gpus*`, `--gres=gpu...`, `--tres-per-*=...gpu...`)."""
    for key, value in options.items():
        if key in GPU_OPTIONS and (not key.startswith(("gres", "tres")) or "gpu" in str(value)):
            return True
    return False


def resolve_gpus(args):
    """Set `args.gpus_per_job` (an int) and `args.expect_gpus` from `--gpus_per_job` and the `--sbatch` options."""
    options = parse_sbatch_options(args.sbatch)
    by_option = asks_for_gpus(options)
    if by_option and args.gpus_per_job is not None:
        raise InputError(
            f"--gpus_per_job={args.gpus_per_job} and --sbatch options that ask for GPUs: say it once (drop "
            "--gpus_per_job to use the --sbatch ones)"
        )
    if args.gpus_per_job is None:
        args.gpus_per_job = 0 if by_option else 1
    args.expect_gpus = by_option or args.gpus_per_job > 0


def check_args(args):
    """`InputError` for SLURM flags that cannot work together (before anything is expanded)."""
    if args.slurm_signal_delay_s >= args.time_min * 60:
        raise InputError(f"--slurm_signal_delay_s={args.slurm_signal_delay_s} is not below --time_min={args.time_min}")
    if args.python is not None and not os.path.isabs(args.python):
        raise InputError(f"--python={args.python}: give the interpreter's absolute path on the compute nodes")
    resolve_gpus(args)


def job_python(args) -> str:
    """The interpreter every job (and every run's command) uses: `--python`, else this process's."""
    return getattr(args, "python", None) or sys.executable


def setup_lines(args) -> List[str]:
    """The job script's lines before `srun`: the batch shell's handling of SIGUSR1, the signal submitit listens for,
    the user's `--slurm_setup`, then a check that the interpreter fixed into the job exists on the node."""
    python = job_python(args)
    missing = (
        f"error: the Python interpreter {python} fixed into this job at submission does not exist on node "
        "$(hostname) (submit from an interpreter on a filesystem the compute nodes share, or pass the sweep --python)"
    )
    return [
        # SIGUSR1 to the batch shell alone (scancel --batch -s USR1, an admin's --signal=B:USR1) would kill it: the
        # job FAILS and is not requeued. The shell ignores it during the setup lines, and while the job step runs it
        # passes it on to srun, which passes it on to the step (submitit's process, then the driver). A shell runs
        # no trap while a command runs in the foreground, hence srun in the background and an interruptible wait.
        f"trap '' {PREEMPT_SIGNAL}",
        "srun() {",
        "    local pid='' rc",
        f'    trap \'[ -n "$pid" ] && kill -{PREEMPT_SIGNAL} "$pid" 2>/dev/null\' {PREEMPT_SIGNAL}',
        '    command srun "$@" &',
        "    pid=$!",
        '    while :; do wait "$pid"; rc=$?; kill -0 "$pid" 2>/dev/null || break; done',
        f"    trap '' {PREEMPT_SIGNAL}",
        '    return "$rc"',
        "}",
        # The job's submitit process listens for SLURM's warning signal (not its default USR2, which would kill the
        # driver).
        f"export SUBMITIT_PREEMPT_SIGNAL={PREEMPT_SIGNAL}",
        *args.slurm_setup,
        f'if [ ! -x {shlex.quote(python)} ]; then echo "{missing}" >&2; exit 1; fi',
    ]


def slurm_parameters(args, num_runs: int) -> Dict:
    """The `SlurmExecutor.update_parameters` keywords of the sweep (see `make_slurm_executor`)."""
    if getattr(args, "expect_gpus", None) is None:
        resolve_gpus(args)
    extra = parse_sbatch_options(args.sbatch)
    params = dict(
        job_name=f"sweep-{args.sweep_name}",
        time=args.time_min,
        cpus_per_task=args.cpus_per_job,
        mem=f"{int(args.mem_gb)}GB" if args.mem_gb == int(args.mem_gb) else f"{int(args.mem_gb * 1024)}MB",
        signal_delay_s=args.slurm_signal_delay_s,
        array_parallelism=min(args.array_parallelism, num_runs),
        stderr_to_stdout=True,
        wckey=None,  # submitit's default --wckey=submitit is refused where wckeys are enforced: --sbatch=--wckey=W
        setup=setup_lines(args),
        # The job may be requeued (by the job itself or by SLURM on preemption); any --sbatch option after.
        additional_parameters={"signal": f"{PREEMPT_SIGNAL}@{args.slurm_signal_delay_s}", "requeue": True, **extra},
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
        executor = submitit.SlurmExecutor(
            folder=folder, max_num_timeout=args.max_requeues, python=shlex.quote(job_python(args))
        )
    except RuntimeError as e:
        raise InputError(f"--executor=slurm: {e} (no srun on PATH)") from None
    executor.update_parameters(**slurm_parameters(args, num_runs))
    return executor


def sbatch_preview(args, folder: str, num_runs: int) -> str:
    """The sbatch script submitit would write for the job array, made without SLURM."""
    from submitit.slurm import slurm as submitit_slurm

    command = f"{shlex.quote(job_python(args))} -u -m submitit.core._submit {shlex.quote(folder)}"
    params = slurm_parameters(args, num_runs)
    map_count = num_runs if num_runs > 1 else None
    return submitit_slurm._make_sbatch_string(command=command, folder=folder, map_count=map_count, **params)


# ------------------------------------------------------------------------------------------------ the cluster


def _run(command: List[str], timeout: float = 60) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def slurm_answers() -> bool:
    """Whether a SLURM controller answers here (`sinfo` exits 0)."""
    result = _run(["sinfo", "--noheader", "--format=%P"], timeout=30)
    return result is not None and result.returncode == 0


def partition_nodes(partition: Optional[str]) -> Tuple[str, List[Tuple[str, int, int, int]]]:
    """`(partition names, [(node, CPUs, memory MB, GPUs)])` of the nodes `partition` (comma-separated, or the
    default partition when None) holds, from `sinfo`; an empty list when SLURM cannot tell."""
    result = _run(["sinfo", "--noheader", "--Node", "--format=%P|%N|%c|%m|%G"], timeout=30)
    if result is None or result.returncode != 0:
        return partition or "", []
    rows = [line.split("|") for line in result.stdout.splitlines() if line.count("|") == 4]
    if partition is None:
        wanted = {p.rstrip("*") for p, *_ in rows if p.endswith("*")}
    else:
        wanted = {p.strip() for p in partition.split(",")}
    nodes = []
    for part, node, cpus, mem, gres in rows:
        if part.rstrip("*") not in wanted:
            continue
        try:
            cpus_n, mem_mb = int(re.match(r"\d+", cpus).group()), int(re.match(r"\d+", mem).group())
        except (AttributeError, ValueError):
            continue
        nodes.append((node, cpus_n, mem_mb, gres_gpus(gres)))
    return ",".join(sorted(wanted)), nodes


def gres_gpus(gres: str) -> int:
    """The GPUs in an sinfo GRES string: `gpu:4` -> 4, `gpu:a100:4(S:0-1),mps:100` -> 4, `(null)` -> 0."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.strip().split(":")
        if parts[0] in ("gpu", "gres/gpu") and len(parts) > 1 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def check_fits(args):
    """`InputError` when no node of the partition has the CPUs, memory or GPUs one run asks for (per `sinfo`):
    SLURM would accept such a job array and keep it pending forever."""
    where, nodes = partition_nodes(args.partition)
    if not nodes:
        return
    asked = {
        "CPUs": (args.cpus_per_job, "--cpus_per_job", 1),
        "MB of memory": (int(args.mem_gb * 1024), "--mem_gb", 2),
        "GPUs": (args.gpus_per_job, "--gpus_per_job", 3),
    }
    for what, (value, flag, column) in asked.items():
        most = max(node[column] for node in nodes)
        if value > most:
            shown = f"{args.mem_gb:g}" if flag == "--mem_gb" else str(value)
            raise InputError(
                f"{flag}={shown}: no node of partition {where} has more than {most} {what} (sinfo); SLURM would keep "
                "the jobs pending forever"
            )


def sbatch_test_only(script: str) -> str:
    """`sbatch --test-only` of the job script: sbatch's answer (when the array would start); `InputError` with
    sbatch's message when it refuses the options."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="sweep_test_only_", delete=False) as f:
        f.write(script)
    try:
        result = _run(["sbatch", "--test-only", f.name], timeout=120)
    finally:
        os.remove(f.name)
    if result is None:
        return "sbatch --test-only did not answer"
    message = " ".join((result.stderr + result.stdout).split())
    if result.returncode != 0:
        raise InputError(f"sbatch --test-only refused the job array: {message or f'status {result.returncode}'}")
    return message


def check_environment(args):
    """`InputError` when this shell's `JAX_PLATFORMS` would keep every GPU job on CPU (jobs inherit it)."""
    platforms = os.environ.get("JAX_PLATFORMS")
    if args.expect_gpus and platforms and not re.search(r"cuda|gpu|rocm", platforms):
        raise InputError(
            f"JAX_PLATFORMS={platforms} is set in this shell and every job inherits the submitting environment: the "
            "GPU jobs would train on CPU; unset it (env -u JAX_PLATFORMS python scripts/sweep.py ...)"
        )


def check_with_cluster(args, folder: str, num_runs: int):
    """Where SLURM answers: `check_fits`, then `sbatch --test-only` of the job script (printed to stderr)."""
    if not slurm_answers():
        return
    check_fits(args)
    print(f"sbatch --test-only: {sbatch_test_only(sbatch_preview(args, folder, num_runs))}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ queue


def read_jobs(jobs_path: str) -> Dict[str, str]:
    """The sweep's record of submitted jobs (run name -> job id), `{}` when none; `InputError` naming a damaged one."""
    if not os.path.exists(jobs_path):
        return {}
    try:
        with open(jobs_path) as f:
            submitted = json.load(f)
        if not isinstance(submitted, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise InputError(
            f"{jobs_path} is damaged ({e}); remove it after checking with squeue that none of its jobs still run"
        ) from None
    return submitted


def queued_jobs(jobs_path: str) -> Dict[str, str]:
    """Run name -> job id of this sweep's earlier SLURM jobs that are still queued or running (`squeue`)."""
    submitted = read_jobs(jobs_path)
    if not submitted:
        return {}
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


def skip_queued(todo: List[SweepRun], args) -> Tuple[List[SweepRun], Dict[str, str]]:
    """`(runs not queued or running in SLURM, the queued jobs)`; each run skipped is listed on stderr."""
    queued = queued_jobs(os.path.join(args.save_dir, args.sweep_name, "slurm", "jobs.json"))
    # A job trains the runs it is named after: one seed (its name), or a seed group (the group's name). A run is busy
    # when a queued job has its name, its seed group's name, or the name of one of its seeds.
    as_job = {run.name: queued_as(run, queued) for run in todo}
    for run in [r for r in todo if as_job[r.name]]:
        job_name = as_job[run.name]
        which = "" if job_name == run.name else f" ({job_name})"
        print(f"skip (queued or running as job {queued[job_name]}{which}): {run.name}", file=sys.stderr)
    return [r for r in todo if not as_job[r.name]], queued


# ------------------------------------------------------------------------------------------------ submission


def submit_array(executor, runs: List[SweepRun], folder: str):
    """`executor.submit_array(runs)`; when sbatch fails, the job files submitit left for it are removed."""
    os.makedirs(folder, exist_ok=True)
    before = set(os.listdir(folder))
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's complaint, also in its exception
            return executor.submit_array(runs)
    except Exception as e:  # noqa: BLE001 - sbatch's own message (bad partition, account, limits)
        for name in set(os.listdir(folder)) - before:  # <uuid>.pkl per run, .submission_file_<uuid>.sh
            if name.endswith(".pkl") or name.startswith(".submission_file_"):
                os.remove(os.path.join(folder, name))
        raise InputError("sbatch failed: " + " ".join(str(e).split())) from None


def dry_run(args, num_runs: int):
    """`--dry_run`: the job script on stderr, checked against the cluster where SLURM answers."""
    folder = os.path.join(os.path.abspath(os.path.join(args.save_dir, args.sweep_name)), "slurm")
    print("sbatch script of the job array:\n" + sbatch_preview(args, folder, num_runs), file=sys.stderr)
    check_with_cluster(args, folder, num_runs)


def run_slurm(runs: List[SweepRun], args) -> int:
    """Submit the runs as one job array; print the job ids and where the outputs go."""
    group_dir = os.path.abspath(os.path.join(args.save_dir, args.sweep_name))
    folder = os.path.join(group_dir, "slurm")
    jobs_path = os.path.join(folder, "jobs.json")
    check_environment(args)  # run() did too; here for callers that submit directly
    check_with_cluster(args, folder, len(runs))
    os.makedirs(os.path.join(group_dir, "logs"), exist_ok=True)
    for run in runs:  # absolute paths: the job runs wherever SLURM puts it
        run.log_path, run.run_dir = os.path.abspath(run.log_path), os.path.abspath(run.run_dir)
        run.run_dirs = [os.path.abspath(d) for d in run.run_dirs]
        run.expect_gpus = args.expect_gpus
    executor = make_slurm_executor(args, folder, len(runs))
    # The job unpickles its run from any directory: the run's module travels with it, by value.
    import cloudpickle

    cloudpickle.register_pickle_by_value(sweeping.run)
    jobs = submit_array(executor, runs, folder)
    submitted = read_jobs(jobs_path)
    submitted.update({run.name: job.job_id for run, job in zip(runs, jobs, strict=True)})
    atomic_write(jobs_path, json.dumps(submitted, indent=1))
    for run, job in zip(runs, jobs, strict=True):
        print(f"submitted {run.name} as job {job.job_id}")
    print(
        f"sweep {args.sweep_name}: {len(runs)} runs submitted; run directories {group_dir}/<run>, driver logs "
        f"{group_dir}/logs/<run>.log, submitit logs {folder}; run the same command to relaunch unfinished runs"
    )
    return 0
