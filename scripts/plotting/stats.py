"""The statistics of scripts/plot_curves.py: curves per panel and group with rliable's stratified bootstrap CIs.

What is aggregated over what (seeds, tasks, steps) is told once, in the docstring of scripts/plot_curves.py
("Statistics").
"""

import contextlib
import dataclasses
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from plotting.runs import Run, panel_of, progress, sorted_labels, sorted_panels, task_key, warn


@contextlib.contextmanager
def _numpy_seed(seed: int):
    """rliable's bootstraps draw from numpy's global generator: seed it, then restore it."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _aggregate_fns(aggregate: str):
    """`(rectangular, ragged)` aggregate functions over runs x tasks, one value per step."""
    from scipy.stats import trim_mean

    if aggregate == "mean":  # the mean over tasks of the mean over runs (rliable's `aggregate_mean`)
        return (
            lambda scores: scores.mean(axis=0).mean(axis=0),
            lambda *tasks: np.mean([t.mean(axis=0) for t in tasks], axis=0),
        )
    if aggregate == "iqm":  # the 25% trimmed mean over all runs and tasks (rliable's `aggregate_iqm`)
        return (
            lambda scores: trim_mean(scores.reshape(-1, scores.shape[-1]), 0.25, axis=0),
            lambda *tasks: trim_mean(np.concatenate(tasks, axis=0), 0.25, axis=0),
        )
    raise ValueError(f"unknown aggregate {aggregate!r}")


def stratified_interval(tasks: Sequence[np.ndarray], aggregate: str, reps: int, seed: int):
    """Point estimate and 95% stratified bootstrap interval of the aggregate over `tasks`.

    `tasks`: one `(runs, steps)` array per task, no missing values; tasks may have different
    numbers of runs. rliable resamples the runs of each task with replacement (`StratifiedBootstrap`
    when every task has the same number of runs, `StratifiedIndependentBootstrap` otherwise; both
    stratify by task) and takes the 2.5 and 97.5 percentiles of `reps` resampled aggregates.
    Returns `(point, low, high)`, each of shape `(steps,)`.
    """
    from rliable import library

    rectangular, ragged = _aggregate_fns(aggregate)
    if len({len(t) for t in tasks}) == 1:
        scores, func = np.stack(tasks, axis=1), rectangular  # runs x tasks x steps
    else:
        scores, func = list(tasks), ragged
    with _numpy_seed(seed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        points, intervals = library.get_interval_estimates({"x": scores}, func, reps=reps)
    return np.asarray(points["x"], dtype=float), intervals["x"][0], intervals["x"][1]


def bootstrap_curve(tasks: Sequence[np.ndarray], aggregate: str = "mean", reps: int = 5000, seed: int = 0):
    """Aggregate and 95% CI at each step of runs aligned on common steps.

    `tasks`: one `(runs, steps)` array per task, NaN where a run has no evaluation at a step. A run
    contributes only where it has a value; a step where a task has no value at all is NaN. Steps
    with the same runs present share one bootstrap.

    Returns:
        `(point, low, high, runs)`: arrays of shape `(steps,)`; `runs` counts the values used.
    """
    num_steps = tasks[0].shape[1]
    point, low, high = (np.full(num_steps, np.nan) for _ in range(3))
    counts = np.zeros(num_steps, dtype=int)
    present = [~np.isnan(t) for t in tasks]
    defined = np.all([p.any(axis=0) for p in present], axis=0)
    blocks: Dict[bytes, List[int]] = {}
    for step in np.flatnonzero(defined):
        blocks.setdefault(b"".join(np.packbits(p[:, step]).tobytes() + b"|" for p in present), []).append(step)
    for columns in blocks.values():
        columns = np.array(columns)
        arrays = [t[p[:, columns[0]]][:, columns] for t, p in zip(tasks, present, strict=True)]
        point[columns], low[columns], high[columns] = stratified_interval(arrays, aggregate, reps, seed)
        counts[columns] = sum(len(a) for a in arrays)
    return point, low, high, counts


@dataclasses.dataclass
class Curve:
    """One group (label) in one panel (domain or task), on the panel's common steps.

    `x`: `(S,)` steps on the paper's axis; `mean`, `low`, `high`: `(S,)` success (NaN: a gap);
    `count`: `(S,)` runs behind each value, of `len(runs)` in the group. `method`: the paper method's
    label, None for a run of no paper method.
    """

    panel: str
    label: str
    method: Optional[str]
    tasks: Tuple[str, ...]
    runs: List[Run]
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray


def compute_curves(
    runs: Sequence[Run], per_task: bool, aggregate: str, reps: int, seed: int, online_offset: int
) -> List[Curve]:
    """One `Curve` per (panel, label), every curve of a panel on the union of the panel's steps."""
    curves = []
    jobs = []
    for panel in sorted_panels(runs, per_task):
        in_panel = [r for r in runs if panel_of(r, per_task) == panel]
        x = np.unique(np.concatenate([r.x(online_offset) for r in in_panel]))
        for label in sorted_labels(in_panel):
            jobs.append((panel, label, x, [r for r in in_panel if r.label == label]))
    for panel, label, x, group in progress(jobs, len(jobs), "bootstrap"):
        tasks = tuple(sorted({r.task for r in group}, key=task_key))
        matrices = []
        for task in tasks:
            task_runs = sorted((r for r in group if r.task == task), key=lambda r: r.seed)
            seeds = [r.seed for r in task_runs]
            if len(set(seeds)) < len(seeds):
                warn(f"{label} on {task}: more than one run with the same seed ({seeds}); each counts as a run")
            matrix = np.full((len(task_runs), len(x)), np.nan)
            for i, r in enumerate(task_runs):
                matrix[i, np.searchsorted(x, r.x(online_offset))] = r.success
            matrices.append(matrix)
        mean, low, high, count = bootstrap_curve(matrices, aggregate, reps, seed)
        curves.append(Curve(panel, label, group[0].method, tasks, group, x, mean, low, high, count))
    return curves
