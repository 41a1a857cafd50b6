"""The baselines of issue 28 through the project's workflow at tiny size: one pair of driver runs per agent file.

ReBRAC and IFQL's chunked QC-IFQL are each run by name (`--method`) twice: a single-seed run of seed 1,
uninterrupted, and a two-seed group (`--num_seeds=2`, seeds 0 and 1, `--seed_batching=map`) with several updates
per dispatch, as the single run, that is killed and resumed. The group's seed 1 must be the single-seed run, row
for row and bit for bit: neither the seed group nor the resume (of the dispatch's sampler state too) changes
anything. Three processes per family. Both runs take the same k: k updates in one `lax.scan` equal k single updates
only to float rounding for these agents (about 1e-10 after 12 IQL steps: XLA compiles the scanned update
differently), which tests/test_baselines.py checks in process (`batch_update` against sequential `update`).
The sweep over the five methods, vmapped seeds and the plot labels are the fast tests of tests/test_sweep.py,
tests/test_baselines.py and tests/test_plot_curves.py; IFQL and IFQL-n run the same file as QC-IFQL. IQL has no
driver run here (CI time: three processes cost about 40 s): its update is IFQL's value and critic losses with
another actor loss, its batch keys are IFQL's, and nothing of it depends on the step count; a family is one line
of `FAMILIES` (`"iql": (["--method=iql"], ["--updates_per_dispatch=4", "--offline_sampler=host"], "offline:6")`
passed here, killed offline with the prefetching sampler's state resumed).
"""

import json
import math
import os

import pytest

from runner import resume
from tests.driver_runs import assert_same_run, csv_rows, run_driver, tiny_dataset

pytestmark = pytest.mark.slow

TINY = [
    "--agent.actor_hidden_dims=(16,16)",
    "--agent.value_hidden_dims=(16,16)",
    "--agent.batch_size=8",
    "--env_name=cube-single-play-singletask-task1-v0",
    "--offline_steps=12",
    "--online_steps=12",
    "--start_training=2",
    "--log_interval=6",
    "--eval_interval=100",  # evaluations at the end of each phase only
    "--eval_episodes=1",
    "--state_interval=5",
    "--buffer_size=2000",
    "--progress=False",
]
# method flags, the dispatch of both runs, where the group is killed
FAMILIES = {
    # chunks of h=3 (the paper's ablation over h), killed online with the state of step 5 mid-chunk
    "qc-ifql": (
        ["--method=qc-ifql", "--horizon_length=3", "--agent.num_samples=4", "--agent.flow_steps=2"],
        ["--updates_per_dispatch=5", "--offline_sampler=host"],
        "online:8",
    ),
}
# Left out for CI's time (each family is three driver processes; it passed here): ReBRAC with windows drawn on the
# device, killed online, its actor steps following the restored step count:
# "rebrac": (["--method=rebrac"], ["--updates_per_dispatch=4", "--offline_sampler=device"], "online:7"),


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("method", FAMILIES)
def test_a_killed_and_resumed_seed_group_with_dispatch_equals_the_single_seed_run(tmp_path, dataset_path, method):
    flags, dispatch, kill_at = FAMILIES[method]
    save = str(tmp_path)

    def run(name, *extra, **kwargs):
        return run_driver("main.py", save, name, dataset_path, [*flags, *TINY, *extra], timeout=600, **kwargs)

    single, _ = run("single", "--seed=1", *dispatch)
    group = [*dispatch, "--seed=0", "--num_seeds=2", "--seed_batching=map"]
    run("group", *group, fault=f"kill@{kill_at}", expect=-9)
    member = os.path.join(save, "g", "group_sd1")
    phase, step = kill_at.split(":")
    killed_at = int(step) + (12 if phase == "online" else 0)
    states = resume.state_steps(member)  # the resume starts before the kill: it repeats steps
    assert not os.path.isfile(os.path.join(member, "DONE.json")) and states and max(states) < killed_at
    run("group", *group, "--resume")
    assert_same_run(single, member, 24)
    assert csv_rows(os.path.join(single, "online_agent.csv")), "the online phase trained nothing"

    # The run is the paper's method by name, its values from the preset, and it acted in chunks of its h.
    with open(os.path.join(single, "flags.json")) as f:
        record = json.load(f)
    agent = record["agent"]
    assert record["method"]["name"] == method and agent["agent_name"] == method.removeprefix("qc-")
    h = 3 if method == "qc-ifql" else 1
    assert agent["horizon_length"] == h and record["flags"]["sparse"] is False
    preset = {"iql": "agent.alpha", "rebrac": "agent.alpha_actor", "qc-ifql": "agent.expectile"}[method]
    assert record["method"]["sources"][preset] == "preset"
    if method == "qc-ifql":
        assert agent["action_chunking"] is True and record["method"]["sources"]["agent.num_samples"] == "command line"
    for row in csv_rows(os.path.join(single, "eval.csv")):
        assert float(row["policy_calls_per_episode"]) == math.ceil(float(row["episode.length"]) / h)
