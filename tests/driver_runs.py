"""What the end-to-end driver tests share (tests/test_resume.py, tests/test_seed_group.py).

`tiny_dataset` writes a two-episode cube-single dataset, `run_driver` runs `main.py` or
`main_online.py` in a subprocess on it, and `assert_same_run` compares two run directories: the same
CSV rows (wall-clock columns aside), the same final parameters, and a finished second run.
`run_driver(..., compiles=True)` also has JAX report every compilation and the loop mark every step on
stderr; `assert_warm_compiles` then checks that nothing compiled after the warm-up.
"""

import contextlib
import csv
import os
import re
import subprocess
import sys

import numpy as np
from flax import serialization

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_dataset(directory) -> str:
    """Generate `<directory>/cube-single-play-v0.npz` (2 episodes of 60 rows); returns its path."""
    from envs.generate_dataset import generate_dataset

    path = os.path.join(str(directory), "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=2, seed=0, save_path=path, max_episode_steps=60, progress=False
    )
    return path


@contextlib.contextmanager
def tmpfs(where, size: str):
    """A tmpfs of `size` (mount's syntax: `64m`) at `where` for the block (root only: the test is skipped where
    one cannot be mounted), unmounted after it: a small filesystem that really fills up."""
    os.makedirs(where, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        import pytest

        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fault_env(fault, root=ROOT):
    """Environment entries that make a driver process fail on purpose (tests/faults/sitecustomize.py):
    `fault` is `kill@<phase>:<step>` (SIGKILL) or `signal@<phase>:<step>` (SIGTERM). `root`: the repository the
    driver runs in (the injector imports the project from the repository that holds it, before the driver does)."""
    return {"QC_FAULT": fault, "PYTHONPATH": os.path.join(root, "tests", "faults")}


def run_driver(script, save_dir, name, dataset_path, flags, env_extra=None, expect=0, timeout=900, fault=None,
               compiles=False, root=ROOT):  # fmt: skip
    """Run `script` (in the repository at `root`) with `flags` into `<save_dir>/g/<name>`, on `dataset_path` (None:
    the env's own data); assert its exit status; `(run_dir, result)`.

    `fault`: see `fault_env`. `compiles`: JAX logs every compilation (`JAX_LOG_COMPILES`; also when the
    persistent compilation cache has the program: the message comes before the cache is read) and each
    step's end is marked (`QC_MARK_STEPS`, tests/faults/sitecustomize.py), for `compilations`."""
    cmd = [sys.executable, script, f"--save_dir={save_dir}", "--run_group=g", f"--run_name={name}",
           *([] if dataset_path is None else [f"--dataset_path={dataset_path}"]), *flags]  # fmt: skip
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", **(env_extra or {}))
    if fault is not None:
        env.update(fault_env(fault, root))
    if compiles:
        env.update(JAX_LOG_COMPILES="1", QC_MARK_STEPS="1", PYTHONPATH=os.path.join(root, "tests", "faults"))
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == expect, result.stderr[-3000:]
    return os.path.join(save_dir, "g", name), result


def csv_rows(path, drop_time=True):
    """The rows of a CSV file as dicts ([] when it does not exist), wall-clock columns dropped by default."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if not (drop_time and (k.startswith("time") or "duration" in k))} for r in rows]


def checkpoint_params(run_dir, step):
    with open(os.path.join(run_dir, "checkpoints", f"agent_{step}.msgpack"), "rb") as f:
        payload = serialization.msgpack_restore(f.read())
    return payload["agent"]["network"]["params"]


def assert_same_run(a, b, final_step):
    """Equal eval/env/agent CSV rows (time columns aside), equal parameters at `final_step`, `b` finished."""
    for name in ("eval.csv", "env.csv", "offline_agent.csv", "online_agent.csv"):
        assert csv_rows(os.path.join(a, name)) == csv_rows(os.path.join(b, name)), name
    assert csv_rows(os.path.join(a, "eval.csv")), "the reference run evaluated nothing"
    flat_a = serialization.to_state_dict(checkpoint_params(a, final_step))
    flat_b = serialization.to_state_dict(checkpoint_params(b, final_step))

    def compare(x, y):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                compare(x[k], y[k])
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    compare(flat_a, flat_b)
    assert os.path.isfile(os.path.join(b, "DONE.json"))


_MARK = re.compile(r"^qc-step (offline|online):(\d+)$")
_COMPILING = re.compile(r"\] Compiling (\S+) with global shapes and types (.*)\. Argument mapping")  # absl's line
_EVALUATED = re.compile(r"\] step \d+: eval success")


def compilations(stderr):
    """A driver's steps in order as `(phase, step, compiled, evaluated)`: the programs compiled during that step
    (`"<function> <argument types>"`; what compiled before the loop counts in its first step), and whether it
    evaluated. What compiled after the last step comes as phase `after`. Needs `run_driver(..., compiles=True)`."""
    steps, compiled, evaluated = [], [], False
    for line in stderr.splitlines():
        mark, program = _MARK.match(line), _COMPILING.search(line)
        if mark:
            steps.append((mark.group(1), int(mark.group(2)), compiled, evaluated))
            compiled, evaluated = [], False
        elif program:
            compiled.append(f"{program.group(1)} {program.group(2)}")
        elif _EVALUATED.search(line):
            evaluated = True
    assert steps, "no step marks: was the driver run with compiles=True?"
    return steps + [("after", 0, compiled, evaluated)]


def assert_warm_compiles(stderr, warm_steps=3, fresh=None):
    """Nothing compiled after the warm-up: in each phase a process compiles only in its first `warm_steps` steps
    (the first update, the first log row and run state) and at its first evaluation, never after the loop. A
    program compiled again, or compiled anew at the n-th log, run state, evaluation or last batch, would
    compile at every occurrence on a GPU. With `fresh` (the stderr of a run started afresh): this one (a
    resume) compiles no program that one did not. Returns the number of loop steps checked past the warm-up."""
    seen, checked, late, programs = {}, 0, [], set()
    for phase, step, compiled, evaluated in compilations(stderr):
        programs.update(compiled)
        count, evaluated_before = seen.get(phase, (0, False))
        seen[phase] = (count + 1, evaluated_before or evaluated)
        if phase != "after" and (count < warm_steps or (evaluated and not evaluated_before)):
            continue
        checked += phase != "after"
        late += [f"{phase} step {step}: {p[:300]}" for p in compiled]
    assert not late, "compiled after the warm-up:\n" + "\n".join(late)
    if fresh is not None:
        fresh_programs = {p for _, _, compiled, _ in compilations(fresh) for p in compiled}
        extra = sorted(programs - fresh_programs)
        assert not extra, "compiled by the resumed run only:\n" + "\n".join(p[:300] for p in extra)
    return checked
