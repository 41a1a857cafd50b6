"""log_utils: what the drivers log to wandb (every prefix plotted against `env_step`) beside the CSV files."""

import contextlib
import errno
import glob
import os
import time

import numpy as np
import pytest

from log_utils import CsvLogger, Logger, define_wandb_metrics, setup_wandb
from tests.driver_runs import tmpfs


class FakeRun:
    def __init__(self):
        self.defined, self.logged = [], []

    def define_metric(self, name, step_metric=None):
        self.defined.append((name, step_metric))

    def log(self, row, step=None):
        self.logged.append((row, step))


def test_logger_logs_env_step_and_defines_it_as_the_x_axis(tmp_path):
    run = FakeRun()
    define_wandb_metrics(run)
    assert run.defined == [
        ("env_step", None),
        ("eval/*", "env_step"),
        ("offline_agent/*", "env_step"),
        ("online_agent/*", "env_step"),
        ("env/*", "env_step"),
    ]
    logger = Logger(str(tmp_path), run)
    logger.log({"success": 0.5, "episode.length": np.float32(200)}, "eval", 4000)
    assert run.logged == [({"eval/success": 0.5, "eval/episode.length": 200.0, "env_step": 4000}, 4000)]
    # The CSV is as before: no env_step column.
    assert (tmp_path / "eval.csv").read_text().splitlines() == ["step,success,episode.length", "4000,0.5,200.0"]


def test_offline_wandb_run_records_the_metric_definitions(tmp_path, monkeypatch):
    import wandb

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = setup_wandb("qc", "sweep", "run", {"flags": {"horizon_length": 5}}, "offline", str(tmp_path))
    logger = Logger(str(tmp_path), run)
    logger.log({"success": 0.25}, "eval", 4000)
    logger.close()
    wandb.teardown()  # stops wandb's service process, which writes the run file out
    (path,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    names = (b"env_step", b"eval/*", b"offline_agent/*", b"online_agent/*", b"env/*", b"eval/success")
    for _ in range(600):  # the file may still be being flushed (seconds on a loaded machine)
        data = open(path, "rb").read()
        if all(name in data for name in names):
            break
        time.sleep(0.1)
    assert [name for name in names if name not in data] == []


def test_writes_on_a_full_disk_name_their_file_and_leave_no_temporary(tmp_path):
    """A `write` or `close` on a full disk raises `OSError(ENOSPC)` without a file name; the drivers' one
    error line then could not say which file. CSV rows, whole-file writes and run states name theirs."""
    from runner.resume import write_state
    from utils.files import atomic_write

    with tmpfs(tmp_path / "small", "64k") as small:
        logger = CsvLogger(str(small / "eval.csv"))
        logger.log({"success": 0.5}, step=1)
        with open(small / "filler", "wb") as f:  # the rest of the disk
            with contextlib.suppress(OSError):
                f.write(bytes(1 << 20))
        for write, path in [
            (lambda: logger.log({"success": "9" * 10_000}, step=2), small / "eval.csv"),  # more than a page
            (lambda: atomic_write(str(small / "flags.json"), "x" * 10_000), small / "flags.json"),
            (
                lambda: write_state(str(small), {"global_step": 7}, {"w": np.zeros(10_000)}),
                small / "state" / "step_000000000007",
            ),
        ]:
            with pytest.raises(OSError) as raised:
                write()
            assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(path))
        assert sorted(os.listdir(small)) == ["eval.csv", "filler", "state"] and os.listdir(small / "state") == []
        assert open(small / "eval.csv").read().splitlines()[:2] == ["step,success", "1,0.5"]
