"""The paper's figures from run directories (or wandb): success rate against steps, 95% bootstrap CIs.

Usage:
    python scripts/plot_curves.py exp/my_sweep --out_dir=plots/my_sweep
    python scripts/plot_curves.py 'exp/*/2026*_cube-double-*' --per_task --out_dir=plots/cube_double
    python scripts/plot_curves.py --wandb_project=ENTITY/qc --wandb_group=my_sweep --out_dir=plots/wandb

This file is the command line and tells the story; its parts sit beside it in scripts/plotting/: runs.py
(reading runs, labels, order), stats.py (bootstrap), paper.py (the paper's released curves), figure.py (figure,
styles, legend), table.py (`table.md`, `curves.csv`) and compare.py (`--compare`).

Inputs. Each argument is a run directory (it holds `flags.json`), a directory searched recursively
for run directories (a sweep's group directory works as one argument) or a glob (expanded here,
so it may be quoted). With `--wandb_project` the runs of that project (and `--wandb_group`) are
read through wandb's public API too (`read_wandb_runs`): the config is the run's `flags.json`
content and the curve is the history of `eval/success` against the step it was logged at (the
environment step).

Groups. Runs are grouped by a label derived from the resolved agent config in `flags.json`, not from
`--method` (`plotting.runs.label_of` and `describe`): a config of a paper method (the agent's
`method_of`) is labelled with the method's name plus each setting where it differs from the paper's
values for its domain (`h=3`, `N=16`, `alpha=100`) and every other key that differs from the agent's
defaults; any other config (an agent the registry does not know, a config with keys its registered
agent lacks, a combination no paper method has) is labelled from its agent name and the keys that
differ from its defaults (`flags.json` `agent_defaults`, else the registered agent's) and the keys in
which the plotted runs of that agent vary (`show_varying_keys`: every arm of a sweep names its value), never
as a paper method: no paper curve is drawn for it and it never gets a paper method's style, and a label
that would start with a paper method's name gets ` (not the paper's QC)`. ` (generated data)` marks
runs on a locally generated dataset (`flags.json` `datasets`; a run without that record counts as
unknown, see `table.md`). A warning per label says why a label may surprise: an unknown agent
without `agent_defaults` (the label lists every key), a config with keys its registered agent lacks.

Statistics (`bootstrap_curve`). Per task: the mean (or `--aggregate=iqm`) over seeds; per domain:
the mean over the domain's tasks of the per-task means over seeds (the paper's aggregate), or the
IQM over all runs and tasks. 95% confidence intervals come from rliable's stratified bootstrap
(runs resampled with replacement within each task, percentile interval, `--reps` resamples; the
paper used 5000). Steps: a run's evaluation at step `i` is placed at `i` (`main.py` logs offline
step `i` as `i` and online step `i` as `offline_steps + i`); `main_online.py` runs are shifted by
`--online_offset` (default: the offline steps of the `main.py` runs plotted, or the paper's 1M when
there are none, where the paper puts its online-only methods). The curves of a panel are aligned
on the union of their steps: a run without an evaluation at a step, or whose success there is
empty or NaN, contributes nothing there; a task aggregate where no run has a value, or a domain
aggregate where one of its tasks has none, is missing (a gap, never interpolated).

Outputs in `--out_dir`: `curves.png` and `curves.pdf` (one panel per domain, or per task with
`--per_task`; the paper's released curves of the runs' paper methods dashed, for the families the papers ran,
`--no_paper` to leave them out; a family added since names its panels with its own `paper_domain` and `short`),
`table.md` (success at the end of the offline phase and at the end of training, per label
and domain and per label and task, beside the paper's numbers; `(k of n runs)` where a value comes
from fewer runs than the group has) and `curves.csv` (every plotted point, with `runs`, the runs
behind the value, and `runs_in_group`). Where runs logged how much of each chunk they executed (an agent that picks
its prefix, `--method=acsac`), `executed_lengths.png` and `.csv` show the share of each length against steps
(`plotting/lengths.py`).

Bad inputs. A file the plot cannot use (a `flags.json` that lacks what the label needs, an `eval.csv`
with an unreadable cell, a success outside [0, 1], or steps that repeat or go backwards) is refused
with one `error:` line naming the file (and line) and exit status 2 (`InputError`); what the plot can
go on without (a NaN or empty success, a run without evaluations yet, an empty directory) is a
`warning:` line naming the run. The full list: docs/plots.md, "Bad inputs".
"""

import argparse
import os
import sys
import tempfile
from typing import List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

import plotting.compare  # noqa: E402
import plotting.lengths  # noqa: E402
from plotting.figure import (  # noqa: E402,F401 - this module's interface
    DPI,
    METHOD_STYLES,
    draw_figure,
    figure_size,
    paper_methods_drawn,
)
from plotting.paper import PAPER_OFFLINE_STEPS, load_paper  # noqa: E402
from plotting.runs import (  # noqa: E402,F401
    METHOD_ORDER,
    InputError,
    Run,
    check_panels,
    cut_runs,
    data_source,
    domain_and_task,
    find_run_dirs,
    label_of,
    make_wandb_api,
    progress,
    read_eval_csv,
    read_run_dir,
    read_wandb_runs,
    show_varying_keys,
    sorted_labels,
    sorted_panels,
    warn,
    warn_about_labels,
)
from plotting.stats import bootstrap_curve, compute_curves  # noqa: E402,F401
from plotting.table import build_table, write_curves_csv  # noqa: E402
from utils.startup import ArgumentParser  # noqa: E402

# ------------------------------------------------------------------------------------------------ command line


def _offset_arg(value: str):
    if value == "auto":
        return value
    try:
        offset = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number of steps, got {value!r}") from None
    if offset < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {offset}")
    return offset


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def make_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python scripts/plot_curves.py",
        description="Plot success rate against steps for runs of main.py / main_online.py, grouped by method, "
        "with 95% stratified bootstrap confidence intervals and the paper's curves for comparison.",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        type=os.path.expanduser,  # '~' is expanded here too: a quoted glob reaches us as written
        metavar="RUN_DIR_OR_GLOB",
        help="Run directories (with flags.json and eval.csv), directories to search recursively for them "
        "(e.g. a sweep's group directory exp/GROUP), or globs (quoted or not).",
    )
    parser.add_argument(
        "--out_dir",
        default="plots",
        type=os.path.expanduser,
        help="Directory for curves.png, curves.pdf, table.md, curves.csv (default: %(default)s).",
    )
    parser.add_argument(
        "--wandb_project",
        help="Also read the runs of this wandb project (ENTITY/PROJECT, or PROJECT for your default entity) "
        "through wandb's public API; needs network and a wandb login.",
    )
    parser.add_argument("--wandb_group", help="With --wandb_project: only the runs of this group (--run_group).")
    parser.add_argument(
        "--aggregate",
        choices=("mean", "iqm"),
        default="mean",
        help="mean: mean over seeds, per domain the mean over tasks of that (the paper); "
        "iqm: interquartile mean over seeds, per domain over all runs and tasks.",
    )
    parser.add_argument("--per_task", action="store_true", help="One panel per task instead of one per domain.")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="Also write compare.md, compare.csv and compare.png: every (task, method, step) of runs at the "
        "paper's settings beside the released curve, with the verdict of docs/results.md; the flags.json and "
        "eval.csv of the runs behind them go to <out_dir>/runs/<run>/.",
    )
    parser.add_argument("--no_paper", action="store_true", help="Do not overlay the paper's released curves.")
    parser.add_argument(
        "--paper_dir",
        default=os.path.join(ROOT, "data", "paper"),
        help="Directory of the paper's curves (ogbench-agg.csv, ogbench-individual.csv, robomimic-individual.csv).",
    )
    parser.add_argument(
        "--reps",
        type=_positive,
        default=5000,
        help="Bootstrap resamples per confidence interval (default: %(default)s, as the paper).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap resampling (default: %(default)s).")
    parser.add_argument(
        "--online_offset",
        type=_offset_arg,
        default="auto",
        help="Steps added to main_online.py runs (online only) to place them on the paper's axis; auto: the "
        "offline steps of the main.py runs plotted, or 1000000 (where the paper puts online-only methods) "
        "when there are none.",
    )
    return parser


def _online_offset(runs: Sequence[Run], requested) -> int:
    if requested != "auto":
        return requested
    offline = sorted({r.offline_steps for r in runs if r.driver == "main"})
    if not offline:
        return PAPER_OFFLINE_STEPS
    if len(offline) > 1 and any(r.driver == "main_online" for r in runs):
        warn(f"main.py runs with different --offline_steps {offline}: online-only runs start at {offline[-1]}")
    return offline[-1]


def check_out_dir(out_dir: str):
    """`InputError` unless `out_dir` is (or can be made) a writable directory."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"--out_dir={out_dir} is a file, not a directory")
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir):
            pass
    except OSError as e:
        raise InputError(f"--out_dir={out_dir}: cannot write there ({e.strerror or e})") from None


def run(args, wandb_api=None) -> int:
    """The command: read, aggregate, plot, write; raises `InputError` for bad inputs."""
    if not args.runs and not args.wandb_project:
        raise InputError("no runs given: pass run directories, a sweep directory or globs, or --wandb_project")
    if args.wandb_group and not args.wandb_project:
        raise InputError("--wandb_group needs --wandb_project")
    check_out_dir(args.out_dir)  # before reading anything: the whole bootstrap must not end in a traceback
    runs: List[Run] = []
    sources: List[Optional[str]] = []  # each run's directory (None: from wandb)
    if args.runs:
        directories = find_run_dirs(args.runs)
        for path in progress(directories, len(directories), "reading runs"):
            loaded = read_run_dir(path)
            if loaded is not None:
                runs.append(loaded)
                sources.append(path)
    if args.wandb_project:
        api = wandb_api if wandb_api is not None else make_wandb_api()
        found = read_wandb_runs(api, args.wandb_project, args.wandb_group)
        runs += found
        sources += [None] * len(found)
    if not runs:
        raise InputError("none of the runs found has an evaluation yet (eval.csv rows)")
    # Every arm of a sweep names the keys its runs vary in; then the partial-chunk evaluations (ac<n>/ columns).
    runs = show_varying_keys(runs)
    whole_runs = list(runs)  # before the partial-chunk evaluations: what the executed-length figure reads
    runs += [cut for run, path in zip(runs, sources, strict=True) if path for cut in cut_runs(run, path)]
    warn_about_labels(runs)
    check_panels(runs)
    paper = {} if args.no_paper else load_paper(args.paper_dir)
    offset = _online_offset(runs, args.online_offset)
    for panel in sorted_panels(runs, False):
        in_panel = [r for r in runs if r.domain == panel]
        for label in sorted_labels(in_panel):
            group = [r for r in in_panel if r.label == label]
            print(f"{label} on {panel}: {len({r.task for r in group})} task(s), {len(group)} run(s)")
    curves = compute_curves(runs, args.per_task, args.aggregate, args.reps, args.seed, offset)
    os.makedirs(args.out_dir, exist_ok=True)
    paths, (width, height) = draw_figure(curves, paper, args.per_task, offset, args.aggregate, args.out_dir)
    inputs = " ".join(args.runs) + (f" wandb:{args.wandb_project}" if args.wandb_project else "")
    if args.wandb_group:
        inputs += f" (group {args.wandb_group})"
    table_path = os.path.join(args.out_dir, "table.md")
    with open(table_path, "w") as f:
        f.write(build_table(runs, paper, args.aggregate, args.reps, args.seed, offset, inputs.strip()))
    csv_path = os.path.join(args.out_dir, "curves.csv")
    write_curves_csv(csv_path, curves)
    lengths = plotting.lengths.write_lengths(whole_runs, sources, args.out_dir)
    if args.compare:
        if not paper:
            raise InputError("--compare needs the paper's curves: drop --no_paper")
        rows = plotting.compare.compare_rows(runs, paper, args.reps, args.seed)
        with open(os.path.join(args.out_dir, "compare.md"), "w") as f:
            f.write(plotting.compare.compare_table(rows, inputs.strip()))
        plotting.compare.write_compare_csv(os.path.join(args.out_dir, "compare.csv"), rows)
        if rows:
            plotting.compare.draw_compare(rows, paper, os.path.join(args.out_dir, "compare.png"))
            plotting.compare.copy_records(rows, args.out_dir)
        said = ", ".join(f"{sum(r.verdict == v for r in rows)} {v}" for v in ("reproduced", "below", "above"))
        print(f"compared {len(rows)} (task, method, step) rows with the released curves: {said}")
    longest = max(int(r.x(offset).max()) for r in runs)
    if paper_methods_drawn(curves, paper, args.per_task) and longest < 0.2 * 2 * PAPER_OFFLINE_STEPS:
        print(f"note: the runs reach step {longest:,}; the paper's curves span 2M steps (--no_paper to zoom in)")
    print(f"wrote {paths[0]} ({width}x{height} px), {paths[1]}, {table_path}, {', '.join([csv_path] + lengths)}")
    return 0


def main(argv: Optional[Sequence[str]] = None, wandb_api=None) -> int:
    """Entry point; `wandb_api` replaces `wandb.Api()` (tests pass a fake one)."""
    args = make_parser().parse_args(argv)
    try:
        return run(args, wandb_api)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
