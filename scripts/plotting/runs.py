"""The runs of scripts/plot_curves.py: run directories, `eval.csv`, `flags.json` and wandb; labels and order.

What is read, how runs are labelled, what is refused and what is warned about: the docstring of
scripts/plot_curves.py ("Inputs", "Groups", "Bad inputs"), told once there.
"""

import csv
import dataclasses
import glob
import json
import math
import os
import re
import sys
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

import agents
import envs
from runner import methods

# The registry's paper methods, in its order (each agent's methods in the order of its paper's legends), each
# followed by its partly executed variants (DQC's "DQC-naive").
METHOD_ORDER = tuple(
    label
    for spec in agents.REGISTRY.values()
    for entry in spec.methods.values()
    for label in (entry.label, *entry.cut_labels.values())
)
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
# A warning lists at most this many steps of one run, then how many there are in all.
MAX_LISTED_STEPS = 20


class InputError(Exception):
    """A bad input: reported as one `error:` line with exit status 2."""


def warn(message: str):
    print(f"warning: {message}", file=sys.stderr)


def progress(items, total: int, what: str):
    """`items` with a progress bar on stderr when there are 20 or more."""
    from tqdm import tqdm

    return tqdm(items, total=total, desc=what, disable=total < 20, file=sys.stderr, leave=False)


# ------------------------------------------------------------------------------------------------ labels


def _format(value) -> str:
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, (tuple, list)) and value and len(set(value)) == 1:
        return f"{value[0]}x{len(value)}"  # (256, 256, 256) -> 256x3
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# Keys filled in from the data or derived by create(): never part of a label.
DERIVED_KEYS = ("ob_dims", "action_dim", "target_entropy", "agent_name")


def describe(
    config: Mapping, paper_values: Optional[Mapping] = None, defaults: Optional[Mapping] = None, shown: Sequence = ()
):
    """`(method label, run label)` of a resolved agent config (a run's `flags.json` `agent`).

    A config of a paper method (`method_of`, with every key known to the agent) is labelled by the method,
    e.g. `('QC', 'QC h=3 N=16')`: plus each setting of the method (its definition, then `paper_values`,
    the paper's `{setting: value}` for the run's domain; `None` counts as different) the run differs
    in, plus every other key that differs from the agent's `get_config()`. Any other config (an
    unknown agent, unknown keys, a combination no method has) is labelled from its own agent name and
    the keys that differ from its defaults (`defaults`, else the registered agent's `get_config()`),
    e.g. `('toy', 'toy toy_weight=0.5')`: never with a paper method's label; keys in `shown` (those the
    runs plotted beside it vary in) appear whatever their value, e.g. `'toy toy_weight=0.5'` beside
    `'toy toy_weight=1'` although 0.5 is the default.
    """
    name = str(config.get("agent_name"))
    spec = agents.REGISTRY.get(name)
    if defaults is None and spec is not None:
        defaults = spec.get_config().to_dict()
    defaults = dict(defaults or {})
    known = spec is not None and set(config) <= set(spec.get_config().keys())
    method = spec.method_of(config) if known else None
    if method is not None and method in spec.methods:
        entry = spec.methods[method]
        parts, shown = [entry.label], set()
        for setting, paper in {**entry.settings, **(paper_values or {})}.items():
            if not setting.startswith("agent.") and setting != "horizon_length":
                continue  # a driver flag such as --sparse: not an agent setting
            key = setting[len("agent.") :] if setting.startswith("agent.") else setting
            shown.add(key)
            if key in config and (paper is None or not _same(config[key], paper)):
                parts.append(f"{spec.short_names.get(setting, key)}={_format(config[key])}")
        extra = [k for k in sorted(config) if k not in shown and k not in DERIVED_KEYS]
        parts += [f"{k}={_format(config[k])}" for k in extra if k in defaults and not _same(config[k], defaults[k])]
        return entry.label, " ".join(parts)
    parts = [name]
    for key in sorted(config):
        if key in DERIVED_KEYS:
            continue
        if key in shown or key not in defaults or not _same(config[key], defaults[key]):
            parts.append(f"{key}={_format(config[key])}")
    return name, " ".join(parts)


def _paper_method(agent: Dict) -> Optional[str]:
    """The `--method` name of the paper method a resolved agent config is, by its registry entry; None for
    an unknown agent, a config with keys the registered agent lacks, or a combination no method has."""
    spec = agents.REGISTRY.get(agent.get("agent_name"))
    if spec is None or not set(agent) <= set(spec.get_config().keys()):
        return None
    method = spec.method_of(agent)
    return method if method in spec.methods else None


def label_of(record: Dict, shown: Sequence[str] = ()) -> Tuple[Optional[str], str]:
    """`(paper method, label)` of a run from its `flags.json` record (plot_curves.py, "Groups").

    `('QC', 'QC h=3 N=16')` for a run of a paper method (`describe`);
    `(None, 'toy toy_weight=0.5')` for any other run, which also names the config keys in `shown`
    (`show_varying_keys`). A label that would start with a paper method's name without being that method
    gets ` (not the paper's QC)`.

    Raises:
        KeyError, TypeError, ValueError: a record without `agent` or `flags.env_name`, or an agent config
            its registered agent cannot read (`method_of`); `make_run` reports these as `InputError`.
    """
    agent, env_name = record["agent"], record["flags"]["env_name"]
    method = _paper_method(agent)
    paper = methods.paper_values(method, env_name) if method else {}
    method_label, label = describe(agent, paper, record.get("agent_defaults"), shown)
    first = label.split(" ")[0]
    if method is None and first in METHOD_ORDER:
        label += f" (not the paper's {first})"
    if data_source(record) == "generated":
        label += " (generated data)"
    return (method_label if method else None), label


def label_note(record: Dict) -> Optional[str]:
    """Why a run's label may surprise (plot_curves.py, "Groups"), or None."""
    agent = record["agent"]
    name = agent.get("agent_name")
    spec = agents.REGISTRY.get(name)
    if spec is None and not isinstance(record.get("agent_defaults"), dict):
        return (
            f"agent {name!r} is not in the registry and flags.json records no agent_defaults: "
            "the label lists every key of its config"
        )
    if spec is not None:
        extra = sorted(set(agent) - set(spec.get_config().keys()))
        if extra:
            return (
                f"the config has keys that the registered agent {name!r} lacks ({', '.join(extra)}): "
                "labelled from its own keys, not as a paper method"
            )
    return None


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


def domain_and_task(env: Mapping, task_id: Optional[int]) -> Tuple[str, str]:
    """`(domain, task)` names of a run's panels, from its `env` block (`envs.record_of`). A family the papers ran
    (`methods.PAPER_FAMILIES`): as the paper's files spell them, its `paper_domain`, `paper_task`: `('cube-double',
    'cube-double-play-task2')`; robomimic multi-human `('lift', 'lift')`; data the paper did not use keeps its type:
    `('cube-double-noisy', 'cube-double-noisy-task2')`, `('lift-ph', 'lift-ph')`; a default-task run is named by
    the task it ran (`task_id`, from its record). Any other family: its own `paper_domain` and `short`
    (`('pendulum', 'pendulum')`). A name no family here knows is its own domain and task."""
    if "paper_domain" not in env:  # a name no family here knows
        return env["name"], env["name"]
    if env["family"] not in methods.PAPER_FAMILIES:
        return env["paper_domain"], env["short"]
    if task_id is not None and env["task"] is None and not env["goal_conditioned"]:
        return env["paper_domain"], f"{env['domain']}-{env['dataset_type']}-task{task_id}"
    return env["paper_domain"], env["paper_task"]


# ------------------------------------------------------------------------------------------------ runs


@dataclasses.dataclass
class Run:
    """One run: what it is (from `flags.json`) and its evaluations.

    `steps`: `(E,)` int64, increasing, as logged; `success`: `(E,)` float64 in [0, 1], NaN where the
    run logged no success value at that step. `method`: the paper method's label, None for any other
    run. `note`: why the label may surprise (`label_note`), or None.
    """

    source: str
    method: Optional[str]
    label: str
    driver: str  # 'main' (offline-to-online) or 'main_online' (online only)
    env_name: str
    family: str
    domain: str
    task: str
    seed: int
    offline_steps: int
    online_steps: int
    data: str
    steps: np.ndarray
    success: np.ndarray
    note: Optional[str] = None
    record: Optional[Dict] = dataclasses.field(default=None, repr=False)  # its flags.json
    goal_conditioned: bool = False  # its env block's: the env is its own task (the paper's all-goals result)

    def x(self, online_offset: int) -> np.ndarray:
        """Steps on the paper's axis: `main_online.py` runs start at `online_offset`."""
        return self.steps + (online_offset if self.driver == "main_online" else 0)

    def value_at(self, step: int) -> float:
        """The success at logged step `step`; NaN where the run has none."""
        hit = np.flatnonzero(self.steps == step)
        return float(self.success[hit[0]]) if hit.size else math.nan

    @property
    def paper_family(self) -> bool:
        """The run's env is of a family the papers ran (`methods.PAPER_FAMILIES`): only then is a paper curve
        drawn beside it."""
        return self.family in methods.PAPER_FAMILIES

    @property
    def end_of_offline(self) -> Optional[int]:
        """The logged step of the last offline evaluation; `None` for an online-only run."""
        return self.offline_steps if self.driver == "main" and self.offline_steps > 0 else None

    @property
    def end_of_training(self) -> int:
        return self.offline_steps + self.online_steps if self.driver == "main" else self.online_steps


def _steps_text(steps: Sequence[int]) -> str:
    listed = ", ".join(str(s) for s in steps[:MAX_LISTED_STEPS])
    return listed if len(steps) <= MAX_LISTED_STEPS else f"{listed}, ... ({len(steps)} steps in all)"


def _count(value, name: str, low: int = 0) -> int:
    """`value` as a whole number >= `low` (ints, and floats or strings that hold one); `ValueError` naming `name`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number.is_integer() or number < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(number)


def _check_record(record: Dict):
    """`ValueError` naming the first entry of a `flags.json` record that the plot cannot use."""
    flags, agent = record.get("flags"), record.get("agent")
    if not isinstance(flags, dict):
        raise ValueError("no 'flags' record (the run's flags)" if flags is None else "'flags' is not a JSON object")
    if not isinstance(agent, dict):
        raise ValueError("no 'agent' record (the agent's config)" if agent is None else "'agent' is not a JSON object")
    if not isinstance(flags.get("env_name"), str):
        raise ValueError(f"flags.env_name must be an env name, got {flags.get('env_name')!r}")
    if not isinstance(agent.get("agent_name"), str):
        raise ValueError(f"agent.agent_name must be the agent's name, got {agent.get('agent_name')!r}")
    if record.get("agent_defaults") is not None and not isinstance(record["agent_defaults"], dict):
        raise ValueError("'agent_defaults' is not a JSON object")
    _count(flags.get("seed"), "flags.seed")
    for key in ("offline_steps", "online_steps"):
        if flags.get(key) is not None:
            _count(flags[key], f"flags.{key}")
    if record.get("task_id") is not None:
        _count(record["task_id"], "task_id", 1)


def _driver(source: str, record: Dict) -> str:
    """The driver that ran the run (`flags.json` `driver`; else the default driver of its registered agent)."""
    spec = agents.REGISTRY.get(record["agent"]["agent_name"])
    driver = record.get("driver") or (spec.drivers[0] if spec is not None else None)
    if driver in methods.DRIVER_FILES:
        return driver
    known = " or ".join(methods.DRIVER_FILES)
    what = f"driver {driver!r} is not {known}" if driver else "flags.json records no driver"
    warn(f"{source}: {what}: its steps are placed as logged (as main.py's)")
    return "main"


def make_run(source: str, config_file: str, record: Dict, rows: Iterable[Tuple[int, float]]) -> Run:
    """A `Run` from a `flags.json` record and its `(step, success)` rows (NaN: no success value there).

    `source` names the run (its directory or `wandb:PROJECT/ID`), `config_file` where the record came
    from. Warns, naming the run, about every step without a success value and about unknown drivers.

    Raises:
        InputError: a record the plot cannot use (naming `config_file` and the entry), or steps that
            repeat or go backwards (naming `source`).
    """
    try:
        _check_record(record)
        method, label = label_of(record)
        note = label_note(record)
    except KeyError as e:
        name = record["agent"]["agent_name"]
        raise InputError(
            f"{config_file}: the agent config has no {e.args[0]!r}, which agent {name!r} reads to tell its paper method"
        ) from None
    except (TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{config_file}: malformed run config: {e}") from None
    flags = record["flags"]
    rows = list(rows)
    check_steps(source, [step for step, _ in rows])
    missing = [step for step, value in rows if math.isnan(value)]
    if missing:
        warn(
            f"{source}: no success value (NaN or empty) at step(s) {_steps_text(missing)}: left out there "
            "(table.md and curves.csv count the runs behind each value)"
        )
    task_id = record.get("task_id")
    try:
        env = envs.record_of(record)
    except envs.UnknownEnvName:  # a name no family here knows (a family added elsewhere): its own domain and task
        env = {"family": "unknown", "name": flags["env_name"]}
    except ValueError as e:  # a name of a known family with a bad part
        raise InputError(f"{config_file}: malformed run config: {e}") from None
    domain, task = domain_and_task(env, None if task_id is None else _count(task_id, "task_id", 1))
    return Run(
        source=source,
        method=method,
        label=label,
        driver=_driver(source, record),
        env_name=flags["env_name"],
        family=env["family"],
        domain=domain,
        task=task,
        seed=_count(flags["seed"], "flags.seed"),
        offline_steps=int(flags.get("offline_steps") or 0),
        online_steps=int(flags.get("online_steps") or 0),
        data=data_source(record),
        steps=np.array([step for step, _ in rows], dtype=np.int64),
        success=np.array([value for _, value in rows], dtype=np.float64),
        note=note,
        record=record,
        goal_conditioned=bool(env.get("goal_conditioned", False)),
    )


def check_steps(where: str, steps: Sequence[int], lines: Optional[Sequence[int]] = None):
    """`InputError` naming `where` (and the line, given `lines`) where a step repeats or goes backwards."""
    for i in range(1, len(steps)):
        if steps[i] <= steps[i - 1]:
            at = f"{where}:{lines[i]}" if lines is not None else where
            how = "repeats" if steps[i] == steps[i - 1] else f"goes backwards after step {steps[i - 1]}"
            raise InputError(f"{at}: step {steps[i]} {how}; steps must increase (two processes writing the same run?)")


def parse_value(where: str, step, success) -> Tuple[int, float]:
    """`(step, success)` of one evaluation; success NaN where empty or NaN.

    Raises:
        InputError: naming `where`: a step that is no whole number >= 0, a success that is no number
            or outside [0, 1].
    """
    try:
        step = _count(step, "step")
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None
    if success is None or (isinstance(success, str) and not success.strip()):
        return step, math.nan
    try:
        value = float(success)
    except (TypeError, ValueError):
        raise InputError(f"{where}: success {success!r} at step {step} is not a number") from None
    if not math.isnan(value) and not 0.0 <= value <= 1.0:
        raise InputError(f"{where}: success {success!r} at step {step} is not a success rate in [0, 1]")
    return step, value


# ------------------------------------------------------------------------------------------------ reading


def find_run_dirs(arguments: Sequence[str]) -> List[str]:
    """Run directories (with a `flags.json`) named by, or found under, each argument or glob.

    Symbolic links are followed (a folder of links to runs works; a link loop is visited once); a run
    found through two arguments (overlapping globs, a sweep and one of its runs) counts once. Warns
    about an empty directory found while searching (a run that never wrote its `flags.json`) and a
    broken link found or matched.

    Raises:
        InputError: an argument that matches nothing or finds no run directory, a broken link named
            directly, a directory with an `eval.csv` but no `flags.json`.
    """
    found: Dict[str, str] = {}  # real path -> the path as first found
    for argument in arguments:
        if any(c in argument for c in "*?["):
            paths = sorted(glob.glob(argument, recursive=True))
            for path in [p for p in paths if not os.path.exists(p)]:
                warn(f"skipping {path}: a broken symbolic link")
            paths = [p for p in paths if os.path.exists(p)]
        else:
            paths = [argument]
            if os.path.islink(argument) and not os.path.exists(argument):
                raise InputError(f"{argument}: a broken symbolic link (to {os.readlink(argument)})")
        if not paths or not all(os.path.exists(p) for p in paths):
            raise InputError(f"{argument}: no such file or directory")
        hits = 0
        for path in paths:
            if os.path.basename(path) == "flags.json":
                path = os.path.dirname(path) or "."
            if not os.path.isdir(path):
                raise InputError(f"{path}: not a run directory (no flags.json) nor a directory to search")
            visited = set()
            for root, dirs, files in os.walk(path, followlinks=True):
                real = os.path.realpath(root)
                if real in visited:  # a link back up the tree
                    dirs[:] = []
                    continue
                visited.add(real)
                if "flags.json" in files:
                    found.setdefault(real, os.path.normpath(root))
                    hits += 1
                    dirs[:] = []  # a run directory holds no further runs
                    continue
                if "eval.csv" in files:
                    raise InputError(f"{os.path.join(root, 'eval.csv')}: no flags.json beside it (the run's config)")
                for name in files:  # a link to a run that is gone: a seed would drop out of the mean unseen
                    link = os.path.join(root, name)
                    if os.path.islink(link) and not os.path.exists(link):
                        warn(f"skipping {os.path.normpath(link)}: a broken symbolic link")
                if not dirs and not files and root != path:
                    warn(f"skipping {os.path.normpath(root)}: an empty directory")
                dirs[:] = sorted(d for d in dirs if d not in ("wandb", "checkpoints"))
        if hits == 0:
            raise InputError(f"{argument}: no run directory (a directory with a flags.json) in it")
    return list(found.values())


def read_csv_rows(path: str) -> Tuple[List[str], List[Tuple[int, Dict[str, str]]]]:
    """The header and `(line, row)` of every row of a CSV file; `([], [])` for an empty file.

    Raises:
        InputError: naming the file and line: an unreadable file, a row with more or fewer cells than the
            header (torn by a full disk or an editor: never read as an empty cell).
    """
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = []
            for line, row in enumerate(reader, start=2):
                missing = sum(value is None for key, value in row.items() if key is not None)
                if missing or None in row:
                    cells = len(reader.fieldnames) - missing + len(row.get(None) or ())
                    raise InputError(
                        f"{path}:{line}: a broken row: {cells} cells where the header has {len(reader.fieldnames)}"
                    )
                rows.append((line, row))
            return list(reader.fieldnames or []), rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: unreadable: {e}") from None


def read_eval_csv(path: str) -> List[Tuple[int, float]]:
    """`(step, success)` of every row of an `eval.csv`, NaN where the success cell is empty or NaN; `[]` for
    an empty file.

    Raises:
        InputError: naming the file (and line): an unreadable file or broken row (`read_csv_rows`), no
            `step` or `success` column, a value `parse_value` refuses, steps that repeat or go backwards.
    """
    fields, lines_rows = read_csv_rows(path)
    if not fields:
        return []  # an empty file: the run has not logged its first evaluation yet
    if "step" not in fields or "success" not in fields:
        raise InputError(f"{path}: unreadable eval.csv: no 'step' and 'success' columns (header: {fields})")
    rows = [parse_value(f"{path}:{line}", row["step"], row["success"]) for line, row in lines_rows]
    check_steps(path, [step for step, _ in rows], [line for line, _ in lines_rows])
    return rows


def read_run_dir(path: str) -> Optional[Run]:
    """The run in `path`, or `None` (with a warning) while it has no evaluation row yet.

    Raises:
        InputError: an unreadable or unusable `flags.json` or `eval.csv`, naming the file.
    """
    config_file = os.path.join(path, "flags.json")
    try:
        with open(config_file) as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{config_file}: unreadable: {e}") from None
    if not isinstance(record, dict):
        raise InputError(f"{config_file}: not a JSON object")
    eval_path = os.path.join(path, "eval.csv")
    if not os.path.exists(eval_path):
        warn(f"skipping {path}: no eval.csv (no evaluation yet)")
        return None
    rows = read_eval_csv(eval_path)
    if not rows:
        warn(f"skipping {path}: eval.csv has no evaluation row yet")
        return None
    return make_run(path, config_file, record, rows)


_CUT_RE = re.compile(r"^ac(\d+)/success$")


def cut_runs(run: Run, path: str) -> List[Run]:
    """The evaluations of `run` that executed only the first `n` actions of each chunk (`ac<n>/success`
    columns of its eval.csv, `--action_chunk_eval_sizes`), one `Run` each: labelled with the paper's name
    for them where its method has one (the DQC release's "DQC-naive h=25 h_a=5"), else `<label> first n`."""
    rows = [row for _, row in read_csv_rows(os.path.join(path, "eval.csv"))[1]]
    columns = {int(m[1]): c for c in (rows[0].keys() if rows else ()) if (m := _CUT_RE.match(c))}
    spec = agents.REGISTRY.get(run_agent_name(path))
    entry = None
    if spec is not None and run.method is not None:
        entry = next((m for m in spec.methods.values() if m.label == run.method), None)
    derived = []
    for n, column in sorted(columns.items()):
        values = [parse_value(f"{path}/eval.csv", row["step"], row[column])[1] for row in rows]
        paper = entry.cut_labels.get(n) if entry is not None else None
        label = paper if paper else f"{run.label} first {n}"
        derived.append(dataclasses.replace(run, method=paper, label=label, success=np.array(values, np.float64)))
    return derived


def run_agent_name(path: str) -> Optional[str]:
    with open(os.path.join(path, "flags.json")) as f:
        return json.load(f).get("agent", {}).get("agent_name")


def read_wandb_runs(api, project: str, group: Optional[str]) -> List[Run]:
    """The runs of a wandb project (and group) through the public API object `api`.

    `api` is `wandb.Api()` or anything with `runs(path, filters=...)` yielding objects with `id`,
    `config` (the run's `flags.json` record, which the drivers pass to `wandb.init`) and
    `scan_history(keys=[...])` (rows with `_step`, the environment step the drivers log at, and
    `eval/success`).

    Raises:
        InputError: wandb could not be read (no network, no login, no such project), or a run's config or
            history is unusable (as for run directories).
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
        rows = [parse_value(source, step, value) for step, value in rows]
        if not rows:
            warn(f"skipping {source}: no eval/success in its history yet")
            continue
        runs.append(make_run(source, f"{source} (its config)", record, rows))
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


def _comparable(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return tuple(_comparable(v) for v in value) if isinstance(value, (list, tuple)) else value


def show_varying_keys(runs: Sequence[Run]) -> List[Run]:
    """`runs`, where runs of one agent and no paper method differ in config keys, relabelled so that every
    one of them names those keys: a sweep's arms read `toy beta=0.5` and `toy beta=1` rather than `toy`
    (0.5 being the default) and `toy beta=1`."""
    by_agent: Dict[str, List[Run]] = {}
    for r in runs:
        if r.method is None and r.record is not None:
            by_agent.setdefault(r.record["agent"]["agent_name"], []).append(r)
    relabelled = {}
    for group in by_agent.values():
        configs = [r.record["agent"] for r in group]
        keys = sorted({k for c in configs for k in c} - set(DERIVED_KEYS))
        varying = [k for k in keys if len({repr(_comparable(c.get(k))) for c in configs}) > 1]
        for r in group if varying else ():
            relabelled[id(r)] = dataclasses.replace(r, label=label_of(r.record, varying)[1])
    return [relabelled.get(id(r), r) for r in runs]


def warn_about_labels(runs: Sequence[Run]):
    """One warning per label whose runs carry a `note`, naming the first run and how many there are."""
    by_label: Dict[Tuple[str, str], List[Run]] = {}
    for r in runs:
        if r.note:
            by_label.setdefault((r.label, r.note), []).append(r)
    for (label, note), group in by_label.items():
        others = f" and {len(group) - 1} other run(s)" if len(group) > 1 else ""
        warn(f"{group[0].source}{others}, labelled {label!r}: {note}")


# ------------------------------------------------------------------------------------------------ order


def label_key(method: Optional[str], label: str) -> Tuple:
    """Sort key of a group: the paper methods in the registry's order (each before its variants), then
    every other label alphabetically."""
    rank = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
    return (rank, label != method, label)


def sorted_labels(groups: Iterable) -> List[str]:
    """The labels of `groups` (anything with `label` and `method`, e.g. runs or curves), each once, in order."""
    method_of = {g.label: g.method for g in groups}
    return sorted(method_of, key=lambda label: label_key(method_of[label], label))


def task_key(task: str) -> Tuple:
    match = re.search(r"task(\d+)$", task)
    return (task.rsplit("-task", 1)[0], int(match[1]) if match else 0, task)


def _domain_key(domain: str) -> Tuple:
    return (DOMAIN_ORDER.index(domain) if domain in DOMAIN_ORDER else len(DOMAIN_ORDER), domain)


def check_panels(runs: Sequence[Run]):
    """`InputError` where runs of two families share a domain name (a family's `paper_domain` spelled like another
    family's): one panel and one curve would mix two benchmarks."""
    families: Dict[str, Dict[str, str]] = {}
    for run in runs:
        families.setdefault(run.domain, {}).setdefault(run.family, run.source)
    for domain, found in families.items():
        if len(found) > 1:
            named = " and ".join(f"{family} ({source})" for family, source in sorted(found.items()))
            raise InputError(
                f"the runs of the families {named} are all named {domain!r} (each family's EnvName.paper_domain): "
                "one panel would mix two benchmarks; plot them apart, or give the family its own paper_domain"
            )


def panel_of(run: Run, per_task: bool) -> str:
    return run.task if per_task else run.domain


def sorted_panels(runs: Sequence[Run], per_task: bool) -> List[str]:
    domain_of_panel = {panel_of(r, per_task): r.domain for r in runs}
    return sorted(domain_of_panel, key=lambda p: (_domain_key(domain_of_panel[p]), task_key(p)))
