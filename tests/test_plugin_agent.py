"""An agent added in one file, as agents/README.md tells a researcher to, works with every tool.

The test writes the README's worked example: a copy of `agents/acfql.py` with another critic target
(the target ensemble's mean minus `beta` times its standard deviation) and one new config key, in a
folder of its own, loaded with `--agent=<file>`. No other file is edited. It then runs the copy through
`main.py` (its results equal ACFQL's exactly at `beta = 0` and differ at `beta > 0`), `--num_seeds=2`,
`--updates_per_dispatch` with the device sampler, a kill-and-resume, a sweep dry run and
`scripts/plot_curves.py`.
"""

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT, assert_same_run, csv_rows, run_driver, tiny_dataset

pytestmark = pytest.mark.slow

TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--agent.actor_num_samples=4",
    "--agent.flow_steps=2",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--horizon_length=3",
    "--offline_steps=20",
    "--online_steps=30",
    "--start_training=2",
    "--log_interval=5",
    "--eval_interval=20",
    "--eval_episodes=1",
    "--buffer_size=2000",
    "--state_interval=5",
    "--progress=False",
]


def write_pessimistic_agent(folder) -> str:
    """agents/README.md's worked example, made by editing a copy of agents/acfql.py; returns its path."""
    with open(os.path.join(ROOT, "agents", "acfql.py")) as f:
        source = f.read()
    edits = [
        ("ACFQLAgent", "PessimisticAgent"),
        ('"acfql"', '"pessimistic"'),
        (
            "            weight_decay=0.0,",
            "            beta=0.5,  # Target: mean - beta * std of the target ensemble.\n            weight_decay=0.0,",
        ),
        (
            'next_q = aggregate(next_qs, cfg["q_agg"])  # (B,)',
            'next_q = next_qs.mean(axis=0) - cfg["beta"] * next_qs.std(axis=0)  # (B,)',
        ),
        (
            "    common.check_types(c, get_config())\n",
            '    common.expect(c, "beta", common.is_number(c["beta"], 0), "a number >= 0")\n'
            "    common.check_types(c, get_config())\n",
        ),
        ("    methods=METHODS,\n", ""),
        ("    method_of=method_of,\n", ""),
    ]
    for old, new in edits:
        assert old in source, f"agents/README.md's example no longer applies to acfql.py: {old!r}"
        source = source.replace(old, new)
    path = os.path.join(str(folder), "pessimistic.py")
    with open(path, "w") as f:
        f.write(source)
    return path


@pytest.fixture(scope="module")
def setup_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    return tiny_dataset(folder), write_pessimistic_agent(folder)


def _run(save, name, dataset, *extra, fault=None, expect=0):
    """`extra` may start with `--agent=FILE`, which ml_collections needs before any `--agent.KEY`."""
    first = [a for a in extra if a.startswith("--agent=")]
    rest = [a for a in extra if not a.startswith("--agent=")]
    return run_driver("main.py", save, name, dataset, [*first, *TINY, *rest], fault=fault, expect=expect, timeout=600)


def test_a_new_agent_in_one_file_works_with_every_tool(tmp_path, setup_files):
    dataset, agent_file = setup_files
    save = str(tmp_path)
    agent = f"--agent={agent_file}"
    run_dir, _ = _run(save, "p", dataset, agent)
    with open(os.path.join(run_dir, "flags.json")) as f:
        record = json.load(f)
    assert record["agent"]["agent_name"] == "pessimistic" and record["agent"]["beta"] == 0.5
    assert record["agent_defaults"]["beta"] == 0.5 and record["flags"]["agent_file"] == agent_file
    assert csv_rows(os.path.join(run_dir, "eval.csv")) and os.path.isfile(os.path.join(run_dir, "DONE.json"))

    # Its own check: one line, before anything is written, for a bad value and for a value of the wrong kind.
    for name, bad in (("negative", "-1"), ("word", "abc")):
        bad_dir, result = _run(save, name, dataset, agent, f"--agent.beta={bad}", expect=2)
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and "--agent.beta" in last and "Traceback" not in result.stderr, last
        assert not os.path.exists(bad_dir)

    # beta = 0 is ACFQL's target (q_agg mean): the same run, row for row; beta > 0 is another one.
    zero, _ = _run(save, "p0", dataset, agent, "--agent.beta=0.0")
    acfql, _ = _run(save, "acfql", dataset)
    assert_same_run(acfql, zero, 50)
    losses = [float(r["critic/critic_loss"]) for r in csv_rows(os.path.join(run_dir, "offline_agent.csv"))]
    assert losses != [float(r["critic/critic_loss"]) for r in csv_rows(os.path.join(zero, "offline_agent.csv"))]

    # Several seeds in one process, with k steps per dispatch and windows drawn on the device.
    _run(save, "group", dataset, agent, "--num_seeds=2", "--updates_per_dispatch=5", "--offline_sampler=device")
    for seed in (0, 1):
        assert os.path.isfile(os.path.join(save, "g", f"group_sd{seed}", "DONE.json"))

    # Killed in the online phase, resumed: equal to the uninterrupted run. The agent's file is part of what a
    # resume checks (its sha256 in flags.json): an edited copy is refused unless accepted, and then recorded.
    cut, _ = _run(save, "cut", dataset, agent, fault="kill@online:12", expect=-9)
    edited = os.path.join(save, "edited.py")
    with open(agent_file) as f, open(edited, "w") as g:
        g.write(f.read() + "\n# edited after the run started\n")
    _, result = _run(save, "cut", dataset, f"--agent={edited}", "--resume", expect=2)
    assert "the agent's file changed since" in result.stderr and "--accept_changed_agent" in result.stderr
    _run(save, "cut", dataset, f"--agent={edited}", "--resume", "--accept_changed_agent")
    assert_same_run(run_dir, cut, 50)  # a comment changes nothing else
    with open(os.path.join(cut, "flags.json")) as f:
        record = json.load(f)
    assert record["agent_source"]["path"] == edited and record["agent_source_history"][0]["path"] == agent_file

    # A sweep over the new key (dry run), and the plot with its own label.
    sweep = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--driver=main.py", "--grid=agent.beta=0.0,1.0", "--seeds=0",
         "--dry_run", f"--save_dir={save}", "--", agent, "--env_name=cube-single-play-singletask-task1-v0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.stdout.count("--agent.beta=") == 2
    out = os.path.join(save, "plots")
    plot = subprocess.run(
        [sys.executable, "scripts/plot_curves.py", run_dir, acfql, f"--out_dir={out}", "--reps=50", "--no_paper"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    with open(os.path.join(out, "curves.csv")) as f:
        labels = {row["label"] for row in csv.DictReader(f)}
    pessimistic = [label for label in labels if label.startswith("pessimistic")]
    assert len(pessimistic) == 1 and "QC" not in pessimistic[0], labels
    assert any(label.startswith("QC") for label in labels), labels
