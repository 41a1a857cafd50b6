"""scripts/sweeping/slurm.py and the SLURM side of scripts/sweeping/run.py, without a cluster.

Stand-in `sbatch`, `sinfo`, `squeue`, `scontrol` and `srun` programs (tests/test_sweep.py's `_fake_programs`), the job
script's setup lines run by a real bash, and a SLURM job played by submitit's own entry point. What only a real
cluster can show (requeues, signals through slurmstepd and srun, exact resumes) is in tests/test_slurm_live.py.
"""

import concurrent.futures
import os
import signal
import subprocess
import textwrap
import time

import pytest
from submitit.core import utils as submitit_utils

import sweeping.slurm
from tests.test_sweep import ENV, _error, _fake_programs, _fake_run, _start_slurm_job, sweep


@pytest.fixture(autouse=True)
def _no_relaunch_pause(monkeypatch):
    monkeypatch.setattr(sweep.SweepRun, "RELAUNCH_DELAY_S", 0.0)


def _args(*argv):
    args = sweep.make_parser().parse_args(["--driver=main.py", "--executor=slurm", *argv])
    args.sweep_name = "s"
    sweeping.slurm.check_args(args)
    return args


def _sbatch_lines(args, num_runs=2):
    return sweep.sbatch_preview(args, "/tmp/slurm", num_runs).splitlines()


# ------------------------------------------------------------------------------------------------ options


def test_sbatch_options_become_sbatch_lines_and_no_wckey():
    args = _args(
        "--sbatch=--gres=gpu:a100:2",
        "--sbatch=exclude=node[01-03]",
        "--sbatch=--reservation res",
        "--sbatch=--exclusive",
        "--account=proj",
        "--qos=high",
    )
    lines = _sbatch_lines(args)
    for line in [
        "#SBATCH --gres=gpu:a100:2",
        "#SBATCH --exclude='node[01-03]'",
        "#SBATCH --reservation=res",
        "#SBATCH --exclusive",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --signal=USR1@300",
        "#SBATCH --requeue",
    ]:
        assert line in lines, (line, lines)
    assert not any("wckey" in line for line in lines)  # submitit's default --wckey=submitit is dropped
    assert not any("gpus-per-node" in line for line in lines)  # the GPUs come from --gres
    assert args.expect_gpus and args.gpus_per_job == 0
    # A wckey only when asked for; the default is one GPU per run as --gpus-per-node.
    lines = _sbatch_lines(_args("--sbatch=--wckey=mykey"))
    assert "#SBATCH --wckey=mykey" in lines and "#SBATCH --gpus-per-node=1" in lines
    cpu = _args("--gpus_per_job=0")
    assert not cpu.expect_gpus and not any("gpu" in line for line in _sbatch_lines(cpu))


@pytest.mark.parametrize(
    "option, message",
    [
        ("--sbatch=--time=60", "writes --time itself; use the sweep's --time_min"),
        ("--sbatch=--signal=B:USR1@60", "writes --signal itself; use the sweep's --slurm_signal_delay_s"),
        ("--sbatch=-A proj", "write one long sbatch option"),
        ("--sbatch=--partition=gpu", "use the sweep's --partition"),
        # One run, one process: more nodes or tasks would start the same run several times at once.
        ("--sbatch=--nodes=2", "the sweep writes --nodes itself"),
        ("--sbatch=--ntasks=3", "the sweep writes --ntasks itself"),
        ("--sbatch=--ntasks-per-node=2", "the sweep writes --ntasks-per-node itself"),
        (
            "--sbatch=--mem-per-cpu=1G",
            "writes --mem, which SLURM does not take beside --mem-per-cpu; use the sweep's --mem_gb",
        ),
        (
            "--sbatch=--cpus-per-gpu=4",
            "--cpus-per-task, which SLURM does not take beside --cpus-per-gpu; use the sweep's --cpus_per_job",
        ),
        ("--sbatch=--gres", "--gres needs a value"),
        # Options that take away what the job script relies on (docs/sweeps.md, section 9), each named.
        ("--sbatch=--export=NONE", "the job would not inherit this shell's environment (PATH and the venv, "
                                   "JAX_PLATFORMS, CUDA_VISIBLE_DEVICES, XLA_*, WANDB_*); keep ALL in the list"),
        ("--sbatch=--export=PATH,HOME", "would not inherit this shell's environment"),
        ("--sbatch=--export", "would not inherit this shell's environment"),
        ("--sbatch=--get-user-env", "the job would start from the login environment, not this shell's"),
        ("--sbatch=--chdir=/scratch", "the sweep fixes each run's working directory"),
        ("--sbatch=--uid=1001", "the job would run as another user"),
        ("--sbatch=--gid=50", "the job would run in another group"),
        ("--sbatch=--wait", "sbatch would not return until the whole array has ended"),
    ],
)  # fmt: skip
def test_sbatch_options_the_sweep_owns_are_refused(capsys, option, message):
    line = _error(capsys, "--driver=main.py", "--executor=slurm", "--dry_run", option, "--", ENV)
    assert message in line


def test_gpus_asked_for_twice_or_an_option_given_twice(capsys):
    line = _error(capsys, "--driver=main.py", "--executor=slurm", "--gpus_per_job=1", "--sbatch=--gres=gpu:1")
    assert "say it once" in line
    line = _error(capsys, "--driver=main.py", "--executor=slurm", "--sbatch=--exclude=a", "--sbatch=--exclude=b")
    assert "--exclude is given twice" in line
    line = _error(capsys, "--driver=main.py", "--executor=slurm", "--python=venv/bin/python")
    assert "absolute path" in line


# ------------------------------------------------------------------------------------------------ the job script


FAKE_SRUN = textwrap.dedent(
    """\
    #!/bin/bash
    # Stand-in srun: runs until SIGUSR1 reaches it, then exits 3 (as a job step whose driver saved its state).
    trap 'echo "srun got USR1" >> "$OUT/srun.txt"; exit 3' USR1
    echo started >> "$OUT/srun.txt"
    for i in $(seq 600); do sleep 0.1; done
    exit 9
    """
)


def _job_script(tmp_path, args):
    """The setup lines of the job script, then `srun` as the generated script calls it, then its status."""
    return "\n".join(sweeping.slurm.setup_lines(args) + ["srun --unbuffered fake", 'echo "srun returned $?"'])


def test_batch_shell_passes_usr1_on_to_the_job_step(tmp_path):
    """`scancel --batch -s USR1` signals the batch shell alone: it must survive and pass the signal on to srun."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(tmp_path))
    shell = subprocess.Popen(
        ["bash", "-c", _job_script(tmp_path, _args())], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120  # a loaded machine may take seconds to start the job's shell and srun
    while not (tmp_path / "srun.txt").exists():
        assert shell.poll() is None and time.monotonic() < deadline, "the job's srun did not start"
        time.sleep(0.05)
    shell.send_signal(signal.SIGUSR1)  # to the shell only, as scancel --batch does
    output = shell.communicate(timeout=30)[0].decode()
    assert shell.returncode == 0, output
    assert (tmp_path / "srun.txt").read_text().splitlines() == ["started", "srun got USR1"]
    assert "srun returned 3" in output


def test_job_stops_when_its_interpreter_is_missing_on_the_node(tmp_path):
    script = _job_script(tmp_path, _args("--python=/nonexistent/venv/bin/python"))
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "srun returned" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the Python interpreter /nonexistent/venv/bin/python")
    assert "does not exist on node" in lines[0] and "--python" in lines[0]
    # --python is the interpreter of the jobs and of every run's command.
    args = _args("--python=/shared/venv/bin/python")
    assert "/shared/venv/bin/python -u -m submitit.core._submit" in sweep.sbatch_preview(args, "/tmp/slurm", 2)


# ------------------------------------------------------------------------------------------------ the cluster


SINFO = ["debug*|n1|2|19000|(null)", "gpu|g1|64|512000|gpu:a100:4(S:0-1)", "gpu|g2|32|256000|gpu:2,mps:100"]


def test_gres_gpus():
    gres = ("(null)", "gpu:4", "gpu:a100:4(S:0-1)", "gpu:2,mps:100")
    assert [sweeping.slurm.gres_gpus(g) for g in gres] == [0, 4, 4, 2]
    assert sweeping.slurm.gres_gpus("gpu:a100:2,gpu:v100:1") == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cpus_per_job=8", "--gpus_per_job=0"], "--cpus_per_job=8: no node of partition debug has more than 2 CPUs"),
        (["--partition=gpu", "--gpus_per_job=8"], "--gpus_per_job=8: no node of partition gpu has more than 4 GPUs"),
        (["--partition=gpu", "--mem_gb=600"], "--mem_gb=600: no node of partition gpu has more than 512000 MB"),
    ],
)
def test_requests_no_node_can_hold_are_refused(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path, sinfo=SINFO)}:{os.environ['PATH']}")
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.chdir(tmp_path)
    line = _error(capsys, "--driver=main.py", "--sweep_name=s", "--executor=slurm", *argv, "--", ENV)
    assert message in line and "pending forever" in line
    assert not (tmp_path / "sbatch_script.sh").exists() and not (tmp_path / "test_only.sh").exists()


def test_the_job_script_is_checked_with_test_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path, sinfo=SINFO)}:{os.environ['PATH']}")
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.chdir(tmp_path)
    argv = ["--driver=main.py", "--sweep_name=s", "--executor=slurm", "--partition=gpu", "--gpus_per_job=4"]
    assert sweep.main([*argv, "--dry_run", "--", ENV]) == 0
    assert "sbatch --test-only: sbatch: Job 1 to start at now" in capsys.readouterr().err
    assert "#SBATCH --gpus-per-node=4" in (tmp_path / "test_only.sh").read_text()
    assert not (tmp_path / "sbatch_script.sh").exists()  # a dry run submits nothing
    assert sweep.main([*argv, "--", ENV]) == 0
    capsys.readouterr()
    assert (tmp_path / "sbatch_script.sh").read_text().splitlines()[1:] == (
        (tmp_path / "test_only.sh").read_text().splitlines()[1:]
    )
    # sbatch --test-only refuses: one error line with sbatch's message, nothing submitted, no job files left.
    (tmp_path / "bin" / "sbatch").write_text(
        '#!/bin/sh\necho "allocation failure: Requested reservation is invalid" >&2\nexit 1\n'
    )
    folder = tmp_path / "exp" / "s2" / "slurm"
    argv[1] = "--sweep_name=s2"
    line = _error(capsys, *argv, "--sbatch=--reservation=nope", "--", ENV)
    refused = "allocation failure: Requested reservation is invalid"
    assert line == f"error: sbatch --test-only refused the job array: {refused}"
    assert not folder.exists() or not any(p.suffix == ".pkl" for p in folder.iterdir())


def test_failed_sbatch_leaves_no_stray_job_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path, sbatch_fails=True)}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    line = _error(capsys, "--driver=main.py", "--sweep_name=s", "--seeds=0,1", "--executor=slurm", "--gpus_per_job=0")
    assert line.startswith("error: sbatch failed:") and "Invalid account" in line
    folder = tmp_path / "exp" / "s" / "slurm"
    assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == []


def test_jax_platforms_cpu_is_refused_for_gpu_jobs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    line = _error(capsys, "--driver=main.py", "--sweep_name=s", "--executor=slurm", "--", ENV)
    assert "JAX_PLATFORMS=cpu is set in this shell and every job inherits" in line
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert sweep.main(["--driver=main.py", "--sweep_name=s", "--executor=slurm", "--", ENV]) == 0
    assert sweep.main(["--driver=main.py", "--sweep_name=c", "--executor=slurm", "--gpus_per_job=0", "--", ENV]) == 0


# ------------------------------------------------------------------------------------------------ the job


def _as_slurm_job(monkeypatch, restart_count=None):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    if restart_count is not None:
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart_count))


def _in_thread(run):
    """Call `run` off the main thread (a job's signal handlers stay out of pytest)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=300)


def test_gpu_job_that_sees_no_gpu_stops_with_one_error_line(tmp_path, monkeypatch):
    _as_slurm_job(monkeypatch)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # as if left in the submitting shell
    run = _fake_run(tmp_path, "ok")
    run.expect_gpus = True
    with pytest.raises(sweep.RunFailed, match="asked for GPUs but JAX sees only cpu"):
        _in_thread(run)
    errors = [line for line in open(run.log_path).read().splitlines() if "error:" in line]
    assert len(errors) == 1 and "JAX_PLATFORMS='cpu'" in errors[0] and "inherits" in errors[0], errors
    assert not (tmp_path / "r" / "launches.txt").exists()  # the driver never started
    # Without GPUs asked for, the same job runs; a missing working directory stops it.
    run.expect_gpus = False
    assert _in_thread(run)["status"] == "finished"
    gone = _fake_run(tmp_path, "ok", name="g")
    gone.cwd = str(tmp_path / "not-on-this-node")
    assert "working directory" in gone.start_up_check() and "does not exist on this node" in gone.start_up_check()


def test_requeues_by_slurm_count_toward_max_requeues(tmp_path, monkeypatch):
    _as_slurm_job(monkeypatch, restart_count=2)  # SLURM requeued this job twice by itself (scontrol requeue)
    run = _fake_run(tmp_path, "ok", max_requeues=3)
    assert _in_thread(run) == {"name": "r", "status": "finished", "returncode": 0, "requeues": 2}
    log = open(run.log_path).read()
    assert "SLURM requeued this job 2 time(s) by itself" in log and "(requeues so far: 2)" in log
    # After one requeue of its own (pickled with job_requeues=1), a third start counts one more, not three.
    run = _fake_run(tmp_path, "ok", name="q", max_requeues=3)
    run.requeues = run.job_requeues = 1
    assert _in_thread(run)["requeues"] == 2
    # More SLURM requeues than --max_requeues: the run fails instead of starting again.
    over = _fake_run(tmp_path, "ok", name="o", max_requeues=1)
    with pytest.raises(sweep.RunFailed, match="requeued 2 times, more than --max_requeues=1"):
        _in_thread(over)


def test_each_signal_is_handled_and_logged_once(tmp_path):
    """SIGUSR1 and SIGTERM delivered twice (slurmstepd, srun): one forward, one requeue, one line each."""
    run = _fake_run(tmp_path, "wait_for_signal")
    proc, _, _, folder = _start_slurm_job(tmp_path, run)
    proc.send_signal(signal.SIGUSR1)
    proc.send_signal(signal.SIGUSR1)
    output = proc.communicate(timeout=60)[0]
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "77"], output
    assert output.count("Caught signal SIGUSR1") == 1, output  # submitit wrote its warnings to stdout and stderr
    log = open(run.log_path).read()
    assert log.count("SIGUSR1: forwarded") == 1 and log.count("requeued (1/3)") == 1, log
    assert submitit_utils.DelayedSubmission.load(folder / "77_submitted.pkl").function.requeues == 1
    # SIGTERM twice to the job: noted once, the driver stopped once, not relaunched.
    second = tmp_path / "second"
    second.mkdir()
    stopped = _fake_run(second, "wait_for_signal")
    proc, _, _, _ = _start_slurm_job(second, stopped)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    log = open(stopped.log_path).read()
    assert log.count("SIGTERM to this job (") == 1 and log.count("] launch ") == 1, log
    assert output.count("SIGTERM to this job (") == 1 and "Bypassing signal" not in output, output


def test_options_that_keep_the_environment_pass(capsys, tmp_path):
    """--export with ALL keeps the contract; --export-file may replace variables: one warning line naming them."""
    for option in ("--sbatch=--export=ALL,OMP_NUM_THREADS=4", "--sbatch=--export=all"):
        rc = sweep.main(["--driver=main.py", "--executor=slurm", "--dry_run", "--sweep_name=s",
                         f"--save_dir={tmp_path}", option, "--", ENV])  # fmt: skip
        out, err = capsys.readouterr()
        assert rc == 0 and "#SBATCH --export=" in out + err and "warning:" not in err, err
    rc = sweep.main(["--driver=main.py", "--executor=slurm", "--dry_run", "--sweep_name=s", f"--save_dir={tmp_path}",
                     "--sbatch=--export-file=/etc/env", "--", ENV])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0 and "warning: --sbatch=--export-file=/etc/env: variables in that file replace this shell's" in err
