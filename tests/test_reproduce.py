"""scripts/reproduce.py: the paper's protocol by domain as a sweep (data step, commands, a tiny real run)."""

import json
import os
import shlex

import pytest

import plot_curves
import reproduce


def _commands(out: str):
    return [shlex.split(line) for line in out.splitlines() if line.strip()]


def test_dry_run_gives_the_papers_protocol(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))  # no dataset there: the data step says what it would run
    argv = ["--domain=puzzle-3x3", "--tasks=1,2", "--methods=qc-fql", "--seeds=0", "--offline_steps=100000"]
    assert reproduce.main(argv + ["--online_steps=0", "--dry_run", f"--save_dir={tmp_path}/exp"]) == 0
    out, err = capsys.readouterr()
    commands = _commands(out)
    assert len(commands) == 2
    for task, command in zip((1, 2), commands, strict=True):
        assert command[1].endswith("main.py")
        for flag in (
            f"--env_name=puzzle-3x3-play-singletask-task{task}-v0",
            "--method=qc-fql",
            "--offline_steps=100000",
            "--online_steps=0",
            "--eval_episodes=50",
            "--eval_interval=100000",
            "--state_interval=5000",
            "--seed=0",
            "--run_group=repro_puzzle-3x3_off100k_on0",
            f"--run_name=puzzle-3x3-t{task}_qc-fql_sd0",
            "--resume",
        ):
            assert flag in command
    assert "envs.download_datasets --env_names=puzzle-3x3-play-v0" in err
    assert "envs.generate_dataset --env_name=puzzle-3x3-play-v0 --seed=0" in err


def test_a_second_data_draw_has_its_own_file_sweep_and_evaluations(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    argv = ["--domain=puzzle-3x3", "--tasks=1", "--methods=qc-fql", "--seeds=1", "--offline_steps=100000"]
    argv += ["--online_steps=0", "--data_seed=3", "--eval_interval=20000", "--dry_run", f"--save_dir={tmp_path}/exp"]
    assert reproduce.main(argv) == 0
    out, err = capsys.readouterr()
    (command,) = _commands(out)
    path = f"{tmp_path}/.ogbench/data/puzzle-3x3-play-v0-draw3.npz"
    assert f"--dataset_path={path}" in command
    assert "--eval_interval=20000" in command and "--eval_interval=100000" not in command
    assert "--run_group=repro_puzzle-3x3_off100k_on0_draw3" in command
    # No download for a draw other than 0: the generator with its seed, writing the draw's own file.
    assert "download" not in err
    assert f"envs.generate_dataset --env_name=puzzle-3x3-play-v0 --seed=3 --save_path={path}" in err
    # Draw 0 is today's file and sweep, read where the drivers look by default (no --dataset_path).
    assert reproduce.dataset_path("puzzle-3x3", 0) == f"{tmp_path}/.ogbench/data/puzzle-3x3-play-v0.npz"
    assert reproduce.main([a for a in argv if not a.startswith("--data_seed")]) == 0
    (command,) = _commands(capsys.readouterr().out)
    assert "--run_group=repro_puzzle-3x3_off100k_on0" in command
    assert not any(c.startswith("--dataset_path") for c in command)


def test_methods_of_both_drivers_make_two_sweeps(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    argv = ["--domain=scene", "--tasks=1", "--methods=qc,rlpd", "--seeds=0-1", "--dry_run"]
    assert reproduce.main(argv + [f"--save_dir={tmp_path}/exp"]) == 0
    commands = _commands(capsys.readouterr().out)
    drivers = sorted(os.path.basename(c[1]) for c in commands)
    assert drivers == ["main.py", "main.py", "main_online.py", "main_online.py"]
    online = [c for c in commands if c[1].endswith("main_online.py")]
    assert all("--run_group=repro_scene_off1M_on1M_online" in c for c in online)
    assert all("--offline_steps=1000000" not in c for c in online)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--domain=scene", "--methods=qc,nope"], "error: --methods: nope is not a method"),
        (["--domain=cube-quadruple"], "error: argument --domain: invalid choice"),
        (["--domain=scene", "--tasks=7", "--dry_run"], "error: --tasks"),
    ],
)
def test_bad_inputs_are_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert reproduce.main(argv + [f"--save_dir={tmp_path}/exp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(message)


@pytest.mark.slow
def test_a_tiny_protocol_runs_and_compares(tmp_path, monkeypatch, capsys):
    """A two-episode puzzle-3x3 dataset in ~/.ogbench/data of a temporary home, one tiny run through the
    sweep, then `plot_curves.py --compare` over it (a step the released curve lacks: no row, no error)."""
    from envs.generate_dataset import generate_dataset

    monkeypatch.setenv("HOME", str(tmp_path))
    data = tmp_path / ".ogbench" / "data" / "puzzle-3x3-play-v0.npz"
    generate_dataset("puzzle-3x3-play-v0", num_episodes=2, seed=0, save_path=str(data), max_episode_steps=60)
    tiny = ["--agent.actor_hidden_dims=(16,16)", "--agent.value_hidden_dims=(16,16)", "--agent.batch_size=8"]
    argv = ["--domain=puzzle-3x3", "--tasks=2", "--methods=qc-fql", "--seeds=0", "--offline_steps=20"]
    argv += ["--online_steps=0", f"--save_dir={tmp_path}/exp", "--", "--eval_episodes=1", "--progress=False", *tiny]
    assert reproduce.main(argv) == 0
    run_dir = tmp_path / "exp" / "repro_puzzle-3x3_off20_on0" / "puzzle-3x3-t2_qc-fql_sd0"
    record = json.loads((run_dir / "flags.json").read_text())
    assert record["flags"]["eval_interval"] == 100000 and record["flags"]["sparse"] is True
    assert record["method"]["name"] == "qc-fql"
    assert [d["source"] for d in record["datasets"] if d["role"] == "train"] == ["generated"]
    assert (run_dir / "eval.csv").read_text().splitlines()[1].startswith("20,")
    assert (run_dir / "DONE.json").exists()
    # The same command again skips the finished run.
    capsys.readouterr()
    assert reproduce.main(argv) == 0
    assert "skip (finished" in capsys.readouterr().err
    # Tiny networks are not the paper's settings, and step 20 is no released step: the table says so.
    out = tmp_path / "plots"
    assert plot_curves.main([str(run_dir), f"--out_dir={out}", "--compare", "--reps=50"]) == 0
    assert "no run at the paper's settings" in (out / "compare.md").read_text()


# ---------------------------------------------------------------- --check_speed

TINY_AGENT = ["--", "--agent.actor_hidden_dims=(8,8)", "--agent.value_hidden_dims=(8,8)", "--agent.batch_size=4"]


def test_the_hours_a_row_needs():
    # 2 runs of 100k offline steps at 10 steps/s: 2 * 100000 / 10 s = 5.556 h; one evaluation each (60 s).
    hours = reproduce.training_hours(10.0, 2, 100_000, 0)
    assert hours["training"] == pytest.approx(200_000 / 10 / 3600)
    assert hours["evaluation"] == pytest.approx(2 * 60 / 3600)
    # Online steps count as utd gradient steps each; 150k online steps: evaluations at 100k and at the end.
    hours = reproduce.training_hours(10.0, 1, 100_000, 150_000, utd=2)
    assert hours["training"] == pytest.approx((100_000 + 300_000) / 10 / 3600)
    assert hours["evaluation"] == pytest.approx(3 * 60 / 3600)
    # Evaluations every 20k steps of 100k: 5 of them.
    hours = reproduce.training_hours(10.0, 1, 100_000, 0, eval_interval=20_000)
    assert hours["evaluation"] == pytest.approx(5 * 60 / 3600)
    # 1100 episodes at 0.5 episodes/s per worker: 1100 s with two workers.
    assert reproduce.generation_hours(2) == pytest.approx(1100 / 3600)


@pytest.mark.parametrize("data_there, hours_left, fits", [(True, 2.9, True), (False, 2.9, False), (True, 2.8, False)])
def test_check_speed_says_whether_the_row_fits(tmp_path, monkeypatch, capsys, data_there, hours_left, fits):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    if data_there:
        (tmp_path / ".ogbench" / "data").mkdir(parents=True)
        (tmp_path / ".ogbench" / "data" / "puzzle-3x3-play-v0.npz").write_bytes(b"")
    timed = []

    def time_update(driver, method, env_name, run_flags, steps):
        timed.append((driver, method, env_name, list(run_flags), steps))
        return {"steps_per_second": 10.0, "config": {"actor_hidden_dims": (512,) * 4, "batch_size": 256}, "utd": 1}

    monkeypatch.setattr(reproduce, "time_update", time_update)
    argv = ["--domain=puzzle-3x3", "--tasks=2,3", "--methods=qc-fql", "--seeds=0", "--offline_steps=50000",
            "--online_steps=0", "--check_speed", f"--hours_left={hours_left}", "--", "--agent.lr=0.001"]  # fmt: skip
    assert reproduce.main(argv) == (0 if fits else 1)
    out = capsys.readouterr().out
    # Task 2's env stands for the domain; the flags after `--` reach the driver's parser.
    assert timed == [("main", "qc-fql", "puzzle-3x3-play-singletask-task2-v0", ["--agent.lr=0.001"], 20)]
    assert "speed: qc-fql on puzzle-3x3: 10 gradient steps/s (4x512 MLPs, batch 256; 20 updates" in out
    # 2 runs x 50000 steps / 10 per s = 2.778 h; 2 evaluations of 60 s = 0.033 h; data: 1100 s = 0.306 h.
    assert "time: 2 run(s) of 50000 offline and 0 online steps: training 2.78 h, evaluations 0.03 h" in out
    assert ("data: " in out) is not data_there
    total = 2.81 if data_there else 3.12
    assert f"total: about {total:.2f} h" in out
    verdict = "fits" if fits else "does not fit"
    assert out.strip().splitlines()[-1] == f"verdict: {verdict} in {hours_left:g} h ({total:.2f} h needed)"


def test_check_speed_times_the_real_update_with_a_tiny_network(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))  # no data there: the estimate adds its generation
    argv = ["--domain=puzzle-3x3", "--tasks=1", "--methods=qc-fql", "--seeds=0", "--offline_steps=100000",
            "--online_steps=0", "--check_speed", "--hours_left=0", "--speed_steps=3", *TINY_AGENT]  # fmt: skip
    assert reproduce.main(argv) == 1  # nothing fits in no time
    out = capsys.readouterr().out
    speed = [line for line in out.splitlines() if line.startswith("speed: ")]
    assert len(speed) == 1 and "(2x8 MLPs, batch 4; 3 updates after 2 warm-up ones" in speed[0], out
    rate = float(speed[0].split(": ")[2].split()[0])
    assert rate > 0
    training = float(out.split("training ")[1].split(" h")[0])
    assert training == pytest.approx(100_000 / rate / 3600, abs=0.006, rel=0.01)  # the printed rate has 3 digits
    assert f"data: {tmp_path}/.ogbench/data/puzzle-3x3-play-v0.npz is missing" in out
    assert out.strip().splitlines()[-1].startswith("verdict: does not fit in 0 h")
    # It runs nothing: no sweep, no command printed.
    assert {line.split(":")[0] for line in out.splitlines()} == {"speed", "time", "data", "total", "verdict"}
