"""The report's accuracy figures: needles by depth and length, accuracy against length,
multi-hop chains (registered before the cost figures of report/figures/cost_figures.py).

Each draws the task's chance level and its "values in context" floor (attnbench/verdicts/quality.py),
each design's 95% interval, and a design that did not learn the task at its training length
as a thin dotted line labelled so: it is shown, never read as a result.
"""

from __future__ import annotations


import textwrap
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from attnbench.verdicts.quality import pooled_acc

from attnbench.verdicts.readings import NOT_MEASURED, metric, pooled

from attnbench.basics import fmt_len
from attnbench.report.frame import cell_state, design_order, designs, haystack_counts, mark_partial
from attnbench.report.style import facet_grid, figure, figure_legend, len_axis, plot_status_series, spare, style


@figure(
    "niah_heatmap",
    "Needle-in-a-haystack: accuracy by depth and context length",
    ("niah/acc",),
    "Each cell: mean accuracy over seeds (red 0 to green 1, the number where it fits the cell); the colour bar "
    "marks the task's chance level (dotted) and values-in-context floor (dashed). Hatched grey: skipped; hatched "
    "red: failed (see the records); plain light grey: not run for this design; dotted: a partial cell, fewer "
    "haystacks than planned. A panel titled 'did not learn the task' is a model that did not learn it at its "
    "training length.",
)
def niah_heatmap(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "niah/acc")
    if d.empty:
        return None
    d = mark_partial(d.assign(task=d["task"].fillna("")), haystack_counts(df))
    facets = [(n, t) for n in designs(d) for t in sorted(d["task"].unique()) if not d[(d["design"] == n) & (d["task"] == t)].empty]
    lens = sorted(d["context_len"].dropna().unique())
    depths = sorted(d["depth"].dropna().unique())
    if not lens or not depths:
        return None
    cols = 3
    fig, axes = facet_grid(len(facets), max_cols=cols, height=1.2 + 0.42 * len(depths))
    import matplotlib

    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#eeeeee")
    im = None
    kinds: set[str] = set()
    cells = []  # (ax, grid, marks) to number once the layout has sized the cells
    for k, (ax, (name, task)) in enumerate(zip(axes, facets)):
        g = d[(d["design"] == name) & (d["task"] == task)]
        grid, marks = _heatmap_cells(g, depths, lens)
        im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        for i in range(len(depths)):
            for j in range(len(lens)):
                mark = marks.get((i, j), "not run")
                kinds.add(mark)
                if mark in HEATMAP_CELLS and mark != "not run":
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, **HEATMAP_CELLS[mark]))
        cells.append((ax, grid, marks))
        ax.set_xticks(range(len(lens)), [fmt_len(x) for x in lens], rotation=90 if len(lens) > 5 else 0)
        ax.set_yticks(range(len(depths)), [f"{100 * x:g}%" if k % cols == 0 else "" for x in depths])
        ax.tick_params(length=2, pad=2)
        ax.grid(False)
        ax.set_title(
            f"{name}"
            + (f" ({task})" if task and d["task"].nunique() > 1 else "")
            + ("\n(did not learn the task)" if learned_of(g) is False else ""),
            fontsize=8,
        )
    fig.supylabel("needle depth", fontsize=8)
    free = spare(fig, axes)  # an empty slot of the grid holds the colour bar and the key, else they go beside
    if free:
        fig.supxlabel("context length", fontsize=8)
    else:  # the key goes below the grid, where a figure-wide label would run into it: each bottom panel says it
        for ax in list(axes)[-min(cols, len(axes)) :]:
            ax.set_xlabel("context length", fontsize=8)
    if free:
        cb = fig.colorbar(im, cax=free[0].inset_axes((0.08, 0.78, 0.84, 0.09)), orientation="horizontal", label="accuracy")
    else:
        cb = fig.colorbar(im, ax=list(axes), shrink=0.9, aspect=25, label="accuracy")
    line = cb.ax.axvline if free else cb.ax.axhline
    handles: list = [Patch(**{"facecolor": "#eeeeee", **HEATMAP_CELLS[k]}) for k in HEATMAP_CELLS if k in kinds]
    labels = [HEATMAP_LABELS[k] for k in HEATMAP_CELLS if k in kinds]
    for col, ls, what in (("floor", "--", "values-in-context floor"), ("chance", ":", "chance")):  # marked on the colour scale
        if d[col].notna().any():
            y = float(d[col].mean())
            line(y, color="black", ls=ls, lw=1.2)
            handles.append(Line2D([], [], color="black", ls=ls, lw=1.2))
            labels.append(f"{what} ({y:.2g})")
    if handles and free:
        free[0].legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.55), handlelength=1.6, fontsize=7)
    elif handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(handles)), handlelength=1.6)
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + 0.2 * -(-len(handles) // 3))  # room for the key: the panels keep their height
    _number_cells(fig, cells, len(depths), len(lens))
    return fig


def _heatmap_cells(g: pd.DataFrame, depths: list, lens: list) -> tuple[np.ndarray, dict[tuple[int, int], str]]:
    """One panel's accuracy grid (depth x length) and each cell's kind (HEATMAP_CELLS; "": measured),
    the state the tables read (data.cell_state): a square without records of its own depth takes
    its length's depth-less records (a cell skipped whole, or haystack by haystack after the plan)."""
    grid = np.full((len(depths), len(lens)), np.nan)
    marks: dict[tuple[int, int], str] = {}
    for j, length in enumerate(lens):
        at = g[g["context_len"] == length]
        whole, _ = cell_state(at[at["depth"].isna()])
        for i, depth in enumerate(depths):
            cell = at[at["depth"] == depth]
            state, _ = cell_state(cell)
            if state in ("measured", "projected"):
                ok = cell[cell["status"].isin(("measured",) + NOT_MEASURED)]
                grid[i, j] = ok["v"].mean()
                marks[(i, j)] = "projected" if state == "projected" else ("partial" if ok["partial"].any() else "")
            elif state != "not run" or whole in ("skipped", "failed"):
                marks[(i, j)] = state if state != "not run" else whole
    return grid, marks


def _number_cells(fig: Figure, cells: list, n_depths: int, n_lens: int) -> None:
    """Write each measured cell's accuracy in it, at a size the laid-out cell holds (none when too small)."""
    fig.draw_without_rendering()  # the constrained layout: now each cell's size is known
    for ax, grid, marks in cells:
        box = ax.get_window_extent()
        w_pt, h_pt = (box.width / n_lens, box.height / n_depths)
        w_pt, h_pt = w_pt * 72 / fig.dpi, h_pt * 72 / fig.dpi
        size = min(7.0, 0.85 * w_pt / 2.4, 0.55 * h_pt)  # "0.83" is about 2.3 em wide
        if size < 4.5:
            continue  # too small to read: the colour says it
        for (i, j), mark in marks.items():
            if mark in ("", "partial", "projected") and not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=size, fontstyle="italic" if mark else "normal")


HEATMAP_CELLS: dict[str, dict[str, Any]] = {  # the patch drawn over a cell of each kind (a plain colour: measured)
    "partial": dict(fill=False, hatch="..", edgecolor="0.3", lw=0),
    "skipped": dict(facecolor="#d0d0d0", hatch="///", edgecolor="#808080", lw=0),
    "failed": dict(facecolor="#d0d0d0", hatch="///", edgecolor="red", lw=0),
    "not run": dict(facecolor="#eeeeee", lw=0),
}
HEATMAP_LABELS = {
    "partial": "partial (fewer haystacks than planned)",
    "skipped": "skipped",
    "failed": "failed",
    "not run": "not run for this design",
}


def _train_lens(ax, d: pd.DataFrame) -> None:
    """A dotted vertical line at each true training length (0, no stage passed, is not drawn),
    labelled in the legend with the designs trained to it when they differ."""
    lens = d.dropna(subset=["train_len"]).groupby("train_len")["design"].agg(lambda x: ", ".join(design_order(set(x))))
    lens = lens[lens.index > 0]
    for t, who in lens.items():
        label = f"training length ({fmt_len(t)})" if len(lens) == 1 else textwrap.fill(f"trained to {fmt_len(t)}: {who}", 34)
        ax.axvline(t, color="0.35", ls=":", lw=1.2, label=label)


def draw_levels(ax, d: pd.DataFrame, x: str | None = None, legend: bool = False) -> None:
    """The task's chance level and "values in context" floor: horizontal lines (x=None), or
    a step line along ``x`` when they differ with it (hops). Labelled in the legend
    (``legend``), else by a note at the right end of each line."""
    for col, ls, label in (("floor", "--", "values-in-context floor"), ("chance", ":", "chance")):
        lv = d.dropna(subset=[col])
        if lv.empty:
            continue
        if x is None or lv.groupby(x)[col].mean().nunique() == 1:
            y = float(lv[col].mean())
            ax.axhline(y, color="0.45", ls=ls, lw=1.0, zorder=0, label=f"{label} ({y:.2g})" if legend else None)
            if not legend:
                ax.annotate(
                    f"{label} {y:.2g}", (1.0, y), xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=6.5, color="0.35"
                )
        else:
            per = lv.groupby(x)[col].mean().sort_index()
            ax.plot(per.index, per.values, color="0.45", ls=ls, lw=1.0, drawstyle="steps-mid", zorder=0, label=label)


def learned_of(g: pd.DataFrame) -> bool | None:
    flags = g["learned"].dropna() if "learned" in g.columns else pd.Series(dtype=object)
    return None if flags.empty else bool(flags.iloc[0])


def _acc_series(g: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per x: the pooled accuracy and its 95% Wilson interval (measured), or the state the tables
    read (data.cell_state: skipped whole or haystack by haystack, failed); ``partial`` where the
    cell ran fewer haystacks than planned (its late-skipped haystacks beside measured ones)."""
    rows = []
    for xv, gg in g.groupby(x, dropna=True):
        state, _ = cell_state(gg)
        if state == "not run":
            continue
        status = "projected" if state == "projected" else state
        ok = gg[gg["status"] == "measured"] if state == "measured" else gg[gg["status"].isin(NOT_MEASURED)]
        a = pooled_acc(ok) if state == "measured" else None
        part = bool(gg["partial"].any()) if "partial" in gg else False
        v = a.p if a else (ok["v"].mean() if state in ("measured", "projected") else np.nan)
        rows.append({x: xv, "status": status, "v": v, "lo": a.lo if a else np.nan, "hi": a.hi if a else np.nan, "partial": part})
    return pd.DataFrame(rows, columns=[x, "status", "v", "lo", "hi", "partial"])


def _plot_acc(ax, g: pd.DataFrame, x: str, name: str, names: list[str], nudge: float = 1.0, label: str | None = None, **line) -> set[str]:
    """One design's (or one model's: label) accuracy series; line: matplotlib line keywords (a later seed's)."""
    color, marker = style(name, names)
    name = label or name
    m = _acc_series(g, x)
    learned = learned_of(g)
    if learned is False:  # shown, never read as a result: thin, dotted, pale, no band
        meas = m[m["status"] == "measured"].sort_values(x)
        ax.plot(
            meas[x], meas["v"], ls=":", lw=1.0, marker=marker, ms=3, mfc="white", color=color, alpha=0.6, label=f"{name} (did not learn)"
        )
        for status, c in (("skipped", color), ("failed", "red")):
            part = m[m["status"] == status]
            if not part.empty:
                ax.plot(
                    part[x] * nudge,
                    [0.03] * len(part),
                    transform=ax.get_xaxis_transform(),
                    ls="none",
                    marker="x",
                    color=c,
                    ms=7,
                    alpha=0.6,
                    clip_on=False,
                )
        return set(m["status"]) & {"skipped", "failed"}  # its label says it did not learn
    seen = plot_status_series(ax, m, x, "v", color, marker, name if learned else f"{name} (no learned check)", nudge=nudge, **line)
    band = m[(m["status"] == "measured") & m["lo"].notna()].sort_values(x)
    if len(band) > 1:
        ax.fill_between(band[x], band["lo"], band["hi"], color=color, alpha=0.12, lw=0)
    elif len(band) == 1:
        ax.vlines(band[x], band["lo"], band["hi"], color=color, lw=1)
    return seen


@figure(
    "niah_vs_length",
    "Needle-in-a-haystack: accuracy against context length",
    ("niah/acc",),
    "Accuracy over needle depths, seeds and runs pooled; the band is its 95% Wilson interval. "
    "Grey: the task's chance level (dotted) and its values-in-context floor (dashed: a guess among this context's "
    "needle values, no lookup). Dotted vertical: each model's true training length. A thin dotted line is a model "
    "that did not learn the task at its training length: shown, not a result.",
)
def niah_vs_length(df: pd.DataFrame) -> Figure | None:
    d = pooled(metric(df, "niah/acc"))
    if d.empty:
        return None
    d = mark_partial(d.assign(task=d["task"].fillna("")), haystack_counts(df))
    tasks = sorted(d["task"].unique())
    names = designs(df)  # colours fixed across the whole report
    # the legend below grows a row for every three designs: the axes keep the larger part
    fig, axes = facet_grid(len(tasks), max_cols=2, height=3.6 + 0.3 * max(0, len(designs(d)) - 6) / 3)
    statuses: set[str] = set()
    for ax, task in zip(axes, tasks):
        t = d[d["task"] == task]
        draw_levels(ax, t, legend=True)
        here = designs(t)
        lens = t["context_len"].dropna()
        step = min(0.15, np.log2(lens.max() / lens.min()) / (10 * max(1, len(here)))) if len(lens) else 0.0
        for i, name in enumerate(here):
            nudge = 2 ** (step * (i - (len(here) - 1) / 2))  # the designs' skip marks side by side
            statuses |= _plot_acc(ax, t[t["design"] == name], "context_len", name, names, nudge)
        _train_lens(ax, t)
        len_axis(ax)
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("accuracy")
        if task and len(tasks) > 1:
            ax.set_title(task)
    figure_legend(fig, statuses)
    return fig


@figure(
    "multihop",
    "Multi-hop: accuracy by hops, per context length",
    ("multihop/acc",),
    "Compositional probes (start key given, final value scored); runs and seeds pooled, bars "
    "the 95% Wilson interval. Grey dashed: the values-in-context floor per hop count. A thin dotted line is a model "
    "that did not learn the task at its training length. Older records scored every hop with the keys given; "
    "their panel says so.",
)
def multihop(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "multihop/acc")
    if d.empty or d["hops"].dropna().empty:
        return None
    final = d["scoring"] == "final value"
    d = d[final] if final.any() else d
    lens = sorted(d["context_len"].dropna().unique()) or [np.nan]
    fig, axes = facet_grid(len(lens), max_cols=4, height=2.6, sharey=True)
    names = designs(df)
    statuses: set[str] = set()
    for ax, length in zip(axes, lens):
        t = d[d["context_len"] == length] if pd.notna(length) else d
        draw_levels(ax, t, "hops", legend=True)
        for name in designs(t):
            statuses |= _plot_acc(ax, t[t["design"] == name], "hops", name, names)
        ax.set_title(f"context {fmt_len(length)}")
        ax.set_xlabel("hops")
        ax.set_ylim(-0.02, 1.05)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("accuracy")
    if not final.any():
        fig.suptitle("older records: every hop scored with the intermediate keys given (k single lookups, not composition)", fontsize=8)
    figure_legend(fig, statuses)
    return fig


@figure(
    "capacity",
    "Capacity: accuracy at the training length against key-value pairs",
    ("capacity/acc",),
    "exp=capacity (after Zoology's MQAR sweeps): each model at its training length, one query a context, "
    "one line a model (design and seed: a design's later seeds thinner, never pooled), bands the 95% Wilson interval. Left: against the number of key-value pairs in the context. "
    "Right: the lightning models against pairs per float of one layer's state (heads x head dim squared), where "
    "a fixed state must start to lose pairs; softmax keeps every token and has no such axis. Grey (left): the "
    "task's chance level (dotted) and values-in-context floor (dashed). A thin dotted line is a model that did not learn "
    "the task at its training length: shown, not a capacity curve.",
)
def capacity(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "capacity/acc")
    if d.empty or d["n_pairs"].dropna().empty:
        return None
    stated = d[d["state_size"].notna()] if "state_size" in d else d.iloc[:0]
    fig, axes = facet_grid(2 if not stated.empty else 1, max_cols=2, height=3.4)
    names = designs(df)
    statuses: set[str] = set()
    for ax, (part, x, label) in zip(
        axes, ((d, "n_pairs", "key-value pairs in the context"), (stated, "pairs_per_state", "pairs per state float (one lightning layer)"))
    ):
        if x == "n_pairs":  # the levels follow pairs; per state float they would mix the state sizes' steps
            draw_levels(ax, part, x, legend=True)
        for name in designs(part):
            g = part[part["design"] == name]
            by_seed = list(g.groupby("seed", sort=True)) if "seed" in g and g["seed"].notna().all() else [(None, g)]
            for i, (seed, model) in enumerate(by_seed):
                model_label = f"{name}, seed {int(seed)}" if seed is not None else None
                statuses |= _plot_acc(ax, model, x, name, names, label=model_label, **({"lw": 1.0, "alpha": 0.6} if i else {}))
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy")
    figure_legend(fig, statuses)
    return fig


# ---------------------------------------------------------------- cost
