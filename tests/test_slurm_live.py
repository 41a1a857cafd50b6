"""The live SLURM tier: scripts/sweep.py against a real SLURM cluster (marker `slurm`; skipped when `sinfo` fails).

`.ci/run` starts a single-node cluster with scripts/slurm/local_cluster.sh and runs `pytest -m slurm`; by hand:

    sudo scripts/slurm/local_cluster.sh start           # FAKE_GPUS=1 adds the GPU start-up check
    JAX_PLATFORMS=cpu python -m pytest -m slurm tests/test_slurm_live.py
    sudo scripts/slurm/local_cluster.sh stop

The jobs run on whatever cluster answers (its default partition), as the user running pytest, and write under
pytest's temporary directory, which the compute nodes must see (a single-node cluster does). Each run is a tiny
`main.py` (16-unit networks, a few thousand steps on a two-episode dataset). To interrupt a run mid-way for certain,
the test freezes its driver (SIGSTOP) once the driver has written a state in the online phase, signals the job
through SLURM, and lets the driver go on (SIGCONT) once the job's wrapper has seen the signal.
"""

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.driver_runs import ROOT, assert_same_run, run_driver, tiny_dataset


def _sinfo(*fields):
    try:
        result = subprocess.run(["sinfo", "--noheader", *fields], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


SINFO = _sinfo("--Node", "--format=%P|%c|%G")
REQUIRED = os.environ.get("QC_REQUIRE_SLURM") == "1"  # .ci/run: a cluster that does not answer is a failure
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(
        SINFO is None and not REQUIRED, reason="no SLURM cluster answers (sinfo); see scripts/slurm/local_cluster.sh"
    ),
]
DEFAULT_NODES = [line.split("|") for line in (SINFO or "").splitlines() if line.split("|")[0].endswith("*")]
NODE_CPUS = max((int(re.match(r"\d+", n[1]).group()) for n in DEFAULT_NODES), default=0)
HAS_GPUS = any("gpu" in n[2] for n in DEFAULT_NODES)

ONLINE_STEPS = 2000
FINAL_STEP = 6 + ONLINE_STEPS
TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--agent.actor_num_samples=4",
    "--agent.flow_steps=2",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--eval_episodes=1",
    "--eval_interval=1000",
    "--log_interval=100",
    "--buffer_size=4000",
    "--progress=False",
    "--horizon_length=3",
    "--state_interval=100",
    "--start_training=2",
    "--offline_steps=6",
    f"--online_steps={ONLINE_STEPS}",
]
JOB = ["--executor=slurm", "--gpus_per_job=0", "--cpus_per_job=1", "--mem_gb=2", "--time_min=20"]
ENV = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", XLA_PYTHON_CLIENT_PREALLOCATE="false")
WAIT_S = 420  # the most one wait may take (a loaded machine; a requeue waits CredExpire + 1 s first)


@pytest.fixture(autouse=True)
def _cluster_answers():
    if SINFO is None:
        pytest.fail("QC_REQUIRE_SLURM=1 but no SLURM cluster answers (sinfo)")


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


def _sweep(save_dir, name, *options, fixed=(), env=None, expect=0):
    """`python scripts/sweep.py --driver=main.py ... -- fixed`; asserts its exit status; returns the result."""
    command = [sys.executable, os.path.join(ROOT, "scripts", "sweep.py"), "--driver=main.py", f"--sweep_name={name}"]
    command += [f"--save_dir={save_dir}", *options, "--", *fixed]
    result = subprocess.run(command, cwd=ROOT, env=env or ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == expect, result.stdout + result.stderr
    return result


def _job_ids(stdout):
    return dict(re.findall(r"^submitted (\S+) as job (\S+)$", stdout, re.M))


def _wait(what, condition, timeout=WAIT_S, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _queued(job_ids):
    out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i"], capture_output=True, text=True).stdout
    return set(out.split()) & set(job_ids)


def _job_field(job_id, field):
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    m = re.search(rf"\b{field}=(\S+)", out)
    return m.group(1) if m else None


def _driver_pid(run_name, save_dir):
    """The PID of the `main.py` process training `run_name` under `save_dir` (a job's driver), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(w.endswith("main.py") for w in words[:2]) and f"--run_name={run_name}" in words:
            if f"--save_dir={save_dir}" in words:
                return int(pid)
    return None


def _online_state(run_dir):
    """Whether the run has written a state in its online phase (global step > 6)."""
    states = os.path.join(run_dir, "state")
    return os.path.isdir(states) and any(n.startswith("step_") and int(n[5:]) > 6 for n in os.listdir(states))


def _read(path):
    return open(path).read() if os.path.exists(path) else ""


def _freeze_mid_run(save_dir, sweep, names):
    """SIGSTOP each run's driver as soon as it has written a state in its online phase; `{name: pid}`."""
    pids = {name: _wait(f"the driver of {name}", lambda name=name: _driver_pid(name, save_dir)) for name in names}
    frozen = {}

    def freeze():
        for name, pid in pids.items():
            if name not in frozen and _online_state(os.path.join(save_dir, sweep, name)):
                os.kill(pid, signal.SIGSTOP)
                frozen[name] = pid
        return len(frozen) == len(pids)

    try:
        _wait("an online state of every run", freeze)
    except BaseException:
        _thaw(frozen.values())
        raise
    for name in names:
        assert not os.path.exists(os.path.join(save_dir, sweep, name, "DONE.json")), f"{name} finished too soon"
    return frozen


def _thaw(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _signal_job(save_dir, sweep, name, job_id, how, seen):
    """`how job_id` (a SLURM command), then wait until the run's log has `seen` (the job's wrapper got it)."""
    log = os.path.join(save_dir, sweep, "logs", f"{name}.log")
    subprocess.run([*how, job_id], check=True, capture_output=True, timeout=60)

    def seen_or_ended():
        if seen in _read(log):
            return True
        state = _job_field(job_id, "JobState")
        assert state not in ("FAILED", "COMPLETED", "CANCELLED", "TIMEOUT"), f"job {job_id} {state} without {seen!r}"
        return False

    _wait(f"{seen!r} in {log}", seen_or_ended, timeout=120, every=0.2)


def test_requeued_runs_resume_exactly_and_a_rerun_skips_them(tmp_path, dataset_path):
    """A 2-run job array: `scancel --batch -s USR1` to one job (the batch shell passes it on, the job requeues
    itself), `scontrol requeue` to the other (SIGTERM, SLURM requeues it); both resume and equal uninterrupted
    twins; the same sweep command again skips both."""
    save_dir = str(tmp_path / "exp")
    fixed = [f"--dataset_path={dataset_path}", *TINY]
    submitted = _sweep(save_dir, "live", "--seeds=0,1", *JOB, fixed=fixed)
    jobs = _job_ids(submitted.stdout)
    usr1, requeue = "cube-single-t1_sd0", "cube-single-t1_sd1"
    assert set(jobs) == {usr1, requeue}, submitted.stdout
    assert "sbatch --test-only: sbatch: Job" in submitted.stderr  # checked against the cluster first
    frozen = _freeze_mid_run(save_dir, "live", [usr1, requeue])
    try:
        _signal_job(save_dir, "live", usr1, jobs[usr1], ["scancel", "--batch", "--signal=USR1"], "SIGUSR1: forwarded")
        _thaw([frozen[usr1]])
        _signal_job(save_dir, "live", requeue, jobs[requeue], ["scontrol", "requeue"], "SIGTERM to this job")
    finally:
        _thaw(frozen.values())
    # The twins run on this machine meanwhile (the jobs wait to be started again), never interrupted.
    twins = concurrent.futures.ThreadPoolExecutor(2)
    twin_dirs = [
        twins.submit(run_driver, "main.py", str(tmp_path / "twins"), f"sd{s}", dataset_path, [*TINY, f"--seed={s}"])
        for s in (0, 1)
    ]
    _wait("both jobs to finish", lambda: not _queued(jobs.values()), every=1.0)
    twin_dirs = [f.result(timeout=WAIT_S)[0] for f in twin_dirs]
    twins.shutdown()

    logs = {name: _read(os.path.join(save_dir, "live", "logs", f"{name}.log")) for name in jobs}
    for name, job_id in jobs.items():
        assert _job_field(job_id, "JobState") == "COMPLETED", logs[name][-3000:]
        assert _job_field(job_id, "Restarts") == "1", logs[name][-3000:]
        assert logs[name].count("the driver exited with status 3") == 1, logs[name]
        assert logs[name].count("the driver exited with status 0") == 1, logs[name]
        assert "(requeues so far: 1)" in logs[name]
    # The job signalled through its batch shell requeued itself; the other was requeued by SLURM, and counted.
    assert logs[usr1].count("SIGUSR1: forwarded to the driver") == 1 and "requeued (1/10)" in logs[usr1]
    assert logs[requeue].count("SIGTERM to this job (") == 1
    assert "SLURM requeued this job 1 time(s) by itself" in logs[requeue]
    job_log = _read(os.path.join(save_dir, "live", "slurm", f"{jobs[usr1]}_0_log.out"))
    assert job_log.count("Caught signal SIGUSR1") == 1, job_log
    for name, twin in zip((usr1, requeue), twin_dirs, strict=True):
        assert_same_run(twin, os.path.join(save_dir, "live", name), FINAL_STEP)

    again = _sweep(save_dir, "live", "--seeds=0,1", *JOB, fixed=fixed)
    assert "nothing to do" in again.stdout and again.stderr.count("skip (finished") == 2, again.stdout + again.stderr
    assert "submitted" not in again.stdout


def test_jobs_that_cannot_run_stop_with_one_error_line(tmp_path):
    """A job whose interpreter is missing on the node, and (on a cluster with GPUs) a GPU job whose JAX sees none:
    each stops at start-up with one `error:` line, and the job FAILS instead of training."""
    save_dir = str(tmp_path / "exp")
    started = {}  # sweep -> (run name, job id)
    result = _sweep(save_dir, "nopython", *JOB, "--python=/nonexistent/venv/bin/python")
    started["nopython"] = next(iter(_job_ids(result.stdout).items()))
    if HAS_GPUS:
        env = {k: v for k, v in ENV.items() if k != "JAX_PLATFORMS"}
        result = _sweep(save_dir, "nogpu", *[o for o in JOB if "gpus" not in o], "--gpus_per_job=1", env=env)
        started["nogpu"] = next(iter(_job_ids(result.stdout).items()))
    _wait("the jobs to end", lambda: not _queued([job for _, job in started.values()]), every=1.0)
    for sweep, (_, job_id) in started.items():
        assert _job_field(job_id, "JobState") == "FAILED", sweep
    job_log = _read(os.path.join(save_dir, "nopython", "slurm", f"{started['nopython'][1]}_0_log.out"))
    errors = [line for line in job_log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "/nonexistent/venv/bin/python" in errors[0], job_log
    assert "does not exist on node" in errors[0]
    if HAS_GPUS:
        log = _read(os.path.join(save_dir, "nogpu", "logs", f"{started['nogpu'][0]}.log"))
        errors = [line for line in log.splitlines() if "error:" in line]
        assert len(errors) == 1 and "asked for GPUs but JAX sees only cpu" in errors[0], log
        assert "] launch " not in log  # the driver never started


def test_sbatch_options_are_checked_against_the_cluster(tmp_path):
    """Bad or impossible options are refused before anything is submitted; any #SBATCH option can be added."""
    save_dir = str(tmp_path / "exp")
    bad = _sweep(save_dir, "bad", *JOB, "--sbatch=--reservation=nope", expect=2)
    assert bad.stderr.strip().splitlines()[-1].startswith("error: sbatch --test-only refused the job array: ")
    assert "reservation" in bad.stderr.lower()
    too_big = _sweep(save_dir, "big", *[o for o in JOB if "cpus" not in o], f"--cpus_per_job={NODE_CPUS + 1}", expect=2)
    assert "no node of partition" in too_big.stderr and f"more than {NODE_CPUS} CPUs" in too_big.stderr
    for sweep in ("bad", "big"):
        folder = os.path.join(save_dir, sweep, "slurm")
        assert not os.path.isdir(folder) or not [n for n in os.listdir(folder) if n.endswith(".pkl")]
    ok = _sweep(save_dir, "ok", *JOB, "--sbatch=--exclusive", "--sbatch=--comment=qc-live", "--dry_run")
    assert "#SBATCH --comment=qc-live" in ok.stderr and "sbatch --test-only: sbatch: Job" in ok.stderr
    assert "wckey" not in ok.stderr and "submitted" not in ok.stdout
    if HAS_GPUS:
        gpu = _sweep(save_dir, "gres", *[o for o in JOB if "gpus" not in o], "--sbatch=--gres=gpu:1", "--dry_run")
        assert "#SBATCH --gres=gpu:1" in gpu.stderr and "sbatch --test-only: sbatch: Job" in gpu.stderr
