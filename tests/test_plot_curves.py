"""scripts/plot_curves.py and its parts (paper curves from run directories or wandb).

Tiny run directories written here as the drivers write them (`flags.json`: `driver`, `flags`, `agent`,
`task_id`, optional `method`, `datasets` and `agent_defaults`; `eval.csv`: `step, success, ...`): QC and
QC-FQL on cube-double tasks 1 and 2, 3 seeds each, with known success values, one missing evaluation
and one extra evaluation step; runs of an agent the registry does not know (`toy`) beside them; and
every kind of input the script refuses (one `error:` line naming the file) or warns about (naming
the run). Bootstraps use few resamples to stay fast.
"""

import csv
import json
import math
import os

import numpy as np
import pytest
from PIL import Image

import agents
import envs
import plot_curves as pc
import plotting.figure
import plotting.paper
import plotting.runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPS = 400
OFFLINE, ONLINE = 8000, 2000
QC_AGENT = {"agent_name": "acfql", "actor_type": "best-of-n", "action_chunking": True, "actor_num_samples": 32}
QC_FQL_AGENT = {"agent_name": "acfql", "actor_type": "distill-ddpg", "action_chunking": True, "alpha": 300.0}
NAN = math.nan
# success per method, task and seed at steps 4000, 8000 (end of offline) and 10000 (end); NaN: not evaluated.
VALUES = {
    "QC": {
        1: [[0.1, 0.3, 0.5], [0.2, 0.4, 0.6], [0.3, 0.5, 1.0]],
        2: [[0.4, 0.6, 0.8]] * 3,  # every seed agrees
    },
    "QC-FQL": {
        1: [[0.0, 0.2, 0.4], [0.2, 0.4, 0.6], [0.1, NAN, 0.2]],  # seed 2 has no evaluation at 8000
        2: [[0.6, 0.6, 0.9], [0.3, 0.6, 0.6], [0.0, 0.6, 0.3]],
    },
}
EXTRA = {("QC-FQL", 2, 0): (6000, 0.7)}  # the only evaluation at step 6000
# Hand-computed means over seeds at 4000, 6000, 8000, 10000, per task and per domain (mean over tasks).
TASK_MEANS = {
    ("QC", 1): [0.2, NAN, 0.4, 0.7],
    ("QC", 2): [0.4, NAN, 0.6, 0.8],
    ("QC-FQL", 1): [0.1, NAN, 0.3, 0.4],
    ("QC-FQL", 2): [0.3, 0.7, 0.6, 0.6],
}
DOMAIN_MEANS = {"QC": [0.3, NAN, 0.5, 0.75], "QC-FQL": [0.2, NAN, 0.45, 0.5]}


def _record(agent, env_name, seed, task_id, offline_steps=OFFLINE, online_steps=ONLINE, h=5, datasets=None):
    flags = {
        "env_name": env_name,
        "seed": seed,
        "offline_steps": offline_steps,
        "online_steps": online_steps,
        "horizon_length": h,
        "eval_episodes": 10,
        "run_group": "sweep",
        "method": None,
    }
    record = {
        "driver": "main_online" if agent["agent_name"] == "acrlpd" else "main",
        "flags": flags,
        "agent": {**agent, "horizon_length": h, "discount": 0.99, "batch_size": 256},
        "task_id": task_id,
        "ogbench_version": "1.2.2",
        "success_timing": "post",
    }
    if datasets is not None:
        record["datasets"] = datasets
    return record


def write_run(directory, record, rows):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "flags.json"), "w") as f:
        json.dump(record, f, indent=2)
    with open(os.path.join(directory, "eval.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "success", "episode.return", "episode.length"])
        for step, value in rows:
            writer.writerow([step, value, -100.0, 200.0])


def _rows(method, task, seed):
    rows = [(s, v) for s, v in zip((4000, 8000, 10000), VALUES[method][task][seed], strict=True) if not math.isnan(v)]
    if (method, task, seed) in EXTRA:
        rows = sorted(rows + [EXTRA[(method, task, seed)]])
    return rows


def _records():
    for method, agent in (("QC", QC_AGENT), ("QC-FQL", QC_FQL_AGENT)):
        for task in (1, 2):
            for seed in range(3):
                env_name = f"cube-double-play-singletask-task{task}-v0"
                yield method, task, seed, _record(agent, env_name, seed, task), _rows(method, task, seed)


@pytest.fixture
def sweep(tmp_path):
    """`exp/sweep/<timestamp>_<env>_sd<seed>/` for every method, task and seed, like a sweep's group dir."""
    group = tmp_path / "exp" / "sweep"
    for method, task, seed, record, rows in _records():
        write_run(group / f"20261130_1200{seed}{task}_{method}_cube-double-task{task}_sd{seed:03d}", record, rows)
    (group / "notes").mkdir()  # a directory without runs is searched and skipped
    (group / "notes" / "todo.txt").write_text("more seeds\n")
    return group


# ------------------------------------------------------------------------------------------------ labels


def _agent_record(env_name="cube-double-play-singletask-task2-v0", h=5, datasets=None, **agent):
    return _record(agent, env_name, 0, 2, h=h, datasets=datasets)


@pytest.mark.parametrize(
    "agent,h,label",
    [
        (QC_AGENT, 5, "QC"),
        (QC_FQL_AGENT, 5, "QC-FQL"),
        ({**QC_AGENT, "action_chunking": False, "actor_num_samples": 4}, 5, "BFN-n"),
        ({**QC_AGENT, "actor_num_samples": 4}, 1, "BFN"),
        ({**QC_FQL_AGENT, "action_chunking": False, "alpha": 100.0}, 5, "FQL-n"),
        ({**QC_FQL_AGENT, "alpha": 300.0}, 1, "FQL"),
        ({"agent_name": "acrlpd", "action_chunking": True, "bc_alpha": 0.0}, 1, "RLPD"),
        ({"agent_name": "acrlpd", "action_chunking": True, "bc_alpha": 0.0}, 5, "RLPD-AC"),
        ({"agent_name": "acrlpd", "action_chunking": True, "bc_alpha": 0.01}, 5, "QC-RLPD"),
        # Suffixes: h differs from the paper's 5, N or alpha or bc_alpha from the paper's domain value.
        (QC_AGENT, 3, "QC h=3"),
        ({**QC_AGENT, "actor_num_samples": 16}, 5, "QC N=16"),
        ({**QC_AGENT, "actor_num_samples": 16}, 10, "QC h=10 N=16"),
        ({**QC_AGENT, "action_chunking": False, "actor_num_samples": 32}, 5, "BFN-n N=32"),
        ({**QC_AGENT, "actor_num_samples": 8}, 1, "BFN N=8"),
        ({**QC_FQL_AGENT, "alpha": 100.0}, 3, "QC-FQL h=3 alpha=100"),
        ({"agent_name": "acrlpd", "action_chunking": True, "bc_alpha": 0.1}, 4, "QC-RLPD h=4 bc_alpha=0.1"),
        # Not a paper method: the agent's name and what differs from its defaults, never a method's label.
        (
            {"agent_name": "acrlpd", "action_chunking": False, "bc_alpha": 0.0},
            5,
            "acrlpd action_chunking=False horizon_length=5",
        ),
        ({**QC_AGENT, "critic_target": "max"}, 5, "acfql critic_target=max horizon_length=5"),
        (
            {"agent_name": "toy", "toy_weight": 0.5},
            5,
            "toy batch_size=256 discount=0.99 horizon_length=5 toy_weight=0.5",
        ),
    ],
)
def test_method_labels(agent, h, label):
    assert pc.label_of(_agent_record(h=h, **agent))[1] == label


def test_label_domain_values_and_data_source():
    # N of QC is 64 on puzzle-3x3 (32 elsewhere): the same run config gets another label there.
    puzzle = "puzzle-3x3-play-singletask-task4-v0"
    assert pc.label_of(_agent_record(env_name=puzzle, **{**QC_AGENT, "actor_num_samples": 64}))[1] == "QC"
    assert pc.label_of(_agent_record(env_name=puzzle, **QC_AGENT))[1] == "QC N=32"
    # The paper gives no N for BFN on robomimic: the label always shows it.
    assert pc.label_of(_agent_record(env_name="lift-mh-low_dim", h=1, **{**QC_AGENT, "actor_num_samples": 4}))[1] == (
        "BFN N=4"
    )
    generated = [{"source": "generated", "role": "train"}, {"source": "official", "role": "val"}]
    assert pc.label_of(_agent_record(datasets=generated, **QC_AGENT)) == ("QC", "QC (generated data)")
    official = [{"source": "official", "role": "train"}, {"source": "unknown", "role": "val"}]
    assert pc.data_source(_agent_record(datasets=official, **QC_AGENT)) == "official"
    assert pc.data_source(_agent_record(**QC_AGENT)) == "unknown"  # no `datasets` record
    assert pc.label_of(_agent_record(**QC_AGENT))[1] == "QC"

    def names(env_name, task_id):
        return pc.domain_and_task(envs.parse(env_name).record(), task_id)

    assert names("cube-double-play-singletask-task2-v0", 2) == ("cube-double", "cube-double-play-task2")
    assert names("cube-double-noisy-singletask-v0", 2) == ("cube-double-noisy", "cube-double-noisy-task2")
    assert names("square-mh-low_dim", None) == ("square", "square")
    assert names("lift-ph-low_dim", None) == ("lift-ph", "lift-ph")
    assert names("cube-double-play-oraclerep-v0", None) == ("cube-double", "cube-double-play-oraclerep-v0")
    assert names("transport-mh-low_dim", None) == ("transport", "transport")  # no paper values: still its names


# ------------------------------------------------------------------------------------------------ statistics


def _runs(sweep):
    return [pc.read_run_dir(d) for d in pc.find_run_dirs([str(sweep)])]


def _seed_values(method, task, i):
    x = (4000, 6000, 8000, 10000)[i]
    values = [v for s in range(3) for step, v in _rows(method, task, s) if step == x]
    return values


def test_curves_per_task_and_domain(sweep):
    runs = _runs(sweep)
    assert len(runs) == 12 and {r.label for r in runs} == {"QC", "QC-FQL"}
    per_task = pc.compute_curves(runs, True, "mean", REPS, 0, online_offset=0)
    assert [(c.panel, c.label) for c in per_task] == [
        ("cube-double-play-task1", "QC"),
        ("cube-double-play-task1", "QC-FQL"),
        ("cube-double-play-task2", "QC"),
        ("cube-double-play-task2", "QC-FQL"),
    ]
    for c in per_task:
        task = int(c.panel[-1])
        # Every curve of the panel lies on the union of the panel's steps (6000 only from task 2's QC-FQL).
        assert list(c.x) == ([4000, 6000, 8000, 10000] if task == 2 else [4000, 8000, 10000])
        expected = TASK_MEANS[(c.label, task)]
        if task == 1:
            expected = [expected[0], expected[2], expected[3]]
        np.testing.assert_allclose(c.mean, expected, atol=1e-12)  # NaN where no run of the group has a value
        for i, x in enumerate(c.x):
            values = [v for s in range(3) for step, v in _rows(c.label, task, s) if step == x]
            if not values:
                assert math.isnan(c.low[i]) and math.isnan(c.high[i]) and c.count[i] == 0
                continue
            assert c.count[i] == len(values)
            assert min(values) - 1e-12 <= c.low[i] <= c.mean[i] <= c.high[i] <= max(values) + 1e-12
            if len(set(values)) == 1:  # all seeds agree: the interval is the point
                assert c.low[i] == pytest.approx(c.mean[i]) and c.high[i] == pytest.approx(c.mean[i])
            elif len(values) > 1:
                assert c.low[i] < c.high[i]
    # QC-FQL task 1 at 8000: seed 2 has no evaluation there, so the mean of the other two.
    fql_task1 = per_task[1]
    assert fql_task1.count[1] == 2 and fql_task1.mean[1] == pytest.approx((0.2 + 0.4) / 2)


def test_domain_aggregate_is_mean_over_tasks(sweep):
    runs = _runs(sweep)
    domain = pc.compute_curves(runs, False, "mean", REPS, 0, online_offset=0)
    per_task = pc.compute_curves(runs, True, "mean", REPS, 0, online_offset=0)
    assert [(c.panel, c.label, c.tasks) for c in domain] == [
        ("cube-double", "QC", ("cube-double-play-task1", "cube-double-play-task2")),
        ("cube-double", "QC-FQL", ("cube-double-play-task1", "cube-double-play-task2")),
    ]
    for c in domain:
        assert list(c.x) == [4000, 6000, 8000, 10000]
        np.testing.assert_allclose(c.mean, DOMAIN_MEANS[c.label], atol=1e-12)
        # The mean over tasks of the per-task means over seeds (where every task has a value).
        task_curves = [t for t in per_task if t.label == c.label]
        for i, x in enumerate(c.x):
            task_means = [t.mean[list(t.x).index(x)] for t in task_curves if x in t.x]
            if len(task_means) < 2 or any(math.isnan(m) for m in task_means):
                assert math.isnan(c.mean[i])  # 6000: task 1 has no value, so no domain value
            else:
                assert c.mean[i] == pytest.approx(np.mean(task_means))
                assert c.low[i] <= c.mean[i] <= c.high[i]
    # Same seed, same intervals.
    again = pc.compute_curves(runs, False, "mean", REPS, 0, online_offset=0)
    np.testing.assert_array_equal(again[0].low, domain[0].low)


def test_bootstrap_ragged_tasks_and_iqm():
    # Task A: 3 seeds, task B: 2 seeds (rliable's independent stratified bootstrap).
    a, b = np.array([[0.0], [0.5], [1.0]]), np.array([[0.2], [0.4]])
    point, low, high, count = pc.bootstrap_curve([a, b], "mean", REPS, 0)
    assert point[0] == pytest.approx((0.5 + 0.3) / 2) and count[0] == 5
    assert (0.0 + 0.2) / 2 <= low[0] < point[0] < high[0] <= (1.0 + 0.4) / 2
    # IQM over seeds: the 25% trimmed mean (4 values: drop the lowest and the highest).
    point, low, high, _ = pc.bootstrap_curve([np.array([[0.0], [0.2], [0.4], [1.0]])], "iqm", REPS, 0)
    assert point[0] == pytest.approx(0.3) and 0.0 <= low[0] <= point[0] <= high[0] <= 1.0
    # In the figure a value between two gaps gets its own marker and CI bar (no line reaches it).
    assert plotting.figure._isolated(np.array([0.1, NAN, 0.2, 0.3, NAN, 0.4])) == [0, 5]


def test_online_only_runs_start_at_the_offline_steps(sweep):
    record = _record(
        {"agent_name": "acrlpd", "action_chunking": True, "bc_alpha": 0.0},
        "cube-double-play-singletask-task1-v0",
        0,
        1,
        offline_steps=0,
        h=1,
    )
    write_run(sweep / "rlpd_sd000", record, [(1000, 0.1), (2000, 0.3)])
    runs = _runs(sweep)
    rlpd = [r for r in runs if r.label == "RLPD"]
    assert len(rlpd) == 1 and rlpd[0].driver == "main_online"
    offset = pc._online_offset(runs, "auto")
    assert offset == OFFLINE and list(rlpd[0].x(offset)) == [9000, 10000]
    assert pc._online_offset(rlpd, "auto") == 1_000_000  # alone: where the paper puts online-only methods


# ------------------------------------------------------------------------------------------------ command line


def _paper_value(task, method, x):
    with open(os.path.join(ROOT, "data", "paper", "ogbench-individual.csv")) as f:
        for row in csv.DictReader(f):
            if row["task"] == task and row["method"] == method and float(row["steps_millions"]) == x:
                return float(row["mean"])
    raise AssertionError((task, method, x))


def test_command_writes_figure_and_table(sweep, tmp_path, capsys):
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", f"--reps={REPS}"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}/curves.png" in printed and "QC on cube-double: 2 task(s), 6 run(s)" in printed
    table = (out / "table.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if "| cube-double |" in line}
    # End of offline (8000) and of training (10000), per domain: mean over tasks of the means over seeds.
    assert "| QC | cube-double | 1, 2 | 6 | unknown | 8,000 | 0.500 [" in rows["QC"]
    assert "| 10,000 | 0.750 [" in rows["QC"]
    assert "| 8,000 | 0.450 [" in rows["QC-FQL"] and "(5 of 6 runs)" in rows["QC-FQL"]
    assert "| 10,000 | 0.500 [" in rows["QC-FQL"]
    # Beside it, the paper's QC at the end of its phases: the mean of its task 1 and task 2 curves.
    for x in (1.0, 2.0):
        paper = np.mean([_paper_value(f"cube-double-play-task{t}", "QC", x) for t in (1, 2)])
        assert f"{paper:.3f} @{x:g}M (QC, mean of tasks 1, 2)" in rows["QC"]
    # Per task: the seed means; task 2 of QC has identical seeds, so the interval is the point.
    assert "| QC | cube-double-play-task2 | 3 | unknown | 8,000 | 0.600 [0.600, 0.600] |" in table
    assert f"{_paper_value('cube-double-play-task2', 'QC', 1.0):.3f} [" in table
    # The figure: a PNG of the size the layout asks for, with the curves drawn; a PDF.
    png, pdf = out / "curves.png", out / "curves.pdf"
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        # One panel; the legend: QC and QC-FQL, each above the paper's curve (one column).
        width, height = pc.figure_size(1, 4, False)
        assert image.size == (round(width * pc.DPI), round(height * pc.DPI))
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3).astype(int)
    qc_red = np.array([0xD6, 0x27, 0x28])
    assert (np.abs(pixels - qc_red).sum(axis=1) < 30).sum() > 200
    assert png.stat().st_size > 20_000 and pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 5_000
    # curves.csv: the plotted points, a gap (empty) where the domain aggregate is missing.
    with open(out / "curves.csv") as f:
        points = [r for r in csv.DictReader(f) if r["label"] == "QC-FQL"]
    assert [(r["step"], r["value"]) for r in points] == [
        ("4000", "0.2"),
        ("6000", ""),
        ("8000", "0.45"),
        ("10000", "0.5"),
    ]


def _family_run(directory, env, seed=0, agent=QC_AGENT):
    """A QC run whose `flags.json` carries `env` as its env block (as a family's run records it)."""
    record = {**_record(agent, env["name"], seed, env["task"]), "env": env}
    write_run(directory, record, [(4000, 0.2), (8000, 0.4), (10000, 0.6)])


def test_a_family_the_papers_did_not_run_has_its_own_panels_and_no_paper_curve(tmp_path, capsys):
    """A family added since the papers (a `family` outside `methods.PAPER_FAMILIES`) names its panels with its own
    `paper_domain` and `short`, and gets no released curve, even with names spelled like the paper's; the note that
    the paper's curves span 2M steps comes only with a paper curve."""
    env = {"family": "lookalike", "name": "lookalike-task2-v1", "domain": "cube-double", "dataset_type": "play",
           "task": 2, "goal_conditioned": False, "paper_domain": "cube-double-like",
           "paper_task": "cube-double-play-task2", "short": "lookalike-t2"}  # fmt: skip
    for seed in (0, 1):
        _family_run(tmp_path / "runs" / f"like_sd{seed}", env, seed)
    for per_task, panel in ((False, "cube-double-like"), (True, "lookalike-t2")):
        out = tmp_path / f"plots{per_task}"
        argv = [str(tmp_path / "runs"), f"--out_dir={out}", "--reps=50"] + (["--per_task"] if per_task else [])
        assert pc.main(argv) == 0
        printed = capsys.readouterr().out
        with open(out / "curves.csv") as f:
            assert {(r["panel"], r["tasks"]) for r in csv.DictReader(f)} == {(panel, "lookalike-t2")}
        assert "the paper's curves span 2M steps" not in printed  # no paper curve is drawn
        rows = [line for line in (out / "table.md").read_text().splitlines() if line.startswith("| QC |")]
        assert rows and all(line.endswith("| — |") for line in rows), rows  # no paper number beside it
    # Its paper_domain spelled like a paper domain: still no paper curve; beside OGBench's runs of that domain, refused.
    _family_run(tmp_path / "alike" / "like_sd0", {**env, "paper_domain": "cube-double"})
    assert pc.main([str(tmp_path / "alike"), f"--out_dir={tmp_path / 'p2'}", "--reps=50"]) == 0
    assert "the paper's curves span 2M steps" not in capsys.readouterr().out
    assert "@2M (QC" not in (tmp_path / "p2" / "table.md").read_text()
    ogbench = _record(QC_AGENT, "cube-double-play-singletask-task2-v0", 0, 2)
    write_run(tmp_path / "alike" / "ogbench_sd0", ogbench, [(4000, 0.2), (8000, 0.4)])
    assert pc.main([str(tmp_path / "alike"), f"--out_dir={tmp_path / 'p3'}", "--reps=50"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "the families lookalike (" in error[0] and "are all named 'cube-double'" in error[0]
    # OGBench's runs alone: the paper's curve is drawn, and the note comes with it; a run of no paper method: none.
    os.remove(tmp_path / "alike" / "like_sd0" / "flags.json")
    assert pc.main([str(tmp_path / "alike" / "ogbench_sd0"), f"--out_dir={tmp_path / 'p4'}", "--reps=50"]) == 0
    assert "the paper's curves span 2M steps (--no_paper to zoom in)" in capsys.readouterr().out
    toy = _record({"agent_name": "toy", "toy_weight": 0.5}, "cube-double-play-singletask-task2-v0", 0, 2)
    write_run(tmp_path / "toy" / "toy_sd0", toy, [(4000, 0.2), (8000, 0.4)])
    assert pc.main([str(tmp_path / "toy"), f"--out_dir={tmp_path / 'p5'}", "--reps=50"]) == 0
    assert "the paper's curves span 2M steps" not in capsys.readouterr().out


def test_a_tilde_in_paths_is_the_home_directory(sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert pc.main(["~/exp/sweep", "--out_dir=~/out", "--reps=20"]) == 0
    assert os.path.isfile(tmp_path / "out" / "curves.png") and not os.path.exists("~")


def test_command_per_task_glob_and_no_paper(sweep, tmp_path):
    out = tmp_path / "plots"
    pattern = str(sweep / "*task2*")
    assert pc.main([pattern, f"--out_dir={out}", "--per_task", "--no_paper", "--reps=50", "--aggregate=iqm"]) == 0
    table = (out / "table.md").read_text()
    assert "task1" not in table and "IQM" in table and "| — |" in table  # no paper column values
    with Image.open(out / "curves.png") as image:
        width, height = pc.figure_size(1, 2, True)
        assert image.size == (round(width * pc.DPI), round(height * pc.DPI))


class FakeWandbRun:
    def __init__(self, run_id, config, rows):
        self.id, self.config, self._rows = run_id, config, rows

    def scan_history(self, keys):
        assert keys == ["_step", "eval/success"]
        return [{"_step": step, "eval/success": value} for step, value in self._rows]


class FakeWandbApi:
    def __init__(self, runs=None, error=None):
        self._runs, self._error, self.calls = runs, error, []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        if self._error:
            raise self._error
        return self._runs


def test_wandb_runs_give_the_same_table(sweep, tmp_path):
    fake = FakeWandbApi([FakeWandbRun(f"r{i}", record, rows) for i, (*_, record, rows) in enumerate(_records())])
    out_wandb, out_dirs = tmp_path / "wandb", tmp_path / "dirs"
    argv = ["--wandb_project=me/qc", "--wandb_group=sweep", f"--out_dir={out_wandb}", "--reps=200"]
    assert pc.main(argv, wandb_api=fake) == 0
    assert fake.calls == [("me/qc", {"group": "sweep"})]
    assert pc.main([str(sweep), f"--out_dir={out_dirs}", "--reps=200"]) == 0

    def numbers(path):
        return [line.split(" | ")[1:] for line in path.read_text().splitlines() if line.startswith("| QC")]

    assert numbers(out_wandb / "table.md") == numbers(out_dirs / "table.md")
    assert (out_wandb / "curves.png").stat().st_size > 10_000


def test_wandb_unreachable_is_one_error_line(tmp_path, capsys):
    fake = FakeWandbApi(error=ConnectionError("Max retries exceeded with url: /graphql"))
    assert pc.main(["--wandb_project=me/qc", f"--out_dir={tmp_path}"], wandb_api=fake) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: cannot read wandb project me/qc: ConnectionError: Max retries exceeded with url: /graphql"]


def _append(path, text):
    with open(path, "a") as f:
        f.write(text)


def _rewrite_flags(run_dir, change):
    path = os.path.join(run_dir, "flags.json")
    with open(path) as f:
        record = json.load(f)
    change(record)
    with open(path, "w") as f:
        json.dump(record, f)


def _bad_input(case, sweep, tmp_path):
    """`(arguments, the error after 'error: ')` of one bad input; `run_dir` is QC-FQL task 1 seed 0."""
    run_dir = str(sweep / "20261130_120001_QC-FQL_cube-double-task1_sd000")
    csv_path, flags_path = os.path.join(run_dir, "eval.csv"), os.path.join(run_dir, "flags.json")
    no_runs = f"{tmp_path / 'empty'}: no run directory (a directory with a flags.json) in it"
    if case == "empty_dir":
        (tmp_path / "empty").mkdir()
        return [tmp_path / "empty"], no_runs
    if case == "an_argument_without_runs":  # beside a sweep that has runs
        (tmp_path / "empty").mkdir()
        return [sweep, tmp_path / "empty"], no_runs
    if case == "missing_path":
        return [tmp_path / "nope"], f"{tmp_path / 'nope'}: no such file or directory"
    if case == "no_args":
        return [], "no runs given: pass run directories, a sweep directory or globs, or --wandb_project"
    if case == "bad_header":
        with open(csv_path, "w") as f:
            f.write("a;b\n1;2\n")
        return [sweep], f"{csv_path}: unreadable eval.csv: no 'step' and 'success' columns (header: ['a;b'])"
    if case == "eval_csv_without_flags_json":
        os.remove(flags_path)
        return [sweep], f"{csv_path}: no flags.json beside it (the run's config)"
    # eval.csv rows the plot cannot use: the file and line named (the run has 3 rows, lines 2-4).
    rows = {
        "non_numeric_success": ("12000,high,0,0\n", "success 'high' at step 12000 is not a number"),
        "success_above_one": ("12000,1.5,0,0\n", "success '1.5' at step 12000 is not a success rate in [0, 1]"),
        "infinite_success": ("12000,inf,0,0\n", "success 'inf' at step 12000 is not a success rate in [0, 1]"),
        "empty_step": (",0.5,0,0\n", "step must be a whole number >= 0, got ''"),
        "fractional_step": ("12000.5,0.5,0,0\n", "step must be a whole number >= 0, got '12000.5'"),
        # A row torn by a full disk is broken, not read as empty (NaN) cells.
        "torn_row": ("12000,0.5\n", "a broken row: 2 cells where the header has 4"),
        "long_row": ("12000,0.5,0,0,1\n", "a broken row: 5 cells where the header has 4"),
    }
    if case in rows:
        row, message = rows[case]
        _append(csv_path, row)
        return [sweep], f"{csv_path}:5: {message}"
    # flags.json records the plot cannot use: the file named.
    if case == "flags_json_unreadable":
        with open(flags_path, "w") as f:
            f.write('{"flags": ')
        return [sweep], f"{flags_path}: unreadable: Expecting value: line 1 column 11 (char 10)"
    if case == "flags_json_not_an_object":
        with open(flags_path, "w") as f:
            f.write("[1, 2]")
        return [sweep], f"{flags_path}: not a JSON object"
    changes = {
        "no_agent_record": (lambda r: r.pop("agent"), "malformed run config: no 'agent' record (the agent's config)"),
        "no_agent_name": (
            lambda r: r["agent"].pop("agent_name"),
            "malformed run config: agent.agent_name must be the agent's name, got None",
        ),
        "bad_agent_defaults": (
            lambda r: r.update(agent_defaults=[1]),
            "malformed run config: 'agent_defaults' is not a JSON object",
        ),
        "bad_seed": (
            lambda r: r["flags"].update(seed="one"),
            "malformed run config: flags.seed must be a whole number >= 0, got 'one'",
        ),
        # A key the registered agent reads to tell the method: no label can be given.
        "missing_agent_key": (
            lambda r: r["agent"].pop("horizon_length"),
            "the agent config has no 'horizon_length', which agent 'acfql' reads to tell its paper method",
        ),
    }
    change, message = changes[case]
    _rewrite_flags(run_dir, change)
    return [sweep], f"{flags_path}: {message}"


BAD_INPUTS = [
    "empty_dir",
    "an_argument_without_runs",
    "missing_path",
    "no_args",
    "bad_header",
    "eval_csv_without_flags_json",
    "non_numeric_success",
    "success_above_one",
    "infinite_success",
    "empty_step",
    "fractional_step",
    "torn_row",
    "long_row",
    "flags_json_unreadable",
    "flags_json_not_an_object",
    "no_agent_record",
    "no_agent_name",
    "bad_agent_defaults",
    "bad_seed",
    "missing_agent_key",
]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_error_line_naming_the_file(case, sweep, tmp_path, capsys):
    paths, message = _bad_input(case, sweep, tmp_path)
    assert pc.main([str(p) for p in paths] + [f"--out_dir={tmp_path / 'out'}", "--reps=20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {message}"]
    assert not os.path.exists(tmp_path / "out" / "curves.png")


@pytest.mark.parametrize(
    "rows,message",
    [
        ("4000,0.1\n8000,0.3\n8000,0.4\n10000,0.5\n", "eval.csv:4: step 8000 repeats"),
        ("4000,0.1\n8000,0.3\n10000,0.5\n6000,0.4\n", "eval.csv:5: step 6000 goes backwards after step 10000"),
        # Two processes appending the same run: their rows interleave.
        ("4000,0.1\n4000,0.1\n8000,0.3\n8000,0.35\n", "eval.csv:3: step 4000 repeats"),
        # A NaN row still has a step: the order is checked on every row.
        ("4000,0.1\n8000,nan\n6000,0.2\n", "eval.csv:4: step 6000 goes backwards after step 8000"),
    ],
)
def test_steps_that_repeat_or_go_backwards_are_refused(rows, message, sweep, tmp_path, capsys):
    run_dir = sweep / "20261130_120001_QC_cube-double-task1_sd000"
    (run_dir / "eval.csv").write_text("step,success\n" + rows)
    assert pc.main([str(sweep), f"--out_dir={tmp_path}", "--reps=20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {run_dir}/{message}; steps must increase (two processes writing the same run?)"]


def test_argument_errors_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        pc.main(["x", "--aggregate=median"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: argument --aggregate")
    parser = pc.make_parser()
    assert all(action.help for action in parser._actions)


def test_runs_are_found_once_through_links_and_overlapping_arguments(sweep, tmp_path, capsys):
    everything = pc.find_run_dirs([str(sweep)])
    one = str(sweep / "20261130_120001_QC_cube-double-task1_sd000")
    # A run found through two arguments (the sweep and one of its runs, or the same glob twice) counts once.
    assert pc.find_run_dirs([str(sweep), one]) == everything
    assert pc.find_run_dirs([f"{sweep}/*QC*", f"{sweep}/*QC-FQL*"]) == pc.find_run_dirs([f"{sweep}/*QC*"])
    # A folder of links to runs is followed; a link back up the tree is visited once.
    (tmp_path / "compare").mkdir()
    os.symlink(one, tmp_path / "compare" / "baseline")
    os.symlink(tmp_path / "compare", tmp_path / "compare" / "loop")
    assert pc.find_run_dirs([str(tmp_path / "compare")]) == [str(tmp_path / "compare" / "baseline")]
    # A broken link: skipped with a warning when a glob matched it, an error when named.
    os.symlink(tmp_path / "gone", tmp_path / "compare" / "deleted_run")
    capsys.readouterr()
    assert pc.find_run_dirs([str(tmp_path / "compare" / "*")]) == [str(tmp_path / "compare" / "baseline")]
    assert f"skipping {tmp_path}/compare/deleted_run: a broken symbolic link" in capsys.readouterr().err
    assert pc.find_run_dirs([str(tmp_path / "compare")]) == [str(tmp_path / "compare" / "baseline")]
    assert f"skipping {tmp_path}/compare/deleted_run: a broken symbolic link" in capsys.readouterr().err
    with pytest.raises(pc.InputError, match=r"deleted_run: a broken symbolic link \(to .*gone\)"):
        pc.find_run_dirs([str(tmp_path / "compare" / "deleted_run")])


def test_a_run_without_evaluations_is_skipped(sweep, tmp_path, capsys):
    os.makedirs(sweep / "running")
    with open(sweep / "running" / "flags.json", "w") as f:
        json.dump(_record(QC_AGENT, "cube-double-play-singletask-task1-v0", 7, 1), f)
    assert len(pc.find_run_dirs([str(sweep)])) == 13
    assert pc.main([str(sweep), f"--out_dir={tmp_path}", "--reps=20", "--no_paper"]) == 0
    assert "warning: skipping" in capsys.readouterr().err


def _curves_csv(out):
    with open(out / "curves.csv") as f:
        return list(csv.DictReader(f))


def _table_rows(out, label):
    """The cells of every table.md row of `label` (domain rows first, then task rows)."""
    lines = (out / "table.md").read_text().splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines if line.startswith(f"| {label} |")]


def test_a_nan_or_empty_success_is_left_out_with_a_warning_and_counted(sweep, tmp_path, capsys):
    # QC task 1 (seeds: 0.1 0.3 0.5 / 0.2 0.4 0.6 / 0.3 0.5 1.0 at 4000, 8000, 10000): seed 2's success at
    # 8000 is NaN, seed 1's at 10000 an empty cell.
    seed1 = sweep / "20261130_120011_QC_cube-double-task1_sd001"
    seed2 = sweep / "20261130_120021_QC_cube-double-task1_sd002"
    (seed1 / "eval.csv").write_text("step,success\n4000,0.2\n8000,0.4\n10000,\n")
    (seed2 / "eval.csv").write_text("step,success\n4000,0.3\n8000,nan\n10000,1.0\n")
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=50"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    note = "left out there (table.md and curves.csv count the runs behind each value)"
    assert err == [
        f"warning: {seed1}: no success value (NaN or empty) at step(s) 10000: {note}",
        f"warning: {seed2}: no success value (NaN or empty) at step(s) 8000: {note}",
    ]
    # Task 1 at 8000: the mean of seeds 0 and 1 only; at 10000 of seeds 0 and 2; the table says so.
    task1 = _table_rows(out, "QC")[1]
    assert task1[:5] == ["QC", "cube-double-play-task1", "3", "unknown", "8,000"]
    assert task1[5].startswith("0.350 [") and task1[5].endswith("] (2 of 3 runs)")
    assert task1[8].startswith("0.750 [") and task1[8].endswith("] (2 of 3 runs)")
    domain = _table_rows(out, "QC")[0]
    assert domain[6].startswith(f"{(0.35 + 0.6) / 2:.3f} [") and domain[6].endswith("(5 of 6 runs)")
    # curves.csv: the runs behind each value, of the group's 6.
    points = [r for r in _curves_csv(out) if r["label"] == "QC"]
    assert [(r["step"], r["value"], r["runs"], r["runs_in_group"]) for r in points] == [
        ("4000", "0.3", "6", "6"),
        ("6000", "", "0", "6"),
        ("8000", f"{(0.35 + 0.6) / 2:.6g}", "5", "6"),
        ("10000", f"{(0.75 + 0.8) / 2:.6g}", "5", "6"),
    ]


def test_a_task_without_success_values_at_the_end_says_so(sweep, tmp_path):
    for seed in range(3):
        run_dir = sweep / f"20261130_1200{seed}1_QC_cube-double-task1_sd{seed:03d}"
        (run_dir / "eval.csv").write_text("step,success\n4000,0.2\n8000,0.4\n10000,nan\n")
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=20", "--per_task"]) == 0
    assert _table_rows(out, "QC")[1][8] == "— (no success value)"
    assert _table_rows(out, "QC")[0][9] == "— (no success value)"  # the domain needs every task


WARNED = {
    # A run that has not logged its first evaluation (an empty eval.csv) and an empty directory: skipped.
    "empty_eval_csv": "skipping {run}: eval.csv has no evaluation row yet",
    "empty_directory": "skipping {sweep}/never_started: an empty directory",
    "unknown_driver": "{run}: driver 'main_dqc' is not main or main_online: its steps are placed as logged (as "
    "main.py's)",
    # An agent the registry does not know, so no default driver either.
    "no_driver_of_an_unknown_agent": "{sweep}/toy: flags.json records no driver: its steps are placed as logged "
    "(as main.py's)",
}


@pytest.mark.parametrize("case", sorted(WARNED))
def test_inputs_that_are_warned_about_name_the_run(case, sweep, tmp_path, capsys):
    run_dir = sweep / "20261130_120001_QC-FQL_cube-double-task1_sd000"
    if case == "empty_eval_csv":
        (run_dir / "eval.csv").write_text("")
    elif case == "empty_directory":
        (sweep / "never_started").mkdir()
        (sweep / "only_wandb" / "wandb").mkdir(parents=True)  # not empty, and wandb/ is never searched
    elif case == "unknown_driver":
        _rewrite_flags(run_dir, lambda r: r.update(driver="main_dqc"))
    else:
        record = _toy_record(1, 0)
        del record["driver"]
        write_run(sweep / "toy", record, [(4000, 0.2)])
    assert pc.main([str(sweep), f"--out_dir={tmp_path}", "--reps=20", "--no_paper"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: " + WARNED[case].format(run=run_dir, sweep=sweep)]


# ------------------------------------------------------------------------------------------------ other agents

TOY_DEFAULTS = {"toy_weight": 1.0, "lr": 0.0003, "horizon_length": 5, "discount": 0.99, "batch_size": 256}


def _toy_record(task, seed, name="toy", defaults=True):
    """A run of an agent the registry does not know, as a driver that loaded its file writes it."""
    agent = {"agent_name": name, "toy_weight": 0.5, "lr": 0.0003}
    record = _record(agent, f"cube-double-play-singletask-task{task}-v0", seed, task)
    if defaults:
        record["agent_defaults"] = {"agent_name": name, **TOY_DEFAULTS}
    return record


def test_an_unknown_agent_is_plotted_beside_qc_under_its_own_label(sweep, tmp_path, capsys):
    for task in (1, 2):
        for seed in range(2):
            rows = [(4000, 0.1), (8000, 0.2 + 0.2 * seed), (10000, 0.9)]
            write_run(sweep / f"toy_t{task}_sd{seed}", _toy_record(task, seed), rows)
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=50"]) == 0
    captured = capsys.readouterr()
    assert "toy toy_weight=0.5 on cube-double: 2 task(s), 4 run(s)" in captured.out
    assert captured.err == ""  # its flags.json records its defaults: nothing to explain
    points = _curves_csv(out)
    assert {r["label"] for r in points} == {"QC", "QC-FQL", "toy toy_weight=0.5"}
    toy = [(r["step"], r["value"], r["method"], r["runs"]) for r in points if r["label"] == "toy toy_weight=0.5"]
    assert toy == [("4000", "0.1", "", "4"), ("6000", "", "", "0"), ("8000", "0.3", "", "4"), ("10000", "0.9", "", "4")]
    # table.md: its own rows (the domain, then each task), no paper numbers; QC still beside the paper's QC.
    rows = _table_rows(out, "toy toy_weight=0.5")
    assert [r[1] for r in rows] == ["cube-double", "cube-double-play-task1", "cube-double-play-task2"]
    assert rows[0][6].startswith("0.300 [") and all(r[-4] == "—" and r[-1] == "—" for r in rows)
    assert "(QC, mean of tasks 1, 2)" in _table_rows(out, "QC")[0][7]
    # The figure: the paper's QC and QC-FQL beside their runs, none for the toy agent, whose style is its own.
    curves = pc.compute_curves(_runs(sweep), False, "mean", 20, 0, online_offset=0)
    paper = pc.load_paper(os.path.join(ROOT, "data", "paper"))
    styles, paper_methods, _, legend, _ = plotting.figure.legend_plan(curves, paper, False)
    assert paper_methods == ["QC", "QC-FQL"]
    assert [name for name, _, _ in legend if name] == [
        "QC",
        "QC (paper)",
        "QC-FQL",
        "QC-FQL (paper)",
        "toy toy_weight=0.5",
    ]
    assert styles["toy toy_weight=0.5"] not in (styles["QC"], styles["QC-FQL"])


def test_a_sweeps_arms_name_the_key_they_vary_in_and_long_labels_stay_inside_the_figure(tmp_path, capsys):
    # A sweep of an unknown agent over toy_weight: its default arm (1.0) names the key too. The labels are
    # long (every key that differs from the defaults): the legend wraps them and stays inside the picture.
    long_dims = {"actor_hidden_dims": [32, 32], "value_hidden_dims": [32, 32], "batch_size": 16, "discount": 0.995}
    for weight in (0.5, 1.0):
        for seed in range(2):
            record = _toy_record(1, seed)
            record["agent"].update(toy_weight=weight, **long_dims)
            write_run(tmp_path / "runs" / f"w{weight}_sd{seed}", record, [(100, 0.1), (200, 0.2 * seed)])
    out = tmp_path / "plots"
    assert pc.main([str(tmp_path / "runs"), f"--out_dir={out}", "--reps=20", "--no_paper"]) == 0
    labels = {r["label"] for r in _curves_csv(out)}
    common = "actor_hidden_dims=32x2 batch_size=16 discount=0.995"
    assert labels == {
        f"toy {common} toy_weight=0.5 value_hidden_dims=32x2",
        f"toy {common} toy_weight=1 value_hidden_dims=32x2",
    }, labels
    with Image.open(out / "curves.png") as image:
        pixels = np.asarray(image.convert("L")).astype(int)
    # Nothing is cut at the picture's edges (a legend wider than the figure was).
    assert pixels[:, :3].min() > 240 and pixels[:, -3:].min() > 240 and pixels[-3:, :].min() > 240
    # Steps of short runs read as steps, not as millions (0.0001).
    assert plotting.figure.step_scale(pc.compute_curves(_runs(tmp_path / "runs"), False, "mean", 20, 0, 0), False) == (
        1.0,
        "",
    )


def test_an_agent_named_like_a_paper_method_is_not_that_method():
    record = _toy_record(2, 0, name="QC")
    assert pc.label_of(record) == (None, "QC toy_weight=0.5 (not the paper's QC)")
    assert pc.label_of(_agent_record(**{**QC_AGENT, "critic_target": "max"}))[0] is None
    assert pc.label_of(_agent_record(**QC_AGENT))[0] == "QC"
    run = plotting.runs.make_run("lookalike", "lookalike/flags.json", record, [(4000, 0.5), (8000, 0.6)])
    curves = pc.compute_curves([run], False, "mean", 20, 0, online_offset=0)
    paper = pc.load_paper(os.path.join(ROOT, "data", "paper"))
    styles, paper_methods, _, legend, _ = plotting.figure.legend_plan(curves, paper, False)
    assert paper_methods == [] and [name for name, _, _ in legend] == ["QC toy_weight=0.5 (not the paper's QC)"]
    assert styles[run.label] not in pc.METHOD_STYLES.values()


def test_labels_that_may_surprise_are_explained_once_per_label(sweep, tmp_path, capsys):
    # A config with a key the registered acfql lacks (an older or edited copy of the agent under its name),
    # and an unknown agent whose flags.json records no defaults: both plotted, one warning per label.
    defaults = agents.REGISTRY["acfql"].get_config().to_dict()
    for seed in range(2):
        record = _record({**defaults, **QC_AGENT, "beta": 1.0}, "cube-double-play-singletask-task1-v0", seed, 1)
        record["agent_defaults"] = {**defaults, "beta": 0.5}
        write_run(sweep / f"beta_sd{seed}", record, [(4000, 0.2), (8000, 0.4)])
        write_run(sweep / f"toy_sd{seed}", _toy_record(1, seed, defaults=False), [(4000, 0.2), (8000, 0.4)])
    assert pc.main([str(sweep), f"--out_dir={tmp_path}", "--reps=20"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    beta_label = pc.label_of(record)[1]
    assert beta_label.startswith("acfql ") and "beta=1" in beta_label and "QC" not in beta_label
    toy_label = "toy batch_size=256 discount=0.99 horizon_length=5 lr=0.0003 toy_weight=0.5"
    assert err == [
        f"warning: {sweep}/beta_sd0 and 1 other run(s), labelled {beta_label!r}: the config has keys that the "
        "registered agent 'acfql' lacks (beta): labelled from its own keys, not as a paper method",
        f"warning: {sweep}/toy_sd0 and 1 other run(s), labelled {toy_label!r}: agent 'toy' is not in the registry "
        "and flags.json records no agent_defaults: the label lists every key of its config",
    ]
    assert {r["label"] for r in _curves_csv(tmp_path)} == {"QC", "QC-FQL", beta_label, toy_label}


def test_wandb_nan_and_repeated_steps(tmp_path, capsys):
    record = _record(QC_AGENT, "cube-double-play-singletask-task2-v0", 0, 2)
    fake = FakeWandbApi([FakeWandbRun("a1", record, [(4000, 0.5), (8000, NAN), (10000, 0.7)])])
    assert pc.main(["--wandb_project=me/qc", f"--out_dir={tmp_path}", "--reps=20"], wandb_api=fake) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "warning: wandb:me/qc/a1: no success value (NaN or empty) at step(s) 8000: left out there (table.md and "
        "curves.csv count the runs behind each value)"
    ]
    fake = FakeWandbApi([FakeWandbRun("b2", record, [(4000, 0.5), (4000, 0.6)])])
    assert pc.main(["--wandb_project=me/qc", f"--out_dir={tmp_path}", "--reps=20"], wandb_api=fake) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: wandb:me/qc/b2: step 4000 repeats; steps must increase (two processes writing the same run?)"
    ]


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_an_out_dir_that_cannot_be_written_is_refused_before_reading(sweep, tmp_path, capsys, kind):
    out = tmp_path / "a_file" if kind == "file" else "/sys/qc_plots"  # /sys refuses new directories even to root
    if kind == "file":
        out.write_text("")
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out_dir=") and ("is a file" in err or "cannot write there" in err), err
    assert "reading runs" not in err


# ------------------------------------------------------------------------------------------------ DQC


def _dqc_run(directory, backup_horizon, policy_chunk_size, chunk_critic, seed, values, cut_values=None):
    """A finished DQC run on cube-triple oraclerep: success at 0.25M, 0.5M, 0.75M, 1M (and ac5/ columns)."""
    spec = agents.get("dqc")
    kappa_d = {"kappa_d": 0.8} if chunk_critic else {}  # only DQC's distillation has the paper's own kappa_d
    agent = spec.check_config({**spec.get_config().to_dict(), "backup_horizon": backup_horizon,
                               "policy_chunk_size": policy_chunk_size, "use_chunk_critic": chunk_critic,
                               "kappa_b": 0.93, "q_agg": "min", **kappa_d})  # fmt: skip
    record = {
        "driver": "main",
        "flags": {
            "env_name": "cube-triple-play-oraclerep-v0",
            "seed": seed,
            "offline_steps": 1_000_000,
            "online_steps": 0,
            "run_group": "dqc",
        },  # fmt: skip
        "agent": agent,
        "agent_defaults": spec.get_config().to_dict(),
    }
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "flags.json"), "w") as f:
        json.dump(record, f)
    with open(os.path.join(directory, "eval.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "success", *(["ac5/success"] if cut_values else [])])
        for i, step in enumerate((250_000, 500_000, 750_000, 1_000_000)):
            writer.writerow([step, values[i], *([cut_values[i]] if cut_values else [])])


def test_dqc_runs_beside_the_dqc_papers_results(tmp_path):
    for seed in range(2):
        _dqc_run(tmp_path / "runs" / f"dqc_sd{seed}", 25, 5, True, seed, [0.1, 0.2, 0.3, 0.4 + 0.1 * seed])
        _dqc_run(tmp_path / "runs" / f"qc_sd{seed}", 25, 25, False, seed, [0.1, 0.1, 0.2, 0.2], [0.0, 0.1, 0.1, 0.3])
    out = tmp_path / "plots"
    assert pc.main([str(tmp_path / "runs"), f"--out_dir={out}", "--reps=50"]) == 0
    with open(out / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    labels = {r["label"] for r in rows}
    # The release's names: DQC, QC and the partly executed QC chunk ("DQC-naive"), from the ac5/ column.
    assert {"DQC h=25 h_a=5", "QC h=25", "DQC-naïve h=25 h_a=5"} <= labels, labels
    final = {r["label"]: float(r["value"]) for r in rows if r["step"] == "1000000"}
    assert final["DQC h=25 h_a=5"] == pytest.approx(0.45) and final["DQC-naïve h=25 h_a=5"] == pytest.approx(0.3)
    table = (out / "table.md").read_text()
    # The paper's own numbers at 1M steps beside ours (its mean over 10 seeds, from data/paper/dqc-exp-data.csv).
    paper = pc.load_paper(os.path.join(ROOT, "data", "paper"))
    dqc = paper[("task", "cube-triple-play-oraclerep-v0", "DQC h=25 h_a=5")]
    assert list(dqc.x) == [0.25, 0.5, 0.75, 1.0] and 0 <= dqc.low[-1] <= dqc.mean[-1] <= dqc.high[-1] <= 1
    assert f"{dqc.mean[-1]:.2f}" in table or f"{dqc.mean[-1]:.3f}" in table, table
    # A goal-conditioned env is its own task (its env block says so): the paper's all-goals curve, no "task N only".
    assert "(DQC h=25 h_a=5)" in table and "only" not in table, table
    curve = plotting.paper.paper_curve(paper, "QC h=25", "cube-triple", ["cube-triple-play-oraclerep-v0"], False, True)
    assert curve.note == "" and curve.mean[-1] == pytest.approx(
        paper[("task", "cube-triple-play-oraclerep-v0", "QC h=25")].mean[-1]
    )


# ---------------------------------------------------------------- labels


def _acfql(**overrides):
    spec = agents.get("acfql")
    return spec.check_config({**spec.get_config().to_dict(), "horizon_length": 5, **overrides})


@pytest.mark.parametrize(
    "overrides, paper, label",
    [
        ({}, {"agent.actor_num_samples": 32}, "QC"),
        (dict(horizon_length=3, actor_num_samples=16), {"agent.actor_num_samples": 32}, "QC h=3 N=16"),
        (dict(actor_type="distill-ddpg", alpha=300.0), {"agent.alpha": 300.0}, "QC-FQL"),
        (dict(actor_type="distill-ddpg", alpha=100.0), {"agent.alpha": 300.0}, "QC-FQL alpha=100"),
        (dict(horizon_length=1, actor_num_samples=4), {"agent.actor_num_samples": None}, "BFN N=4"),  # none given
        (dict(action_chunking=False, actor_type="distill-ddpg", alpha=100.0), {"agent.alpha": 100.0}, "FQL-n"),
        # A key outside the method's settings that differs from get_config(): shown, never pooled silently.
        (
            dict(lr=1e-3, actor_hidden_dims=(256, 256)),
            {"agent.actor_num_samples": 32},
            "QC actor_hidden_dims=256x2 lr=0.001",
        ),
    ],
)
def test_paper_methods_are_labelled_by_name_and_differences(overrides, paper, label):
    method, got = plotting.runs.describe(_acfql(**overrides), paper)
    assert got == label and label.startswith(method)


def test_unknown_keys_and_agents_are_never_labelled_as_a_paper_method():
    variant = dict(_acfql(), critic_target="max")  # an ACFQL variant with a new config key
    method, label = plotting.runs.describe(variant, {"agent.actor_num_samples": 32})
    assert method == "acfql" and "critic_target=max" in label and "QC" not in label
    toy = {"agent_name": "toy", "lr": 0.001, "toy_weight": 0.5, "horizon_length": 5}
    defaults = {"agent_name": "toy", "lr": 0.001, "toy_weight": 1.0, "horizon_length": None}
    assert plotting.runs.describe(toy, None, defaults) == ("toy", "toy horizon_length=5 toy_weight=0.5")
    assert plotting.runs.describe(toy) == ("toy", "toy horizon_length=5 lr=0.001 toy_weight=0.5")  # no defaults known


def test_a_combination_of_no_method_gets_the_agent_label():
    spec = agents.get("acrlpd")
    config = spec.check_config(dict(spec.get_config().to_dict(), horizon_length=5, action_chunking=False))
    method, label = plotting.runs.describe(config)
    assert method == "acrlpd" and "action_chunking=False" in label


def test_format_of_values_in_labels():
    assert plotting.runs._format((512, 512, 512)) == "512x3" and plotting.runs._format((256, 512)) == "(256,512)"
    assert plotting.runs._format(3e-4) == "0.0003" and plotting.runs._format(np.float64(2.0).item()) == "2"


# ---------------------------------------------------------------- the baselines of issue 28 beside their curves

BASELINE_LABELS = {"iql": "IQL", "rebrac": "ReBRAC", "ifql": "IFQL", "ifql-n": "IFQL-n", "qc-ifql": "QC-IFQL"}


def _paper_config(method, env_name):
    """The agent config `main.py --method=METHOD --env_name=ENV` runs with, as flags.json records it."""
    from runner import methods

    spec = agents.method_owner(method)
    config = spec.get_config().to_dict()
    for name, value in methods.preset("main", method, env_name).items():
        if name.startswith("agent.") or name == "horizon_length":
            config[name.removeprefix("agent.")] = value
    return spec.check_config(config)


def test_each_baseline_is_labelled_by_its_paper_name_beside_its_released_curve(tmp_path, capsys):
    """Runs of `--method=iql|rebrac|ifql|ifql-n|qc-ifql` (their recorded configs) are labelled with the paper's names,
    and the table puts the released curve of that name beside each; one key changed is no longer the method's."""
    env = "cube-double-play-singletask-task2-v0"
    for i, method in enumerate(BASELINE_LABELS):
        config = _paper_config(method, env)
        record = _record(config, env, 0, 2, h=config["horizon_length"])
        assert pc.label_of(record) == (BASELINE_LABELS[method],) * 2
        write_run(tmp_path / "runs" / method, record, [(8000, 0.1 * i), (10000, 0.1 * i + 0.05)])
    changed = _record({**_paper_config("iql", env), "expectile": 0.7}, env, 0, 2, h=1)
    assert pc.label_of(changed)[1] == "IQL expectile=0.7"
    out = tmp_path / "plots"
    assert pc.main([str(tmp_path / "runs"), f"--out_dir={out}", "--reps=50"]) == 0
    with open(out / "curves.csv") as f:
        assert {r["label"] for r in csv.DictReader(f)} == set(BASELINE_LABELS.values())
    table = (out / "table.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if "| cube-double |" in line}
    for i, label in enumerate(BASELINE_LABELS.values()):
        assert f"| 10,000 | {0.1 * i + 0.05:.3f} [" in rows[label], rows[label]
        for x in (1, 2):  # the released curve of the same name, at the end of the paper's offline and online phases
            paper = _paper_value("cube-double-play-task2", label, float(x))
            assert f"| {paper:.3f} [" in rows[label] and f"@{x}M ({label}, task 2 only)" in rows[label], rows[label]


# ------------------------------------------------------------------------------------------------ executed lengths


def _write_lengths(run_dir, rows):
    """Rewrite `eval.csv` with executed-length columns (h = 3): rows of (step, success, share_1, share_2, share_3)."""
    with open(os.path.join(run_dir, "eval.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "success", "executed_length.mean"] + [f"executed_length.share_{k}" for k in (1, 2, 3)])
        for step, success, *shares in rows:
            mean = sum(k * s for k, s in zip((1, 2, 3), shares, strict=True)) if all(s != "" for s in shares) else ""
            writer.writerow([step, success, mean, *shares])


def test_executed_lengths_are_averaged_over_a_labels_runs_and_drawn(sweep, tmp_path, capsys):
    """Per label, each length's share averaged over the runs with a value at that step; whole-chunk runs none."""
    for seed, rows in enumerate(
        [
            [(4000, 0.1, 0.5, 0.25, 0.25), (8000, 0.2, 0.0, 0.0, 1.0)],
            [(4000, 0.3, 0.1, 0.3, 0.6), (8000, 0.4, "", "", ""), (10000, 0.5, 0.2, 0.2, 0.6)],
        ]
    ):
        write_run(sweep / f"toy_t1_sd{seed}", _toy_record(1, seed), [(s, v) for s, v, *_ in rows])
        _write_lengths(sweep / f"toy_t1_sd{seed}", rows)
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=20", "--no_paper"]) == 0
    assert "executed_lengths.png" in capsys.readouterr().out
    with open(out / "executed_lengths.csv") as f:
        rows = [
            (r["label"], r["step"], r["runs"], r["mean"], r["share_1"], r["share_2"], r["share_3"])
            for r in csv.DictReader(f)
        ]
    assert rows == [  # QC and QC-FQL executed whole chunks: no rows; step 8000 has one run with a value
        ("toy toy_weight=0.5", "4000", "2", "2.125", "0.3", "0.275", "0.425"),
        ("toy toy_weight=0.5", "8000", "1", "3", "0", "0", "1"),
        ("toy toy_weight=0.5", "10000", "1", "2.4", "0.2", "0.2", "0.6"),
    ]
    assert Image.open(out / "executed_lengths.png").size[0] > 300


def test_without_executed_lengths_there_is_no_lengths_figure_and_a_bad_share_is_refused(sweep, tmp_path, capsys):
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=20", "--no_paper"]) == 0
    assert not (out / "executed_lengths.csv").exists() and not (out / "executed_lengths.png").exists()
    write_run(sweep / "toy_t1_sd0", _toy_record(1, 0), [(4000, 0.1)])
    _write_lengths(sweep / "toy_t1_sd0", [(4000, 0.1, 0.5, 1.5, 0.0)])
    capsys.readouterr()
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=20", "--no_paper"]) == 2
    assert "toy_t1_sd0/eval.csv:2: executed_length.share_2 '1.5' is not a share in [0, 1]" in capsys.readouterr().err


def test_a_long_label_wraps_inside_the_lengths_figure(sweep, tmp_path):
    """A label wider than its panel (an agent named at length) wraps: no title runs off the image's edges."""
    name = "an_agent_with_a_name_much_wider_than_one_panel_of_the_figure"
    write_run(sweep / "toy_t1_sd0", _toy_record(1, 0, name=name), [(4000, 0.1), (8000, 0.2)])
    _write_lengths(sweep / "toy_t1_sd0", [(4000, 0.1, 0.5, 0.25, 0.25), (8000, 0.2, 0.2, 0.2, 0.6)])
    out = tmp_path / "plots"
    assert pc.main([str(sweep), f"--out_dir={out}", "--reps=20", "--no_paper"]) == 0
    for figure in ("executed_lengths.png", "curves.png"):
        pixels = np.asarray(Image.open(out / figure).convert("L"))
        edges = np.concatenate([pixels[:, :2], pixels[:, -2:]], axis=1)
        assert edges.min() > 200, f"{figure}: ink touches the left or right edge, so text was cut off"
