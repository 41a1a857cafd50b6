"""The figure of scripts/plot_curves.py: panels, styles and legend (`curves.png`, `curves.pdf`).

What the figure shows is told once, in the docstring of scripts/plot_curves.py ("Outputs").
"""

import math
import os
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from plotting.paper import PAPER_OFFLINE_STEPS, PaperCurve, paper_curve
from plotting.runs import label_key, sorted_labels, task_key
from plotting.stats import Curve

DPI = 150
LEGEND_FONT_PT = 8
# (colour, marker) of the paper's methods, by the labels of the paper's figures: the marker tells methods
# apart in black and white. A label no entry has gets a free style of EXTRA_STYLES (then of these).
METHOD_STYLES = {
    "QC": ("#d62728", "o"),
    "QC-FQL": ("#ff7f0e", "s"),
    "BFN-n": ("#1f77b4", "^"),
    "BFN": ("#17becf", "v"),
    "FQL-n": ("#2ca02c", "D"),
    "FQL": ("#bcbd22", "P"),
    "RLPD": ("#7f7f7f", "X"),
    "RLPD-AC": ("#9467bd", "*"),
    "QC-RLPD": ("#8c564b", "h"),
}
EXTRA_STYLES = [("#000000", ">"), ("#e377c2", "p"), ("#393b79", "8"), ("#637939", "d"), ("#843c39", "H")]


def panel_grid(num_panels: int, per_task: bool) -> Tuple[int, int]:
    """`(rows, columns)` of panels: up to 3 per row, 5 with `--per_task`."""
    ncols = min(num_panels, 5 if per_task else 3)
    return math.ceil(num_panels / ncols), ncols


def figure_size(num_panels: int, legend_rows: int, per_task: bool) -> Tuple[float, float]:
    """Figure size in inches: 3.4 x 2.7 per panel plus 0.2 per legend row."""
    nrows, ncols = panel_grid(num_panels, per_task)
    return 3.4 * ncols + 0.3, 2.7 * nrows + 0.2 * legend_rows + 0.45


def legend_columns(num_panels: int, per_task: bool) -> int:
    """Legend columns that fit the figure's width (about 2.3 inches each)."""
    return max(1, int(figure_size(num_panels, 0, per_task)[0] / 2.3))


def legend_text_width(width: float, columns: int) -> int:
    """Characters of legend text (8 pt) that fit one of `columns` columns of a figure `width` inches wide,
    besides each entry's line handle and the spacing between columns."""
    return max(12, int(((width * 72 - 12) / columns - LEGEND_FONT_PT * 4) / (0.58 * LEGEND_FONT_PT)))


def _fitting_columns(width: float, longest: int, max_columns: int) -> int:
    """At most `max_columns`, fewer where the longest legend entry would not fit its column on one line."""
    columns = max_columns
    while columns > 1 and longest > legend_text_width(width, columns):
        columns -= 1
    return columns


def step_scale(curves: Sequence[Curve], with_paper: bool) -> Tuple[float, str]:
    """`(divisor, unit)` of the x axis: millions where the paper's curves (up to 1-2M steps) are drawn or a
    run reaches 100k steps, else thousands, else steps, so that short runs get readable ticks."""
    last = max((float(np.max(c.x)) for c in curves if len(c.x)), default=0.0)
    if with_paper or last >= 1e5:
        return 1e6, "millions"
    return (1e3, "thousands") if last >= 1e3 else (1.0, "")


def _styles(curves: Sequence[Curve]) -> Dict[str, Tuple[str, str]]:
    """(colour, marker) per label: a paper method's own for its plain label, else its method's when no
    other label has it, else the next free one. A run of no paper method never gets a method's own."""
    method_of = {c.label: c.method for c in curves}
    labels = sorted_labels(curves)
    styles, used = {}, set()
    for label in labels:
        if label == method_of[label] and label in METHOD_STYLES:
            styles[label] = METHOD_STYLES[label]
            used.add(styles[label])
    spare = [s for s in EXTRA_STYLES + list(METHOD_STYLES.values()) if s not in used]
    for label in labels:
        if label not in styles:
            own = METHOD_STYLES.get(method_of[label]) if method_of[label] is not None else None
            styles[label] = own if own and own not in used else (spare.pop(0) if spare else ("#000000", "."))
            used.add(styles[label])
            if styles[label] in spare:
                spare.remove(styles[label])
    return styles


def legend_plan(curves: Sequence[Curve], paper: Dict, per_task: bool):
    """What the figure draws besides the runs' curves: `(styles, paper methods, groups, legend, columns)`.

    `styles`: `{label: (colour, marker)}`; `paper methods`: the methods whose released curve is drawn (only
    runs' paper methods, never a label's); `groups`: `(label, paper method or None)` in legend order;
    `legend`: `(name, style, dashed)` entries, `''` for a blank; `columns`: legend columns.
    """
    styles = _styles(curves)
    methods_drawn = paper_methods_drawn(curves, paper, per_task)
    num_panels = len({c.panel for c in curves})
    groups = [(label, next(c.method for c in curves if c.label == label)) for label in sorted_labels(curves)]
    longest = max([len(label) for label, _ in groups] + [len(f"{m} (paper)") for m in methods_drawn], default=0)
    width = figure_size(num_panels, 0, per_task)[0]
    max_columns = _fitting_columns(width, longest, legend_columns(num_panels, per_task))
    legend, columns = _legend_entries(groups, methods_drawn, styles, max_columns)
    return styles, methods_drawn, groups, legend, columns


def paper_methods_drawn(curves: Sequence[Curve], paper: Dict, per_task: bool) -> List[str]:
    """The paper methods whose released curve the figure draws in some panel (in legend order); [] for none."""
    drawn = {c.method for c in curves if paper and _panel_paper(curves, paper, c.panel, c.method, per_task)}
    return sorted(drawn, key=lambda method: label_key(method, method))


def draw_figure(
    curves: Sequence[Curve],
    paper: Dict,
    per_task: bool,
    online_offset: int,
    aggregate: str,
    out_dir: str,
) -> Tuple[List[str], Tuple[int, int]]:
    """Write `curves.png` and `curves.pdf`; return their paths and the PNG size in pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    panels = list(dict.fromkeys(c.panel for c in curves))
    styles, paper_methods, groups, legend, columns = legend_plan(curves, paper, per_task)
    nrows, ncols = panel_grid(len(panels), per_task)
    # A label longer than its column wraps onto more lines (agents' labels list the keys they differ in).
    text_width = legend_text_width(figure_size(len(panels), 0, per_task)[0], columns)
    names = [textwrap.fill(name, text_width, break_on_hyphens=False) for name, _, _ in legend]
    lines = max([name.count("\n") + 1 for name in names], default=1)
    width, height = figure_size(len(panels), math.ceil(len(legend) / columns) * lines, per_task)
    scale, unit = step_scale(curves, bool(paper_methods))
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", squeeze=False)
    stat = "IQM" if aggregate == "iqm" else "Success rate"
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.axis("off")
            continue
        panel = panels[index]
        in_panel = [c for c in curves if c.panel == panel]
        boundaries = set()
        for c in in_panel:
            color, marker = styles[c.label]
            xm = c.x / scale
            isolated = _isolated(c.mean)
            every = max(1, len(xm) // 12) if len(xm) > 25 else 1
            marked = sorted(set(range(0, len(xm), every)) | set(isolated))
            ax.fill_between(xm, c.low, c.high, color=color, alpha=0.18, linewidth=0)
            ax.vlines(xm[isolated], c.low[isolated], c.high[isolated], color=color, alpha=0.4, linewidth=2)
            ax.plot(xm, c.mean, color=color, marker=marker, markersize=4, markevery=marked, linewidth=1.6)
            for r in c.runs:
                if r.driver == "main" and r.offline_steps > 0 and r.online_steps > 0:
                    boundaries.add(r.offline_steps)
                elif r.driver == "main_online" and online_offset > 0:
                    boundaries.add(online_offset)
        for method in paper_methods:
            curve = _panel_paper(curves, paper, panel, method, per_task)
            if curve is None:
                continue
            color, marker = _paper_style(method, groups, styles)
            if curve.low is not None:
                ax.fill_between(curve.x, curve.low, curve.high, color=color, alpha=0.07, linewidth=0)
            ax.plot(curve.x, curve.mean, color=color, linestyle="--", linewidth=1.1, marker=marker, markersize=3.5)
            ax.lines[-1].set_markerfacecolor("white")
            if curve.x.max() > PAPER_OFFLINE_STEPS / 1e6:  # the paper's online phase follows (not DQC's results)
                boundaries.add(PAPER_OFFLINE_STEPS)
        transform = blended_transform_factory(ax.transData, ax.transAxes)
        for b in sorted(boundaries):
            ax.axvline(b / scale, color="0.35", linestyle=":", linewidth=1.0)
            if b == max(boundaries):
                box = {"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 0.3}
                for text, align in (("offline ", "right"), (" online", "left")):
                    ax.text(
                        b / scale,
                        0.98,
                        text,
                        ha=align,
                        va="top",
                        fontsize=7,
                        color="0.35",
                        transform=transform,
                        bbox=box,
                    )
        tasks = sorted({t for c in in_panel for t in c.tasks})
        title = panel if per_task else f"{panel} ({len(tasks)} task{'s' if len(tasks) != 1 else ''})"
        ax.set_title(title, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(left=0)
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.tick_params(labelsize=8)
        if index % ncols == 0:
            ax.set_ylabel(stat, fontsize=9)
        if index // ncols == nrows - 1 or index + ncols >= len(panels):
            offline_only = all(r.online_steps == 0 and r.driver == "main" for c in curves for r in c.runs)
            what = "Offline steps" if offline_only else "Steps"
            unit_text = f" ({unit})" if unit else ""
            ax.set_xlabel(f"{what}{unit_text}" if offline_only else f"{what}{unit_text}: offline, then online",
                          fontsize=8)  # fmt: skip
    handles = [
        Line2D(
            [],
            [],
            color=color,
            marker=marker,
            markersize=4,
            linestyle="--" if dashed else "-",
            markerfacecolor="white" if dashed else color,
            linewidth=1.1 if dashed else 1.6,
        )
        for _, (color, marker), dashed in legend
    ]
    for handle, (name, _, _) in zip(handles, legend, strict=True):
        handle.set_visible(bool(name))
    fig.legend(
        handles,
        names,
        loc="outside lower center",
        ncol=columns,
        fontsize=LEGEND_FONT_PT,
        frameon=False,
    )
    paths = [os.path.join(out_dir, "curves.png"), os.path.join(out_dir, "curves.pdf")]
    fig.savefig(paths[0], dpi=DPI)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths, (round(width * DPI), round(height * DPI))


def _isolated(values: np.ndarray) -> List[int]:
    """Indices of finite values whose neighbours are missing: no line reaches them, so they get a
    marker and a vertical CI bar of their own."""
    finite = np.isfinite(values)
    left = np.concatenate([[False], finite[:-1]])
    right = np.concatenate([finite[1:], [False]])
    return [int(i) for i in np.flatnonzero(finite & ~left & ~right)]


def _legend_entries(
    groups: Sequence[Tuple[str, Optional[str]]], paper_methods: Sequence[str], styles: Dict, max_columns: int
):
    """Legend entries `(name, style, dashed)` and the number of columns: each `(label, paper method)`
    group above the paper's curve of its method (blank entries where there is none), column by column."""
    pairs, placed = [], set()
    for label, method in groups:
        paper = None
        if method in paper_methods and method not in placed:
            paper = (f"{method} (paper)", _paper_style(method, groups, styles), True)
            placed.add(method)
        pairs.append(((label, styles[label], False), paper))
    blank = ("", ("#ffffff", ""), False)
    if not any(paper for _, paper in pairs):
        return [ours for ours, _ in pairs], min(max(len(pairs), 1), max_columns)
    per_column = math.ceil(len(pairs) / min(len(pairs), max_columns))
    columns = math.ceil(len(pairs) / per_column)
    pairs += [(blank, None)] * (per_column * columns - len(pairs))
    entries = []
    for ours, paper in pairs:
        entries += [ours, paper or blank]
    while entries and entries[-1] is blank and columns == 1:
        entries.pop()
    return entries, columns


def _paper_style(method: str, groups: Sequence[Tuple[str, Optional[str]]], styles: Dict) -> Tuple[str, str]:
    """The style of the paper's curve of `method`: its plain label's, else its first variant's."""
    if method in styles:
        return styles[method]
    own = next((styles[label] for label, m in groups if m == method), None)
    return own or METHOD_STYLES.get(method, ("#000000", "."))


def _panel_paper(curves, paper, panel, method, per_task) -> Optional[PaperCurve]:
    shown = [c for c in curves if c.panel == panel and c.method == method]
    if not all(r.paper_family for c in shown for r in c.runs):  # a family the papers did not run: no paper curve
        return None
    tasks = sorted({t for c in shown for t in c.tasks}, key=task_key)
    goal_conditioned = all(r.goal_conditioned for c in shown for r in c.runs)
    return paper_curve(paper, method, panel, tasks, per_task, goal_conditioned) if tasks else None
