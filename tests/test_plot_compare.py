"""`scripts/plot_curves.py --compare`: our runs beside the released curves, with docs/results.md's verdict.

Two fake QC-FQL runs at the paper's settings on puzzle-3x3 task 2 (seeds 0 and 1, 50 episodes each) and a
released-curve stub; every number of the table is computed by hand below. A run at other settings and a
run whose online phase does not line up with the paper's axis add no row.
"""

import csv
import json
import os

import pytest
from PIL import Image

import plot_curves as pc
import plotting.compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENV = "puzzle-3x3-play-singletask-task2-v0"
TASK = "puzzle-3x3-play-task2"
AGENT = {"agent_name": "acfql", "actor_type": "distill-ddpg", "action_chunking": True, "alpha": 300.0}
SHA = "0123456789abcdef" * 4
# The released stub: QC-FQL at 0.0, 0.1 (a wide interval) and 0.2M (an empty interval) steps.
PAPER_ROWS = [(0.0, 0.0, 0.0, 0.0), (0.1, 0.69, 0.225, 0.945), (0.2, 0.5, 0.5, 0.5)]
COMMIT = "e9ceebaffc4f36e8b705826f164a32904de98410"
MADE_BY = {"commit": COMMIT, "uncommitted_changes": False}


def write_run(directory, seed, rows, alpha=300.0, offline_steps=200000, online_steps=0, made_by=None, sha=SHA,
              data_seed=None):  # fmt: skip
    os.makedirs(directory)
    record = {
        "driver": "main",
        "flags": {
            "env_name": ENV,
            "seed": seed,
            "offline_steps": offline_steps,
            "online_steps": online_steps,
            "horizon_length": 5,
            "eval_episodes": 50,
            "sparse": True,
        },
        "agent": {**AGENT, "alpha": alpha, "horizon_length": 5, "discount": 0.99, "batch_size": 256},
        "task_id": 2,
        "datasets": [
            {
                "role": "train",
                "source": "generated",
                "sha256": sha,
                **({} if data_seed is None else {"seed": data_seed}),
            },
            {"role": "val", "source": "generated", "sha256": "f" * 64},
        ],
    }
    if made_by is not None:
        record["made_by"] = made_by
    with open(os.path.join(directory, "flags.json"), "w") as f:
        json.dump(record, f)
    with open(os.path.join(directory, "eval.csv"), "w") as f:
        f.write("step,success\n" + "".join(f"{s},{v}\n" for s, v in rows))


@pytest.fixture
def compared(tmp_path):
    paper = tmp_path / "paper"
    paper.mkdir()
    header = "task,method,steps_millions,mean,ci_low,ci_high\n"
    (paper / "ogbench-individual.csv").write_text(
        header + "".join(f"{TASK},QC-FQL,{x},{m},{lo},{hi}\n" for x, m, lo, hi in PAPER_ROWS)
    )
    (paper / "ogbench-agg.csv").write_text(header)
    (paper / "robomimic-individual.csv").write_text(header)
    runs = tmp_path / "exp"
    # Seed 0 made at a clean commit, seed 1 at the same commit with uncommitted changes, seed 3 before the record;
    # 150k: no released point.
    write_run(runs / "sd0", 0, [(100000, 0.6), (150000, 0.9), (200000, 0.3)], made_by=MADE_BY)
    write_run(runs / "sd1", 1, [(100000, 0.8), (200000, 0.34)], made_by=dict(MADE_BY, uncommitted_changes=True))
    write_run(runs / "alpha100", 2, [(100000, 0.0)], alpha=100.0)  # not the paper's alpha: not compared
    write_run(runs / "online", 3, [(100000, 0.1), (200000, 0.1)], offline_steps=100000, online_steps=100000)
    out = tmp_path / "out"
    argv = [str(runs), f"--paper_dir={paper}", f"--out_dir={out}", "--compare", "--reps=500"]
    assert pc.main(argv) == 0
    with open(out / "compare.csv") as f:
        return list(csv.DictReader(f)), out


def test_rows_and_every_number(compared):
    rows, _ = compared
    # The online run's 100k point is its last offline step (seed 3 joins that row); its 200k point is online
    # after 100k offline steps, which the paper's axis does not have.
    assert [(r["step"], r["seeds"]) for r in rows] == [("100000", "0 1 3"), ("200000", "0 1")]
    first, second = rows
    # 100k: ours 0.6, 0.8, 0.1 -> mean 0.5; released 0.69 [0.225, 0.945].
    # se_p = 0.72 / 3.92 = 0.183673; per-seed variance 4 se_p^2 = 0.134944 (> the binomial floor
    # q(1-q)/50 = 0.004332 with q = 35.5/52); se_m = sqrt(0.134944 / 3) = 0.212088;
    # z = (0.5 - 0.69) / sqrt(0.044981 + 0.033736) = -0.19 / 0.280566 = -0.677203.
    assert float(first["mean"]) == pytest.approx(0.5)
    assert (float(first["paper_mean"]), float(first["paper_ci_low"]), float(first["paper_ci_high"])) == (
        0.69,
        0.225,
        0.945,
    )
    assert int(first["paper_seeds"]) == 4 and int(first["episodes"]) == 50
    assert float(first["paper_se"]) == pytest.approx(0.183673, abs=1e-6)
    assert float(first["se"]) == pytest.approx(0.212088, abs=1e-6)
    assert float(first["z"]) == pytest.approx(-0.677203, abs=1e-5)
    assert first["verdict"] == "reproduced"
    # Our bootstrap over three seeds: the percentile interval lies inside [min, max] of the seeds.
    assert 0.1 <= float(first["ci_low"]) < 0.5 < float(first["ci_high"]) <= 0.8
    # 200k: ours 0.3, 0.34 -> 0.32; released 0.5 with an empty interval: se_p = 0 and the spread is the
    # binomial floor alone, q = 26/52 = 0.5, q(1-q)/50 = 0.005; se_m = sqrt(0.005 / 2) = 0.05;
    # z = -0.18 / 0.05 = -3.6: below.
    assert float(second["mean"]) == pytest.approx(0.32)
    assert float(second["paper_se"]) == 0.0
    assert float(second["se"]) == pytest.approx(0.05)
    assert float(second["z"]) == pytest.approx(-3.6)
    assert second["verdict"] == "below"
    # Two seeds: every bootstrap mean is 0.3, 0.32 or 0.34, so the interval is [0.3, 0.34].
    assert (float(second["ci_low"]), float(second["ci_high"])) == pytest.approx((0.3, 0.34))
    assert second["data"] == f"generated {SHA[:12]}" and second["values"] == "0.3 0.34"
    # The commits behind each row, 12 hex digits; `+`: uncommitted changes; `-`: a run recorded without one.
    assert second["commit"] == "e9ceebaffc4f; e9ceebaffc4f+"
    assert first["commit"] == "-; e9ceebaffc4f; e9ceebaffc4f+"


def test_markdown_table_and_figure(compared):
    _, out = compared
    table = (out / "compare.md").read_text()
    assert f"| {TASK} | QC-FQL | 100,000 | 0,1,3 | 1 | 50 | 0.500 [" in table
    assert (
        "| 0.690 [0.225, 0.945] (4) | -0.68 | reproduced | generated 0123456789ab | -; e9ceebaffc4f; e9ceebaffc4f+ |"
        in table
    )
    assert "| -3.60 | below | generated 0123456789ab | e9ceebaffc4f; e9ceebaffc4f+ |" in table
    assert "| 0.500 [0.500, 0.500] (4) | -3.60 | below |" in table
    assert "docs/results.md" in table
    # The records behind the rows are copied beside the table; the runs that add no row are not.
    assert sorted(os.listdir(out / "runs")) == ["online", "sd0", "sd1"]
    assert (out / "runs" / "sd1" / "eval.csv").read_text() == "step,success\n100000,0.8\n200000,0.34\n"
    with Image.open(out / "compare.png") as image:
        assert image.size == (504, 408)  # one axis (4.2 x 3.4 inches at 120 dpi)


def test_the_rule_itself():
    # A released 0.0 with an empty interval: one success in 50 episodes is within the rule, five are not.
    compare = plotting.compare
    assert compare.verdict([0.02], 50, 0.0, 0.0, 0.0, 4)[3] == "reproduced"
    assert compare.verdict([0.1], 50, 0.0, 0.0, 0.0, 4)[3] == "above"
    # Without a released interval there is no verdict.
    assert compare.verdict([0.5], 50, 0.5, None, None, 4)[2:] == (None, None)


def test_runs_on_two_data_draws_by_hand(tmp_path):
    # Released 0.69 [0.225, 0.945] over 4 seeds: per-seed variance s^2 = 0.134944 (test_rows_and_every_number).
    # Draw A: seeds 0.6 and 0.8 (mean 0.7); draw B: one seed, 0.1. Each draw weighs the same: m = 0.4.
    # Within: s^2/2 = 0.067472 and s^2/1 = 0.134944, their mean 0.101208; the draw means' variance (ddof 1):
    # 0.3^2 + 0.3^2 = 0.18; tau^2 = 0.18 - 0.101208 = 0.078792; se_m^2 = 0.078792/2 + (0.067472 + 0.134944)/4
    # = 0.09: se_m = 0.3; z = -0.29 / sqrt(0.09 + 0.183673^2) = -0.824422.
    m, se_m, se_p, z, said = plotting.compare.pooled_verdict([[0.6, 0.8], [0.1]], 50, 0.69, 0.225, 0.945, 4)
    assert (m, se_m, se_p, z) == pytest.approx((0.4, 0.3, 0.183673, -0.824422), abs=1e-6)
    assert said == "reproduced"
    # The plain mean of the three seeds (0.5) would weigh draw A twice. Draws that agree: tau^2 = 0, only the
    # seeds' spread remains (se_m^2 = (0.067472 + 0.067472) / 4 = 0.033736).
    assert plotting.compare.pooled_verdict([[0.6, 0.8], [0.7, 0.7]], 50, 0.69, 0.225, 0.945, 4)[1] == pytest.approx(
        0.183673, abs=1e-6
    )
    # One draw: section 1's numbers.
    assert plotting.compare.pooled_verdict([[0.6, 0.8]], 50, 0.69, 0.225, 0.945, 4)[1:] == pytest.approx(
        plotting.compare.verdict([0.6, 0.8], 50, 0.69, 0.225, 0.945, 4)
    )
    # Through the table: the row names both draws, each with its own mean and z.
    paper = tmp_path / "paper"
    paper.mkdir()
    header = "task,method,steps_millions,mean,ci_low,ci_high\n"
    (paper / "ogbench-individual.csv").write_text(header + f"{TASK},QC-FQL,0.1,0.69,0.225,0.945\n")
    for name in ("ogbench-agg.csv", "robomimic-individual.csv"):
        (paper / name).write_text(header)
    write_run(tmp_path / "exp" / "a0", 0, [(100000, 0.6)], data_seed=0)
    write_run(tmp_path / "exp" / "a1", 1, [(100000, 0.8)], data_seed=0)
    write_run(tmp_path / "exp" / "b0", 0, [(100000, 0.1)], sha="ab" * 32, data_seed=1)
    out = tmp_path / "out"
    assert pc.main([str(tmp_path / "exp"), f"--paper_dir={paper}", f"--out_dir={out}", "--compare", "--reps=50"]) == 0
    with open(out / "compare.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["draws"] == "2" and float(row["mean"]) == pytest.approx(0.4) and float(row["se"]) == pytest.approx(0.3)
    # Draw A's own z: 0.01 / sqrt(0.067472 + 0.033736) = 0.03; draw B's: -0.59 / sqrt(0.134944 + 0.033736) = -1.44.
    assert row["data"] == (
        "generated seed 0 0123456789ab: 0.700 (z 0.03); generated seed 1 abababababab: 0.100 (z -1.44)"
    )
    assert "| 0,0,1 | 2 | 50 | 0.400 [" in (out / "compare.md").read_text()


def test_compare_needs_the_paper(tmp_path, capsys):
    write_run(tmp_path / "exp" / "sd0", 0, [(100000, 0.5)])
    argv = [str(tmp_path / "exp"), f"--out_dir={tmp_path / 'out'}", "--compare", "--no_paper", "--reps=50"]
    assert pc.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: --compare needs the paper's curves")
