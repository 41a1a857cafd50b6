"""Micro-benchmarks for qc components.

Usage:
    python scripts/benchmark.py                       # run every section
    python scripts/benchmark.py --only sample_sequence
    python scripts/benchmark.py --list

Each section is a function `(args) -> None` registered in BENCHMARKS under its name; it prints
one line per figure it measures. To add a section, write the function and add it to the dict.
Sections import what they need themselves, so one section's dependencies never slow another.
"""

import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

from utils.startup import ArgumentParser  # noqa: E402


def _median_ms(fn, repeats, warmup):
    """Median wall time of `fn()` in milliseconds over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench_sample_sequence(args):
    """One `Dataset.sample_sequence(256, 5, 0.99)` call on a 1M-row state dataset.

    Obs dim 28, action dim 5, trajectories of 1000 rows (a terminal every 1000th row), masks 1.
    """
    import numpy as np

    from utils.datasets import Dataset

    n, ob_dim, action_dim, traj_len = 1_000_000, 28, 5, 1000
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((n + 1, ob_dim), dtype=np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[traj_len - 1 :: traj_len] = 1.0
    dataset = Dataset.create(
        observations=observations[:-1],
        next_observations=observations[1:],
        actions=rng.uniform(-1, 1, size=(n, action_dim)).astype(np.float32),
        rewards=rng.standard_normal(n, dtype=np.float32),
        terminals=terminals,
        masks=np.ones(n, dtype=np.float32),
        seed=0,
    )
    ms = _median_ms(lambda: dataset.sample_sequence(256, 5, 0.99), args.repeats, args.warmup)
    print(
        f"sample_sequence: {ms:.3f} ms median per call "
        f"(batch 256, H=5, {n:,} rows, obs dim {ob_dim}, action dim {action_dim}, "
        f"{args.repeats} calls after {args.warmup} warm-up)"
    )


BENCHMARKS = {
    "sample_sequence": bench_sample_sequence,
}


def main(argv=None):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        choices=sorted(BENCHMARKS),
        action="append",
        help="run only this section (repeatable); default: all sections",
    )
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per figure (median reported)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f"--repeats={args.repeats} must be >= 1 and --warmup={args.warmup} >= 0")
    if args.list:
        for name, fn in BENCHMARKS.items():
            print(f"{name}: {fn.__doc__.splitlines()[0]}")
        return
    for name in args.only or BENCHMARKS:
        BENCHMARKS[name](args)


if __name__ == "__main__":
    main()
