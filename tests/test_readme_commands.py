"""Every `python main.py ...` / `python main_online.py ...` command of the README parses with the driver's own
parser: flags, `--agent.*` keys and values, `--method` and its per-domain values (no data is loaded)."""

import os
import re
import shlex

import pytest

from runner.config import config_from_argv
from tests.driver_runs import ROOT


def readme_commands():
    """`(driver, argv)` of each README command (continuation lines joined; placeholders such as `...` skipped)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    commands = []
    lines = re.findall(r"`(python main(?:_online)?\.py [^`]*)`", text)  # in tables and text
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    for line in lines:
        line = line.split("  #")[0].strip()
        match = re.match(r"^python (main|main_online)\.py (.*)$", line)
        if match and not any(p in line for p in ("...", "PATH", "<", "--help")):
            commands.append((match[1], shlex.split(match[2])))
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_the_commands_it_promises():
    assert len(COMMANDS) >= 15
    assert any("--method=dqc" in argv for _, argv in COMMANDS)  # the DQC section's
    assert any("--method=qc-rlpd" in argv for _, argv in COMMANDS)


@pytest.mark.parametrize("driver, argv", COMMANDS, ids=[" ".join(a)[:80] for _, a in COMMANDS])
def test_readme_command_parses(driver, argv):
    cfg = config_from_argv(driver, argv)
    assert cfg.agent["agent_name"] in ("acfql", "acrlpd", "dqc")
