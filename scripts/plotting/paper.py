"""The paper's released curves for scripts/plot_curves.py (`data/paper/`, data/paper/README.md for their source).

Which curve is drawn beside which runs is told once, in the docstring of scripts/plot_curves.py ("Outputs").
"""

import csv
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from plotting.runs import InputError, task_key

PAPER_OFFLINE_STEPS = 1_000_000  # the paper's x axis: 1M offline steps, then 1M online steps
PAPER_FILES = ("ogbench-agg.csv", "ogbench-individual.csv", "robomimic-individual.csv")
# The DQC paper's results: success of every seed at 0.25/0.5/0.75/1M offline steps per goal-conditioned env.
DQC_FILE = "dqc-exp-data.csv"


@dataclasses.dataclass
class PaperCurve:
    """A released curve: `x` `(P,)` in millions of steps, `mean`, `low`, `high` `(P,)` success rates;
    `low`/`high` are `None` for a mean of curves."""

    x: np.ndarray
    mean: np.ndarray
    low: Optional[np.ndarray]
    high: Optional[np.ndarray]
    note: str  # '' for a released curve as is, else what it is (e.g. 'mean of tasks 2, 3')

    def at(self, x_millions: float) -> Optional[Tuple[float, Optional[float], Optional[float]]]:
        hit = np.flatnonzero(np.abs(self.x - x_millions) < 1e-6)
        if not hit.size:
            return None
        i = hit[0]
        return self.mean[i], None if self.low is None else self.low[i], None if self.high is None else self.high[i]


def load_paper(paper_dir: str) -> Dict[Tuple[str, str, str], PaperCurve]:
    """`{(kind, task, method): PaperCurve}` from `data/paper/` (`kind`: `'agg'` or `'task'`).

    Raises:
        InputError: a missing or malformed file.
    """
    columns = {}
    for name in PAPER_FILES:
        kind = "agg" if name.endswith("-agg.csv") else "task"
        path = os.path.join(paper_dir, name)
        try:
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    key = (kind, row["task"], row["method"])
                    values = [float(row[c]) for c in ("steps_millions", "mean", "ci_low", "ci_high")]
                    columns.setdefault(key, []).append(values)
        except (OSError, KeyError, ValueError) as e:
            raise InputError(f"{path}: cannot read the paper's curves ({e}); or pass --no_paper") from None
    curves = {}
    for key, rows in columns.items():
        x, mean, low, high = np.array(sorted(rows)).T
        curves[key] = PaperCurve(x, mean, low, high, "")
    curves.update(load_seed_results(os.path.join(paper_dir, DQC_FILE)))
    return curves


def load_seed_results(path: str, reps: int = 5000, seed: int = 0) -> Dict[Tuple[str, str, str], PaperCurve]:
    """`{('task', env name, method): PaperCurve}` from per-seed results (`task,method,steps_millions,seed,success`):
    the mean over seeds and a 95% percentile bootstrap over them at each step. `{}` when `path` is missing."""
    if not os.path.exists(path):
        return {}
    values: Dict[Tuple[str, str], Dict[float, List[float]]] = {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                steps = values.setdefault((row["task"], row["method"]), {})
                steps.setdefault(float(row["steps_millions"]), []).append(float(row["success"]))
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{path}: cannot read the paper's results ({e}); or pass --no_paper") from None
    rng = np.random.default_rng(seed)
    curves = {}
    for (task, method), by_step in values.items():
        x = np.array(sorted(by_step))
        points = [np.array(by_step[step]) for step in x]
        means = [rng.choice(p, (reps, len(p))).mean(axis=1) for p in points]  # resampled seeds
        low, high = (np.array([np.percentile(m, q) for m in means]) for q in (2.5, 97.5))
        curves[("task", task, method)] = PaperCurve(x, np.array([p.mean() for p in points]), low, high, "")
    return curves


def _paper_tasks_of(paper: Dict, domain: str, method: str) -> List[str]:
    prefix = f"{domain}-play-task"
    return sorted((t for kind, t, m in paper if kind == "task" and m == method and t.startswith(prefix)), key=task_key)


def paper_curve(
    paper: Dict, method: Optional[str], panel: str, tasks: Sequence[str], per_task: bool, goal_conditioned: bool = False
) -> Optional[PaperCurve]:
    """The paper's curve of `method` for a panel: the task's curve, the domain's aggregate when the
    runs cover all of its tasks, else the mean of the paper's curves of the tasks covered (no CI); for runs of
    one goal-conditioned env (`goal_conditioned`, from their env block), that env's all-goals curve.
    None for `method` None (a run of no paper method) or where the paper has no such curve."""
    if method is None:
        return None
    if per_task:
        return paper.get(("task", panel, method))
    if len(tasks) == 1 and goal_conditioned:
        return paper.get(("task", tasks[0], method))
    if ("agg", panel, method) in paper and list(tasks) == _paper_tasks_of(paper, panel, method):
        return paper[("agg", panel, method)]
    parts = [paper.get(("task", t, method)) for t in tasks]
    if not parts or any(p is None for p in parts):
        return None
    numbers = ", ".join(str(task_key(t)[1]) for t in tasks)
    if len(parts) == 1:
        return parts[0] if tasks[0] == panel else dataclasses.replace(parts[0], note=f"task {numbers} only")
    if any(len(p.x) != len(parts[0].x) or np.any(p.x != parts[0].x) for p in parts):
        return None
    return PaperCurve(parts[0].x, np.mean([p.mean for p in parts], axis=0), None, None, f"mean of tasks {numbers}")
