"""The local executor of scripts/sweep.py: at most `--max_parallel` runs at once as subprocesses, one log each.

Runs are `sweeping.run.SweepRun`s called from a thread pool; a lock file keeps a second sweep of the same name on this
machine out; SIGTERM or Ctrl-C to the sweep sends SIGTERM to every running driver, which writes its state and stops.
"""

import argparse
import concurrent.futures
import fcntl
import os
import signal
import sys
import threading
import time
from typing import Dict, List, Tuple

from sweeping.run import InputError, RunFailed, SweepRun, int_at_least


def add_arguments(parser: argparse.ArgumentParser):
    """The sweep's `local executor` flags."""
    local = parser.add_argument_group("local executor")
    local.add_argument("--max_parallel", type=int_at_least(1), default=1, help="Most runs at once (default: 1).")
    local.add_argument(
        "--local_gpus",
        help="Comma-separated GPU ids: each run gets the least busy one as CUDA_VISIBLE_DEVICES. When more runs "
        "than GPUs run at once, JAX's GPU memory preallocation is turned off (XLA_PYTHON_CLIENT_PREALLOCATE=false).",
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run_local(runs: List[SweepRun], skipped: List[SweepRun], args) -> int:
    """Run at most `--max_parallel` runs at once; print a summary; 1 if a run failed, 128+signal if stopped."""
    group_dir = os.path.join(args.save_dir, args.sweep_name)
    os.makedirs(os.path.join(group_dir, "logs"), exist_ok=True)
    lock_fd = os.open(os.path.join(group_dir, ".sweep.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise InputError(
            f"sweep {args.sweep_name} is running already on this machine ({group_dir}/.sweep.lock is held by it or "
            "by one of its runs)"
        ) from None
    gpus = [g.strip() for g in args.local_gpus.split(",") if g.strip()] if args.local_gpus else []
    busy = {g: 0 for g in gpus}
    lock = threading.Lock()
    shared = args.max_parallel > max(1, len(gpus))

    def task(run: SweepRun):
        with lock:
            gpu = min(gpus, key=lambda g: busy[g]) if gpus else None
            if gpu is not None:
                busy[gpu] += 1
        if gpu is not None:
            run.env["CUDA_VISIBLE_DEVICES"] = gpu
        if shared and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
            run.env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # runs share a device: no 75% preallocation each
        run.pass_fds, run.new_session = (lock_fd,), True
        start[run.name] = time.time()
        with lock:  # print() writes the text and its newline separately: two threads could share a line
            print(f"started {run.name} (log: {run.log_path})", flush=True)
        try:
            return run()
        finally:
            if gpu is not None:
                with lock:
                    busy[gpu] -= 1

    results: Dict[str, Tuple[str, int]] = {}
    start: Dict[str, float] = {}
    stopped_by = None
    main_thread = threading.current_thread() is threading.main_thread()
    # SIGINT gets its own handler too: a sweep started from a non-interactive shell in the background inherits
    # SIGINT as ignored, and Python then never raises KeyboardInterrupt.
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main_thread else None

    def on_sigterm(signum, frame):
        raise _Stop(signum)

    if previous is not None:
        for signum in previous:
            signal.signal(signum, on_sigterm)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.max_parallel)
    futures = {pool.submit(task, r): r for r in runs}
    try:
        pending = set(futures)
        while pending:
            finished, pending = concurrent.futures.wait(pending, timeout=0.5)
            for fut in finished:
                run = futures[fut]
                took = _duration(time.time() - start[run.name])
                try:
                    result = fut.result()
                    results[run.name] = (result["status"], 0)
                    line = f"[{len(results)}/{len(runs)}] {result['status']} {run.name} ({took})"
                except RunFailed as e:
                    results[run.name] = ("failed", e.returncode)
                    line = f"[{len(results)}/{len(runs)}] FAILED {run.name}: {e}"
                with lock:
                    print(line, flush=True)
    except (KeyboardInterrupt, _Stop) as e:
        stopped_by = e.signum if isinstance(e, _Stop) else signal.SIGINT
        print("stopping: SIGTERM to every running driver (each writes its state)...", file=sys.stderr, flush=True)
        for fut, run in futures.items():
            fut.cancel()
            run.stop()
        try:
            for fut, run in futures.items():
                if fut.cancelled():
                    continue
                try:
                    result = fut.result()
                    results.setdefault(run.name, (result["status"], result["returncode"]))
                except RunFailed as failure:
                    results.setdefault(run.name, ("failed", failure.returncode))
        except (KeyboardInterrupt, _Stop):
            print("not waiting any longer: the drivers finish writing their states on their own", file=sys.stderr)
    finally:
        pool.shutdown(wait=stopped_by is None, cancel_futures=True)
        if previous is not None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        os.close(lock_fd)
    finished = [r.name for r in runs if results.get(r.name, ("",))[0] in ("finished", "skipped")]
    failed = [r for r in runs if results.get(r.name, ("",))[0] == "failed"]
    stopped = [r.name for r in runs if results.get(r.name, ("",))[0] == "stopped"]
    not_started = [r.name for r in runs if r.name not in results]
    print(
        f"sweep {args.sweep_name}: {len(finished)} finished, {len(failed)} failed, {len(skipped)} skipped "
        f"(finished before)" + (f", {len(stopped) + len(not_started)} stopped or not started" if stopped_by else "")
    )
    if finished:
        print("  finished: " + ", ".join(finished))
    for run in failed:
        print(f"  failed: {run.name} (exit status {results[run.name][1]}; log: {run.log_path})")
    if skipped:
        print("  skipped: " + ", ".join(r.name for r in skipped))
    if stopped_by is not None:
        if stopped or not_started:
            print("  stopped or not started: " + ", ".join(stopped + not_started))
        print(f"  run the same command (--sweep_name={args.sweep_name}) to continue them")
        return 128 + int(stopped_by)
    return 1 if failed else 0
