"""Run states and `--resume` (docs/outputs.md, "Resume and preemption", tells the story).

A state is `<run_dir>/state/step_<global step, 12 digits>/` (`agent.msgpack`, `buffer/<field>.npy` online,
`state.json`, `SHA256SUMS`, and `COMPLETE` last), written into a temporary directory and renamed into place, so
a half-written state is never read. `SHA256SUMS` (the format of `sha256sum -c`) holds the sha256 of every other
file of the state; a reader checks them, so a state damaged after it was written (a flipped byte, an edited
array) is passed over for the one before it.
"""

import contextlib
import csv
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import sys
from typing import Dict, List, Optional

import numpy as np

from envs.provenance import sha256_file
from log_utils import WANDB_PREFIXES
from utils.files import atomic_write, naming
from utils.flax_utils import restore_agent, save_agent

FORMAT_VERSION = 1  # of the run-state folder; a reader refuses any other (`StateFormatError`)
EXIT_PREEMPTED = 3  # the driver wrote its state and stopped on a signal: rerun with --resume to continue
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
CHECKSUMS = "SHA256SUMS"  # in each state folder: "<sha256>  <path relative to the folder>" per file


def state_dirs(run_dir: str) -> List[str]:
    """Complete state directories of `run_dir`, oldest first."""
    root = os.path.join(run_dir, "state")
    if not os.path.isdir(root):
        return []
    names = sorted(n for n in os.listdir(root) if n.startswith("step_"))
    return [os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n, "COMPLETE"))]


def state_steps(run_dir: str) -> List[int]:
    """Global steps of the complete states of `run_dir`, oldest first."""
    return [int(os.path.basename(p)[len("step_") :]) for p in state_dirs(run_dir)]


def state_path(run_dir: str, global_step: int) -> str:
    return os.path.join(run_dir, "state", f"step_{int(global_step):012d}")


def prune_states(run_dir: str, keep: int):
    """Remove all but the newest `keep` complete states of `run_dir`."""
    for old in state_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def write_state(run_dir: str, meta: Dict, agent, buffer=None, keep: Optional[int] = 2) -> str:
    """Write one state atomically and keep the newest `keep` (None: prune nothing); returns its directory.

    `meta` must hold `global_step` (an int) and only JSON values. `buffer` is a `ReplayBuffer` or None.
    """
    root = os.path.join(run_dir, "state")
    os.makedirs(root, exist_ok=True)
    name = f"step_{int(meta['global_step']):012d}"
    for stale in os.listdir(root):  # left by a process killed while writing (the run directory is locked)
        if stale.startswith(".tmp_"):
            shutil.rmtree(os.path.join(root, stale), ignore_errors=True)
    tmp = os.path.join(root, f".tmp_{name}_{os.getpid()}")
    with naming(os.path.join(root, name), temporary=tmp):  # an error names the state, not its temporary folder
        try:  # a full disk (or any failure) leaves no partial state behind, only the complete ones before
            os.makedirs(tmp)
            save_agent(agent, os.path.join(tmp, "agent.msgpack"), metadata={"global_step": int(meta["global_step"])})
            meta = dict(meta, format_version=FORMAT_VERSION)
            if buffer is not None:
                os.makedirs(os.path.join(tmp, "buffer"))
                # Only the rows written so far (storage rows 0 .. size - 1 before the first wrap; all of them after).
                rows = (
                    buffer.size if buffer.size < buffer.max_size and buffer.pointer == buffer.size else buffer.max_size
                )
                for key, array in buffer.items():
                    np.save(os.path.join(tmp, "buffer", f"{key}.npy"), array[:rows], allow_pickle=False)
                meta["buffer"] = {
                    "pointer": int(buffer.pointer),
                    "size": int(buffer.size),
                    "max_size": int(buffer.max_size),
                    "rows": int(rows),
                }
            meta["checksums"] = CHECKSUMS  # a state without the file it names is damaged, not old
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump(meta, f)
            with open(os.path.join(tmp, CHECKSUMS), "w") as f:
                f.writelines(f"{sha256_file(os.path.join(tmp, n))}  {n}\n" for n in _state_files(tmp))
            with open(os.path.join(tmp, "COMPLETE"), "w") as f:
                f.write(name + "\n")
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    final = os.path.join(root, name)
    if os.path.exists(final):  # the same step written again (e.g. a phase end after an interval)
        shutil.rmtree(final)
    os.rename(tmp, final)
    if keep is not None:
        prune_states(run_dir, keep)
    return final


def _state_files(path: str) -> List[str]:
    """The files of the state folder `path` that `SHA256SUMS` covers (relative paths, sorted)."""
    names = [n for n in os.listdir(path) if n not in (CHECKSUMS, "COMPLETE", "buffer")]
    if os.path.isdir(os.path.join(path, "buffer")):
        names += [f"buffer/{n}" for n in os.listdir(os.path.join(path, "buffer"))]
    return sorted(names)


def verify_checksums(path: str, meta: Dict):
    """`ValueError` naming the first file of the state folder `path` that differs from its `SHA256SUMS` line,
    is missing, or is not listed; `meta` is its `state.json`. A state written before checksums (neither a
    `checksums` key in `state.json` nor `SHA256SUMS`) passes unchecked; one whose `state.json` names the file
    but lacks it is damaged."""
    listed_path = os.path.join(path, CHECKSUMS)
    if not os.path.exists(listed_path):
        if isinstance(meta, dict) and meta.get("checksums"):
            raise ValueError(f"{CHECKSUMS} is missing")
        return
    with open(listed_path) as f:
        lines = f.read().splitlines()
    listed = {}
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
            raise ValueError(f"{CHECKSUMS} has a broken line: {line[:80]!r}")
        listed[name] = digest
    for name in _state_files(path):
        if name not in listed:
            raise ValueError(f"{name} is not in {CHECKSUMS}")
    for name, digest in sorted(listed.items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise ValueError(f"{name} is missing ({CHECKSUMS} lists it)")
        actual = sha256_file(file)
        if actual != digest:
            raise ValueError(f"{name} has sha256 {actual[:12]}..., {CHECKSUMS} says {digest[:12]}...: changed since")


class StateFormatError(ValueError):
    """A run state written in another format than `FORMAT_VERSION`: not damaged, but not this code's to read."""


def read_state(path: str, agent_template) -> Dict:
    """`state.json` of `path` plus `agent` (restored into `agent_template`) and, if saved, `buffer_arrays`.

    Raises `StateFormatError` when `state.json` names another `format_version` than this code writes, and
    `ValueError` when a file differs from its `SHA256SUMS` line (`verify_checksums`) or does not read back.
    """
    with open(os.path.join(path, "state.json")) as f:
        meta = json.load(f)
    version = meta.get("format_version", FORMAT_VERSION) if isinstance(meta, dict) else FORMAT_VERSION
    if version != FORMAT_VERSION:
        raise StateFormatError(
            f"--resume: the run state {path} is in format {version!r}, and this code reads format {FORMAT_VERSION}: "
            "it was written by another version of qc. Resume with the commit that wrote it (flags.json's "
            "made_by names it), or start a new run. Nothing was changed."
        )
    verify_checksums(path, meta)
    meta["agent"] = restore_agent(agent_template, os.path.join(path, "agent.msgpack"))
    if "buffer" in meta:
        folder, info = os.path.join(path, "buffer"), meta["buffer"]
        meta["buffer_arrays"] = {}
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:  # else numpy advises loading it unsafely (pickle)
                if f.read(6) != b"\x93NUMPY":
                    raise ValueError(f"buffer/{name} is not a .npy array file")
            rows = np.load(os.path.join(folder, name), mmap_mode="r", allow_pickle=False)
            if len(rows) != info.get("rows", info["max_size"]):
                raise ValueError(f"buffer/{name} has {len(rows)} rows, state.json says {info.get('rows')}")
            full = np.zeros((info["max_size"], *rows.shape[1:]), rows.dtype)  # unwritten rows are zeros, as created
            full[: len(rows)] = rows
            meta["buffer_arrays"][name[: -len(".npy")]] = full
    return meta


REQUIRED_KEYS = ("format_version", "global_step", "phase", "step_in_phase", "dataset_rng", "csv_rows")


def _read_usable(path: str, agent_template, dataset) -> Optional[Dict]:
    """`read_state(path)` plus `path`, or None (with a warning) when the state is damaged."""
    try:
        meta = read_state(path, agent_template)
        missing = [k for k in REQUIRED_KEYS if k not in meta]
        if missing:
            raise ValueError(f"state.json lacks {missing}")
        if meta["phase"] == "online" and "collector" not in meta:
            raise ValueError("state.json lacks the collector")
        if "buffer" in meta:
            arrays = meta["buffer_arrays"]
            if set(arrays) != set(dataset.keys()):
                raise ValueError(f"buffer fields {sorted(arrays)} are not the dataset's {sorted(dataset.keys())}")
            if any(len(a) != meta["buffer"]["max_size"] for a in arrays.values()):
                raise ValueError("buffer arrays do not have max_size rows")
    except StateFormatError:
        raise  # not damage: falling back to an older state would hide it
    except Exception as e:  # noqa: BLE001 - any damage: the caller falls back to the previous state
        logging.warning("Skipping damaged run state %s (%s: %s).", path, type(e).__name__, e)
        return None
    meta["path"] = path
    return meta


def read_latest_usable_state(run_dir: str, agent_template, dataset) -> Optional[Dict]:
    """The newest state of `run_dir` that reads back whole (`read_state` plus `path`), or None.

    A state that is damaged although marked complete (a missing or truncated file, missing keys, buffer
    fields that are not the dataset's) is skipped with a warning, and the one before it is used. A state in
    another format raises `StateFormatError` (`read_state`).
    """
    for path in reversed(state_dirs(run_dir)):
        meta = _read_usable(path, agent_template, dataset)
        if meta is not None:
            return meta
    return None


def read_usable_state(run_dir: str, global_step: int, agent_template, dataset) -> Optional[Dict]:
    """The state of `run_dir` at `global_step` when it is complete and reads back whole, else None."""
    path = state_path(run_dir, global_step)
    if path not in state_dirs(run_dir):
        return None
    return _read_usable(path, agent_template, dataset)


_LOCKS = {}  # run directory -> the open file descriptor of its `.lock`
# Folders this process created for its runs (a run directory and the parents it needed), deepest first: a run
# refused before it wrote anything leaves none of them behind (`discard_unused_run_dirs`).
_CREATED: List[str] = []


def make_dirs(run_dir: str):
    """`os.makedirs(run_dir, exist_ok=True)`, remembering each folder it creates (`discard_unused_run_dirs`)."""
    new, path = [], os.path.abspath(run_dir)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        new.append(path)
        path = os.path.dirname(path)
    os.makedirs(run_dir, exist_ok=True)
    _CREATED.extend(new)


def created(run_dir: str):
    """Record that this process created `run_dir` (made elsewhere, e.g. `log_utils.make_run_dir`)."""
    _CREATED.append(os.path.abspath(run_dir))


def lock_run_dir(run_dir: str):
    """Hold an exclusive lock on `<run_dir>/.lock` for this process's lifetime; `ValueError` if another holds it."""
    fd = os.open(os.path.join(run_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"{run_dir} is in use by another process (the same run started or resumed twice at once?)."
        ) from None
    _LOCKS[os.path.abspath(run_dir)] = fd


def release_run_dirs():
    """Release every run directory this process holds (at the end of its runs)."""
    while _LOCKS:
        os.close(_LOCKS.popitem()[1])


def release_run_dir(run_dir: str):
    """Release `run_dir` if this process holds it (a run given up during its setup)."""
    fd = _LOCKS.pop(os.path.abspath(run_dir), None)
    if fd is not None:
        os.close(fd)


def discard_unused_run_dirs():
    """Remove the folders this process created that hold nothing but its own `.lock` (a run refused during
    setup, before it wrote `flags.json`): a refused run leaves no folder. Any other file keeps its folder."""
    for path in sorted(set(_CREATED), key=len, reverse=True):  # a run directory before the parents it needed
        if not os.path.isdir(path) or not set(os.listdir(path)) <= {".lock"}:
            continue
        release_run_dir(path)
        with contextlib.suppress(OSError):
            if os.path.exists(os.path.join(path, ".lock")):
                os.remove(os.path.join(path, ".lock"))
            os.rmdir(path)
    _CREATED.clear()


def forget_created_dirs():
    """The runs are set up (each directory holds its `flags.json`): nothing is left to discard."""
    _CREATED.clear()


def _run_csvs(run_dir: str) -> List[str]:
    """The CSV files the drivers write in `run_dir` (`log_utils.WANDB_PREFIXES`): never a user's own file."""
    return [f"{p}.csv" for p in sorted(WANDB_PREFIXES) if os.path.isfile(os.path.join(run_dir, f"{p}.csv"))]


def csv_row_counts(run_dir: str) -> Dict[str, int]:
    """Data rows of every CSV file the run writes in `run_dir` (the header excluded)."""
    counts = {}
    for name in _run_csvs(run_dir):
        with open(os.path.join(run_dir, name)) as f:
            counts[name] = max(sum(1 for _ in f) - 1, 0)
    return counts


def truncate_csvs(run_dir: str, counts: Dict[str, int]):
    """Drop the rows written after a state: keep the header and the first `counts[name]` rows of each CSV
    the run writes. One the state does not know (created after it) is removed; other files are left alone.
    """
    for name in _run_csvs(run_dir):
        path = os.path.join(run_dir, name)
        if name not in counts:
            os.remove(path)
            continue
        with open(path) as f:
            lines = f.readlines()
        atomic_write(path, "".join(lines[: 1 + counts[name]]))  # a full disk leaves the file whole, no temporary


class PreemptionFlag:
    """Set by SIGTERM or SIGUSR1 (SLURM's warning signals) or Ctrl-C; the driver saves at the next safe point.

    A second SIGTERM/SIGUSR1 while the state is being written only sets the flag again: the write goes on,
    and the atomic rename means no signal can leave a half-written state behind. A second Ctrl-C stops at
    once (`KeyboardInterrupt`), without a new state.
    """

    def __init__(self):
        self.signum = None
        self._previous = {}

    def install(self):
        for signum in (*PREEMPTION_SIGNALS, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        self.signum = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once
            print(
                "Ctrl-C: the run state is written at the end of this step, then the run stops (Ctrl-C again: stop "
                "now, without it).",
                file=sys.stderr,
                flush=True,
            )

    @property
    def raised(self) -> bool:
        return self.signum is not None


# ------------------------------------------------------------------------------------------------ --resume

# Settings that may differ between a run and its resumption.
RESUME_MAY_CHANGE = (
    "resume",
    "progress",
    "state_interval",
    "keep_states",
    "wandb_mode",
    "sweep_info",
    "run_name",
    "num_seeds",
    "seed_batching",
    "donate_agent",
    "updates_per_dispatch",
    "offline_sampler",
    "eval_envs",
    "eval_env_mode",
    "agent_file",
    "start_if_missing",
    "accept_changed_data",
    "accept_changed_agent",
    "accept_changed_family",
    "compilation_cache_dir",
)
# Flags holding paths: compared after normalisation (`exp` and `exp/` are one directory).
PATH_FLAGS = ("save_dir", "dataset_path", "dataset_dir", "agent_file")
# Flags that say only where a run or its data lives: a run copied or moved elsewhere (or its data) resumes where it
# now is; `flags.json` records each move (`moves`). The data itself is compared by size and sha256.
LOCATION_FLAGS = ("save_dir", "dataset_path", "dataset_dir")
# Agent config keys filled in by create(): not set by the user.
FILLED_KEYS = ("ob_dims", "action_dim", "target_entropy")


def _comparable(values: Dict, path_keys=()) -> Dict:
    values = json.loads(json.dumps(values))
    for k in path_keys:
        if values.get(k):
            values[k] = os.path.normpath(os.path.abspath(os.path.expanduser(values[k])))
    return values


# Flags renamed, {old name: name}: the old name stays an alias on the command line (`runner.flags`), and a run
# recorded under it reads as the new one (`current_names`). flags.json records the new name only.
RENAMED = {"ogbench_dataset_dir": "dataset_dir"}


def current_names(recorded: Dict) -> Dict:
    """The `flags` of a `flags.json` record under today's names (`RENAMED`: a run recorded before a rename); a
    record holding both names keeps the new one's value."""
    renamed = {name: value for name, value in recorded.items() if name not in RENAMED}
    for old, new in RENAMED.items():
        if old in recorded and new not in recorded:
            renamed[new] = recorded[old]
    return renamed


class RunFinished(Exception):
    """`--resume` of a run that has finished (its `DONE.json` exists) with the same settings: nothing to do."""


def read_record(run_dir: str) -> Dict:
    """The run's `flags.json`, its `flags` under today's names (`current_names`: a run recorded as
    `--ogbench_dataset_dir` reads as `--dataset_dir`); `ValueError` naming the file when it cannot be read or is
    not a run record."""
    path = os.path.join(run_dir, "flags.json")
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}); this run cannot be resumed.") from None
    if not isinstance(record, dict) or not isinstance(record.get("flags"), dict):
        raise ValueError(f"{path} is damaged (no 'flags' record); this run cannot be resumed.")
    # What a resume compares: each part must have the shape the drivers write, or the check cannot be made.
    shapes = {
        "agent": (dict, None),
        "datasets": (list, dict),
        "dataset_history": (list, list),
        **{f"{kind}_source": (dict, None) for kind in SOURCE_KINDS},
        **{f"{kind}_source_history": (list, dict) for kind in SOURCE_KINDS},
    }
    for key, (kind, item) in shapes.items():
        value = record.get(key, kind())
        if not isinstance(value, kind) or (item is not None and not all(isinstance(v, item) for v in value)):
            want = f"a JSON {'object' if kind is dict else 'list'}" + (
                f" of {'objects' if item is dict else 'lists'}" if item is not None else ""
            )
            raise ValueError(
                f"{path} is damaged ('{key}' is {json.dumps(value)[:60]}, not {want}); this run cannot be resumed."
            )
    return {**record, "flags": current_names(record["flags"])}


def changed_settings(record: Dict, flag_values: Dict, agent: Dict) -> List[str]:
    """`--name: then -> now` for every setting of `flag_values`/`agent` that differs from the run's `record`.

    Settings in `RESUME_MAY_CHANGE` may differ; paths compare after normalisation; agent keys filled
    in by `create` (`FILLED_KEYS`) and unset keys are not compared; an agent key the record lacks (added to the
    agent since) counts as its `get_config()` default. A record from before `--eval_temperature`
    existed counts as 1 for an agent with a temperature (it evaluated with the collection noise) and 0 otherwise.
    """
    old, new = _comparable(record.get("flags", {}), PATH_FLAGS), _comparable(flag_values, PATH_FLAGS)
    if old and "eval_temperature" not in old:  # recorded before the flag (2026-12-03): what that run evaluated with
        old["eval_temperature"] = 1.0 if _takes_temperature(agent) else 0.0
    changed = [
        f"--{k}: {old.get(k)!r} then, {new.get(k)!r} now"
        for k in sorted(set(old) | set(new))
        if k not in RESUME_MAY_CHANGE and k not in LOCATION_FLAGS and old.get(k) != new.get(k)
    ]
    old_agent, new_agent = _comparable(record.get("agent", {})), _comparable(agent)
    if old_agent:  # a key the agent gained since the run was recorded: the run had the behaviour of its default
        old_agent = {**_comparable(_agent_defaults(agent)), **old_agent}
    for k in sorted(new_agent):
        if k not in FILLED_KEYS and new_agent[k] is not None and old_agent.get(k) != new_agent[k]:
            changed.append(f"--agent.{k}: {old_agent.get(k)!r} then, {new_agent[k]!r} now")
    return changed


def _agent_spec(agent: Dict):
    """The registry's spec of the recorded agent, or None for an agent this code does not know (the agent
    comparison then names the difference)."""
    import agents

    try:
        return agents.get(agent.get("agent_name"))
    except ValueError:
        return None


def _agent_defaults(agent: Dict) -> Dict:
    """The agent's `get_config()` values (empty for an unknown agent). Agent keys are added with the default
    that keeps the earlier behaviour (docs/outputs.md), as ACSAC's `commit_margin` = 0."""
    spec = _agent_spec(agent)
    return spec.get_config().to_dict() if spec is not None else {}


def _takes_temperature(agent: Dict) -> bool:
    """Whether the agent's `sample_actions` takes a `temperature` (IQL, ReBRAC: `--eval_temperature` applies)."""
    from agents import common

    spec = _agent_spec(agent)
    return spec is not None and common.sample_actions_takes(spec.agent_class, "temperature")


def moves(record: Dict, flag_values: Dict) -> List[Dict]:
    """The run's `moves` record: the earlier ones, plus `{flag: {'then', 'now'}}` for every `LOCATION_FLAGS` flag
    whose (normalised) path differs between the run's `record` and this start."""
    old, new = _comparable(record.get("flags", {}), LOCATION_FLAGS), _comparable(flag_values, LOCATION_FLAGS)
    earlier = record.get("moves", [])
    earlier = earlier if isinstance(earlier, list) else []
    moved = {k: {"then": old.get(k), "now": new.get(k)} for k in LOCATION_FLAGS if old.get(k) != new.get(k)}
    return earlier + [moved] if moved else earlier


def run_dir_of(cfg) -> str:
    """`<save_dir>/<run_group>/<run_name>`."""
    return os.path.join(cfg.save_dir, cfg.run_group, cfg.run_name or "")


def _group_hint(cfg) -> str:
    """A hint when `--run_name` names a seed group (directories `<name>_sd<seed>` exist) or, resumed as a
    seed group, a single-seed run."""
    parent = os.path.join(cfg.save_dir, cfg.run_group)
    base = cfg.run_name
    single = re.sub(r"_sd\d+$", "", base)
    if cfg.num_seeds > 1 and os.path.isfile(os.path.join(parent, single, "flags.json")):
        return f" ({os.path.join(parent, single)} exists as a single-seed run: resume it without --num_seeds)"
    if os.path.isdir(parent):
        members = sorted(n for n in os.listdir(parent) if n.startswith(f"{base}_sd") and n[len(base) + 3 :].isdigit())
        if members:
            return f" ({', '.join(members)} exist: resume the seed group with --num_seeds={len(members)})"
    return ""


def check_group_members(configs: List):
    """`ValueError` when some runs of a seed group have run states and others do not exist (no `flags.json`):
    a seed added to a group that has started cannot join its states (they share steps), so it must run
    apart. A group whose runs hold no state yet starts afresh, whichever of its runs exist."""
    exist = [os.path.isfile(os.path.join(run_dir_of(c), "flags.json")) for c in configs]
    started = [bool(state_steps(run_dir_of(c))) for c in configs]
    if len(configs) > 1 and any(started) and not all(exist):
        old = [c.run_name for c, e in zip(configs, started, strict=True) if e]
        new = [c.run_name for c, e in zip(configs, exist, strict=True) if not e]
        raise ValueError(
            f"--resume: the seed group has runs {', '.join(old)} but not {', '.join(new)}: a seed was added since "
            "it started. Resume the group with the seeds it started with, and start the new seed(s) as a run of "
            "their own (a sweep: a new --sweep_name, or --seeds_per_process that puts them in a process apart)."
        )


def check_runs(configs: List) -> List[Optional[Dict]]:
    """`--resume`, before anything is loaded: each run's `flags.json` record (None: start it fresh), every run
    directory locked for this process's life. `ValueError` for a missing run (unless `--start_if_missing`,
    never beside a seed group of its name), a damaged record, other settings than the run's, or a group only
    partly finished; `RunFinished` when every run has finished with these settings."""
    check_group_members(configs)
    records, finished = [], []
    for cfg in configs:
        run_dir = run_dir_of(cfg)
        if not os.path.isfile(os.path.join(run_dir, "flags.json")):
            # A seed group's members exist (or the single run a group resume names): a new run beside them
            # would be a second run of a seed.
            hint = _group_hint(cfg)
            if hint:
                raise ValueError(f"--resume: there is no run {run_dir}{hint}.")
            if not cfg.start_if_missing:
                raise ValueError(
                    f"--resume: there is no run {run_dir} (check --save_dir, --run_group and --run_name); pass "
                    "--start_if_missing to start it when it does not exist."
                )
            records.append(None)
            continue
        record = read_record(run_dir)
        changed = changed_settings(record, cfg.flag_values, cfg.agent)
        if changed:
            raise ValueError(
                f"--resume: {run_dir} was started with other settings ({'; '.join(changed)}); resume it with the "
                "same flags, or start another --run_name."
            )
        records.append(record)
        if os.path.isfile(os.path.join(run_dir, "DONE.json")):
            finished.append(cfg.run_name)
    if finished and len(finished) < len(configs):
        raise ValueError(
            f"--resume: runs {finished} of this seed group have finished and the others have not; resume each "
            "unfinished run alone (--num_seeds=1 --seed=<its seed> --run_name=<its name>)."
        )
    if finished:
        raise RunFinished(", ".join(os.path.join(c.save_dir, c.run_group, c.run_name) for c in configs))
    for cfg in configs:
        try:
            make_dirs(run_dir_of(cfg))  # a run started by --start_if_missing: removed again if refused in setup
            lock_run_dir(run_dir_of(cfg))
        except OSError as e:  # a read-only run directory or --save_dir
            raise ValueError(f"--resume: cannot write to {run_dir_of(cfg)} ({e.strerror or e}).") from None
    return records


DATA_KEYS = ("path", "size_bytes", "sha256")


def check_datasets(run_dir: str, record: Optional[Dict], datasets: List[Dict], accept_changed: bool) -> List[Dict]:
    """The data records of earlier parts of the run, to keep in `flags.json` (`dataset_history`).

    `datasets` are this start's records (`envs.provenance`). Raises `ValueError` when a file the run trained
    on has another size or hash now, or the files differ, unless `accept_changed` (`--accept_changed_data`):
    then the old records are kept beside the new ones.
    """
    if record is None:
        return []
    history = list(record.get("dataset_history", []))
    # The data is its content: a file that moved (another path, the same size and sha256) is the same data.
    old = [{k: d.get(k) for k in DATA_KEYS} for d in record.get("datasets", []) if d.get("role", "train") == "train"]
    new = [{k: d.get(k) for k in DATA_KEYS} for d in datasets if d.get("role", "train") == "train"]
    if [(d["size_bytes"], d["sha256"]) for d in old] == [(d["size_bytes"], d["sha256"]) for d in new]:
        return history
    if not accept_changed:
        what = []
        for a, b in zip(old, new, strict=False):
            if a != b:
                diff = [k for k in ("size_bytes", "sha256") if a.get(k) != b.get(k)]
                what.append(f"{b['path']}: {'/'.join(diff) or 'path'} changed")
        if len(old) != len(new):
            what.append(f"{len(old)} data file(s) then, {len(new)} now")
        raise ValueError(
            f"--resume: the data of {run_dir} changed since it started ({'; '.join(what)}); the run would continue "
            "on other data. Restore the files, or pass --accept_changed_data to continue anyway (flags.json keeps "
            "both records)."
        )
    logging.warning(
        "--accept_changed_data: %s continues on changed data; flags.json keeps the earlier records.", run_dir
    )
    return history + [record.get("datasets", [])]


# Source files a run records in `flags.json` (`<kind>_source`: path and sha256) and `--resume` checks, since a change
# to one would make the rest of the run another experiment: kind -> (the file, what the run would continue with).
SOURCE_KINDS = {
    "agent": ("the agent's file", "other losses and updates"),
    "family": ("the benchmark family's file", "other envs, data or success test (eval.csv would mix the two)"),
}


def source_record(obj) -> Dict:
    """`{'path', 'sha256'}` of the file of the module that defines `obj` (a class or function), for `flags.json`."""
    path = os.path.abspath(sys.modules[obj.__module__].__file__)
    return {"path": path, "sha256": sha256_file(path)}


def run_sources(agent_class, family) -> Dict[str, Dict]:
    """The `SOURCE_KINDS` records of a run: the file that defines `agent_class`, and the family file (the one that
    defines the family's `load`, which builds its envs and data: `envs/<family>.py`)."""
    return {"agent": source_record(agent_class), "family": source_record(family.load)}


def check_source(kind: str, run_dir: str, record: Optional[Dict], now: Dict, accept_changed: bool) -> List[Dict]:
    """The earlier records of the `kind` file (`SOURCE_KINDS`) to keep in `flags.json` (`<kind>_source_history`).

    Raises `ValueError` when the file has another sha256 than the run's `record` holds (the run would continue
    with other code), unless `accept_changed` (`--accept_changed_<kind>`): then the old record is kept beside the
    new one. A record without `<kind>_source` (a run recorded before it) passes; so does a file that moved.
    """
    if record is None:
        return []
    history = list(record.get(f"{kind}_source_history", []))
    then = record.get(f"{kind}_source")
    if not isinstance(then, dict) or then.get("sha256") == now["sha256"]:
        return history
    (file, other), flag = SOURCE_KINDS[kind], f"--accept_changed_{kind}"
    if not accept_changed:
        raise ValueError(
            f"--resume: {file} changed since {run_dir} started ({then.get('path')}: sha256 "
            f"{str(then.get('sha256'))[:12]}... then, {now['path']}: {now['sha256'][:12]}... now); the run would "
            f"continue with {other}. Restore the file, start a new run, or pass {flag} to continue anyway "
            "(flags.json keeps both records)."
        )
    logging.warning("%s: %s continues although %s changed; flags.json keeps both records.", flag, run_dir, file)
    return history + [then]


def group_resume_states(configs: List, agents_: List, datasets: List) -> List[Optional[Dict]]:
    """The states to continue, one per seed, at the newest step every seed has whole (None for every seed when
    none has a complete state: a fresh start). `ValueError`, deleting nothing, when states exist but none can
    be continued (all damaged, or a group's seeds share no step), or a CSV lost or broke rows since."""
    dirs = [run_dir_of(c) for c in configs]
    if len(configs) == 1:
        metas = [read_latest_usable_state(dirs[0], agents_[0], datasets[0])]
    else:
        metas = [None] * len(configs)
        common = set.intersection(*[set(state_steps(d)) for d in dirs])
        for step in sorted(common, reverse=True):
            candidate = [read_usable_state(d, step, a, ds) for d, a, ds in zip(dirs, agents_, datasets, strict=True)]
            if all(m is not None for m in candidate):
                metas = candidate
                break
    if all(m is None for m in metas) and any(state_steps(d) for d in dirs):
        held = "; ".join(f"{d}: {', '.join(map(str, state_steps(d))) or 'none'}" for d in dirs)
        if len(dirs) > 1 and not common:
            why = (
                f"the seeds' run states have no step in common ({held}): a seed was resumed alone since. Resume "
                "each seed alone (--num_seeds=1 --seed=<its seed> --run_name=<its directory>) to the end"
            )
        else:
            why = (
                f"no run state can be read back ({held}; the warnings above say what is damaged). To start "
                "over, delete the state/ directory (the CSV rows are then written again from step 0)"
            )
        raise ValueError(f"--resume: {why}. Nothing was changed.")
    for d, meta in zip(dirs, metas, strict=True):
        if meta is not None:
            check_csv_rows(d, meta["csv_rows"])
    for d, meta in zip(dirs, metas, strict=True):
        if meta is not None:
            truncate_csvs(d, meta["csv_rows"])
            logging.info("Resuming from %s (%s step %d)", meta["path"], meta["phase"], meta["step_in_phase"])
        else:
            logging.warning("--resume: %s has no complete run state; starting it fresh.", d)
            shutil.rmtree(os.path.join(d, "state"), ignore_errors=True)  # a fresh start
    return metas


def check_csv_rows(run_dir: str, counts: Dict[str, int]):
    """`ValueError` when a CSV file of `run_dir` lost rows a state recorded, or holds a broken one among them.

    Each of the first `counts[name]` rows must be whole: ended by a newline, as many cells as the header,
    and an integer `step` first (a row torn by a full disk or an editor is not counted as a row).
    """
    for name, rows in sorted(counts.items()):
        path = os.path.join(run_dir, name)
        if not os.path.exists(path):
            raise ValueError(
                f"--resume: {path} is missing, but the run state recorded {rows} rows: rows were lost since, and "
                "the finished run would lack them. Restore the file (or start the run again)."
            )
        with open(path, newline="") as f:
            lines = f.readlines()
        if len(lines) - 1 < rows:
            raise ValueError(
                f"--resume: {path} has {max(len(lines) - 1, 0)} rows, but the run state recorded {rows}: rows were "
                "lost since, and the finished run would lack them. Restore the file (or start the run again)."
            )
        header = next(csv.reader([lines[0]]), [])
        for number, line in enumerate(lines[1 : 1 + rows], start=1):
            cells = next(csv.reader([line]), [])
            whole = line.endswith("\n") and len(cells) == len(header) and re.fullmatch(r"-?\d+", cells[0] or "")
            if not whole:
                raise ValueError(
                    f"--resume: {path} row {number} (of the {rows} the run state recorded) is broken: "
                    f"{line.rstrip()[:80]!r} does not have the header's {len(header)} cells with the step first. "
                    "Restore the file (or start the run again)."
                )
