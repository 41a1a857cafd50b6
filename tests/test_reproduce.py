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
