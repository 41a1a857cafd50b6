"""Our runs against the released curves, row by row: `compare.md`, `compare.csv` and `compare.png`.

A row is one (task, paper method, step) where runs at the paper's settings and the released curve
(`data/paper/`) both have a value. The verdict is the rule written in docs/results.md, section 1, before any
reproduction run: `z = (m - p) / sqrt(se_m^2 + se_p^2)` with the released standard error read off its 95%
interval, `se_p = (h - l) / (2 * 1.96)`, and our mean's `se_m = s / sqrt(n)`, where the per-seed spread
`s^2 = max(n_p * se_p^2, q (1 - q) / E)`, `q = (p E + 1) / (E + 2)`; reproduced when `|z| <= 1.96`. Runs on
several data draws (training files of other sha256) are pooled by section 1a's rule (`pooled_verdict`): each draw
weighs the same, and the draw means' spread beyond their seeds' adds to `se_m`.
"""

import csv
import dataclasses
import math
import os
import shutil
from typing import Dict, List, Optional, Sequence

import numpy as np

from plotting.paper import PAPER_OFFLINE_STEPS
from plotting.runs import Run, task_key
from plotting.stats import stratified_interval

Z95 = 1.96
# Seeds behind each released curve (the paper's section 5): 4 per OGBench task, 5 per robomimic task.
PAPER_SEEDS = {"ogbench": 4, "robomimic": 5}  # seeds behind each family's released curves


@dataclasses.dataclass
class Row:
    """One compared point. `values`: our seeds' success rates at `step`; `low`/`high`: our 95% bootstrap
    interval over seeds; `paper_*`: the released mean and interval at `step`; `z`, `verdict` as in the module
    docstring (`verdict` None where the released curve has no interval)."""

    task: str
    method: str
    step: int
    seeds: List[int]
    episodes: int
    values: List[float]
    mean: float
    low: float
    high: float
    paper_mean: float
    paper_low: Optional[float]
    paper_high: Optional[float]
    paper_seeds: int
    se: float
    paper_se: Optional[float]
    z: Optional[float]
    verdict: Optional[str]
    data: str
    sources: List[str]  # the runs behind the row (their directories, or wandb:...)
    commit: str = "-"  # commit_text of the runs behind the row
    draws: int = 1  # data draws (training files) behind the row; `mean` is the mean of their means


def _seed_spread(episodes: int, p: float, low, high, paper_seeds: int):
    """`(s^2, se_p)`: one seed's variance around the population mean and the released standard error
    (docs/results.md, section 1); without a released interval `(binomial floor, None)`."""
    q = (p * episodes + 1) / (episodes + 2)
    binomial = q * (1 - q) / episodes
    if low is None or high is None:
        return binomial, None
    se_p = (high - low) / (2 * Z95)
    return max(paper_seeds * se_p**2, binomial), se_p


def _said(m: float, p: float, se_m: float, se_p: Optional[float]):
    """`(z, verdict)` of our mean `m` against the released `p`; `(None, None)` without a released interval."""
    if se_p is None:
        return None, None
    z = (m - p) / math.sqrt(se_m**2 + se_p**2)
    return z, "reproduced" if abs(z) <= Z95 else ("below" if z < 0 else "above")


def verdict(values: Sequence[float], episodes: int, p: float, low, high, paper_seeds: int):
    """`(se_m, se_p, z, verdict)` for our seeds' `values` (each over `episodes` episodes) against the
    released mean `p` with interval `[low, high]` over `paper_seeds` seeds (docs/results.md, section 1).
    Without a released interval: `(se_m, None, None, None)` with `se_m` from the binomial floor alone."""
    spread, se_p = _seed_spread(episodes, p, low, high, paper_seeds)
    se_m = math.sqrt(spread / len(values))
    return (se_m, se_p, *_said(float(np.mean(values)), p, se_m, se_p))


def pooled_verdict(by_draw: Sequence[Sequence[float]], episodes: int, p: float, low, high, paper_seeds: int):
    """`(m, se_m, se_p, z, verdict)` for runs on several data draws (docs/results.md, section 1a): `by_draw[d]`
    holds draw d's seeds' values; `m` is the mean of the draw means, `se_m^2 = tau^2 / D + sum_d(s^2 / n_d) / D^2`
    with `tau^2 = max(0, var(draw means, ddof=1) - mean_d(s^2 / n_d))`. One draw: `verdict`'s numbers."""
    spread, se_p = _seed_spread(episodes, p, low, high, paper_seeds)
    means = [float(np.mean(v)) for v in by_draw]
    within = [spread / len(v) for v in by_draw]
    draws = len(by_draw)
    tau2 = max(0.0, float(np.var(means, ddof=1)) - float(np.mean(within))) if draws > 1 else 0.0
    se_m = math.sqrt(tau2 / draws + sum(within) / draws**2)
    m = float(np.mean(means))
    return (m, se_m, se_p, *_said(m, p, se_m, se_p))


def at_paper_settings(run: Run) -> bool:
    """A run of a paper method, on a family the papers ran, whose label names no setting that differs from the
    paper's."""
    return run.paper_family and run.method is not None and run.label.removesuffix(" (generated data)") == run.method


def paper_step(run: Run, step: int) -> Optional[int]:
    """`step` of `run` on the paper's axis (1M offline steps, then 1M online), or None where the run's
    phases do not line up with the paper's (an online step after fewer than 1M offline steps)."""
    if run.driver == "main_online":
        return PAPER_OFFLINE_STEPS + step
    if step <= run.offline_steps or run.offline_steps == PAPER_OFFLINE_STEPS:
        return step
    return None


def data_text(run: Run) -> str:
    """`generated seed 1 01d3f511e206` (source, the generator's seed where recorded, and sha256 prefix of each
    training file the run read): the run's data draw."""
    files = [d for d in (run.record or {}).get("datasets") or () if isinstance(d, dict) and d.get("role") != "val"]
    parts = set()
    for d in files:
        seed = "" if d.get("seed") is None else f" seed {d['seed']}"
        parts.add(f"{d.get('source', 'unknown')}{seed} {(d.get('sha256') or '?')[:12]}")
    return "; ".join(sorted(parts)) or "unknown"


def commit_text(run: Run) -> str:
    """`e9ceebaffc4f` (the first 12 hex digits of the commit that made the run, `flags.json` `made_by`), with `+`
    where its tree had uncommitted changes; `-` for a run recorded without it (an older run, or no git where it ran)."""
    made_by = (run.record or {}).get("made_by") or {}
    commit = made_by.get("commit") if isinstance(made_by, dict) else None
    if not isinstance(commit, str) or not commit:
        return "-"
    return commit[:12] + ("+" if made_by.get("uncommitted_changes") else "")


def compare_rows(runs: Sequence[Run], paper: Dict, reps: int, seed: int) -> List[Row]:
    """Every row, sorted by task, method and step."""
    groups: Dict[tuple, List[Run]] = {}
    for run in runs:
        if at_paper_settings(run) and ("task", run.task, run.method) in paper:
            groups.setdefault((run.task, run.method), []).append(run)
    rows = []
    for (task, method), group in sorted(groups.items(), key=lambda kv: (task_key(kv[0][0]), kv[0][1])):
        curve = paper[("task", task, method)]
        points: Dict[int, List[tuple]] = {}
        for run in group:
            for step, value in zip(run.steps, run.success, strict=True):
                x = paper_step(run, int(step))
                if x is not None and math.isfinite(value) and curve.at(x / 1e6) is not None:
                    points.setdefault(x, []).append((run, float(value)))
        for x, hits in sorted(points.items()):
            values = [v for _, v in hits]
            episodes = min(int(r.record["flags"]["eval_episodes"]) for r, _ in hits)
            p, low, high = curve.at(x / 1e6)
            paper_seeds = PAPER_SEEDS.get(group[0].family, PAPER_SEEDS["ogbench"])
            by_draw: Dict[str, List[float]] = {}
            for r, v in hits:
                by_draw.setdefault(data_text(r), []).append(v)
            mean, se, se_p, z, said = pooled_verdict(list(by_draw.values()), episodes, p, low, high, paper_seeds)
            _, ci_low, ci_high = stratified_interval([np.array(values)[:, None]], "mean", reps, seed)
            data = "; ".join(sorted(by_draw))
            if len(by_draw) > 1:  # each draw's own mean and z (section 1 on its seeds alone), to read beside
                data = "; ".join(
                    f"{d}: {np.mean(v):.3f} (z {_num(verdict(v, episodes, p, low, high, paper_seeds)[2], 2)})"
                    for d, v in sorted(by_draw.items())
                )
            rows.append(
                Row(
                    task,
                    method,
                    x,
                    sorted(r.seed for r, _ in hits),
                    episodes,
                    values,
                    mean,
                    float(ci_low[0]),
                    float(ci_high[0]),
                    float(p),
                    low,
                    high,
                    paper_seeds,
                    se,
                    se_p,
                    z,
                    said,
                    data,
                    [r.source for r, _ in hits],
                    "; ".join(sorted({commit_text(r) for r, _ in hits})),
                    len(by_draw),
                )  # fmt: skip
            )
    return rows


def _num(value: Optional[float], digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def compare_table(rows: Sequence[Row], inputs: str) -> str:
    """`compare.md`: one line per row, then what the columns are and the rule."""
    lines = [
        "# Our runs against the released curves",
        "",
        f"Runs: {inputs}. Rule (docs/results.md, section 1): reproduced when |z| <= 1.96.",
        "",
        "| task | method | step | seeds | draws | episodes | ours: mean [95% CI over seeds] | released: mean [95% CI] "
        "(seeds) | z | verdict | data (source sha256) | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.method} | {r.step:,} | {','.join(map(str, r.seeds))} | {r.draws} | {r.episodes} | "
            f"{r.mean:.3f} [{r.low:.3f}, {r.high:.3f}] | {r.paper_mean:.3f} [{_num(r.paper_low)}, "
            f"{_num(r.paper_high)}] ({r.paper_seeds}) | {_num(r.z, 2)} | {r.verdict or '— (no released CI)'} | "
            f"{r.data} | {r.commit} |"
        )
    if not rows:
        lines.append("| (no run at the paper's settings has a step the released curves have) |||||||||||||")
    lines += [
        "",
        "- step: on the paper's axis (1M offline gradient steps, then 1M online environment steps);",
        "- ours: the mean over our seeds and rliable's 95% percentile bootstrap over them (zero width for one seed);",
        "- released: data/paper/ogbench-individual.csv (or robomimic-individual.csv), mean over the paper's seeds;",
        "- z: (ours - released) / sqrt(se_ours^2 + se_released^2), with se_ours counting seed spread and the "
        "binomial noise of the episodes (docs/results.md);",
        "- draws: the training files behind the row; with more than one, ours is the mean of each draw's mean and "
        "se_ours adds the draws' spread (docs/results.md, section 1a);",
        "- data: each training file's source (official or generated, with the generator's seed) and sha256 prefix; "
        "with several draws each draw's mean and its own z;",
        "- commit: the repository's commit that made the runs (flags.json `made_by`; `+`: with uncommitted changes, "
        "`-`: not recorded).",
    ]
    return "\n".join(lines) + "\n"


def write_compare_csv(path: str, rows: Sequence[Row]):
    columns = ["task", "method", "step", "seeds", "episodes", "values", "mean", "ci_low", "ci_high"]
    columns += ["paper_mean", "paper_ci_low", "paper_ci_high", "paper_seeds", "se", "paper_se", "z", "verdict", "data"]
    columns += ["commit", "draws"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for r in rows:
            numbers = [f"{v:.6g}" if v is not None else "" for v in (r.mean, r.low, r.high, r.paper_mean)]
            numbers += [f"{v:.6g}" if v is not None else "" for v in (r.paper_low, r.paper_high)]
            errors = [f"{v:.6g}" if v is not None else "" for v in (r.se, r.paper_se, r.z)]
            seeds, values = " ".join(map(str, r.seeds)), " ".join(f"{v:g}" for v in r.values)
            writer.writerow([r.task, r.method, r.step, seeds, r.episodes, values, *numbers, r.paper_seeds, *errors]
                            + [r.verdict or "", r.data, r.commit, r.draws])  # fmt: skip


def copy_records(rows: Sequence[Row], out_dir: str) -> List[str]:
    """Copy `flags.json` and `eval.csv` of every run behind `rows` to `<out_dir>/runs/<run>/` (small text files:
    what a reader needs to check each row without the run directories); returns the copies' directories."""
    copied = []
    for source in sorted({s for r in rows for s in r.sources if os.path.isdir(s)}):
        target = os.path.join(out_dir, "runs", os.path.basename(os.path.normpath(source)))
        os.makedirs(target, exist_ok=True)
        for name in ("flags.json", "eval.csv"):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))
        copied.append(target)
    return copied


def draw_compare(rows: Sequence[Row], paper: Dict, path: str):
    """One axis per task: each method's released curve (line and 95% band) up to a step past our last
    compared step, our seeds (dots) and our mean with +-1.96 se (the spread the verdict uses)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r.task for r in rows}, key=task_key)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, task in zip(axes[0], tasks, strict=True):
        in_task = [r for r in rows if r.task == task]
        last = max(r.step for r in in_task) / 1e6
        for i, method in enumerate(sorted({r.method for r in in_task})):
            color, curve = colors[i % len(colors)], paper[("task", task, method)]
            shown = curve.x <= last + 0.1 + 1e-9
            ax.plot(curve.x[shown], curve.mean[shown], "--", color=color, label=f"{method}, released")
            if curve.low is not None:
                ax.fill_between(curve.x[shown], curve.low[shown], curve.high[shown], color=color, alpha=0.15)
            mine = [r for r in in_task if r.method == method]
            x = np.array([r.step / 1e6 for r in mine])
            ax.errorbar(x, [r.mean for r in mine], yerr=[Z95 * r.se for r in mine], fmt="o", color=color,
                        capsize=4, label=f"{method}, ours ({len(mine[0].seeds)} seed(s))")  # fmt: skip
            for r in mine:
                ax.plot([r.step / 1e6] * len(r.values), r.values, ".", color=color, alpha=0.5)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("steps (millions; 1M offline, then online)")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success rate")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
