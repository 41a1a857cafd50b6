"""Run logging: one CSV file per prefix, optional wandb, run naming and run metadata.

`Logger.log(info, prefix, step)` writes `info` (a flat dict of scalars) as one row of
`<save_dir>/<prefix>.csv` (prefixes used by the drivers: `eval`, `offline_agent`,
`online_agent`, `env`) and, when wandb is on, as `<prefix>/<key>` at `step`, together with
`env_step` (the same step). `setup_wandb` declares `env_step` as the x axis of every
`<prefix>/*` metric (`define_wandb_metrics`), so wandb's panels plot against environment steps.
"""

import contextlib
import csv
import errno
import importlib.metadata
import io
import json
import math
import os
import platform
import subprocess
import time
from datetime import datetime
from typing import Dict, List, Optional

import numpy as np

from utils.files import atomic_write, naming


def write_video(path: str, frames: np.ndarray, fps: int = 15) -> str:
    """Write `frames` `(T, H, W, 3)` uint8 as an H.264 mp4 at `path` (imageio's ffmpeg plugin), atomically.

    `H` and `W` must be even (H.264's 4:2:0 sampling); MuJoCo's default 200 x 200 frames are. Returns `path`.
    The file is read back before it takes its name: ffmpeg's exit status does not reach imageio, which would
    leave a truncated video without a word. Raises `OSError` (`ENOSPC`/`EDQUOT` on a full disk or quota,
    `EIO` for any other failure to write a whole video) naming `path`; nothing is left behind then.
    """
    import imageio.v2 as imageio
    import imageio_ffmpeg

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[1] % 2 or frames.shape[2] % 2:
        raise ValueError(f"a video needs frames (T, H, W, 3) with even H and W, got {frames.shape}.")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.mp4"
    try:
        try:
            with imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=1, ffmpeg_log_level="quiet") as w:
                for frame in frames.astype(np.uint8):
                    w.append_data(frame)
            written = imageio_ffmpeg.count_frames_and_secs(tmp)[0]
        except (RuntimeError, OSError):  # ffmpeg stopped (a broken pipe), or what it left cannot be read
            written = None
        if written != len(frames):
            _raise_write_error(tmp, path)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _raise_write_error(tmp: str, path: str):
    """The `OSError` of a video ffmpeg could not write whole: a 1 MiB probe written beside it (while the
    partial video still holds its space) tells a full disk or quota from any other failure."""
    probe = f"{tmp}.probe"
    try:
        with open(probe, "wb") as f:
            f.write(bytes(1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None
    finally:
        if os.path.exists(probe):
            os.remove(probe)
    raise OSError(errno.EIO, "ffmpeg did not write a whole video", path)


def _to_scalar(value):
    """A plain Python float/int/str for one logged value; arrays must have size 1."""
    if isinstance(value, (str, bool, int, float)):
        return value
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"Only scalars can be logged, got an array of shape {arr.shape}.")
    return arr.item()


class CsvLogger:
    """Appends rows to a CSV file; the header is the union of all keys seen so far.

    A row with a key the file does not have yet rewrites the file once with the wider header
    (earlier rows get empty cells), so columns never shift. Every row carries `step` first.
    `resume=True` continues an existing file instead of starting a new one.
    """

    def __init__(self, path: str, resume: bool = False):
        self.path = path
        self.fieldnames = []
        if resume and os.path.exists(path):
            with open(path, newline="") as f:
                reader = csv.reader(f)
                self.fieldnames = next(reader, [])
        elif os.path.exists(path):
            os.remove(path)

    def log(self, row: Dict, step: int):
        row = {"step": int(step), **{k: _to_scalar(v) for k, v in row.items()}}
        new_keys = [k for k in row if k not in self.fieldnames]
        if new_keys:
            old_rows = []
            if os.path.exists(self.path):
                with open(self.path, newline="") as f:
                    old_rows = list(csv.DictReader(f))
            self.fieldnames = self.fieldnames + new_keys
            buffer = io.StringIO(newline="")
            writer = csv.DictWriter(buffer, fieldnames=self.fieldnames)
            writer.writeheader()
            writer.writerows(old_rows)
            atomic_write(self.path, buffer.getvalue())  # a crash here must not lose the earlier rows
        with naming(self.path), open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.fieldnames).writerow(row)


class Logger:
    """CSV per prefix plus optional wandb (`wandb_run` None: CSV only)."""

    def __init__(self, save_dir: str, wandb_run=None, resume: bool = False):
        self.save_dir = save_dir
        self.wandb_run = wandb_run
        self.resume = resume
        self.csv_loggers: Dict[str, CsvLogger] = {}
        os.makedirs(save_dir, exist_ok=True)

    def log(self, info: Dict, prefix: str, step: int):
        if prefix not in self.csv_loggers:
            self.csv_loggers[prefix] = CsvLogger(os.path.join(self.save_dir, f"{prefix}.csv"), self.resume)
        self.csv_loggers[prefix].log(info, step)
        if self.wandb_run is not None:
            row = {f"{prefix}/{k}": _to_scalar(v) for k, v in info.items()}
            self.wandb_run.log({**row, "env_step": int(step)}, step=step)

    def close(self):
        if self.wandb_run is not None:
            self.wandb_run.finish()


# The prefixes the drivers log (`Logger.log`); `define_wandb_metrics` plots each against `env_step`.
WANDB_PREFIXES = ("eval", "offline_agent", "online_agent", "env")


def define_wandb_metrics(run):
    """Make `env_step` the x axis of every logged metric of `run` (a wandb run).

    Steps are environment steps as the drivers count them (offline step `i` -> `i`, online step
    `i` -> `offline_steps + i`); `Logger.log` logs `env_step` with every row.
    """
    run.define_metric("env_step")
    for prefix in WANDB_PREFIXES:
        run.define_metric(f"{prefix}/*", step_metric="env_step")


def setup_wandb(
    project: str, group: str, name: str, config: Dict, mode: str, save_dir: str, run_id: Optional[str] = None
):
    """Start a wandb run, or return None when `mode == 'disabled'`.

    `mode` is `online` (needs an account and network), `offline` (writes to
    `<save_dir>/wandb`; sync later with `wandb sync`) or `disabled`. No `start_method`
    setting is passed (current wandb rejects it). `run_id` resumes the run with that id.
    The run's metrics are plotted against `env_step` (`define_wandb_metrics`). Several runs may be
    open in one process (`reinit="create_new"`, wandb >= 0.19.10): `--num_seeds` opens one per seed and
    logs through each run object, never the global `wandb.log`.
    Raises `ValueError` for an unknown mode.
    """
    if mode not in ("online", "offline", "disabled"):
        raise ValueError(f"--wandb_mode must be online, offline or disabled, got {mode!r}.")
    if mode == "disabled":
        return None
    import wandb  # imported here: a CSV-only run does not pay for it

    run = wandb.init(
        project=project,
        group=group,
        name=name,
        config=config,
        mode=mode,
        dir=save_dir,
        id=run_id,
        resume="allow" if run_id else None,
        reinit="create_new",  # --num_seeds: one wandb run per seed, all open in this process
    )
    define_wandb_metrics(run)
    return run


def get_exp_name(env_name: str, seed: int, tag: str = "") -> str:
    """`<timestamp>_<env_name>_sd<seed>[_tag]_<unique>`, e.g. `20261129_231500_cube-double-..._sd000_3f9a1c2e`.

    `<unique>` is 8 hex digits from `os.urandom` (not from any seeded stream), so runs started in the same
    second, on one host or many hosts over a shared filesystem, get different names; the rest stays
    readable. `make_run_dir` also refuses to reuse a directory that exists.
    """
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    name = f"{stamp}_{env_name}_sd{seed:03d}" + (f"_{tag}" if tag else "")
    return f"{name}_{os.urandom(4).hex()}"


def make_run_dir(parent: str, name: str) -> str:
    """Create `<parent>/<name>` and return it; `FileExistsError` when it exists (never shared, never reused).

    The creation is atomic (`os.mkdir`): of two processes that pick the same name, exactly one gets it.
    """
    os.makedirs(parent, exist_ok=True)
    path = os.path.join(parent, name)
    os.mkdir(path)
    return path


def write_json(path: str, data: Dict):
    """Write `data` as indented JSON (non-finite floats as strings, other objects via `str`)."""

    def default(obj):
        if isinstance(obj, (np.floating, np.integer)):
            return obj.item()
        return str(obj)

    def clean(obj):
        if isinstance(obj, float) and not math.isfinite(obj):
            return str(obj)
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [clean(v) for v in obj]
        return obj

    atomic_write(path, json.dumps(clean(data), indent=2, default=default, sort_keys=True))


# ------------------------------------------------------------------------------------------------ what made a run

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))
# The packages whose versions change a run's arithmetic, its envs or its data.
MADE_BY_PACKAGES = ("jax", "jaxlib", "flax", "optax", "gymnasium", "mujoco", "ogbench")
GIT_TIMEOUT_S = 5.0


def _git(root: str, *args: str) -> Optional[str]:
    """The output of `git <args>` in `root`, stripped; None where git is missing, `root` is no git tree, git
    refuses it (another owner) or takes longer than `GIT_TIMEOUT_S`."""
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def cpu_info(path: str = "/proc/cpuinfo") -> Dict:
    """`{"model": str or None, "avx512": bool or None, "cores": int or None}` of this machine's CPU.

    `model` is the first `model name` line of `path` (Linux's `/proc/cpuinfo`), `avx512` whether its first
    `flags` line names `avx512f` (the foundation every AVX-512 CPU has); both None where `path` cannot be read
    or lacks the line. `cores`: `os.cpu_count()`."""
    model = flags = None
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = value.split()
    except OSError:
        pass
    return {"model": model, "avx512": None if flags is None else "avx512f" in flags, "cores": os.cpu_count()}


def made_by(root: str = REPO_ROOT) -> Dict:
    """What made a run, for its `flags.json` (`made_by`); no network, never raises for a missing tool.

    Returns `{"commit", "uncommitted_changes", "versions", "python", "cpu", "devices"}`:
    `commit` the 40-hex `HEAD` of the git tree at `root` (default: this repository) and `uncommitted_changes`
    whether a tracked file differs from it (untracked files are not counted), both None where git or the
    tree is missing; `versions` `{package: version or None}` for `MADE_BY_PACKAGES`; `cpu` as `cpu_info`;
    `devices` JAX's devices as `[{"platform", "kind", "count"}]` (e.g. `cpu`/`cpu`, or `gpu`/`NVIDIA
    H200`), one entry per kind. Imports JAX (and starts its backend) when it has not been.
    """
    import jax

    commit = _git(root, "rev-parse", "--verify", "HEAD")
    changed = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    versions = {}
    for package in MADE_BY_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    kinds: Dict[tuple, int] = {}
    for device in jax.devices():
        key = (device.platform, device.device_kind)
        kinds[key] = kinds.get(key, 0) + 1
    return {
        "commit": commit or None,
        "uncommitted_changes": None if changed is None else bool(changed),
        "versions": versions,
        "python": platform.python_version(),
        "cpu": cpu_info(),
        "devices": [{"platform": p, "kind": k, "count": n} for (p, k), n in kinds.items()],
    }


def _read_record(run_dir: str) -> Optional[Dict]:
    path = os.path.join(run_dir, "flags.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def provenance(run_dir: str, root: str = REPO_ROOT) -> Dict:
    """The `flags.json` entries that say what made the run in `run_dir`, for the record `runner.setup` writes.

    `made_by` is this process's (`made_by(root)`). A run resumed from an earlier part (its `flags.json` is
    there) keeps that part's `speed` entries (`record_speed`: a phase finished before the resume is not run
    again) and, where this part is made by something else, the earlier `made_by` records in `made_by_history`
    (oldest first). `ValueError` (json's) for a `flags.json` that is not JSON; `resume.check_runs` has refused
    such a run before setup writes anything.
    """
    now = made_by(root)
    out = {"made_by": now}
    earlier = _read_record(run_dir)
    if not earlier:
        return out
    if earlier.get("speed"):
        out["speed"] = earlier["speed"]
    history: List = list(earlier.get("made_by_history") or [])
    if earlier.get("made_by") and earlier["made_by"] != now:
        history.append(earlier["made_by"])
    if history:
        out["made_by_history"] = history
    return out


def record_speed(run_dir: str, phase: str, first: int, last: int, seconds: float, gradient_steps: int):
    """Write this process's speed in `phase` into `<run_dir>/flags.json` (`speed.<phase>`), atomically.

    `first`, `last`: the phase's steps this process started from and reached (a resumed run starts past 0);
    `seconds`: wall seconds of the phase's loop in this process (sampling, updates, logging, evaluation and run
    states included: the rate the progress line shows); `gradient_steps`: the updates made in that time. The
    entry is `{"from_step", "to_step", "seconds", "steps_per_second", "gradient_steps_per_second"}` (steps:
    the phase's own, environment steps online). Nothing is written when no step was made (`last <= first`),
    so an earlier part's entry stays. `OSError` naming the file where it cannot be written."""
    if last <= first or seconds <= 0:
        return
    record = _read_record(run_dir) or {}
    record.setdefault("speed", {})[phase] = {
        "from_step": int(first),
        "to_step": int(last),
        "seconds": round(float(seconds), 3),
        "steps_per_second": (last - first) / seconds,
        "gradient_steps_per_second": gradient_steps / seconds,
    }
    write_json(os.path.join(run_dir, "flags.json"), record)


# ------------------------------------------------------------------------------------------------ time split

TIME_SECTIONS = ("updates", "sampling", "env_steps", "evaluation", "logging", "checkpoints")


class TimeSplit:
    """Wall-clock seconds of a driver's loop by section (`TIME_SECTIONS`), from construction on.

    `with split("updates"): ...` adds the block's duration to its section. Device work is
    asynchronous: the host may run one update ahead of the device (so the next batch is sampled while
    the device computes). Entering `updates` first waits for all but the newest dispatched update
    (`dispatched(outputs)` after each one), and `wait()` before logging, evaluation and checkpoints
    waits for all; both waits count as `updates`, so device work that overlaps host sampling is not
    counted twice.

    `metrics()` -> `time/<section>_s` (cumulative seconds), `time/<section>_frac` (share of the
    wall-clock time since this process started its loop; a resumed run starts again from 0),
    `time/total_s` and `time/other_frac` (what no section covers: the loop itself, progress bars).
    """

    def __init__(self):
        self.start = time.perf_counter()
        self.seconds = {name: 0.0 for name in TIME_SECTIONS}
        self._pending = []

    @contextlib.contextmanager
    def __call__(self, section: str):
        if section not in self.seconds:
            raise ValueError(f"unknown time section {section!r}; sections are {TIME_SECTIONS}.")
        begin = time.perf_counter()
        try:
            if section == "updates":
                self._block(ahead=1)
            yield
        finally:
            self.seconds[section] += time.perf_counter() - begin

    def dispatched(self, outputs):
        """Remember the newest device outputs (entering `updates` and `wait` block on them)."""
        self._pending.append(outputs)

    def _block(self, ahead: int):
        import jax

        while len(self._pending) > ahead:
            jax.block_until_ready(self._pending.pop(0))

    def wait(self):
        """Block until every dispatched device work is done (counted as `updates`)."""
        if self._pending:
            with self("updates"):
                self._block(ahead=0)

    def metrics(self) -> Dict[str, float]:
        total = max(time.perf_counter() - self.start, 1e-9)
        out = {"time/total_s": total}
        for name, seconds in self.seconds.items():
            out[f"time/{name}_s"] = seconds
            out[f"time/{name}_frac"] = seconds / total
        out["time/other_frac"] = max(0.0, 1.0 - sum(self.seconds.values()) / total)
        return out
