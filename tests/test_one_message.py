"""One mistake, one message (issue 29 item 8): an error whose fix would lead straight to a second error about
the same command line says both at once. The wrong driver for an agent or a method together with what that
driver also refuses (--online_steps for an offline-only agent, --horizon_length for an agent without one, a
flag only the other driver has), a flag of the other driver, a non-goal agent on a goal-conditioned env (found
from the name, before the data or --sparse). In-process, through the drivers' flag parsing; no training.
"""

import os
import sys

import pytest
from absl import flags

from runner import cli
from runner.config import RunConfig
from runner.flags import define_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DQC = os.path.join(ROOT, "agents", "dqc.py")
ACRLPD = os.path.join(ROOT, "agents", "acrlpd.py")
NO_H = (
    "--horizon_length: the dqc agent has no horizon_length (its chunk lengths are --agent.* keys, e.g. DQC's "
    "--agent.backup_horizon and --agent.policy_chunk_size); drop the flag."
)
OFFLINE = "--online_steps={}: the dqc agent learns offline only; pass --online_steps=0 (or leave it out)."
ONLINE_METHODS = "--method=rlpd|rlpd-ac|qc-rlpd"
GOAL_ENV = (
    "{} is goal-conditioned (evaluation goals, no task reward), but the acfql agent is not; use a goal-conditioned "
    "agent (--agent=agents/dqc.py, or --method=dqc) or a singletask env name."
)

CASES = [
    ("main_online", [f"--agent={DQC}", "--online_steps=1000"],
     f"--agent.agent_name='dqc' runs with main.py, not main_online.py. With main.py: {OFFLINE.format(1000)}"),
    ("main_online", [f"--agent={DQC}", "--horizon_length=5", "--offline_ratio=0.2", "--online_steps=10"],
     f"--agent.agent_name='dqc' runs with main.py, not main_online.py. With main.py: {NO_H} {OFFLINE.format(10)} "
     "main.py has no --offline_ratio flag; drop it."),
    ("main_online", ["--method=dqc", "--online_steps=10", "--offline_ratio=0.2"],
     f"--method=dqc is not a method of main_online.py; accepted: {ONLINE_METHODS} (dqc runs with main.py). With "
     f"main.py: {OFFLINE.format(10)} main.py has no --offline_ratio flag; drop it."),
    ("main_online", ["--method=dqc"],
     f"--method=dqc is not a method of main_online.py; accepted: {ONLINE_METHODS} (dqc runs with main.py)."),
    ("main_online", ["--method=dqc", "--offline_steps=5"],
     "--offline_steps is a flag of main.py, not main_online.py; --method=dqc runs with main.py too: run python "
     "main.py with these flags."),
    ("main", ["--method=qc-rlpd", "--offline_ratio=0.3"],
     "--offline_ratio is a flag of main_online.py, not main.py; --method=qc-rlpd runs with main_online.py too: "
     "run python main_online.py with these flags."),
    ("main", [f"--agent={ACRLPD}", "--offline_ratio=0.3"],
     f"--offline_ratio is a flag of main_online.py, not main.py; the acrlpd agent (--agent={ACRLPD}) runs with "
     "main_online.py too: run python main_online.py with these flags."),
    ("main", ["--offline_ratio=0.3"],
     "--offline_ratio is a flag of main_online.py, not main.py; drop it, or run python main_online.py."),
    ("main", ["--method=dqc", "--horizon_length=5", "--online_steps=5"], f"{NO_H} {OFFLINE.format(5)}"),
    ("main", ["--method=qc", "--env_name=scene-play-oraclerep-v0"], GOAL_ENV.format("scene-play-oraclerep-v0")),
    ("main", ["--env_name=cube-double-play-oraclerep-v0"], GOAL_ENV.format("cube-double-play-oraclerep-v0")),
    ("main", ["--method=dqc", "--env_name=cube-single-play-singletask-task1-v0"],
     "the dqc agent is goal-conditioned, but cube-single-play-singletask-task1-v0 is a single-task env; use a "
     "goal-conditioned name such as cube-double-play-oraclerep-v0."),
]  # fmt: skip


def error_line(monkeypatch, capsys, driver, *args) -> str:
    argv = [f"{driver}.py", *args]
    monkeypatch.setattr(sys, "argv", argv)  # ml_collections reads --agent.* from sys.argv
    flag_values = flags.FlagValues()
    define_flags(driver, flag_values)
    try:
        cli.parse_flags(argv, driver, flag_values)
        RunConfig.from_flags(flag_values, driver)
    except SystemExit as e:
        assert e.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]
    except cli.InputError as e:
        return f"error: {e}"
    pytest.fail(f"{driver} {args} was accepted")


@pytest.mark.parametrize(
    "driver, args, message", CASES, ids=[" ".join([d, *a]).replace(ROOT + "/", "") for d, a, _ in CASES]
)
def test_one_message_for_one_mistake(monkeypatch, capsys, driver, args, message):
    assert error_line(monkeypatch, capsys, driver, *args) == f"error: {message}"
