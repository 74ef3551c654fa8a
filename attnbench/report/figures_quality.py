"""The report's accuracy figures: needles by depth and length, accuracy against length,
multi-hop chains (registered before the cost figures of report/figures.py).

Each draws the task's chance level and its "values in context" floor (report/quality.py),
each design's 95% interval, and a design that did not learn the task at its training length
as a thin dotted line labelled so: it is shown, never read as a result.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .data import NOT_MEASURED, design_order, designs, fmt_len, metric, pooled
from .quality import pooled_acc
from .style import design_legend, facet_grid, figure, len_axis, plot_status_series, status_legend, style


@figure(
    "niah_heatmap",
    "Needle-in-a-haystack: accuracy by depth and context length",
    ("niah/acc",),
    "Each cell: mean accuracy over seeds (red 0 to green 1); the colour bar marks the task's "
    "chance level (dotted) and values-in-context floor (dashed). Hatched grey: skipped or failed (see the "
    "records); light grey dash: not run for this design. A panel titled 'did not learn the task' is a model "
    "that did not learn it at its training length.",
)
def niah_heatmap(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "niah/acc")
    if d.empty:
        return None
    d = d.assign(task=d["task"].fillna(""))
    facets = [(n, t) for n in designs(d) for t in sorted(d["task"].unique()) if not d[(d["design"] == n) & (d["task"] == t)].empty]
    lens = sorted(d["context_len"].dropna().unique())
    depths = sorted(d["depth"].dropna().unique())
    if not lens or not depths:
        return None
    fig, axes = facet_grid(len(facets), height=2.4 + 0.12 * len(depths))
    import matplotlib

    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#eeeeee")
    im = None
    for ax, (name, task) in zip(axes, facets):
        g = d[(d["design"] == name) & (d["task"] == task)]
        grid = np.full((len(depths), len(lens)), np.nan)
        marks = {}
        for (depth, length), cell in g.groupby(["depth", "context_len"]):
            i, j = depths.index(depth), lens.index(length)
            ok = cell[cell["status"].isin(("measured",) + NOT_MEASURED)]
            if not ok.empty:
                grid[i, j] = ok["v"].mean()
                marks[(i, j)] = "proj." if ok["status"].isin(NOT_MEASURED).all() else None
            else:
                marks[(i, j)] = "failed" if (cell["status"] == "failed").any() else "skipped"
        whole = g[g["depth"].isna() & g["status"].isin(["skipped", "failed"])]  # a length skipped at every depth
        for length, cell in whole.groupby("context_len"):
            if length in lens:
                j = lens.index(length)
                for i in range(len(depths)):
                    if np.isnan(grid[i, j]):
                        marks[(i, j)] = "failed" if (cell["status"] == "failed").any() else "skipped"
        im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        for i in range(len(depths)):
            for j in range(len(lens)):
                mark = marks.get((i, j), "missing")
                if mark in ("skipped", "failed"):
                    ax.add_patch(
                        Rectangle(
                            (j - 0.5, i - 0.5),
                            1,
                            1,
                            facecolor="#d0d0d0",
                            hatch="///",
                            edgecolor="#808080" if mark == "skipped" else "red",
                            lw=0,
                        )
                    )
                    ax.text(j, i, mark, ha="center", va="center", fontsize=6.5, color="black")
                elif mark == "missing":
                    ax.text(j, i, "–", ha="center", va="center", fontsize=8, color="#777777")
                elif len(lens) * len(depths) <= 120:
                    txt = f"{grid[i, j]:.2f}" + ("\nproj." if mark == "proj." else "")
                    ax.text(j, i, txt, ha="center", va="center", fontsize=6.5, color="black", fontstyle="italic" if mark else "normal")
        ax.set_xticks(range(len(lens)), [fmt_len(x) for x in lens], rotation=45 if len(lens) > 6 else 0)
        ax.set_yticks(range(len(depths)), [f"{100 * x:g}%" for x in depths])
        ax.grid(False)
        ax.set_title(
            f"{name}"
            + (f" ({task})" if task and d["task"].nunique() > 1 else "")
            + ("\n(did not learn the task)" if learned_of(g) is False else ""),
            fontsize=9,
        )
        ax.set_xlabel("context length")
        ax.set_ylabel("needle depth")
    cb = fig.colorbar(im, ax=list(axes), shrink=0.8, label="accuracy")
    for col, ls in (("floor", "--"), ("chance", ":")):  # the task's levels, marked on the colour scale
        if d[col].notna().any():
            y = float(d[col].mean())
            cb.ax.axhline(y, color="black", ls=ls, lw=1.2)
            cb.ax.annotate(
                f"{'floor' if col == 'floor' else 'chance'} {y:.2g}",
                (1.05, y),
                xycoords=("axes fraction", "data"),
                fontsize=6.5,
                va="center",
                annotation_clip=False,
            )
    return fig


def _train_lens(ax, d: pd.DataFrame) -> None:
    """A dotted vertical line at each true training length (0, no stage passed, is not drawn)."""
    lens = d.dropna(subset=["train_len"]).groupby("train_len")["design"].agg(lambda x: ", ".join(design_order(set(x))))
    for i, (t, who) in enumerate(lens.items()):
        if t <= 0:
            continue
        ax.axvline(t, color="0.35", ls=":", lw=1.2)
        ax.annotate(
            f"trained to {fmt_len(t)}: {who}",
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=6.5,
            color="0.35",
            xytext=(-2, -2 - 40 * i),
            textcoords="offset points",
        )


def draw_levels(ax, d: pd.DataFrame, x: str | None = None) -> None:
    """The task's chance level and "values in context" floor: horizontal lines (x=None), or
    a step line along ``x`` when they differ with it (hops)."""
    for col, ls, label in (("floor", "--", "values-in-context floor"), ("chance", ":", "chance")):
        lv = d.dropna(subset=[col])
        if lv.empty:
            continue
        if x is None or lv.groupby(x)[col].mean().nunique() == 1:
            y = float(lv[col].mean())
            ax.axhline(y, color="0.45", ls=ls, lw=1.0, zorder=0)
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
    """Per x: the pooled accuracy and its 95% Wilson interval (measured), or the status mark."""
    rows = []
    for (xv, status), gg in g.groupby([x, "status"], dropna=True):
        a = pooled_acc(gg) if status == "measured" else None
        rows.append({x: xv, "status": status, "v": a.p if a else gg["v"].mean(), "lo": a.lo if a else np.nan, "hi": a.hi if a else np.nan})
    return pd.DataFrame(rows, columns=[x, "status", "v", "lo", "hi"])


def _plot_acc(ax, g: pd.DataFrame, x: str, name: str, names: list[str]) -> set[str]:
    color, marker = style(name, names)
    m = _acc_series(g, x)
    learned = learned_of(g)
    if learned is False:  # shown, never read as a result: thin, dotted, pale, no band
        meas = m[m["status"] == "measured"].sort_values(x)
        ax.plot(
            meas[x],
            meas["v"],
            ls=":",
            lw=1.0,
            marker=marker,
            ms=3,
            mfc="white",
            color=color,
            alpha=0.6,
            label=f"{name} (did not learn the task)",
        )
        return {"measured", "not learned"} | (set(m["status"]) & {"skipped", "failed"})
    seen = plot_status_series(ax, m, x, "v", color, marker, name if learned else f"{name} (no learned check)")
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
    d = d.assign(task=d["task"].fillna(""))
    tasks = sorted(d["task"].unique())
    fig, axes = facet_grid(len(tasks), max_cols=2, height=3.0)
    names = designs(df)  # colours fixed across the whole report
    statuses: set[str] = set()
    for ax, task in zip(axes, tasks):
        t = d[d["task"] == task]
        draw_levels(ax, t)
        for name in designs(t):
            statuses |= _plot_acc(ax, t[t["design"] == name], "context_len", name, names)
        _train_lens(ax, t)
        len_axis(ax)
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("accuracy")
        if task:
            ax.set_title(task)
    design_legend(axes[-1])
    status_legend(axes[-1], statuses)
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
        draw_levels(ax, t, "hops")
        for name in designs(t):
            statuses |= _plot_acc(ax, t[t["design"] == name], "hops", name, names)
        ax.set_title(f"context {fmt_len(length)}")
        ax.set_xlabel("hops")
        ax.set_ylim(-0.02, 1.05)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("accuracy")
    if not final.any():
        fig.suptitle("older records: every hop scored with the intermediate keys given (k single lookups, not composition)", fontsize=8)
    design_legend(axes[-1])
    status_legend(axes[-1], statuses)
    return fig


# ---------------------------------------------------------------- cost
