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
import io
import json
import math
import os
import time
from datetime import datetime
from typing import Dict, Optional

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
