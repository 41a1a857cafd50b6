"""How long a run state takes to write at paper size: `runner.resume.write_state` of an agent and a replay buffer.

A preempted SLURM job gets SIGTERM and then KillWait (30 s by default) before SIGKILL: the driver must write its
state (agent, replay buffer, random streams) in that time, or the run resumes from its previous state. This measures
that write with the project's own `runner.resume.write_state` on a directory of your choice (the filesystem of
`--save_dir`: local disk, node-local scratch, NFS, Lustre...), so that the advice of docs/sweeps.md can be checked
where the runs will live.

    python scripts/bench_state.py                               # local disk (a temporary directory), 2M rows
    python scripts/bench_state.py --dir=/shared/scratch/$USER   # the filesystem the runs write to
    python scripts/bench_state.py --filled=500000               # a buffer a quarter full
    python scripts/bench_state.py --copy_to=/shared/$USER        # plus: copy the state from --dir to there

Defaults: the paper's agent (ACFQL, 4x512 actor and critic networks, 2 critics, horizon 5) and a cube-triple-sized
replay buffer (2,000,000 rows, observations of 70 float32, actions of 5), every row filled with random values. Each
repeat writes one state into a fresh directory under `--dir` and removes it afterwards. Reported per repeat:

* `write`: `write_state` itself (what the driver waits for; on local disk the data may still sit in the page cache,
  which survives the process being killed);
* `durable`: `write` plus an fsync of every file of the state (what a node failure or a network filesystem's close
  would wait for);
* `copy`: with `--copy_to`, copying the finished state there plus fsync (write to node-local scratch, then copy).

The state's size on disk is reported too: `write_state` decides what it writes (today the whole buffer storage; once
states hold only the filled rows, `--filled` changes it), so rerun this after such a change.
"""

import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

from utils.startup import ArgumentParser  # noqa: E402


def paper_agent(obs_dim: int, action_dim: int, horizon: int):
    """ACFQL with the paper's defaults (`agents/acfql.get_config`), built for `obs_dim` observations."""
    import numpy as np

    from agents import acfql

    config = acfql.get_config()
    config["horizon_length"] = horizon
    return acfql.ACFQLAgent.create(0, np.zeros(obs_dim, np.float32), np.zeros(action_dim, np.float32), config)


def filled_buffer(rows: int, filled: int, obs_dim: int, action_dim: int, seed: int = 0):
    """A `ReplayBuffer` of `rows` storage rows whose first `filled` rows hold random transitions."""
    import numpy as np

    from utils.datasets import ReplayBuffer

    rng = np.random.default_rng(seed)
    example = {
        "observations": np.zeros(obs_dim, np.float32),
        "actions": np.zeros(action_dim, np.float32),
        "rewards": np.float32(0),
        "terminals": np.float32(0),
        "masks": np.float32(1),
        "next_observations": np.zeros(obs_dim, np.float32),
    }
    buffer = ReplayBuffer.create(example, size=rows, rng=rng)
    fields = dict(buffer.items())
    for array in fields.values():
        chunk = 1 << 18
        for start in range(0, filled, chunk):  # in chunks: no second full-size array in memory
            stop = min(filled, start + chunk)
            array[start:stop] = rng.standard_normal((stop - start, *array.shape[1:]), dtype=np.float32)
    return ReplayBuffer(fields, rng=rng, size=filled, pointer=filled % rows)


def fsync_tree(path: str):
    """fsync every file under `path`, then the directories."""
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def main(argv=None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="Where the states are written (default: a temporary directory).")
    parser.add_argument("--rows", type=int, default=2_000_000, help="Replay buffer storage rows (default: 2M).")
    parser.add_argument("--filled", type=int, default=None, help="Rows holding transitions (default: all).")
    parser.add_argument("--obs_dim", type=int, default=70, help="Observation size (default: 70, cube-triple-like).")
    parser.add_argument("--action_dim", type=int, default=5, help="Action size (default: 5).")
    parser.add_argument("--horizon", type=int, default=5, help="Chunk length of the agent (default: 5).")
    parser.add_argument("--repeats", type=int, default=3, help="States written (default: 3).")
    parser.add_argument("--copy_to", default=None, help="Also time a copy of each state to this directory.")
    parser.add_argument("--json", action="store_true", help="Print one JSON line instead of the table.")
    args = parser.parse_args(argv)
    filled = args.rows if args.filled is None else args.filled
    if not 0 <= filled <= args.rows:
        parser.error(f"--filled={filled} is not in [0, --rows={args.rows}]")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from runner import resume

    start = time.perf_counter()
    agent = paper_agent(args.obs_dim, args.action_dim, args.horizon)
    buffer = filled_buffer(args.rows, filled, args.obs_dim, args.action_dim)
    setup_s = time.perf_counter() - start
    base = tempfile.mkdtemp(prefix="bench_state_", dir=args.dir)
    results = []
    try:
        for repeat in range(args.repeats):
            run_dir = os.path.join(base, f"run{repeat}")
            start = time.perf_counter()
            path = resume.write_state(run_dir, {"global_step": 1}, agent, buffer, keep=None)
            write_s = time.perf_counter() - start
            fsync_tree(path)
            durable_s = time.perf_counter() - start
            result = {
                "write_s": round(write_s, 2),
                "durable_s": round(durable_s, 2),
                "state_mb": round(tree_bytes(path) / 1e6, 1),
                "agent_mb": round(os.path.getsize(os.path.join(path, "agent.msgpack")) / 1e6, 1),
            }
            if args.copy_to:
                target = tempfile.mkdtemp(prefix="bench_state_copy_", dir=args.copy_to)
                try:
                    start = time.perf_counter()
                    shutil.copytree(path, os.path.join(target, "state"))
                    fsync_tree(target)
                    result["copy_s"] = round(time.perf_counter() - start, 2)
                finally:
                    shutil.rmtree(target, ignore_errors=True)
            shutil.rmtree(run_dir, ignore_errors=True)
            results.append(result)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary = {
        "dir": args.dir or tempfile.gettempdir(),
        "rows": args.rows,
        "filled": filled,
        "obs_dim": args.obs_dim,
        "setup_s": round(setup_s, 1),
        "repeats": results,
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"run state: agent (ACFQL 4x512, horizon {args.horizon}) + replay buffer of {args.rows:,} rows "
        f"({filled:,} filled), obs {args.obs_dim} float32, written under {summary['dir']}"
    )
    header = f"{'repeat':>6} {'state MB':>9} {'agent MB':>9} {'write s':>8} {'MB/s':>7} {'durable s':>10}"
    print(header + (f" {'copy s':>7}" if args.copy_to else ""))
    for i, r in enumerate(results):
        rate = r["state_mb"] / r["write_s"] if r["write_s"] > 0 else float("inf")
        line = f"{i:>6} {r['state_mb']:>9.1f} {r['agent_mb']:>9.1f} {r['write_s']:>8.2f} {rate:>7.0f}"
        line += f" {r['durable_s']:>10.2f}"
        print(line + (f" {r['copy_s']:>7.2f}" if args.copy_to else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
