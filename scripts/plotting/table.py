"""The tables of scripts/plot_curves.py: `table.md` (success at the end of each phase) and `curves.csv`.

What they hold is told once, in the docstring of scripts/plot_curves.py ("Outputs").
"""

import csv
import math
import re
from typing import Dict, Optional, Sequence

import numpy as np

from plotting.paper import PaperCurve, paper_curve
from plotting.runs import Run, panel_of, sorted_labels, sorted_panels, task_key
from plotting.stats import Curve, stratified_interval


def _fmt(point, low=None, high=None) -> str:
    if point is None or not math.isfinite(point):
        return "—"
    text = f"{point:.3f}"
    if low is not None and high is not None:
        text += f" [{low:.3f}, {high:.3f}]"
    return text


def _phase_cell(group: Sequence[Run], tasks: Sequence[str], phase: str, aggregate: str, reps: int, seed: int):
    """`(cell text, steps)` for the end of `phase` ('offline' or 'training') of one group; the text says
    `(k of n runs)` where fewer than the group's `n` runs have a value there."""
    values, steps, logged = [], set(), False
    for task in tasks:
        task_values = []
        for r in group:
            if r.task != task:
                continue
            step = r.end_of_offline if phase == "offline" else r.end_of_training
            if step is None:
                return "— (online only)", set()
            steps.add(step)
            logged = logged or bool(np.any(r.steps == step))
            value = r.value_at(step)
            if math.isfinite(value):
                task_values.append(value)
        if not task_values:
            return ("— (no success value)" if logged else "— (not reached)"), steps
        values.append(np.array(task_values)[:, None])
    point, low, high = stratified_interval(values, aggregate, reps, seed)
    used = sum(len(v) for v in values)
    text = _fmt(point[0], low[0], high[0])
    if used < len(group):
        text += f" ({used} of {len(group)} runs)"
    return text, steps


def _paper_cell(curve: Optional[PaperCurve], method: str, x_steps: set, default_millions: float) -> str:
    if curve is None:
        return "—"
    target = default_millions
    if len(x_steps) == 1:
        (x,) = x_steps
        if curve.at(x / 1e6) is not None:
            target = x / 1e6
    value = curve.at(target)
    if value is None:
        return "—"
    note = f", {curve.note}" if curve.note else ""
    return f"{_fmt(*value)} @{target:g}M ({method}{note})"


def _steps_text(steps: set) -> str:
    return "—" if not steps else (f"{next(iter(steps)):,}" if len(steps) == 1 else "various")


def _data_text(group: Sequence[Run]) -> str:
    return "+".join(sorted({r.data for r in group}))


def build_table(
    runs: Sequence[Run], paper: Dict, aggregate: str, reps: int, seed: int, online_offset: int, inputs: str
) -> str:
    """`table.md`: per label and domain, then per label and task, the success at the end of the
    offline phase and at the end of training, beside the paper's numbers."""
    if aggregate == "iqm":
        stat = "IQM (25% trimmed mean) over seeds; per domain over all runs of all tasks"
    else:
        stat = "mean over seeds; per domain the mean over tasks of the per-task means (the paper's aggregate)"
    lines = [
        "# Success rate at the end of each phase",
        "",
        f"Runs: {inputs}.",
        "",
        "- label: a paper method and the settings its runs differ in, or (no paper method) the agent's name and "
        "the config keys that differ from its defaults;",
        "- runs: the runs of the group; a value from fewer of them (a run without an evaluation or without a "
        "success value at that step) says `(k of n runs)`;",
        f"- ours: {stat}, with the 95% stratified bootstrap confidence interval ({reps} resamples);",
        "- step: the logged step of that evaluation (`main.py`: offline steps, then `offline_steps` + online "
        "steps; `main_online.py`: online steps);",
        "- paper: the released curve of the same method (data/paper) at the same step where it has that point, "
        "else at the end of the paper's phase (1M offline steps, 2M in all); `@` gives the paper's step. Paper "
        "numbers are means over seeds (and tasks); a mean of several task curves has no interval;",
        "- data: the dataset source recorded in flags.json (`unknown`: not recorded).",
    ]
    for per_task in (False, True):
        kind = "task" if per_task else "domain"
        tasks_header = "" if per_task else " tasks |"
        lines += [
            "",
            f"## Per label and {kind}",
            "",
            f"| label | {kind} |{tasks_header} runs | data | end of offline: step | ours | paper "
            "| end of training: step | ours | paper |",
            "|" + " --- |" * (10 if per_task else 11),
        ]
        for panel in sorted_panels(runs, per_task):
            in_panel = [r for r in runs if panel_of(r, per_task) == panel]
            for label in sorted_labels(in_panel):
                group = [r for r in in_panel if r.label == label]
                method = group[0].method
                tasks = sorted({r.task for r in group}, key=task_key)
                gc = all(r.goal_conditioned for r in group)
                drawn = paper and all(r.paper_family for r in group)  # only a family the papers ran
                curve = paper_curve(paper, method, panel, tasks, per_task, gc) if drawn else None
                offline, offline_steps = _phase_cell(group, tasks, "offline", aggregate, reps, seed)
                end, end_steps = _phase_cell(group, tasks, "training", aggregate, reps, seed)
                online_only = group[0].driver == "main_online"
                x_end = {s + (online_offset if online_only else 0) for s in end_steps}
                paper_offline = "—" if online_only else _paper_cell(curve, method, offline_steps, 1.0)
                paper_end = _paper_cell(curve, method, x_end, 2.0)
                numbers = ", ".join(str(task_key(t)[1]) if re.search(r"-task\d+$", t) else t for t in tasks)
                task_cell = "" if per_task else f" {numbers} |"
                lines.append(
                    f"| {label} | {panel} |{task_cell} {len(group)} | {_data_text(group)} | "
                    f"{_steps_text(offline_steps)} | {offline} | {paper_offline} | "
                    f"{_steps_text(end_steps)} | {end} | {paper_end} |"
                )
    return "\n".join(lines) + "\n"


def write_curves_csv(path: str, curves: Sequence[Curve]):
    """Every plotted point, one row each: panel, label, paper method (empty for none), tasks, step (on the
    paper's axis), steps in millions, value, CI (empty for a gap), the runs behind the value and the runs of
    the group."""
    columns = ["panel", "label", "method", "tasks", "step", "steps_millions", "value", "ci_low", "ci_high"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns + ["runs", "runs_in_group"])
        for c in curves:
            for i, x in enumerate(c.x):
                numbers = [c.mean[i], c.low[i], c.high[i]]
                writer.writerow(
                    [c.panel, c.label, c.method or "", " ".join(c.tasks), int(x), f"{x / 1e6:g}"]
                    + ["" if not math.isfinite(v) else f"{v:.6g}" for v in numbers]
                    + [int(c.count[i]), len(c.runs)]
                )
