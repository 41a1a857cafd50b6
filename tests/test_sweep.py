"""scripts/sweep.py: grid expansion, run names, skipping finished runs, the executors and the requeue protocol.

No cluster: the SLURM executor runs against fake `srun`, `sbatch`, `squeue` and `scontrol` programs on PATH, and a
SLURM job is played by running submitit's own job entry point (`python -m submitit.core._submit`) with SLURM's
environment variables. Fake drivers are tiny Python scripts; the `slow` test runs a two-run sweep of the real
`main.py` end to end.
"""

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time

import cloudpickle
import pytest
import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm import slurm as submitit_slurm

import agents
import sweep
from tests.driver_runs import fault_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENV = "--env_name=cube-double-play-singletask-task2-v0"


def _dry_run(capsys, *args, fixed=(ENV,)):
    rc = sweep.main(["--driver=main.py", "--sweep_name=s", "--dry_run", *args, "--", *fixed])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return [shlex.split(line) for line in out.splitlines()], err


def _flag(words, name):
    values = [w.split("=", 1)[1] for w in words if w.startswith(f"--{name}=")]
    assert len(values) == 1, (name, words)
    return values[0]


def _error(capsys, *argv):
    rc = sweep.main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------------------------------------ grid


def test_grid_is_the_cartesian_product_in_order(capsys):
    commands, _ = _dry_run(
        capsys, "--grid=horizon_length=1,5", "--grid=agent.actor_num_samples=4,32", "--seeds=0,1", "--executor=local"
    )
    assert len(commands) == 8
    got = [(_flag(c, "horizon_length"), _flag(c, "agent.actor_num_samples"), _flag(c, "seed")) for c in commands]
    assert got == [(h, n, s) for h in ("1", "5") for n in ("4", "32") for s in ("0", "1")]
    names = [_flag(c, "run_name") for c in commands]
    assert names[-1] == "cube-double-t2_h5_N32_sd1" and len(set(names)) == 8
    first = commands[0]
    assert first[0] == sys.executable and os.path.abspath(first[1]) == os.path.join(ROOT, "main.py")
    # <fixed flags> <grid flags> --seed --run_group --run_name --resume --start_if_missing --sweep_info --save_dir
    assert first[2:5] == [ENV, "--horizon_length=1", "--agent.actor_num_samples=4"]
    assert [w.split("=")[0] for w in first[5:]] == [
        "--seed",
        "--run_group",
        "--run_name",
        "--resume",
        "--start_if_missing",
        "--sweep_info",
        "--save_dir",
    ]
    assert _flag(first, "run_group") == "s" and _flag(first, "save_dir") == "exp/"
    info = json.loads(_flag(commands[3], "sweep_info"))
    assert info == {"sweep": "s", "swept": {"horizon_length": 1, "agent.actor_num_samples": 32}, "seed": 1}


def test_a_tilde_save_dir_is_the_home_directory(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (words,), _ = _dry_run(capsys, "--save_dir=~/runs")
    assert _flag(words, "save_dir") == f"{tmp_path}/runs"


def test_tasks_rewrite_the_env_name_and_method_grid(capsys):
    commands, _ = _dry_run(
        capsys,
        "--grid=method=qc,qc-fql",
        "--tasks=1,3-4",
        "--seeds=0-1",
        fixed=("--env_name=cube-double-play-singletask-v0", "--progress=False"),
    )
    assert len(commands) == 2 * 3 * 2
    envs = [_flag(c, "env_name") for c in commands]
    assert envs[:4] == [f"cube-double-play-singletask-task{t}-v0" for t in (1, 1, 3, 3)]
    assert [_flag(c, "method") for c in commands] == ["qc"] * 6 + ["qc-fql"] * 6
    assert [_flag(c, "run_name") for c in commands][:3] == [
        "cube-double-t1_qc_sd0",
        "cube-double-t1_qc_sd1",
        "cube-double-t3_qc_sd0",
    ]
    info = json.loads(_flag(commands[-1], "sweep_info"))
    assert info["swept"] == {"env_name": "cube-double-play-singletask-task4-v0", "method": "qc-fql"}
    assert commands[0][2] == "--progress=False"  # the fixed env name is replaced, the other fixed flags stay
    # A fixed env name with a task number is rewritten the same way.
    assert sweep.with_task("cube-triple-noisy-singletask-task2-v0", 5) == "cube-triple-noisy-singletask-task5-v0"


@pytest.mark.parametrize(
    "spec",
    ["agent.actor_hidden_dims=(256,256),(512,512)", "agent.actor_hidden_dims=(256,256);(512,512)"],
)
def test_values_with_commas_survive_the_dry_run(capsys, spec):
    commands, _ = _dry_run(capsys, f"--grid={spec}", "--grid=agent.alpha=3e2; 100")
    assert [_flag(c, "agent.actor_hidden_dims") for c in commands] == ["(256,256)"] * 2 + ["(512,512)"] * 2
    assert "--agent.actor_hidden_dims=(256,256)" in commands[0]  # one shell word after shlex.split
    assert [_flag(c, "agent.alpha") for c in commands[:2]] == ["3e2", "100"]
    assert _flag(commands[0], "run_name") == "cube-double-t2_actor_hidden_dims=256-256_alpha3e2_sd0"
    assert json.loads(_flag(commands[0], "sweep_info"))["swept"]["agent.actor_hidden_dims"] == "(256,256)"


def test_split_values():
    assert sweep.split_values("1,5") == ["1", "5"]
    assert sweep.split_values("(1,2),[3,4], x") == ["(1,2)", "[3,4]", "x"]
    assert sweep.split_values("a,b;c") == ["a,b", "c"]
    for bad in ("1,,2", "1,", "(1,2", "1)", "1;1"):
        with pytest.raises(sweep.InputError):
            sweep.split_values(bad)


def test_run_names_are_sanitized_and_unique(capsys):
    assert sweep.sanitize("a b/(c),d") == "a-b-c-d"
    # A value's own sign stays: -1 and 1 are two runs, not one directory.
    assert [sweep.sanitize(v) for v in ("-1", "1", "(-1,2)", "-0.5e-3")] == ["-1", "1", "-1-2", "-0.5e-3"]
    assert sweep.env_short_name("cube-double-play-singletask-task2-v0") == "cube-double-t2"
    assert sweep.env_short_name("puzzle-3x3-noisy-singletask-v0") == "puzzle-3x3-noisy"
    assert sweep.env_short_name("lift-mh-low_dim") == "lift-mh-low_dim"
    commands, _ = _dry_run(capsys, "--grid=wandb_project=my project,a/b", "--grid=agent.actor_type=best-of-n")
    names = [_flag(c, "run_name") for c in commands]
    assert names == [
        "cube-double-t2_wandb_project=my-project_actor_type=best-of-n_sd0",
        "cube-double-t2_wandb_project=a-b_actor_type=best-of-n_sd0",
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9._=-]+", n) for n in names)
    # Values that differ only in replaced characters would share a directory: an error.
    line = _error(capsys, "--driver=main.py", "--dry_run", "--grid=agent.actor_hidden_dims=(1,2);[1,2]")
    assert "run name cube-double-t2_actor_hidden_dims=1-2_sd0 is given to 2 runs" in line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--grid=horizon_length"], "the form is --grid=KEY=V1,V2"),
        (["--grid=horizon_length=1,(5"], "unbalanced brackets"),
        (["--grid=horizon_length=1,1"], "twice"),
        # One value spelled twice would launch the same run twice.
        (["--grid=horizon_length=8,08"], "list one value twice: '8' and '08'"),
        (["--grid=agent.lr=0.0003,3e-4"], "list one value twice: '0.0003' and '3e-4'"),
        (["--grid=agent.layer_norm=True,true"], "list one value twice: 'True' and 'true'"),
        (["--grid=agent.actor_hidden_dims=(256,256);(256, 256)"], "list one value twice: '(256,256)' and '(256, 256)'"),
        (["--grid=horizon_length=1", "--grid=horizon_length=5"], "given twice"),
        (["--grid=seed=1,2"], "use --seeds"),
        (["--grid=hrizon_length=1,5"], "main.py has no flag --hrizon_length"),
        (["--grid=agent.bc_alpha=0,1"], "main.py has no flag --agent.bc_alpha"),
        (["--grid=method=rlpd"], "'rlpd' is not a method of main.py"),
        # Each swept method builds its own agent: a key one of them lacks is named with that method and its file.
        (
            ["--grid=method=acsac,qc", "--", "--agent.target_choice=double"],
            "error: the agent of --method=qc (agents/acfql.py) has no key target_choice (after --)",
        ),
        (
            ["--grid=method=qc,acsac", "--grid=agent.commit_margin=0,1"],
            "--grid=agent.commit_margin=...: the agent of --method=qc (agents/acfql.py) has no key commit_margin",
        ),
        (["--grid=method=acsac", "--grid=agent.alpha=1,2"], "the agent of --method=acsac (agents/acsac.py) has no key"),
        (["--seeds=0,x"], "not an integer"),
        (["--tasks=6"], "--tasks=6: task 6 of cube-double: OGBench tasks are 1..5."),  # the family's tasks
        (["--tasks=2-7"], "--tasks=2-7: task 6 of cube-double: OGBench tasks are 1..5."),
        (["--tasks=0"], "--tasks=0: 0 is below 1"),
        (["--tasks=1", "--", "--env_name=lift-mh-low_dim"], "--tasks needs an OGBench single-task"),
        (["--grid=horizon_length=1,5", "--", "--horizon_length=3"], "both swept"),
        (["--", "--run_name=x"], "set by the sweep"),
        (["--", "--noresume"], "set by the sweep"),
        (["--", "--bogus=1"], "main.py has no flag --bogus"),
        (["--sweep_name=a/b"], "--sweep_name=a/b"),
        (["--driver=train.py"], "unknown driver"),
        (["--max_parallel=0"], "--max_parallel"),
        (["--executor=cloud"], "--executor"),
        (["--seeds=0,2,4", "--seeds_per_process=2"], "the seeds 0,2 would share one process"),
        (["--seeds=0-2,5", "--seeds_per_process=2"], "the seeds 2,5 would share one process"),
        (["--seeds=3,2", "--seeds_per_process=2"], "the seeds 3,2 would share one process"),
        (["--seeds=0-3", "--seeds_per_process=2", "--", "--num_seeds=2"], "use --seeds_per_process"),
        (["--", "--num_seeds=1"], "use --seeds_per_process"),
        (["--grid=num_seeds=1,2"], "use its --seeds_per_process"),
        (["--seeds_per_process=0"], "--seeds_per_process"),
    ],
)
def test_bad_inputs_are_one_error_line(capsys, argv, message):
    driver = [] if any(a.startswith("--driver") for a in argv) else ["--driver=main.py"]
    line = _error(capsys, *driver, "--dry_run", *argv)
    assert message in line


def test_a_swept_method_s_own_agent_keys_can_be_swept_and_fixed(capsys):
    """The agent keys of a method named only in `--grid=method=...` (here ACSAC's, which the driver's default agent
    lacks) are accepted, swept or fixed, and reach every command with its method."""
    commands, _ = _dry_run(
        capsys,
        "--grid=method=acsac,acsac-fixed",
        "--grid=agent.target_choice=max,double",
        fixed=(ENV, "--agent.commit_margin=0.5"),
    )
    assert [(_flag(c, "method"), _flag(c, "agent.target_choice")) for c in commands] == [
        ("acsac", "max"),
        ("acsac", "double"),
        ("acsac-fixed", "max"),
        ("acsac-fixed", "double"),
    ]
    assert all(_flag(c, "agent.commit_margin") == "0.5" for c in commands)
    assert len({_flag(c, "run_name") for c in commands}) == 4


def test_main_online_driver_and_its_flags(capsys):
    commands, _ = _dry_run(capsys, "--driver=main_online.py", "--grid=agent.bc_alpha=0.01,0.1", "--grid=method=qc-rlpd")
    assert os.path.abspath(commands[0][1]) == os.path.join(ROOT, "main_online.py")
    assert [_flag(c, "run_name") for c in commands] == [
        "cube-double-t2_bc0.01_qc-rlpd_sd0",
        "cube-double-t2_bc0.1_qc-rlpd_sd0",
    ]


# The Q-chunking paper's baselines (issue 28): each one's agent, h, and agent keys its preset sets on cube-double.
BASELINES = {
    "iql": ("iql", 1, {"actor_loss": "awr", "alpha": 0.3, "expectile": 0.9}),
    "rebrac": ("rebrac", 1, {"alpha_actor": 0.1, "alpha_critic": 0.0}),
    "ifql": ("ifql", 1, {"action_chunking": True, "num_samples": 32, "expectile": 0.9}),
    "ifql-n": ("ifql", 5, {"action_chunking": False, "num_samples": 32, "expectile": 0.9}),
    "qc-ifql": ("ifql", 5, {"action_chunking": True, "num_samples": 32, "expectile": 0.9}),
}


def test_a_sweep_over_the_baselines_sets_each_ones_paper_flags(capsys):
    """`--grid=method=iql,...,qc-ifql` with two seeds per process: one `--num_seeds=2` command per method, and the
    config its driver builds from it is that method's (agent, h, chunking, the paper's cube-double values)."""
    from runner.config import config_from_argv

    commands, _ = _dry_run(capsys, f"--grid=method={','.join(BASELINES)}", "--seeds=0-1", "--seeds_per_process=2")
    assert [_flag(c, "method") for c in commands] == list(BASELINES)
    assert [_flag(c, "run_name") for c in commands] == [f"cube-double-t2_{m}" for m in BASELINES]
    for words, (method, (agent_name, h, keys)) in zip(commands, BASELINES.items(), strict=True):
        assert (_flag(words, "seed"), _flag(words, "num_seeds")) == ("0", "2")
        cfg = config_from_argv("main", words[2:])
        assert (cfg.agent["agent_name"], cfg.horizon_length, cfg.agent["horizon_length"]) == (agent_name, h, h), method
        assert {k: cfg.agent[k] for k in keys} == keys and cfg.sparse is False, method
        assert {cfg.setting_sources[f"agent.{k}"] for k in keys if f"agent.{k}" in cfg.setting_sources} == {"preset"}
        assert agents.get(agent_name).method_of(cfg.agent) == method


@pytest.mark.parametrize(
    "grid, message",
    [
        # bc_alpha=0 makes QC-RLPD the paper's RLPD-AC: the driver refuses it, so the sweep does before any run starts.
        (["--driver=main_online.py", "--grid=agent.bc_alpha=0.01,0", "--grid=method=qc-rlpd"], "contradicts"),
        (["--grid=agent.actor_num_samples=8,0"], "--agent.actor_num_samples must be an int >= 1, got 0"),
        (["--grid=agent.lr=1e-3,fast"], "agent.lr"),
        (["--grid=eval_interval=-5"], "--eval_interval=-5 must be >= 0"),
    ],
)
def test_a_grid_value_the_driver_refuses_is_an_error_before_anything_runs(capsys, grid, message):
    rc = sweep.main(["--sweep_name=s", "--dry_run", *grid, "--", ENV] if "--driver" in grid[0] else
                    ["--driver=main.py", "--sweep_name=s", "--dry_run", *grid, "--", ENV])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: run ") and "the driver would refuse it" in err and message in err, err


# ------------------------------------------------------------------------------------------------ skipping


def _finish(command):
    """Make the run(s) of a sweep command finished, as the driver leaves them: flags.json and DONE.json."""
    from log_utils import write_json
    from runner import resume, setup
    from runner.config import config_from_argv

    driver = os.path.basename(command[1])[: -len(".py")]
    for cfg in setup.seed_configs(config_from_argv(driver, command[2:])):
        run_dir = resume.run_dir_of(cfg)
        os.makedirs(run_dir, exist_ok=True)
        write_json(os.path.join(run_dir, "flags.json"), {"flags": cfg.flag_values, "agent": cfg.agent})
        write_json(os.path.join(run_dir, "DONE.json"), {})


def test_finished_runs_are_skipped(capsys, tmp_path):
    save_dir = str(tmp_path)
    args = ["--grid=horizon_length=1,5", f"--save_dir={save_dir}"]
    commands, _ = _dry_run(capsys, *args)
    _finish(commands[0])
    commands, err = _dry_run(capsys, *args)
    assert [_flag(c, "run_name") for c in commands] == ["cube-double-t2_h5_sd0"]
    assert "skip (finished" in err and "cube-double-t2_h1_sd0" in err
    _finish(commands[0])
    rc = sweep.main(["--driver=main.py", "--sweep_name=s", *args, "--", ENV])
    out, _ = capsys.readouterr()
    assert rc == 0 and "nothing to do" in out


def test_finished_runs_made_with_other_settings_are_named_not_skipped(capsys, tmp_path):
    args = ["--grid=horizon_length=1,5", f"--save_dir={tmp_path}"]
    commands, _ = _dry_run(capsys, *args)
    for command in commands:
        _finish(command)
    # The same sweep with another fixed flag after --: the finished results were not made with it.
    rc = sweep.main(["--driver=main.py", "--sweep_name=s", "--dry_run", *args, "--", ENV, "--agent.lr=0.001"])
    err = capsys.readouterr().err
    assert rc == 2 and "2 finished run(s) of this sweep were made with other settings" in err, err
    assert "cube-double-t2_h1_sd0 (--agent.lr: 0.0003 then, 0.001 now)" in err


# ------------------------------------------------------------------------------------------------ seed groups


def test_seeds_per_process_groups_seeds_into_one_command_each(capsys):
    commands, _ = _dry_run(capsys, "--grid=horizon_length=1,5", "--seeds=0-7", "--seeds_per_process=4")
    assert len(commands) == 4  # 2 grid points x 2 groups of 4 seeds
    got = [
        (_flag(c, "horizon_length"), _flag(c, "seed"), _flag(c, "num_seeds"), _flag(c, "run_name")) for c in commands
    ]
    assert got == [
        ("1", "0", "4", "cube-double-t2_h1"),
        ("1", "4", "4", "cube-double-t2_h1"),
        ("5", "0", "4", "cube-double-t2_h5"),
        ("5", "4", "4", "cube-double-t2_h5"),
    ]
    # <fixed flags> <grid flags> --seed --num_seeds --run_group --run_name --resume --start_if_missing --sweep_info
    # --save_dir
    assert [w.split("=")[0] for w in commands[1][4:]] == [
        "--seed",
        "--num_seeds",
        "--run_group",
        "--run_name",
        "--resume",
        "--start_if_missing",
        "--sweep_info",
        "--save_dir",
    ]
    # The group's first seed: the driver records each run's own seed.
    info = json.loads(_flag(commands[3], "sweep_info"))
    assert info == {"sweep": "s", "swept": {"horizon_length": 5}, "seed": 4}


def test_seeds_per_process_3_cuts_0_7_into_3_3_2(capsys):
    commands, _ = _dry_run(capsys, "--seeds=0-7", "--seeds_per_process=3")
    assert [(_flag(c, "seed"), _flag(c, "num_seeds")) for c in commands] == [("0", "3"), ("3", "3"), ("6", "2")]
    assert {_flag(c, "run_name") for c in commands} == {"cube-double-t2"}
    # A group of one seed is the ordinary single-seed command (the driver names a run of --num_seeds=1 as given).
    commands, _ = _dry_run(capsys, "--seeds=0-6", "--seeds_per_process=3")
    single, _ = _dry_run(capsys, "--seeds=6")
    assert [_flag(c, "seed") for c in commands] == ["0", "3", "6"] and commands[2] == single[0]


def test_seeds_per_process_1_commands_are_unchanged(capsys):
    args = ("--grid=horizon_length=1,5", "--seeds=0-2")
    default, _ = _dry_run(capsys, *args)
    one, _ = _dry_run(capsys, *args, "--seeds_per_process=1")
    assert one == default and len(default) == 6
    assert not any(w.startswith("--num_seeds") for c in default for w in c)
    assert [_flag(c, "run_name") for c in default][:2] == ["cube-double-t2_h1_sd0", "cube-double-t2_h1_sd1"]
    assert default[1] == [
        sys.executable,
        default[1][1],
        ENV,
        "--horizon_length=1",
        "--seed=1",
        "--run_group=s",
        "--run_name=cube-double-t2_h1_sd1",
        "--resume",
        "--start_if_missing",
        '--sweep_info={"sweep":"s","swept":{"horizon_length":1},"seed":1}',
        "--save_dir=exp/",
    ]


def _done(tmp_path, *names):
    """Finish the named single-seed runs (seed from the name) of `--seeds_per_process` tests."""
    for name in names:
        seed = name.rsplit("_sd", 1)[1]
        command = [sys.executable, "main.py", ENV, f"--seed={seed}", "--run_group=s", f"--run_name={name}",
                   f"--save_dir={tmp_path}"]  # fmt: skip
        _finish(command)


def test_seed_group_is_finished_when_every_seed_is(capsys, tmp_path):
    args = ["--seeds=0-3", "--seeds_per_process=2", f"--save_dir={tmp_path}"]
    _done(tmp_path, "cube-double-t2_sd0", "cube-double-t2_sd1")  # the group 0-1: every run directory finished
    commands, err = _dry_run(capsys, *args)
    assert [(_flag(c, "seed"), _flag(c, "num_seeds")) for c in commands] == [("2", "2")]
    assert "skip (finished" in err and err.strip().endswith(": cube-double-t2_sd0-1")
    # The group 2-3 with seed 3 finished: seed 2 runs alone, with the single-seed command of --seeds_per_process=1.
    _done(tmp_path, "cube-double-t2_sd3")
    commands, err = _dry_run(capsys, *args)
    single, _ = _dry_run(capsys, "--seeds=2", f"--save_dir={tmp_path}")
    assert commands == single and _flag(commands[0], "run_name") == "cube-double-t2_sd2"
    assert "seed group cube-double-t2_sd2-3: cube-double-t2_sd3 finished" in err
    assert "skip (finished" in err and "): cube-double-t2_sd3" in err
    _done(tmp_path, "cube-double-t2_sd2")
    rc = sweep.main(["--driver=main.py", "--sweep_name=s", *args, "--", ENV])
    out, err = capsys.readouterr()
    assert rc == 0 and "nothing to do" in out and err.count("skip (finished") == 2


def test_a_seed_added_to_a_started_group_is_refused_before_anything_runs(capsys, tmp_path):
    """Seeds 0-1 started as one process (killed); the same sweep with --seeds=0-2 would put seed 2 in it."""
    started, _ = _dry_run(capsys, "--seeds=0-1", "--seeds_per_process=4", f"--save_dir={tmp_path}")
    _finish(started[0])
    for seed in (0, 1):  # killed after a run state
        os.remove(tmp_path / "s" / f"cube-double-t2_sd{seed}" / "DONE.json")
        os.makedirs(tmp_path / "s" / f"cube-double-t2_sd{seed}" / "state" / "step_000000000004")
        (tmp_path / "s" / f"cube-double-t2_sd{seed}" / "state" / "step_000000000004" / "COMPLETE").write_text("")
    line = _error(capsys, "--driver=main.py", "--sweep_name=s", "--dry_run", "--seeds=0-2", "--seeds_per_process=4",
                  f"--save_dir={tmp_path}", "--", ENV)  # fmt: skip
    assert "run cube-double-t2_sd0-2: the seed group has runs cube-double-t2_sd0, cube-double-t2_sd1 but not " in line
    assert not os.path.exists(tmp_path / "s" / "cube-double-t2_sd2")


def test_seed_group_run_skips_only_when_every_seed_is_done(tmp_path):
    run = _fake_run(tmp_path, "ok", name="g")
    run.run_dirs = [str(tmp_path / "g" / "a"), str(tmp_path / "g" / "b")]
    os.makedirs(run.run_dirs[0])
    open(os.path.join(run.run_dirs[0], "DONE.json"), "w").close()
    assert not run.is_done() and run()["status"] == "finished"
    os.makedirs(run.run_dirs[1])
    open(os.path.join(run.run_dirs[1], "DONE.json"), "w").close()
    assert run.is_done() and run()["status"] == "skipped" and len(_launches(tmp_path, "g")) == 1


# ------------------------------------------------------------------------------------------------ fake drivers

# Exits 3 (state written) on its first launch, 0 on the next; with SIGUSR1/SIGTERM it writes state and exits 3.
FAKE_DRIVER = textwrap.dedent(
    """
    import os, signal, sys, time
    out = sys.argv[1]
    mode = sys.argv[2]
    with open(os.path.join(out, "launches.txt"), "a") as f:
        f.write(" ".join(sys.argv[3:]) + "\\n")
    launches = len(open(os.path.join(out, "launches.txt")).read().splitlines())
    def stop(signum, frame):
        open(os.path.join(out, "state"), "w").write(str(signum))
        sys.exit(3)
    signal.signal(signal.SIGUSR1, stop)
    signal.signal(signal.SIGTERM, stop)
    print("fake driver launch", launches, flush=True)
    if mode == "three_once":
        sys.exit(3 if launches == 1 else 0)
    if mode == "always_three":
        sys.exit(3)
    if mode == "fail":
        sys.exit(7)
    if mode == "ok":
        sys.exit(0)
    if mode == "starting":  # still importing: SIGTERM's default action (killed, status -15) until "running"
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        open(os.path.join(out, "running"), "w").close()
        time.sleep(60)
        sys.exit(4)
    if mode == "wait_for_signal":  # first launch: run until signalled; later launches finish at once
        if launches > 1:
            sys.exit(0 if os.path.exists(os.path.join(out, "state")) else 5)
        open(os.path.join(out, "running"), "w").close()
        for _ in range(600):
            time.sleep(0.1)
        sys.exit(4)
    """
)


@pytest.fixture(autouse=True)
def _no_relaunch_pause(monkeypatch):
    monkeypatch.setattr(sweep.SweepRun, "RELAUNCH_DELAY_S", 0.0)


def _fake_run(tmp_path, mode, name="r", max_requeues=3):
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "fake_driver.py"
    script.write_text(FAKE_DRIVER)
    return sweep.SweepRun(
        name=name,
        command=[sys.executable, str(script), str(out), mode, "--resume"],
        run_dir=str(out / "run"),
        log_path=str(tmp_path / "logs" / f"{name}.log"),
        cwd=str(tmp_path),
        max_requeues=max_requeues,
        signal_grace_s=20,
    )


def _wait_for(path, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.05)


def _launches(tmp_path, name="r"):
    return (tmp_path / name / "launches.txt").read_text().splitlines()


def test_exit_3_without_preemption_relaunches_with_resume(tmp_path):
    run = _fake_run(tmp_path, "three_once")
    result = run()
    assert result == {"name": "r", "status": "finished", "returncode": 0, "requeues": 1}
    assert _launches(tmp_path) == ["--resume", "--resume"]
    log = open(run.log_path).read()
    assert log.count("fake driver launch") == 2 and "relaunching with --resume (1/3)" in log


def test_relaunches_are_bounded_and_failures_raise(tmp_path):
    run = _fake_run(tmp_path, "always_three", max_requeues=2)
    with pytest.raises(sweep.RunFailed, match="after 2 relaunches"):
        run()
    assert len(_launches(tmp_path)) == 3
    failing = _fake_run(tmp_path, "fail", name="f")
    with pytest.raises(sweep.RunFailed, match="status 7") as info:
        failing()
    assert info.value.returncode == 7 and len(_launches(tmp_path, "f")) == 1
    # A finished run (DONE.json) never starts its driver.
    done = _fake_run(tmp_path, "fail", name="d")
    os.makedirs(done.run_dir)
    open(done.done_path, "w").close()
    assert done()["status"] == "skipped" and not (tmp_path / "d" / "launches.txt").exists()


def test_checkpoint_returns_itself_with_one_more_requeue(tmp_path):
    run = _fake_run(tmp_path, "ok", max_requeues=1)
    delayed = run.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission) and delayed.function is run
    assert run.requeues == 1
    path = tmp_path / "job.pkl"
    delayed.dump(path)  # what submitit writes for the requeued job: config only, no process state
    loaded = submitit_utils.DelayedSubmission.load(path).function
    assert loaded.requeues == 1 and loaded.command == run.command and loaded._proc is None
    # The same warning delivered again (by slurmstepd and by srun): the same answer, counted once.
    again = run.checkpoint()
    assert again is not None and again.function is run and run.requeues == 1
    assert open(run.log_path).read().count("requeued (1/1)") == 1
    assert loaded.checkpoint() is None  # the requeued job at --max_requeues: submitit does not requeue


def _fake_programs(tmp_path, squeue_ids=(), sinfo=None, sbatch_fails=False):
    """`srun`, `sbatch` (copies the script, prints a job id; `--test-only` logs the script to test_only.sh),
    `squeue`, `scontrol` (logs its arguments), `sinfo` (prints the lines `sinfo`, else exits 1: no SLURM answers)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    submit = (
        'echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1'
        if sbatch_fails
        else ('echo "Submitted batch job 4242"')
    )
    programs = {
        "srun": "exit 0",
        "sbatch": f'if [ "$1" = --test-only ]; then cp "$2" {tmp_path}/test_only.sh; '
        'echo "sbatch: Job 1 to start at now" >&2; exit 0; fi\n'
        f'cp "$1" {tmp_path}/sbatch_script.sh\n{submit}',
        "squeue": "\n".join(f"echo {i}" for i in squeue_ids) or "exit 0",
        "scontrol": f'echo "$@" >> {tmp_path}/scontrol.txt',
        "sinfo": "\n".join(f"echo '{line}'" for line in sinfo) if sinfo is not None else "exit 1",
    }
    for name, body in programs.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return str(bin_dir)


def _start_slurm_job(tmp_path, run):
    """Play SLURM: pickle `run` as job 77 and start submitit's job entry point with SLURM's variables."""
    bin_dir = _fake_programs(tmp_path)
    folder = tmp_path / "slurm"
    folder.mkdir()
    delayed = submitit.helpers.DelayedSubmission(run)
    delayed.set_timeout(60, 3)
    cloudpickle.register_pickle_by_value(sys.modules[sweep.SweepRun.__module__])  # as run_slurm does
    delayed.dump(folder / "77_submitted.pkl")
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SUBMITIT_EXECUTOR="slurm",
        SUBMITIT_PREEMPT_SIGNAL="USR1",
        SLURM_JOB_ID="77",
    )
    job = [sys.executable, "-u", "-m", "submitit.core._submit", str(folder)]
    proc = subprocess.Popen(
        job, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    # Signal only once the driver is running with its handlers: under a loaded CI machine the job's start-up
    # (submitit, unpickling, the driver's own start) takes seconds, and a signal before then tests something else.
    deadline = time.monotonic() + 120
    while not (tmp_path / run.name / "running").exists():
        assert proc.poll() is None and time.monotonic() < deadline, (
            proc.communicate(timeout=60)[0] if proc.poll() is not None else "no driver after 120 s"
        )
        time.sleep(0.05)
    return proc, job, env, folder


def test_requeue_protocol_through_submitit(tmp_path):
    """SIGUSR1 to the job: the driver gets it, writes its state, the job requeues itself; the next job finishes."""
    run = _fake_run(tmp_path, "wait_for_signal")
    proc, job, env, folder = _start_slurm_job(tmp_path, run)
    proc.send_signal(signal.SIGUSR1)  # SLURM's warning, to the job's process only: the wrapper forwards it
    output = proc.communicate(timeout=60)[0]
    assert (tmp_path / "r" / "state").read_text() == str(int(signal.SIGUSR1)), output
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "77"], output
    requeued = submitit_utils.DelayedSubmission.load(folder / "77_submitted.pkl")
    assert requeued.function.requeues == 1 and not (folder / "77_0_result.pkl").exists()
    # SLURM starts the requeued job: the driver continues (--resume) and finishes.
    subprocess.run(job, env=env, check=True, capture_output=True, timeout=60)
    status, result = submitit_utils.pickle_load(folder / "77_0_result.pkl")
    assert status == "success" and result == {"name": "r", "status": "finished", "returncode": 0, "requeues": 1}
    assert _launches(tmp_path) == ["--resume", "--resume"]
    log = open(run.log_path).read()
    assert "SIGUSR1: forwarded to the driver" in log and "requeued (1/3)" in log


def test_sigterm_to_the_job_stops_without_relaunch(tmp_path):
    """SIGTERM to every process of the job (preemption, scancel): the driver writes its state, no relaunch."""
    run = _fake_run(tmp_path, "wait_for_signal")
    proc, _, _, folder = _start_slurm_job(tmp_path, run)
    os.killpg(proc.pid, signal.SIGTERM)  # as SLURM signals the whole job step
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert (tmp_path / "r" / "state").read_text() == str(int(signal.SIGTERM))
    status, result = submitit_utils.pickle_load(folder / "77_0_result.pkl")
    assert status == "success" and result["status"] == "stopped" and result["returncode"] == 3
    assert len(_launches(tmp_path)) == 1 and not (tmp_path / "scontrol.txt").exists()
    assert "not relaunched here" in open(run.log_path).read()


def test_sigterm_to_the_job_while_the_driver_starts_is_a_stop_not_a_failure(tmp_path):
    """Preempted before the driver installed its handlers: it dies of the signal (-15), the run is stopped."""
    run = _fake_run(tmp_path, "starting")
    proc, _, _, folder = _start_slurm_job(tmp_path, run)
    os.killpg(proc.pid, signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    status, result = submitit_utils.pickle_load(folder / "77_0_result.pkl")
    assert status == "success" and result == {"name": "r", "status": "stopped", "returncode": -15, "requeues": 0}
    assert len(_launches(tmp_path)) == 1 and not (tmp_path / "scontrol.txt").exists()
    assert "while the driver was starting (no state written): not relaunched here" in open(run.log_path).read()


def test_a_driver_killed_by_sigterm_from_elsewhere_is_a_failure(tmp_path):
    """No SIGTERM to the job itself: a driver that died of a signal failed (nothing says it was a preemption)."""
    run = _fake_run(tmp_path, "starting")
    threading.Thread(target=lambda: (_wait_for(tmp_path / "r" / "running"), run.signal_driver(signal.SIGTERM))).start()
    with pytest.raises(sweep.RunFailed, match="status -15"):
        run()


# ------------------------------------------------------------------------------------------------ executors


def test_slurm_executor_parameters_without_a_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path)}:{os.environ['PATH']}")
    args = sweep.make_parser().parse_args(
        [
            "--driver=main.py",
            "--executor=slurm",
            "--partition=gpu-long",
            "--gpus_per_job=2",
            "--cpus_per_job=6",
            "--mem_gb=48",
            "--time_min=720",
            "--array_parallelism=3",
            "--slurm_signal_delay_s=240",
            "--slurm_setup=module load cuda",
        ]
    )
    args.sweep_name = "s"
    executor = sweep.make_slurm_executor(args, str(tmp_path / "slurm"), num_runs=10)
    assert isinstance(executor, submitit.SlurmExecutor)
    script = submitit_slurm._make_sbatch_string(
        command="python -m submitit.core._submit", folder=executor.folder, map_count=10, **executor.parameters
    )
    for line in [
        "#SBATCH --partition=gpu-long",
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --cpus-per-task=6",
        "#SBATCH --mem=48GB",
        "#SBATCH --time=720",
        "#SBATCH --array=0-9%3",
        "#SBATCH --signal=USR1@240",
        "#SBATCH --requeue",
        "#SBATCH --job-name=sweep-s",
        "export SUBMITIT_PREEMPT_SIGNAL=USR1",
        "module load cuda",
    ]:
        assert line in script.splitlines(), (line, script)
    assert executor.max_num_timeout == 10  # --max_requeues
    single = executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    assert "#SBATCH --partition=gpu-long" in single and "--array" not in single
    # The dry run shows the same script without any SLURM program.
    monkeypatch.setenv("PATH", "/nonexistent")
    preview = sweep.sbatch_preview(args, str(tmp_path / "slurm"), 4)
    assert "#SBATCH --array=0-3%3" in preview and "#SBATCH --signal=USR1@240" in preview


def test_slurm_submission_with_fake_sbatch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", f"{_fake_programs(tmp_path, squeue_ids=['4242_1'])}:{os.environ['PATH']}")
    monkeypatch.delenv("JAX_PLATFORMS")  # GPU jobs: it would reach them
    monkeypatch.chdir(tmp_path)
    argv = [
        "--driver=main.py",
        "--grid=horizon_length=1,5",
        "--seeds=0,1",
        "--sweep_name=s",
        "--executor=slurm",
        "--partition=gpu",
        "--array_parallelism=2",
        "--",
        ENV,
    ]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "submitted cube-double-t2_h5_sd1 as job 4242_3" in out
    script = (tmp_path / "sbatch_script.sh").read_text()
    assert "#SBATCH --array=0-3%2" in script and "#SBATCH --partition=gpu" in script
    folder = tmp_path / "exp" / "s" / "slurm"
    jobs = json.loads((folder / "jobs.json").read_text())
    assert jobs["cube-double-t2_h1_sd1"] == "4242_1"
    job = submitit_utils.DelayedSubmission.load(folder / "4242_3_submitted.pkl").function
    assert job.name == "cube-double-t2_h5_sd1" and "--resume" in job.command
    assert job.log_path == str(tmp_path / "exp" / "s" / "logs" / "cube-double-t2_h5_sd1.log")
    # Again: 4242_1 is still queued (squeue), so only the other three are submitted.
    assert sweep.main(argv) == 0
    captured = capsys.readouterr()
    assert "skip (queued or running as job 4242_1): cube-double-t2_h1_sd1" in captured.err
    assert "#SBATCH --array=0-2%2" in (tmp_path / "sbatch_script.sh").read_text()


def test_slurm_seed_groups_one_array_task_each(tmp_path, monkeypatch, capsys):
    bin_dir = _fake_programs(tmp_path, squeue_ids=["4242_1"])
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.chdir(tmp_path)
    argv = ["--driver=main.py", "--grid=horizon_length=1,5", "--seeds=0-3", "--seeds_per_process=2", "--sweep_name=s"]
    argv += ["--executor=slurm", "--", ENV]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "4 runs (processes of up to 2 seeds)" in out
    assert "submitted cube-double-t2_h1_sd2-3 as job 4242_1" in out
    assert "#SBATCH --array=0-3%4" in (tmp_path / "sbatch_script.sh").read_text()
    group_dir = tmp_path / "exp" / "s"
    jobs = json.loads((group_dir / "slurm" / "jobs.json").read_text())
    assert list(jobs) == [f"cube-double-t2_h{h}_sd{s}" for h in (1, 5) for s in ("0-1", "2-3")]
    job = submitit_utils.DelayedSubmission.load(group_dir / "slurm" / "4242_1_submitted.pkl").function
    assert job.name == "cube-double-t2_h1_sd2-3"
    assert job.log_path == str(group_dir / "logs" / "cube-double-t2_h1_sd2-3.log")
    assert job.run_dirs == [str(group_dir / f"cube-double-t2_h1_sd{seed}") for seed in (2, 3)]
    assert (_flag(job.command, "seed"), _flag(job.command, "num_seeds")) == ("2", "2")
    assert _flag(job.command, "run_name") == "cube-double-t2_h1" and "--resume" in job.command
    # Again while 4242_1 is queued: that group is skipped by its name, the other three are submitted.
    (tmp_path / "bin" / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {tmp_path}/sbatch_script.sh\necho "Submitted batch job 4343"\n'
    )
    assert sweep.main(argv) == 0
    captured = capsys.readouterr()
    assert "skip (queued or running as job 4242_1): cube-double-t2_h1_sd2-3" in captured.err
    assert "#SBATCH --array=0-2%3" in (tmp_path / "sbatch_script.sh").read_text()
    # Seed 2 of the queued group has finished (seed 3 not yet): seed 3 alone would run in a directory of the running
    # job, so it is skipped as queued under its group's name.
    (tmp_path / "bin" / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {tmp_path}/sbatch_script.sh\necho "Submitted batch job 4444"\n'
    )
    _finish([sys.executable, "main.py", ENV, "--horizon_length=1", "--seed=2", "--run_group=s",
             "--run_name=cube-double-t2_h1_sd2", "--save_dir=exp/"])  # fmt: skip
    assert sweep.main(argv) == 0
    captured = capsys.readouterr()
    assert "skip (queued or running as job 4242_1 (cube-double-t2_h1_sd2-3)): cube-double-t2_h1_sd3" in captured.err
    submitted = [line.split()[1] for line in captured.out.splitlines() if line.startswith("submitted ")]
    assert submitted == ["cube-double-t2_h1_sd0-1", "cube-double-t2_h5_sd0-1", "cube-double-t2_h5_sd2-3"]


def test_local_executor_summary_and_exit_status(tmp_path, capsys):
    runs = [
        _fake_run(tmp_path, "ok", name="a"),
        _fake_run(tmp_path, "fail", name="b"),
        _fake_run(tmp_path, "three_once", name="c"),
    ]
    args = sweep.make_parser().parse_args(["--driver=main.py", "--max_parallel=2", f"--save_dir={tmp_path}"])
    args.sweep_name = "s"
    assert sweep.run_local(runs, [], args) == 1
    out = capsys.readouterr().out
    assert "sweep s: 2 finished, 1 failed, 0 skipped" in out
    assert f"failed: b (exit status 7; log: {runs[1].log_path})" in out
    assert runs[2].requeues == 1
    # A second local sweep of the same name on this machine is refused while the first holds the lock.
    import fcntl

    fd = os.open(tmp_path / "s" / ".sweep.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(sweep.InputError, match="running already"):
            sweep.run_local([_fake_run(tmp_path, "ok", name="e")], [], args)
    finally:
        os.close(fd)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stopping_a_local_sweep_stops_its_drivers_with_sigterm(tmp_path, signum):
    """SIGTERM or Ctrl-C to the sweep: each running driver gets SIGTERM (writes its state), nothing is relaunched."""
    run = _fake_run(tmp_path, "wait_for_signal", name="w")
    program = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})  # as `python scripts/sweep.py` has it
        import sweep
        run = sweep.SweepRun(name="w", command={run.command!r}, run_dir={run.run_dir!r}, log_path={run.log_path!r},
                             cwd={str(tmp_path)!r})
        args = sweep.make_parser().parse_args(["--driver=main.py", "--save_dir={tmp_path}"])
        args.sweep_name = "s"
        sys.exit(sweep.run_local([run], [], args))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    _wait_for(tmp_path / "w" / "running")  # the sweep's handlers are in place once its driver runs
    proc.send_signal(signum)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + int(signum), output
    assert (tmp_path / "w" / "state").read_text() == str(int(signal.SIGTERM))
    assert "stopped or not started: w" in output and "--sweep_name=s" in output
    assert len(_launches(tmp_path, "w")) == 1


# ------------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_local_sweep_of_the_real_driver(tmp_path):
    from envs.generate_dataset import generate_dataset

    dataset = str(tmp_path / "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=2, seed=0, save_path=dataset, max_episode_steps=60, progress=False
    )
    save_dir = tmp_path / "exp"
    command = [
        sys.executable,
        os.path.join(ROOT, "scripts", "sweep.py"),
        "--driver=main.py",
        "--grid=horizon_length=2,3",
        "--seeds=0",
        "--executor=local",
        "--max_parallel=2",
        "--sweep_name=tiny",
        f"--save_dir={save_dir}",
        "--",
        "--env_name=cube-single-play-singletask-task1-v0",
        f"--dataset_path={dataset}",
        "--offline_steps=4",
        "--online_steps=4",
        "--start_training=2",
        "--eval_interval=4",
        "--eval_episodes=1",
        "--buffer_size=500",
        "--progress=False",
        "--agent.actor_hidden_dims=(16,16)",
        "--agent.value_hidden_dims=(16,16)",
        "--agent.batch_size=8",
        "--agent.actor_num_samples=4",
        "--agent.flow_steps=2",
    ]
    # Each driver stops itself at offline step 2 as on SIGTERM (state written, exit status 3); the sweep relaunches
    # it in place with --resume and it continues from that state.
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", **fault_env("signal@offline:2"))
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    logs = save_dir / "tiny" / "logs"
    details = result.stdout + result.stderr + "".join(p.read_text()[-3000:] for p in logs.glob("*.log"))
    assert result.returncode == 0, details
    assert "sweep tiny: 2 finished, 0 failed, 0 skipped" in result.stdout
    for h in (2, 3):
        name = f"cube-single-t1_h{h}_sd0"
        run_dir = save_dir / "tiny" / name
        with open(run_dir / "eval.csv") as f:
            assert [int(r["step"]) for r in csv.DictReader(f)] == [4, 8]
        meta = json.loads((run_dir / "flags.json").read_text())
        assert meta["sweep"] == {"sweep": "tiny", "swept": {"horizon_length": h}, "seed": 0}
        assert meta["flags"]["run_group"] == "tiny" and meta["agent"]["horizon_length"] == h
        assert (run_dir / "DONE.json").exists()
        log = (logs / f"{name}.log").read_text()
        assert "the driver exited with status 3" in log and "relaunching with --resume (1/10)" in log, log
    # The same command again: both runs are finished and skipped.
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr
    assert again.stderr.count("skip (finished") == 2


def test_a_large_sweep_says_its_size_first_and_needs_confirming(capsys, tmp_path):
    """Issue 29: 10,000 seeds are checked as one setting (seeds change no check) and say their number first; more
    than 1000 runs start only with --confirm_runs=<their number>."""
    commands, err = _dry_run(capsys, "--seeds=0-9999")
    assert len(commands) == 10000 and [_flag(c, "seed") for c in commands[:2]] == ["0", "1"]
    assert err.startswith("sweep s: 10000 runs of main.py (1 setting(s) x 10000 seed(s)); checking them")
    save = f"--save_dir={tmp_path}"
    for extra in ([], ["--confirm_runs=1999"]):
        line = _error(capsys, "--driver=main.py", "--sweep_name=s", save, "--seeds=0-1999", *extra, "--", ENV)
        assert "this sweep would start 2000 runs (more than 1000); look at it with --dry_run, then pass " in line
        assert line.endswith("--confirm_runs=2000 to start it")
    assert not os.path.exists(os.path.join(tmp_path, "s"))  # nothing started
    # Each setting is still checked: the second of two, with 300 seeds each, is refused naming its first run.
    rc = sweep.main(["--driver=main.py", "--dry_run", "--sweep_name=s", "--seeds=0-299", "--grid=agent.batch_size=8,0",
                     "--", ENV])  # fmt: skip
    size, error = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and size.startswith("sweep s: 600 runs of main.py (2 setting(s) x 300 seed(s))")
    assert error.startswith("error: run cube-double-t2_bs0_sd0: the driver would refuse it: --agent.batch_size")
