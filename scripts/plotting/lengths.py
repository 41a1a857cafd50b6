"""How much of each chunk the runs executed (`executed_lengths.png`, `executed_lengths.csv`).

Agents that choose a prefix of each chunk (`--method=acsac`) log the share of chunks executed at each length
`k = 1..h` with every evaluation (`executed_length.share_<k>` and `executed_length.mean` in `eval.csv`,
docs/outputs.md). Per label, the shares are averaged over the label's runs at each logged step; one panel per
label shows them stacked, so a policy that always executes whole chunks is one band at `k = h`.
"""

import csv
import math
import os
import re
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from plotting.runs import InputError, Run, sorted_labels

_SHARE_RE = re.compile(r"^executed_length\.share_(\d+)$")


def read_lengths(run_dir: str) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """`(steps (E,), shares (E, h))` from a run's `eval.csv`: column `k - 1` is the share of chunks executed at
    length `k`, NaN where the row has no value. None when the run logged no executed lengths (whole chunks).

    Raises:
        InputError: a share cell that is not a number in [0, 1].
    """
    path = os.path.join(run_dir, "eval.csv")
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = {int(m.group(1)): name for name in reader.fieldnames or () if (m := _SHARE_RE.match(name))}
        rows = list(reader)
    if not columns or not rows:
        return None
    horizon = max(columns)
    steps, shares = [], np.full((len(rows), horizon), math.nan)
    for i, row in enumerate(rows):
        steps.append(int(float(row["step"])))
        for k, name in columns.items():
            cell = (row.get(name) or "").strip()
            if not cell:
                continue
            try:
                value = float(cell)
            except ValueError:
                raise InputError(f"{path}:{i + 2}: {name} {cell!r} is not a number") from None
            if not math.isnan(value) and not 0.0 <= value <= 1.0:
                raise InputError(f"{path}:{i + 2}: {name} {cell!r} is not a share in [0, 1]")
            shares[i, k - 1] = value
    return np.asarray(steps, np.int64), shares


def mean_shares(parts: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(steps (S,), shares (S, h), runs (S,))`: on the union of the runs' steps, the mean over the runs that
    have a value there (a run with a shorter chunk counts 0 for the lengths it cannot execute)."""
    horizon = max(s.shape[1] for _, s in parts)
    steps = np.unique(np.concatenate([st for st, _ in parts]))
    total, count = np.zeros((steps.size, horizon)), np.zeros(steps.size, np.int64)
    for run_steps, shares in parts:
        padded = np.zeros((shares.shape[0], horizon))
        padded[:, : shares.shape[1]] = shares
        for row, step in zip(padded, run_steps, strict=True):
            if np.isnan(row).any():
                continue
            at = np.searchsorted(steps, step)
            total[at] += row
            count[at] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count[:, None]
    keep = count > 0
    return steps[keep], mean[keep], count[keep]


def write_lengths(runs: Sequence[Run], sources: Sequence[Optional[str]], out_dir: str) -> List[str]:
    """`executed_lengths.csv` and `.png` in `out_dir` for the labels whose runs logged executed lengths; `[]`
    (nothing written) when none did. CSV columns: label, step, runs, mean, share_1..share_h."""
    groups: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
    for run, source in zip(runs, sources, strict=True):
        parts = read_lengths(source) if source else None
        if parts is not None:
            groups.setdefault(run.label, []).append(parts)
    if not groups:
        return []
    labels = sorted_labels([r for r in runs if r.label in groups])
    table = {label: mean_shares(groups[label]) for label in labels}
    horizon = max(shares.shape[1] for _, shares, _ in table.values())
    csv_path = os.path.join(out_dir, "executed_lengths.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "step", "runs", "mean"] + [f"share_{k}" for k in range(1, horizon + 1)])
        for label, (steps, shares, count) in table.items():
            for step, row, n in zip(steps, shares, count, strict=True):
                padded = list(row) + [0.0] * (horizon - row.size)
                mean = float(np.dot(np.arange(1, horizon + 1), padded))
                writer.writerow([label, int(step), int(n), f"{mean:.6g}"] + [f"{v:.6g}" for v in padded])
    return [csv_path, _draw(table, horizon, os.path.join(out_dir, "executed_lengths.png"))]


def _draw(table, horizon: int, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table), figsize=(3.6 * len(table) + 0.4, 3.0), squeeze=False)
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, horizon))
    for ax, (label, (steps, shares, count)) in zip(axes[0], table.items(), strict=True):
        padded = np.zeros((steps.size, horizon))
        padded[:, : shares.shape[1]] = shares
        names = [f"{k}" for k in range(1, horizon + 1)]
        if steps.size == 1:  # one evaluation: a stacked bar, as an area needs two steps
            bottoms = np.concatenate([[0.0], np.cumsum(padded[0])[:-1]])
            ax.bar([0], padded[0], bottom=bottoms, color=colours, width=0.5, label=names)
            ax.set_xticks([0], [f"{int(steps[0]):,}"])
        else:
            ax.stackplot(steps, padded.T, colors=colours, labels=names)
            ax.set_xlim(steps.min(), steps.max())
        # A label wider than the panel (an agent's name and the keys it differs in) wraps onto more lines.
        ax.set_title(textwrap.fill(f"{label} ({int(count.max())} run(s))", 44), fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of chunks")
    axes[0][-1].legend(
        title="actions executed", fontsize=7, title_fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5)
    )
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
