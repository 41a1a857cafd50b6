"""The paper's figures from run directories (or wandb): success rate against steps, 95% bootstrap CIs.

Usage:
    python scripts/plot_curves.py exp/my_sweep --out_dir=plots/my_sweep
    python scripts/plot_curves.py 'exp/*/2026*_cube-double-*' --per_task --out_dir=plots/cube_double
    python scripts/plot_curves.py --wandb_project=ENTITY/qc --wandb_group=my_sweep --out_dir=plots/wandb

Inputs. Each argument is a run directory (it holds `flags.json`), a directory searched recursively
for run directories (a sweep's group directory works as one argument) or a glob (expanded here,
so it may be quoted). A run directory without an `eval.csv` yet, or with no evaluation row, is
skipped with a warning. With `--wandb_project` the runs of that project (and `--wandb_group`) are
read through wandb's public API too (`read_wandb_runs`): the config is the run's `flags.json`
content and the curve is the history of `eval/success` against the step it was logged at (the
environment step).

Groups. Runs are grouped by a label derived from the resolved agent config in `flags.json`, not from
`--method` (`label_of`, the registry's `agents.describe`): a config of a paper method (the agent's
`method_of`) is labelled with the method's name plus each setting where it differs from the paper's
values for its domain (`h=3`, `N=16`, `alpha=100`) and every other key that differs from the agent's
defaults; any other config (an unknown agent or config key, a combination no paper method has) is
labelled from its agent name and the keys that differ from its defaults, never as a paper method.
` (generated data)` marks runs on a locally generated dataset (`flags.json` `datasets`; a run
without that record counts as unknown, see `table.md`).

Statistics (`bootstrap_curve`). Per task: the mean (or `--aggregate=iqm`) over seeds; per domain:
the mean over the domain's tasks of the per-task means over seeds (the paper's aggregate), or the
IQM over all runs and tasks. 95% confidence intervals come from rliable's stratified bootstrap
(runs resampled with replacement within each task, percentile interval, `--reps` resamples; the
paper used 5000). Steps: a run's evaluation at step `i` is placed at `i` (`main.py` logs offline
step `i` as `i` and online step `i` as `offline_steps + i`); `main_online.py` runs are shifted by
`--online_offset` (default: the offline steps of the `main.py` runs plotted, or the paper's 1M when
there are none, where the paper puts its online-only methods). The curves of a panel are aligned
on the union of their steps: a run without an evaluation at a step contributes nothing there; a
task aggregate where no run has a value, or a domain aggregate where one of its tasks has none,
is missing (a gap, never interpolated).

Outputs in `--out_dir`: `curves.png` and `curves.pdf` (one panel per domain, or per task with
`--per_task`; the paper's released curves dashed, `--no_paper` to leave them out), `table.md`
(success at the end of the offline phase and at the end of training, per method and domain and per
method and task, beside the paper's numbers) and `curves.csv` (every plotted point).
"""

import argparse
import contextlib
import csv
import dataclasses
import glob
import json
import math
import os
import re
import sys
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

# Make the repository root importable when run as `python scripts/plot_curves.py`.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import agents  # noqa: E402
from runner import methods  # noqa: E402

# Paper methods in the order of the registry (each agent's methods in the order of its paper's legends).
METHOD_ORDER = tuple(entry.label for spec in agents.REGISTRY.values() for entry in spec.methods.values())
DOMAIN_ORDER = (
    "scene",
    "puzzle-3x3",
    "cube-double",
    "cube-triple",
    "cube-quadruple",
    "cube-single",
    "lift",
    "can",
    "square",
)
ROBOMIMIC_DOMAINS = ("lift", "can", "square")
PAPER_OFFLINE_STEPS = 1_000_000  # the paper's x axis: 1M offline steps, then 1M online steps
PAPER_FILES = ("ogbench-agg.csv", "ogbench-individual.csv", "robomimic-individual.csv")
DPI = 150
# (colour, marker) per method: the marker tells methods apart in black and white.
METHOD_STYLES = {
    "QC": ("#d62728", "o"),
    "QC-FQL": ("#ff7f0e", "s"),
    "BFN-n": ("#1f77b4", "^"),
    "BFN": ("#17becf", "v"),
    "FQL-n": ("#2ca02c", "D"),
    "FQL": ("#bcbd22", "P"),
    "RLPD": ("#7f7f7f", "X"),
    "RLPD-AC": ("#9467bd", "*"),
    "QC-RLPD": ("#8c564b", "h"),
    "RLPD-n": ("#e377c2", "<"),
}
EXTRA_STYLES = [("#000000", ">"), ("#e377c2", "p"), ("#393b79", "8"), ("#637939", "d"), ("#843c39", "H")]


class InputError(Exception):
    """A bad input: reported as one `error:` line with exit status 2."""


# ------------------------------------------------------------------------------------------------ labels


def label_of(record: Dict) -> Tuple[str, str]:
    """`(method, label)` of a run from its `flags.json` record, e.g. `('QC', 'QC h=3 N=16')` (module docstring)."""
    agent, env_name = record["agent"], record["flags"]["env_name"]
    spec = agents.REGISTRY.get(agent.get("agent_name"))
    method = spec.method_of(agent) if spec is not None and set(agent) <= set(spec.get_config().keys()) else None
    paper = methods.paper_values(method, env_name) if method else {}
    method_label, label = agents.describe(agent, paper, record.get("agent_defaults"))
    if data_source(record) == "generated":
        label += " (generated data)"
    return method_label, label


def data_source(record: Dict) -> str:
    """`'generated'` if any training dataset file of the run was generated locally, `'official'` if
    all were the published files, else `'unknown'` (also without a `datasets` record).

    `datasets` (`envs.provenance`): one record per file with `source` and `role` (`'val'` files are
    not trained on and are ignored).
    """
    records = [d for d in record.get("datasets") or () if isinstance(d, dict) and d.get("role") != "val"]
    sources = {d.get("source") for d in records}
    if "generated" in sources:
        return "generated"
    return "official" if sources == {"official"} else "unknown"


_DATA_TYPE_RE = re.compile(r"-(play|noisy|mh|ph)-")
_TASK_RE = re.compile(r"-task(\d+)-")


def domain_and_task(env_name: str, task_id: Optional[int]) -> Tuple[str, str]:
    """`(domain, task)` names as the paper's files spell them.

    `('cube-double', 'cube-double-play-task2')`; robomimic multi-human `('lift', 'lift')`. Data that
    the paper did not use keeps its type: `('cube-double-noisy', 'cube-double-noisy-task2')`,
    `('lift-ph', 'lift-ph')`. An env name without paper settings is its own domain and task.
    """
    try:
        domain = methods.domain_of(env_name)
    except ValueError:
        return env_name, env_name
    match = _DATA_TYPE_RE.search(env_name)
    data_type = match[1] if match else "play"
    if domain in ROBOMIMIC_DOMAINS:
        name = domain if data_type == "mh" else f"{domain}-{data_type}"
        return name, name
    if task_id is None:
        match = _TASK_RE.search(env_name)
        task_id = int(match[1]) if match else None
    task = f"{domain}-{data_type}-" + (f"task{task_id}" if task_id is not None else "default")
    return (domain if data_type == "play" else f"{domain}-{data_type}"), task


# ------------------------------------------------------------------------------------------------ runs


@dataclasses.dataclass
class Run:
    """One run: what it is (from `flags.json`) and its evaluations (`steps` as logged, `success`)."""

    source: str
    method: str
    label: str
    driver: str  # 'main' (offline-to-online) or 'main_online' (online only)
    env_name: str
    domain: str
    task: str
    seed: int
    offline_steps: int
    online_steps: int
    data: str
    steps: np.ndarray
    success: np.ndarray

    def x(self, online_offset: int) -> np.ndarray:
        """Steps on the paper's axis: `main_online.py` runs start at `online_offset`."""
        return self.steps + (online_offset if self.driver == "main_online" else 0)

    def value_at(self, step: int) -> float:
        hit = np.flatnonzero(self.steps == step)
        return float(self.success[hit[-1]]) if hit.size else math.nan

    @property
    def end_of_offline(self) -> Optional[int]:
        """The logged step of the last offline evaluation; `None` for an online-only run."""
        return self.offline_steps if self.driver == "main" and self.offline_steps > 0 else None

    @property
    def end_of_training(self) -> int:
        return self.offline_steps + self.online_steps if self.driver == "main" else self.online_steps


def make_run(source: str, record: Dict, rows: Iterable[Tuple[float, float]]) -> Run:
    """A `Run` from a `flags.json` record and `(step, success)` pairs (a later duplicate step wins).

    Raises:
        InputError: a record without the keys the label needs.
    """
    try:
        flags, agent = record["flags"], record["agent"]
        method, label = label_of(record)
        domain, task = domain_and_task(flags["env_name"], record.get("task_id"))
        spec = agents.REGISTRY.get(agent.get("agent_name"))
        driver = record.get("driver") or (spec.drivers[0] if spec is not None else "main")
        seed = int(flags["seed"])
        offline_steps = int(flags.get("offline_steps") or 0)
        online_steps = int(flags.get("online_steps") or 0)
    except InputError as e:
        raise InputError(f"{source}: {e}") from None
    except KeyError as e:
        raise InputError(f"{source}: the run config (flags.json) has no {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{source}: malformed run config (flags.json): {e}") from None
    by_step = {int(step): float(value) for step, value in rows}
    steps = np.array(sorted(by_step), dtype=np.int64)
    return Run(
        source=source,
        method=method,
        label=label,
        driver=driver,
        env_name=flags["env_name"],
        domain=domain,
        task=task,
        seed=seed,
        offline_steps=offline_steps,
        online_steps=online_steps,
        data=data_source(record),
        steps=steps,
        success=np.array([by_step[s] for s in steps], dtype=np.float64),
    )


def find_run_dirs(arguments: Sequence[str]) -> List[str]:
    """Run directories (with a `flags.json`) named by, or found under, each argument or glob.

    Raises:
        InputError: an argument that matches nothing, or no run directory at all.
    """
    found: Dict[str, None] = {}
    for argument in arguments:
        paths = sorted(glob.glob(argument, recursive=True)) if any(c in argument for c in "*?[") else [argument]
        if not paths or not all(os.path.exists(p) for p in paths):
            raise InputError(f"{argument}: no such file or directory")
        for path in paths:
            if os.path.basename(path) == "flags.json":
                path = os.path.dirname(path) or "."
            if not os.path.isdir(path):
                raise InputError(f"{path}: not a run directory (no flags.json) nor a directory to search")
            if os.path.isfile(os.path.join(path, "flags.json")):
                found[os.path.normpath(path)] = None
                continue
            for root, dirs, files in os.walk(path):
                if "flags.json" in files:
                    found[os.path.normpath(root)] = None
                    dirs[:] = []  # a run directory holds no further runs
                else:
                    dirs[:] = sorted(d for d in dirs if d not in ("wandb", "checkpoints"))
    if not found:
        raise InputError(f"no run directories (a directory with a flags.json) found in {' '.join(arguments)}")
    return list(found)


def read_eval_csv(path: str) -> List[Tuple[int, float]]:
    """`(step, success)` of every row of an `eval.csv` with a `success` value.

    Raises:
        InputError: an unreadable file, no `step` or `success` column, or a non-numeric value.
    """
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            if "step" not in fields or "success" not in fields:
                raise InputError(f"{path}: unreadable eval.csv: no 'step' and 'success' columns (header: {fields})")
            rows = []
            for line, row in enumerate(reader, start=2):
                if row["success"] in ("", None):
                    continue
                try:
                    step, value = int(float(row["step"])), float(row["success"])
                except (TypeError, ValueError):
                    raise InputError(
                        f"{path}:{line}: unreadable eval.csv: step {row['step']!r}, success {row['success']!r}"
                    ) from None
                if math.isfinite(value):
                    rows.append((step, value))
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: unreadable eval.csv: {e}") from None


def read_run_dir(path: str) -> Optional[Run]:
    """The run in `path`, or `None` (with a warning) while it has no evaluation yet.

    Raises:
        InputError: an unreadable `flags.json` or `eval.csv`.
    """
    try:
        with open(os.path.join(path, "flags.json")) as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}/flags.json: unreadable: {e}") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}/flags.json: not a JSON object")
    eval_path = os.path.join(path, "eval.csv")
    if not os.path.exists(eval_path):
        _warn(f"skipping {path}: no eval.csv (no evaluation yet)")
        return None
    rows = read_eval_csv(eval_path)
    if not rows:
        _warn(f"skipping {path}: eval.csv has no evaluation row yet")
        return None
    return make_run(path, record, rows)


def read_wandb_runs(api, project: str, group: Optional[str]) -> List[Run]:
    """The runs of a wandb project (and group) through the public API object `api`.

    `api` is `wandb.Api()` or anything with `runs(path, filters=...)` yielding objects with `id`,
    `config` (the run's `flags.json` record, which the drivers pass to `wandb.init`) and
    `scan_history(keys=[...])` (rows with `_step`, the environment step the drivers log at, and
    `eval/success`).

    Raises:
        InputError: wandb could not be read (no network, no login, no such project).
    """
    where = f"wandb project {project}" + (f" group {group}" if group else "")
    try:
        fetched = []
        for wandb_run in api.runs(project, filters={"group": group} if group else None):
            history = wandb_run.scan_history(keys=["_step", "eval/success"])
            rows = [(row["_step"], row["eval/success"]) for row in history if row.get("eval/success") is not None]
            fetched.append((f"wandb:{project}/{wandb_run.id}", dict(wandb_run.config), rows))
    except Exception as e:  # anything the client raises (network, authentication, HTTP errors)
        raise InputError(f"cannot read {where}: {type(e).__name__}: {e}") from None
    runs = []
    for source, record, rows in fetched:
        if not rows:
            _warn(f"skipping {source}: no eval/success in its history yet")
            continue
        runs.append(make_run(source, record, rows))
    if not fetched:
        raise InputError(f"no runs in {where}")
    return runs


def make_wandb_api():
    """`wandb.Api()` (needs network and a wandb login); raises `InputError` when that fails."""
    try:
        import wandb

        return wandb.Api(timeout=30)
    except Exception as e:
        raise InputError(f"cannot reach wandb: {type(e).__name__}: {e}") from None


def _warn(message: str):
    print(f"warning: {message}", file=sys.stderr)


def _progress(items, total: int, what: str):
    from tqdm import tqdm

    return tqdm(items, total=total, desc=what, disable=total < 20, file=sys.stderr, leave=False)


# ------------------------------------------------------------------------------------------------ statistics


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
    """One group (label) in one panel (domain or task), on the panel's common steps `x`."""

    panel: str
    label: str
    method: str
    tasks: Tuple[str, ...]
    runs: List[Run]
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray


def _domain_key(domain: str) -> Tuple:
    return (DOMAIN_ORDER.index(domain) if domain in DOMAIN_ORDER else len(DOMAIN_ORDER), domain)


def _label_key(label: str) -> Tuple:
    method = label.split(" ")[0]
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), label != method, label)


def _task_key(task: str) -> Tuple:
    match = re.search(r"task(\d+)$", task)
    return (task.rsplit("-task", 1)[0], int(match[1]) if match else 0, task)


def panel_of(run: Run, per_task: bool) -> str:
    return run.task if per_task else run.domain


def sorted_panels(runs: Sequence[Run], per_task: bool) -> List[str]:
    domain_of_panel = {panel_of(r, per_task): r.domain for r in runs}
    return sorted(domain_of_panel, key=lambda p: (_domain_key(domain_of_panel[p]), _task_key(p)))


def compute_curves(
    runs: Sequence[Run], per_task: bool, aggregate: str, reps: int, seed: int, online_offset: int
) -> List[Curve]:
    """One `Curve` per (panel, label), every curve of a panel on the union of the panel's steps."""
    curves = []
    jobs = []
    for panel in sorted_panels(runs, per_task):
        in_panel = [r for r in runs if panel_of(r, per_task) == panel]
        x = np.unique(np.concatenate([r.x(online_offset) for r in in_panel]))
        for label in sorted({r.label for r in in_panel}, key=_label_key):
            jobs.append((panel, label, x, [r for r in in_panel if r.label == label]))
    for panel, label, x, group in _progress(jobs, len(jobs), "bootstrap"):
        tasks = tuple(sorted({r.task for r in group}, key=_task_key))
        matrices = []
        for task in tasks:
            task_runs = sorted((r for r in group if r.task == task), key=lambda r: r.seed)
            seeds = [r.seed for r in task_runs]
            if len(set(seeds)) < len(seeds):
                _warn(f"{label} on {task}: more than one run with the same seed ({seeds}); each counts as a run")
            matrix = np.full((len(task_runs), len(x)), np.nan)
            for i, r in enumerate(task_runs):
                matrix[i, np.searchsorted(x, r.x(online_offset))] = r.success
            matrices.append(matrix)
        mean, low, high, count = bootstrap_curve(matrices, aggregate, reps, seed)
        curves.append(Curve(panel, label, group[0].method, tasks, group, x, mean, low, high, count))
    return curves


# ------------------------------------------------------------------------------------------------ paper


@dataclasses.dataclass
class PaperCurve:
    """A released curve (x in millions of steps); `low`/`high` are `None` for a mean of curves."""

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
    return curves


def _paper_tasks_of(paper: Dict, domain: str, method: str) -> List[str]:
    prefix = f"{domain}-play-task"
    return sorted((t for kind, t, m in paper if kind == "task" and m == method and t.startswith(prefix)), key=_task_key)


def paper_curve(paper: Dict, method: str, panel: str, tasks: Sequence[str], per_task: bool) -> Optional[PaperCurve]:
    """The paper's curve of `method` for a panel: the task's curve, the domain's aggregate when the
    runs cover all of its tasks, else the mean of the paper's curves of the tasks covered (no CI)."""
    if per_task:
        return paper.get(("task", panel, method))
    if ("agg", panel, method) in paper and list(tasks) == _paper_tasks_of(paper, panel, method):
        return paper[("agg", panel, method)]
    parts = [paper.get(("task", t, method)) for t in tasks]
    if not parts or any(p is None for p in parts):
        return None
    numbers = ", ".join(str(_task_key(t)[1]) for t in tasks)
    if len(parts) == 1:
        return parts[0] if tasks[0] == panel else dataclasses.replace(parts[0], note=f"task {numbers} only")
    if any(len(p.x) != len(parts[0].x) or np.any(p.x != parts[0].x) for p in parts):
        return None
    return PaperCurve(parts[0].x, np.mean([p.mean for p in parts], axis=0), None, None, f"mean of tasks {numbers}")


# ------------------------------------------------------------------------------------------------ figure


def panel_grid(num_panels: int, per_task: bool) -> Tuple[int, int]:
    """`(rows, columns)` of panels: up to 3 per row, 5 with `--per_task`."""
    ncols = min(num_panels, 5 if per_task else 3)
    return math.ceil(num_panels / ncols), ncols


def figure_size(num_panels: int, legend_rows: int, per_task: bool) -> Tuple[float, float]:
    """Figure size in inches: 3.4 x 2.7 per panel plus 0.2 per legend row."""
    nrows, ncols = panel_grid(num_panels, per_task)
    return 3.4 * ncols + 0.3, 2.7 * nrows + 0.2 * legend_rows + 0.45


def legend_columns(num_panels: int, per_task: bool) -> int:
    """Legend columns that fit the figure's width (about 2.3 inches each)."""
    return max(1, int(figure_size(num_panels, 0, per_task)[0] / 2.3))


def _styles(curves: Sequence[Curve]) -> Dict[str, Tuple[str, str]]:
    """(colour, marker) per label: a paper method's own, the next free one for a variant."""
    styles, used = {}, set()
    labels = sorted({c.label for c in curves}, key=_label_key)
    for label in labels:
        if label == label.split(" ")[0] and label in METHOD_STYLES:
            styles[label] = METHOD_STYLES[label]
            used.add(styles[label])
    spare = [s for s in EXTRA_STYLES + list(METHOD_STYLES.values()) if s not in used]
    for label in labels:
        if label not in styles:
            method = label.split(" ")[0]
            own = METHOD_STYLES.get(method)
            styles[label] = own if own and own not in used else (spare.pop(0) if spare else ("#000000", "."))
            used.add(styles[label])
    return styles


def draw_figure(
    curves: Sequence[Curve],
    paper: Dict,
    per_task: bool,
    online_offset: int,
    aggregate: str,
    out_dir: str,
) -> Tuple[List[str], Tuple[int, int]]:
    """Write `curves.png` and `curves.pdf`; return their paths and the PNG size in pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    panels = list(dict.fromkeys(c.panel for c in curves))
    styles = _styles(curves)
    paper_methods = sorted(
        {c.method for c in curves if paper and _panel_paper(curves, paper, c.panel, c.method, per_task)},
        key=_label_key,
    )
    nrows, ncols = panel_grid(len(panels), per_task)
    max_columns = legend_columns(len(panels), per_task)
    legend, columns = _legend_entries(sorted(styles, key=_label_key), paper_methods, styles, max_columns)
    width, height = figure_size(len(panels), math.ceil(len(legend) / columns), per_task)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", squeeze=False)
    stat = "IQM" if aggregate == "iqm" else "Success rate"
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.axis("off")
            continue
        panel = panels[index]
        in_panel = [c for c in curves if c.panel == panel]
        boundaries = set()
        for c in in_panel:
            color, marker = styles[c.label]
            xm = c.x / 1e6
            isolated = _isolated(c.mean)
            every = max(1, len(xm) // 12) if len(xm) > 25 else 1
            marked = sorted(set(range(0, len(xm), every)) | set(isolated))
            ax.fill_between(xm, c.low, c.high, color=color, alpha=0.18, linewidth=0)
            ax.vlines(xm[isolated], c.low[isolated], c.high[isolated], color=color, alpha=0.4, linewidth=2)
            ax.plot(xm, c.mean, color=color, marker=marker, markersize=4, markevery=marked, linewidth=1.6)
            for r in c.runs:
                if r.driver == "main" and r.offline_steps > 0 and r.online_steps > 0:
                    boundaries.add(r.offline_steps)
                elif r.driver == "main_online" and online_offset > 0:
                    boundaries.add(online_offset)
        for method in paper_methods:
            curve = _panel_paper(curves, paper, panel, method, per_task)
            if curve is None:
                continue
            color, marker = _paper_style(method, styles)
            if curve.low is not None:
                ax.fill_between(curve.x, curve.low, curve.high, color=color, alpha=0.07, linewidth=0)
            ax.plot(curve.x, curve.mean, color=color, linestyle="--", linewidth=1.1, marker=marker, markersize=3.5)
            ax.lines[-1].set_markerfacecolor("white")
            boundaries.add(PAPER_OFFLINE_STEPS)
        transform = blended_transform_factory(ax.transData, ax.transAxes)
        for b in sorted(boundaries):
            ax.axvline(b / 1e6, color="0.35", linestyle=":", linewidth=1.0)
            if b == max(boundaries):
                box = {"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 0.3}
                for text, align in (("offline ", "right"), (" online", "left")):
                    ax.text(
                        b / 1e6, 0.98, text, ha=align, va="top", fontsize=7, color="0.35", transform=transform, bbox=box
                    )
        tasks = sorted({t for c in in_panel for t in c.tasks})
        title = panel if per_task else f"{panel} ({len(tasks)} task{'s' if len(tasks) != 1 else ''})"
        ax.set_title(title, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(left=0)
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.tick_params(labelsize=8)
        if index % ncols == 0:
            ax.set_ylabel(stat, fontsize=9)
        if index // ncols == nrows - 1 or index + ncols >= len(panels):
            ax.set_xlabel("Steps (millions): offline, then online", fontsize=8)
    handles = [
        Line2D(
            [],
            [],
            color=color,
            marker=marker,
            markersize=4,
            linestyle="--" if dashed else "-",
            markerfacecolor="white" if dashed else color,
            linewidth=1.1 if dashed else 1.6,
        )
        for _, (color, marker), dashed in legend
    ]
    for handle, (name, _, _) in zip(handles, legend, strict=True):
        handle.set_visible(bool(name))
    fig.legend(
        handles,
        [name for name, _, _ in legend],
        loc="outside lower center",
        ncol=columns,
        fontsize=8,
        frameon=False,
    )
    paths = [os.path.join(out_dir, "curves.png"), os.path.join(out_dir, "curves.pdf")]
    fig.savefig(paths[0], dpi=DPI)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths, (round(width * DPI), round(height * DPI))


def _isolated(values: np.ndarray) -> List[int]:
    """Indices of finite values whose neighbours are missing: no line reaches them, so they get a
    marker and a vertical CI bar of their own."""
    finite = np.isfinite(values)
    left = np.concatenate([[False], finite[:-1]])
    right = np.concatenate([finite[1:], [False]])
    return [int(i) for i in np.flatnonzero(finite & ~left & ~right)]


def _legend_entries(labels: Sequence[str], paper_methods: Sequence[str], styles: Dict, max_columns: int):
    """Legend entries `(name, style, dashed)` and the number of columns: each run label above the
    paper's curve of its method (blank entries where there is none), column by column."""
    pairs = []
    for label in labels:
        method = label.split(" ")[0]
        placed = any(p[1] and p[1][0] == f"{method} (paper)" for p in pairs)
        paper = None
        if method in paper_methods and not placed:
            paper = (f"{method} (paper)", _paper_style(method, styles), True)
        pairs.append(((label, styles[label], False), paper))
    blank = ("", ("#ffffff", ""), False)
    if not any(paper for _, paper in pairs):
        return [ours for ours, _ in pairs], min(max(len(pairs), 1), max_columns)
    per_column = math.ceil(len(pairs) / min(len(pairs), max_columns))
    columns = math.ceil(len(pairs) / per_column)
    pairs += [(blank, None)] * (per_column * columns - len(pairs))
    entries = []
    for ours, paper in pairs:
        entries += [ours, paper or blank]
    while entries and entries[-1] is blank and columns == 1:
        entries.pop()
    return entries, columns


def _paper_style(method: str, styles: Dict) -> Tuple[str, str]:
    if method in styles:
        return styles[method]
    own = next((s for label, s in sorted(styles.items()) if label.split(" ")[0] == method), None)
    return own or METHOD_STYLES.get(method, ("#000000", "."))


def _panel_paper(curves, paper, panel, method, per_task) -> Optional[PaperCurve]:
    tasks = sorted({t for c in curves if c.panel == panel and c.method == method for t in c.tasks}, key=_task_key)
    return paper_curve(paper, method, panel, tasks, per_task) if tasks else None


# ------------------------------------------------------------------------------------------------ table


def _fmt(point, low=None, high=None) -> str:
    if point is None or not math.isfinite(point):
        return "—"
    text = f"{point:.3f}"
    if low is not None and high is not None:
        text += f" [{low:.3f}, {high:.3f}]"
    return text


def _phase_cell(group: Sequence[Run], tasks: Sequence[str], phase: str, aggregate: str, reps: int, seed: int):
    """`(cell text, steps)` for the end of `phase` ('offline' or 'training') of one group."""
    values, steps = [], set()
    for task in tasks:
        task_values = []
        for r in group:
            if r.task != task:
                continue
            step = r.end_of_offline if phase == "offline" else r.end_of_training
            if step is None:
                return "— (online only)", set()
            steps.add(step)
            value = r.value_at(step)
            if math.isfinite(value):
                task_values.append(value)
        if not task_values:
            return "— (not reached)", steps
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
    """`table.md`: per method and domain, then per method and task, the success at the end of the
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
            f"## Per method and {kind}",
            "",
            f"| method | {kind} |{tasks_header} runs | data | end of offline: step | ours | paper "
            "| end of training: step | ours | paper |",
            "|" + " --- |" * (10 if per_task else 11),
        ]
        for panel in sorted_panels(runs, per_task):
            in_panel = [r for r in runs if panel_of(r, per_task) == panel]
            for label in sorted({r.label for r in in_panel}, key=_label_key):
                group = [r for r in in_panel if r.label == label]
                method = group[0].method
                tasks = sorted({r.task for r in group}, key=_task_key)
                curve = paper_curve(paper, method, panel, tasks, per_task) if paper else None
                offline, offline_steps = _phase_cell(group, tasks, "offline", aggregate, reps, seed)
                end, end_steps = _phase_cell(group, tasks, "training", aggregate, reps, seed)
                online_only = group[0].driver == "main_online"
                x_end = {s + (online_offset if online_only else 0) for s in end_steps}
                paper_offline = "—" if online_only else _paper_cell(curve, method, offline_steps, 1.0)
                paper_end = _paper_cell(curve, method, x_end, 2.0)
                numbers = ", ".join(str(_task_key(t)[1]) if re.search(r"-task\d+$", t) else t for t in tasks)
                task_cell = "" if per_task else f" {numbers} |"
                lines.append(
                    f"| {label} | {panel} |{task_cell} {len(group)} | {_data_text(group)} | "
                    f"{_steps_text(offline_steps)} | {offline} | {paper_offline} | "
                    f"{_steps_text(end_steps)} | {end} | {paper_end} |"
                )
    return "\n".join(lines) + "\n"


def write_curves_csv(path: str, curves: Sequence[Curve]):
    """Every plotted point: panel, label, step, steps in millions, aggregate, CI, runs used."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["panel", "label", "method", "tasks", "step", "steps_millions", "value", "ci_low", "ci_high"])
        for c in curves:
            for i, x in enumerate(c.x):
                numbers = [c.mean[i], c.low[i], c.high[i]]
                writer.writerow(
                    [c.panel, c.label, c.method, " ".join(c.tasks), int(x), f"{x / 1e6:g}"]
                    + ["" if not math.isfinite(v) else f"{v:.6g}" for v in numbers]
                )


# ------------------------------------------------------------------------------------------------ command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _offset_arg(value: str):
    if value == "auto":
        return value
    try:
        offset = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number of steps, got {value!r}") from None
    if offset < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {offset}")
    return offset


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python scripts/plot_curves.py",
        description="Plot success rate against steps for runs of main.py / main_online.py, grouped by method, "
        "with 95% stratified bootstrap confidence intervals and the paper's curves for comparison.",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR_OR_GLOB",
        help="Run directories (with flags.json and eval.csv), directories to search recursively for them "
        "(e.g. a sweep's group directory exp/GROUP), or globs (quoted or not).",
    )
    parser.add_argument(
        "--out_dir",
        default="plots",
        help="Directory for curves.png, curves.pdf, table.md, curves.csv (default: %(default)s).",
    )
    parser.add_argument(
        "--wandb_project",
        help="Also read the runs of this wandb project (ENTITY/PROJECT, or PROJECT for your default entity) "
        "through wandb's public API; needs network and a wandb login.",
    )
    parser.add_argument("--wandb_group", help="With --wandb_project: only the runs of this group (--run_group).")
    parser.add_argument(
        "--aggregate",
        choices=("mean", "iqm"),
        default="mean",
        help="mean: mean over seeds, per domain the mean over tasks of that (the paper); "
        "iqm: interquartile mean over seeds, per domain over all runs and tasks.",
    )
    parser.add_argument("--per_task", action="store_true", help="One panel per task instead of one per domain.")
    parser.add_argument("--no_paper", action="store_true", help="Do not overlay the paper's released curves.")
    parser.add_argument(
        "--paper_dir",
        default=os.path.join(ROOT, "data", "paper"),
        help="Directory of the paper's curves (ogbench-agg.csv, ogbench-individual.csv, robomimic-individual.csv).",
    )
    parser.add_argument(
        "--reps",
        type=_positive,
        default=5000,
        help="Bootstrap resamples per confidence interval (default: %(default)s, as the paper).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap resampling (default: %(default)s).")
    parser.add_argument(
        "--online_offset",
        type=_offset_arg,
        default="auto",
        help="Steps added to main_online.py runs (online only) to place them on the paper's axis; auto: the "
        "offline steps of the main.py runs plotted, or 1000000 (where the paper puts online-only methods) "
        "when there are none.",
    )
    return parser


def _online_offset(runs: Sequence[Run], requested) -> int:
    if requested != "auto":
        return requested
    offline = sorted({r.offline_steps for r in runs if r.driver == "main"})
    if not offline:
        return PAPER_OFFLINE_STEPS
    if len(offline) > 1 and any(r.driver == "main_online" for r in runs):
        _warn(f"main.py runs with different --offline_steps {offline}: online-only runs start at {offline[-1]}")
    return offline[-1]


def run(args, wandb_api=None) -> int:
    """The command: read, aggregate, plot, write; raises `InputError` for bad inputs."""
    if not args.runs and not args.wandb_project:
        raise InputError("no runs given: pass run directories, a sweep directory or globs, or --wandb_project")
    if args.wandb_group and not args.wandb_project:
        raise InputError("--wandb_group needs --wandb_project")
    runs: List[Run] = []
    if args.runs:
        directories = find_run_dirs(args.runs)
        for path in _progress(directories, len(directories), "reading runs"):
            loaded = read_run_dir(path)
            if loaded is not None:
                runs.append(loaded)
    if args.wandb_project:
        api = wandb_api if wandb_api is not None else make_wandb_api()
        runs += read_wandb_runs(api, args.wandb_project, args.wandb_group)
    if not runs:
        raise InputError("none of the runs found has an evaluation yet (eval.csv rows with a success value)")
    paper = {} if args.no_paper else load_paper(args.paper_dir)
    offset = _online_offset(runs, args.online_offset)
    for panel in sorted_panels(runs, False):
        for label in sorted({r.label for r in runs if r.domain == panel}, key=_label_key):
            group = [r for r in runs if r.domain == panel and r.label == label]
            print(f"{label} on {panel}: {len({r.task for r in group})} task(s), {len(group)} run(s)")
    curves = compute_curves(runs, args.per_task, args.aggregate, args.reps, args.seed, offset)
    os.makedirs(args.out_dir, exist_ok=True)
    paths, (width, height) = draw_figure(curves, paper, args.per_task, offset, args.aggregate, args.out_dir)
    inputs = " ".join(args.runs) + (f" wandb:{args.wandb_project}" if args.wandb_project else "")
    if args.wandb_group:
        inputs += f" (group {args.wandb_group})"
    table_path = os.path.join(args.out_dir, "table.md")
    with open(table_path, "w") as f:
        f.write(build_table(runs, paper, args.aggregate, args.reps, args.seed, offset, inputs.strip()))
    csv_path = os.path.join(args.out_dir, "curves.csv")
    write_curves_csv(csv_path, curves)
    longest = max(int(r.x(offset).max()) for r in runs)
    if paper and longest < 0.2 * 2 * PAPER_OFFLINE_STEPS:
        print(f"note: the runs reach step {longest:,}; the paper's curves span 2M steps (--no_paper to zoom in)")
    print(f"wrote {paths[0]} ({width}x{height} px), {paths[1]}, {table_path}, {csv_path}")
    return 0


def main(argv: Optional[Sequence[str]] = None, wandb_api=None) -> int:
    """Entry point; `wandb_api` replaces `wandb.Api()` (tests pass a fake one)."""
    args = make_parser().parse_args(argv)
    try:
        return run(args, wandb_api)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
