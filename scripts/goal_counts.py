"""How often an OGBench data file reaches each task's goal, for a file already on disk.

Usage:
    python scripts/goal_counts.py ~/.ogbench/data/puzzle-3x3-play-v0.npz [--tasks=1-5] [--dataset_name=NAME]

For each task it relabels the file as a single-task run of that task loads it (the 'pre' success timing of the
paper's data) and prints the rows whose mask is 0 (the state is in the task's goal) and the entries into the goal
(a row not in it followed, in the same trajectory, by one in it): the transitions a critic learns the goal from.
`python -m envs.generate_dataset` prints the same when it finishes, and a run's `Data:` line and `flags.json`
`datasets[0].goal` give its own task's counts (docs/datasets.md, section 9). The dataset (`puzzle-3x3-play-v0`) is
read from the file's generator record, else from its name; `--dataset_name` sets it. Exit status 2 with one
`error:` line for a file that is missing, of no single-task domain, or that does not fit the dataset.
"""

import argparse
import os
import sys
from typing import Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sweep  # noqa: E402  (its list parser: --tasks=1,3-5)
from envs import generate_dataset, ogbench, provenance  # noqa: E402


def dataset_name_of(path: str) -> Optional[str]:
    """The dataset a file holds: its generator record's `dataset_name`, else its name up to `-v0`
    (`puzzle-3x3-play-v0-draw1.npz` -> `puzzle-3x3-play-v0`); None when neither says."""
    record = provenance.read_generator_metadata(path) or {}
    if isinstance(record.get("dataset_name"), str):
        return record["dataset_name"]
    stem = os.path.basename(path)
    return stem[: stem.index("-v0") + 3] if "-v0" in stem else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/goal_counts.py", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="An OGBench npz file of a single-task domain (generated or official).")
    parser.add_argument("--tasks", default="1-5", help="Task numbers, a list or ranges (default: 1-5).")
    parser.add_argument("--dataset_name", default=None, help="e.g. puzzle-3x3-play-v0 (default: from the file).")
    args = parser.parse_args(argv)
    path = os.path.expanduser(args.path)
    try:
        tasks = sweep.parse_int_list(args.tasks, "tasks", 1, ogbench.NUM_TASKS)
        if not os.path.isfile(path):
            raise ValueError(f"{path} is no file")
        name = args.dataset_name or dataset_name_of(path)
        if name is None:
            raise ValueError(f"{path}: no generator record and no -v0 in its name; pass --dataset_name")
        counts = generate_dataset.file_goal_counts(path, name, tasks)
    except (ValueError, sweep.InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{path} ({name}, sha256 {provenance.sha256_file(path)}):")
    for task, c in counts.items():
        print(f"  {generate_dataset.goal_counts_text(task, c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
