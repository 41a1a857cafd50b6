"""One run of a sweep (`SweepRun`): the driver as a subprocess, relaunched or requeued until it finishes.

The same object runs in the local executor's threads (`scripts/sweeping/local.py`) and as a SLURM job through submitit
(`scripts/sweeping/slurm.py`). It imports only the standard library and submitit, so that submitit can pickle it by
value into a job that runs from any directory. docs/sweeps.md tells the story.
"""

import argparse
import datetime
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import submitit

DONE_FILE = "DONE.json"
EXIT_STATE_SAVED = 3  # the drivers' exit status after SIGTERM/SIGUSR1: state written, run not finished
PREEMPT_SIGNAL = "USR1"  # SLURM's warning signal: the drivers and the submitit job both handle it
# What the job's start-up check runs with the driver's interpreter and environment: the platforms JAX sees.
GPU_PROBE = "import json, jax; print(json.dumps(sorted({d.platform for d in jax.devices()})))"
SIGNAL_ECHO_S = 5.0  # one signal delivered twice this close together (by slurmstepd and by srun) is one signal


class InputError(Exception):
    """A bad input to the sweep: reported as one `error:` line with exit status 2 (here for every sweep module)."""


def int_at_least(low: int):
    """An argparse type: an integer >= `low`."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {value!r}") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {number}")
        return number

    return parse


def positive_float(value: str) -> float:
    """An argparse type: a number > 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


class RunFailed(Exception):
    """A run's driver exited with a failure status, exhausted its relaunches, or its job cannot run it."""

    def __init__(self, name: str, returncode: Optional[int], log_path: str, why: str = "", message: str = ""):
        self.name, self.returncode, self.log_path = name, returncode, log_path
        message = message or f"the driver exited with status {returncode}{why}"
        super().__init__(f"run {name}: {message}; its output is in {log_path}")


def in_slurm_job() -> bool:
    """Whether this process is a SLURM job run by submitit (`python -m submitit.core._submit` under srun)."""
    return bool(os.environ.get("SLURM_JOB_ID")) and os.environ.get("SUBMITIT_EXECUTOR") == "slurm"


def slurm_restart_count() -> int:
    """How many times SLURM has requeued this job (`SLURM_RESTART_COUNT`; 0 outside a job or on its first start)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def log_submitit_warnings_once():
    """submitit logs each warning (its signal lines among them) to stdout and again to stderr; where both go to one
    file (the sweep's jobs: `stderr_to_stdout`), every such line showed twice. Keep the stdout copy only."""
    try:
        same = os.path.sameopenfile(sys.stdout.fileno(), sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return
    if not same:
        return
    logger = logging.getLogger("submitit")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stderr:
            logger.removeHandler(handler)


class SweepRun(submitit.helpers.Checkpointable):
    """One run of the sweep: the driver as a subprocess with `--resume`, its output appended to `log_path`.

    Protocol:

    * `DONE.json` in `run_dir` already (for a seed group, in every directory of `run_dirs`): nothing to do
      (`status: skipped`).
    * The driver exits 0: `status: finished`.
    * It exits 3 (its state is written) while no preemption was signalled to this wrapper: it is relaunched
      in place with `--resume` (a requeue within the same job), at most `max_requeues` times in all (then
      `RunFailed`). When this process got SIGTERM too (a SLURM job being preempted, cancelled or at its time
      limit), it is not relaunched: `status: stopped` (SLURM requeues a preempted job itself). So too when that
      SIGTERM killed the driver before it had installed its handlers (status -15, nothing written).
    * Any other status: `RunFailed` (a failed submitit job; the local summary lists it).
    * `checkpoint()` (submitit calls it on SIGUSR1, SLURM's warning before the time limit or a preemption):
      forwards SIGUSR1 to the driver, waits up to `signal_grace_s` for it to write its state and exit, and returns
      a `DelayedSubmission` of itself with one more requeue counted, which submitit pickles and requeues
      (`scontrol requeue`); the requeued job starts the driver again with `--resume`. After `max_requeues`
      requeues it returns None: the job ends, not requeued.

    `requeues` counts every relaunch and requeue of this run: in-place relaunches, the job's own requeues and the
    requeues SLURM does by itself (preemption, `scontrol requeue`, a node failure), which a job learns from
    `SLURM_RESTART_COUNT` when it starts (`job_requeues` is how many of them the pickled object knew of).

    In a SLURM job (`in_slurm_job`) the run first checks what the job cannot do without (`start_up_check`): its
    working directory exists on the node and, when the job asked for GPUs (`expect_gpus`), JAX sees one. It also
    handles the job's signals, each logged once although SLURM's step daemon and `srun` may both deliver it:
    SIGTERM is noted and passed on to the driver, SIGCONT is ignored, a second SIGUSR1 is ignored while the first
    is being handled, and submitit's own warning lines are written once (`log_submitit_warnings_once`).
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
        expect_gpus: bool = False,
    ):
        """`run_dirs`: a seed group's run directories (`--num_seeds`), one per seed, `run_dir` the first one's;
        default `[run_dir]`. `group_name`: the seed group a single-seed run belongs to when its group was split
        (some seeds finished), so that a job of the whole group still queued is recognised. `expect_gpus`: the
        SLURM job asked for GPUs, so it stops at start-up when JAX sees none."""
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
        self.expect_gpus = expect_gpus
        self.requeues = 0
        self.job_requeues = 0
        self.launches = 0
        self._init_runtime()

    def _init_runtime(self):
        self._proc: Optional[subprocess.Popen] = None
        self._exited = threading.Event()
        self._returncode: Optional[int] = None
        self._signalled = False  # checkpoint() was called: a preemption or the time limit
        self._stopping = False  # the local executor is stopping: no relaunch
        self._terminated = False  # this process got SIGTERM (a SLURM job: preemption, scancel, time limit)
        self._requeue_decided: Optional[bool] = None  # checkpoint()'s answer, once given
        self.pass_fds: Tuple[int, ...] = ()  # local: the sweep's lock, held while the driver lives
        self.new_session = False  # local: Ctrl-C reaches the sweep only, which stops the drivers with SIGTERM

    def __getstate__(self):
        runtime = ("pass_fds", "new_session")
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in runtime}

    def __setstate__(self, state):
        state.setdefault("job_requeues", 0)
        state.setdefault("expect_gpus", False)
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

    def note(self, message: str, echo: bool = False):
        """Append `[sweep <time>] message` to the run's log (`echo`: and print it, to the job's own log)."""
        line = f"[sweep {datetime.datetime.now().isoformat(timespec='seconds')}] {message}"
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")
        if echo:
            print(line, flush=True)

    # ---- the job's start -------------------------------------------------------------------------------------

    def start_up_check(self) -> Optional[str]:
        """In a SLURM job: one `error:` line saying why the job cannot run the driver here, or None when it can.

        The working directory fixed at submission must exist on the node, and a job that asked for GPUs must see
        one through JAX with the driver's own interpreter and environment (the job inherits the submitting shell's
        environment: a `JAX_PLATFORMS=cpu` or an empty `CUDA_VISIBLE_DEVICES` there would train on CPU).
        """
        where = f"job {os.environ.get('SLURM_JOB_ID', '?')} on {socket.gethostname()}"
        if not os.path.isdir(self.cwd):
            return (
                f"error: {where}: the working directory {self.cwd} fixed at submission does not exist on this node; "
                "submit from a directory the compute nodes share"
            )
        if not self.expect_gpus:
            return None
        env = {**os.environ, **self.env}
        try:
            probe = subprocess.run(
                [self.command[0], "-c", GPU_PROBE], cwd=self.cwd, env=env, capture_output=True, text=True, timeout=600
            )
        except (OSError, subprocess.SubprocessError) as e:
            return f"error: {where}: cannot start {self.command[0]} to ask JAX for GPUs ({type(e).__name__}: {e})"
        platforms = None
        if probe.returncode == 0 and probe.stdout.strip():
            try:
                platforms = json.loads(probe.stdout.strip().splitlines()[-1])
            except ValueError:
                platforms = None
        if platforms is not None and "gpu" in platforms:
            return None
        sees = f"only {','.join(platforms)}" if platforms else "no device"
        if platforms is None:  # JAX itself failed (e.g. JAX_PLATFORMS=cuda without a GPU): its last line says why
            lines = (probe.stderr or probe.stdout).strip().splitlines()
            sees += f" (JAX failed: {lines[-1][:300] if lines else f'status {probe.returncode}'})"
        here = ", ".join(f"{k}={env[k]!r}" for k in ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES") if k in env)
        return (
            f"error: {where} asked for GPUs but JAX sees {sees}"
            + (f" ({here} in the job, which inherits the submitting shell's environment)" if here else "")
            + ": unset JAX_PLATFORMS (or an empty CUDA_VISIBLE_DEVICES) before submitting, and check that the job's "
            'Python has a CUDA jaxlib (pip install "jax[cuda12]")'
        )

    def _count_slurm_requeues(self):
        """Count the requeues SLURM did by itself (preemption, `scontrol requeue`): the job's `SLURM_RESTART_COUNT`
        minus those this object knew of (its own, through `checkpoint`)."""
        restarts = slurm_restart_count()
        missed = restarts - self.job_requeues
        if missed <= 0:
            return
        self.requeues += missed
        self.job_requeues = restarts
        self.note(
            f"SLURM requeued this job {missed} time(s) by itself (preemption, scontrol requeue or a node failure; "
            f"SLURM_RESTART_COUNT={restarts}): counted ({self.requeues}/{self.max_requeues})"
        )
        if self.requeues > self.max_requeues:
            raise RunFailed(
                self.name,
                None,
                self.log_path,
                message=f"requeued {self.requeues} times, more than --max_requeues={self.max_requeues}",
            )

    def _install_job_handlers(self):
        """A SLURM job's signal handlers (left installed: the job's process ends with the run)."""
        usr1 = getattr(signal, f"SIG{PREEMPT_SIGNAL}")
        submitit_usr1 = signal.getsignal(usr1)
        last_sigterm = [None]
        handled = [False]

        def on_sigterm(signum, frame):
            now = time.monotonic()
            echo = last_sigterm[0] is not None and now - last_sigterm[0] < SIGNAL_ECHO_S
            last_sigterm[0] = now
            self._terminated = True
            if not echo:
                forwarded = self.signal_driver(signal.SIGTERM)
                self.note(
                    "SIGTERM to this job (preemption, scontrol requeue, scancel or the time limit)"
                    + (": passed on to the driver, which writes its state" if forwarded else ""),
                    echo=True,
                )

        def on_usr1(signum, frame):
            if handled[0]:  # the same warning again (slurmstepd, srun and the batch shell may all deliver it)
                return
            handled[0] = True
            if callable(submitit_usr1):
                submitit_usr1(signum, frame)  # submitit: checkpoint(), then requeue the job or end it

        signal.signal(signal.SIGTERM, on_sigterm)
        signal.signal(signal.SIGCONT, signal.SIG_DFL)  # part of every termination (before SIGTERM): nothing to log
        if callable(submitit_usr1):
            signal.signal(usr1, on_usr1)

    # ---- the driver ------------------------------------------------------------------------------------------

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
        if in_slurm_job():
            log_submitit_warnings_once()
            if main_thread:
                self._install_job_handlers()
            self._count_slurm_requeues()
            error = self.start_up_check()
            if error:
                self.note(error, echo=True)
                raise RunFailed(self.name, None, self.log_path, message=error.removeprefix("error: "))
            return self._run_until_done()
        previous = signal.getsignal(signal.SIGTERM) if main_thread else None

        def on_sigterm(signum, frame):  # remember it, then what was there
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
            if rc in (EXIT_STATE_SAVED, -signal.SIGTERM) and self._terminated:
                # -SIGTERM: the signal reached the driver before its handlers did (it was still starting), so it
                # wrote nothing new; --resume goes on from its last saved state, or starts afresh.
                self.note(
                    "stopped by SIGTERM to the job"
                    + (" while the driver was starting (no state written)" if rc != EXIT_STATE_SAVED else "")
                    + ": not relaunched here; SLURM requeues a preempted or requeued job "
                    "itself, else run the sweep command again to resume"
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
        """submitit's hook on SIGUSR1; a second call (the signal delivered again) gives the first call's answer."""
        first = not self._signalled
        self._signalled = True
        if first and self.signal_driver(getattr(signal, f"SIG{PREEMPT_SIGNAL}")):
            self.note(f"SIG{PREEMPT_SIGNAL}: forwarded to the driver; waiting up to {self.signal_grace_s:g} s")
            if self._exited.wait(self.signal_grace_s):  # noted here: submitit ends this process after the requeue
                self.note(f"the driver exited with status {self._returncode}")
            else:
                self.note("the driver is still writing: requeued anyway (it resumes from its latest complete state)")
        if self._requeue_decided is None:
            self._requeue_decided = self.requeues < self.max_requeues
            if not self._requeue_decided:
                self.note(f"not requeued: requeued {self.requeues} times already (--max_requeues)")
            else:
                self.requeues += 1
                self.job_requeues += 1
                self.note(f"requeued ({self.requeues}/{self.max_requeues}): the next job continues with --resume")
        if not self._requeue_decided:
            return None
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
