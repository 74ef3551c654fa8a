"""The report's figures: one function each, keyed on the shared metric names (results.METRICS).

Every function takes the records table (report.data) and returns a matplotlib Figure, or
None when its metrics have no records yet (the report then says so). Accuracy figures draw
the task's chance level and its "values in context" floor (report/quality.py), each design's
95% interval, and a design that did not learn the task at its training length as a thin
dotted line labelled so: it is shown, never read as a result. One print-readable
style; a design keeps its colour in every figure. Status is always visible:

  measured   solid line, filled markers, solid bars
  projected  dashed line, hollow markers, hatched hollow bars, "(projected)" in the label
             (analytic records, computed from a formula, are drawn the same way)
  skipped    an x on the axis (heatmaps: a hatched grey cell saying "skipped")
  failed     a red x (heatmaps: a hatched cell saying "failed")

To add a figure (an experiment's own): write a function here taking the records table and
returning a Figure or None, and decorate it with ``@figure(id, title, metrics, caption)``.
The report shows figures in the order they are registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from .data import LEN_1M, NOT_MEASURED, design_order, designs, fmt_bytes, fmt_len, is_preset, metric, pooled, varying
from .quality import pooled_acc

STYLE: dict[str, Any] = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 7.5,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
    "savefig.dpi": 150, "figure.dpi": 100, "lines.linewidth": 1.6, "lines.markersize": 5,
}
# Okabe-Ito: tells apart in colour-blind vision and in greyscale print (with the markers).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]
SERIES_COLORS = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#000000"]  # series that are not designs
PRESET_COLORS = ["#332288", "#882255", "#117733", "#999933", "#AA4499", "#44AA99"]  # Tol's muted, for presets
FIXED = {"softmax": 0, "lightning": 1, "lightning_hybrid": 2, "sliding_window": 3, "swa_hybrid": 4, "msa": 5}
WIDTH = 7.2  # inches: an A4 page's text width


@dataclass
class FigureSpec:
    id: str
    title: str
    metrics: tuple[str, ...]
    caption: str
    fn: Callable[[pd.DataFrame], Figure | None]


FIGURES: list[FigureSpec] = []


def figure(id: str, title: str, metrics: tuple[str, ...], caption: str = ""):
    """Register a report figure (see the module docstring)."""

    def register(fn):
        FIGURES[:] = [f for f in FIGURES if f.id != id] + [FigureSpec(id, title, tuple(metrics), caption, fn)]
        return fn

    return register


def style(name: str, all_names: list[str]) -> tuple[str, str]:
    """(colour, marker) of a design or preset, the same in every figure of a report."""
    if name in FIXED:
        i = FIXED[name]
    else:
        others = [n for n in design_order(all_names) if n not in FIXED]
        i = len(FIXED) + (others.index(name) if name in others else 0)
    return PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]


def render(spec: FigureSpec, df: pd.DataFrame) -> bytes | None:
    """The figure as PNG bytes (None: no records for it), drawn and saved in the report style."""
    import io

    import matplotlib.style

    with matplotlib.style.context(STYLE):  # rc_context, typed for a plain dict
        fig = spec.fn(df)
        if fig is None:
            return None
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def new_figure(ncols: int = 1, nrows: int = 1, height: float = 3.0, **kw) -> tuple[Figure, np.ndarray]:
    """A figure of the report's width (call inside ``render``, which applies STYLE)."""
    fig = Figure(figsize=(WIDTH, height * nrows), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def len_axis(ax, log: int = 2) -> None:
    ax.set_xscale("log", base=log)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_len(x) if x >= 1 else f"{x:g}"))


def status_legend(ax, statuses: set[str]) -> None:
    """A legend of what the line styles mean, outside the axes, below the designs' legend."""
    handles = []
    if "measured" in statuses:
        handles.append(Line2D([], [], color="0.3", marker="o", label="measured"))
    if "projected" in statuses:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="--", mfc="white", label="projected (cost model)"))
    if "skipped" in statuses:
        handles.append(Line2D([], [], color="0.3", marker="x", ls="none", label="skipped"))
    if "failed" in statuses:
        handles.append(Line2D([], [], color="red", marker="x", ls="none", label="failed"))
    if "not learned" in statuses:
        handles.append(Line2D([], [], color="0.3", marker="o", ms=3, ls=":", mfc="white", label="did not learn the task"))
    if handles:
        ax.add_artist(Legend(ax, handles, [str(h.get_label()) for h in handles], loc="lower left", bbox_to_anchor=(1.01, 0.0),
                             title="status", title_fontsize=7.5, borderaxespad=0, alignment="left"))


def plot_status_series(ax, g: pd.DataFrame, x: str, y: str, color: str, marker: str, label: str) -> set[str]:
    """One series, measured and projected points drawn apart; skipped/failed marked on the x axis.

    The series is labelled once (the design's legend entry); ``status_legend`` says what the
    line styles mean. The dashed projected part starts at the last measured point so the eye
    follows one series.
    """
    seen = set()
    measured = g[g["status"] == "measured"].dropna(subset=[x, y]).sort_values(x)
    projected = g[g["status"].isin(NOT_MEASURED)].dropna(subset=[x, y]).sort_values(x)
    if not measured.empty:
        seen.add("measured")
        ax.plot(measured[x], measured[y], ls="-", marker=marker, color=color, label=label)
    if not projected.empty:
        seen.add("projected")  # analytic records are drawn the same way
        bridge = measured[measured[x] < projected[x].min()].tail(1)
        line = pd.concat([bridge, projected])
        ax.plot(line[x], line[y], ls="--", color=color, label=None if not measured.empty else label)
        ax.plot(projected[x], projected[y], ls="none", marker=marker, color=color, mfc="white", mec=color)
    for status, c in (("skipped", color), ("failed", "red")):
        part = g[g["status"] == status].dropna(subset=[x])
        if part.empty:
            continue
        seen.add(status)
        ax.plot(part[x], [0.03] * len(part), transform=ax.get_xaxis_transform(), ls="none", marker="x",
                color=c, ms=7, mew=1.8, clip_on=False)
    return seen


def design_legend(ax) -> None:
    """The designs' legend, outside the axes on the right."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5, borderaxespad=0)


def series_label(name: str, row: pd.Series, keys: list[str]) -> str:
    extra = ", ".join(f"{row[k]}" for k in keys if pd.notna(row[k]))
    return f"{name} [{extra}]" if extra else name


def mean_by(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean value over everything but ``keys`` (seeds, depths), with min/max and a count."""
    keys = [k for k in keys if k in df.columns]
    d = df.copy()
    for k in keys:  # groupby drops NaN keys; keep them as a label
        if d[k].dtype == object:
            d[k] = d[k].fillna("")
    return d.groupby(keys, dropna=False, sort=True)["v"].agg(["mean", "min", "max", "count"]).reset_index().rename(
        columns={"mean": "v"})


def facet_grid(n: int, max_cols: int = 3, height: float = 2.6, **kw):
    ncols = min(n, max_cols)
    nrows = -(-n // ncols)
    fig, axes = new_figure(ncols, nrows, height=height, **kw)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


# ---------------------------------------------------------------- quality


@figure("niah_heatmap", "Needle-in-a-haystack: accuracy by depth and context length",
        ("niah/acc",), "Each cell: mean accuracy over seeds (red 0 to green 1); the colour bar marks the task's "
        "chance level (dotted) and values-in-context floor (dashed). Hatched grey: skipped or failed (see the "
        "records); light grey dash: not run for this design. A panel titled 'did not learn the task' is a model "
        "that did not learn it at its training length.")
def niah_heatmap(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "niah/acc")
    if d.empty:
        return None
    d = d.assign(task=d["task"].fillna(""))
    facets = [(n, t) for n in designs(d) for t in sorted(d["task"].unique())
              if not d[(d["design"] == n) & (d["task"] == t)].empty]
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
                    ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, facecolor="#d0d0d0", hatch="///",
                                           edgecolor="#808080" if mark == "skipped" else "red", lw=0))
                    ax.text(j, i, mark, ha="center", va="center", fontsize=6.5, color="black")
                elif mark == "missing":
                    ax.text(j, i, "–", ha="center", va="center", fontsize=8, color="#777777")
                elif len(lens) * len(depths) <= 120:
                    txt = f"{grid[i, j]:.2f}" + ("\nproj." if mark == "proj." else "")
                    ax.text(j, i, txt, ha="center", va="center", fontsize=6.5,
                            color="black", fontstyle="italic" if mark else "normal")
        ax.set_xticks(range(len(lens)), [fmt_len(x) for x in lens], rotation=45 if len(lens) > 6 else 0)
        ax.set_yticks(range(len(depths)), [f"{100 * x:g}%" for x in depths])
        ax.grid(False)
        ax.set_title(f"{name}" + (f" ({task})" if task and d["task"].nunique() > 1 else "")
                     + ("\n(did not learn the task)" if _learned(g) is False else ""), fontsize=9)
        ax.set_xlabel("context length")
        ax.set_ylabel("needle depth")
    cb = fig.colorbar(im, ax=list(axes), shrink=0.8, label="accuracy")
    for col, ls in (("floor", "--"), ("chance", ":")):  # the task's levels, marked on the colour scale
        if d[col].notna().any():
            y = float(d[col].mean())
            cb.ax.axhline(y, color="black", ls=ls, lw=1.2)
            cb.ax.annotate(f"{'floor' if col == 'floor' else 'chance'} {y:.2g}", (1.05, y), xycoords=("axes fraction", "data"),
                           fontsize=6.5, va="center", annotation_clip=False)
    return fig


def _train_lens(ax, d: pd.DataFrame) -> None:
    """A dotted vertical line at each true training length (0, no stage passed, is not drawn)."""
    lens = d.dropna(subset=["train_len"]).groupby("train_len")["design"].agg(lambda x: ", ".join(design_order(set(x))))
    for i, (t, who) in enumerate(lens.items()):
        if t <= 0:
            continue
        ax.axvline(t, color="0.35", ls=":", lw=1.2)
        ax.annotate(f"trained to {fmt_len(t)}: {who}", (t, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                    va="top", ha="right", fontsize=6.5, color="0.35", xytext=(-2, -2 - 40 * i), textcoords="offset points")


def _levels(ax, d: pd.DataFrame, x: str | None = None) -> None:
    """The task's chance level and "values in context" floor: horizontal lines (x=None), or
    a step line along ``x`` when they differ with it (hops)."""
    for col, ls, label in (("floor", "--", "values-in-context floor"), ("chance", ":", "chance")):
        lv = d.dropna(subset=[col])
        if lv.empty:
            continue
        if x is None or lv.groupby(x)[col].mean().nunique() == 1:
            y = float(lv[col].mean())
            ax.axhline(y, color="0.45", ls=ls, lw=1.0, zorder=0)
            ax.annotate(f"{label} {y:.2g}", (1.0, y), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                        fontsize=6.5, color="0.35")
        else:
            per = lv.groupby(x)[col].mean().sort_index()
            ax.plot(per.index, per.values, color="0.45", ls=ls, lw=1.0, drawstyle="steps-mid", zorder=0, label=label)


def _learned(g: pd.DataFrame) -> bool | None:
    flags = g["learned"].dropna() if "learned" in g.columns else pd.Series(dtype=object)
    return None if flags.empty else bool(flags.iloc[0])


def _acc_series(g: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per x: the pooled accuracy and its 95% Wilson interval (measured), or the status mark."""
    rows = []
    for (xv, status), gg in g.groupby([x, "status"], dropna=True):
        a = pooled_acc(gg) if status == "measured" else None
        rows.append({x: xv, "status": status, "v": a.p if a else gg["v"].mean(),
                     "lo": a.lo if a else np.nan, "hi": a.hi if a else np.nan})
    return pd.DataFrame(rows, columns=[x, "status", "v", "lo", "hi"])


def _plot_acc(ax, g: pd.DataFrame, x: str, name: str, names: list[str]) -> set[str]:
    color, marker = style(name, names)
    m = _acc_series(g, x)
    learned = _learned(g)
    if learned is False:  # shown, never read as a result: thin, dotted, pale, no band
        meas = m[m["status"] == "measured"].sort_values(x)
        ax.plot(meas[x], meas["v"], ls=":", lw=1.0, marker=marker, ms=3, mfc="white", color=color, alpha=0.6,
                label=f"{name} (did not learn the task)")
        return {"measured", "not learned"} | (set(m["status"]) & {"skipped", "failed"})
    seen = plot_status_series(ax, m, x, "v", color, marker, name if learned else f"{name} (no learned check)")
    band = m[(m["status"] == "measured") & m["lo"].notna()].sort_values(x)
    if len(band) > 1:
        ax.fill_between(band[x], band["lo"], band["hi"], color=color, alpha=0.12, lw=0)
    elif len(band) == 1:
        ax.vlines(band[x], band["lo"], band["hi"], color=color, lw=1)
    return seen


@figure("niah_vs_length", "Needle-in-a-haystack: accuracy against context length",
        ("niah/acc",), "Accuracy over needle depths, seeds and runs pooled; the band is its 95% Wilson interval. "
        "Grey: the task's chance level (dotted) and its values-in-context floor (dashed: a guess among this context's "
        "needle values, no lookup). Dotted vertical: each model's true training length. A thin dotted line is a model "
        "that did not learn the task at its training length: shown, not a result.")
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
        _levels(ax, t)
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


@figure("multihop", "Multi-hop: accuracy by hops, per context length",
        ("multihop/acc",), "Compositional probes (start key given, final value scored); runs and seeds pooled, bars "
        "the 95% Wilson interval. Grey dashed: the values-in-context floor per hop count. A thin dotted line is a model "
        "that did not learn the task at its training length. Older records scored every hop with the keys given; "
        "their panel says so.")
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
        _levels(ax, t, "hops")
        for name in designs(t):
            statuses |= _plot_acc(ax, t[t["design"] == name], "hops", name, names)
        ax.set_title(f"context {fmt_len(length)}")
        ax.set_xlabel("hops")
        ax.set_ylim(-0.02, 1.05)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("accuracy")
    if not final.any():
        fig.suptitle("older records: every hop scored with the intermediate keys given (k single lookups, not "
                     "composition)", fontsize=8)
    design_legend(axes[-1])
    status_legend(axes[-1], statuses)
    return fig


# ---------------------------------------------------------------- cost


@figure("latency", "Latency against context length (log-log), with crossovers",
        ("latency/prefill_ms", "latency/decode_ms", "crossover/prefill_len", "crossover/decode_len"),
        "Median of repeats; whiskers p25-p75. Vertical lines: where a design becomes cheaper than its "
        "baseline (crossover), shaded over its bracket; dashed lines are analytic (cost model).")
def latency(df: pd.DataFrame) -> Figure | None:
    phases = [("prefill", "latency/prefill_ms", "crossover/prefill_len"),
              ("decode", "latency/decode_ms", "crossover/decode_len")]
    if all(metric(df, m).empty and metric(df, c).empty for _, m, c in phases):
        return None
    lat = df[df["metric"].isin([m for _, m, _ in phases])]
    devices: list[str | None] = [*sorted({str(x) for x in lat["device"].dropna()})] or [None]  # one row per device: never compared across
    fig, axes = new_figure(2, len(devices), height=3.2)
    names = designs(df)
    statuses: set[str] = set()
    for row, device in zip(axes, devices):
        for ax, (phase, name_ms, name_x) in zip(row, phases):
            d = metric(df, name_ms)
            d = d[d["device"] == device] if device else d
            keys = varying(d, ("backend", "scope", "dtype")) if not d.empty else []
            for name in designs(d):
                color, marker = style(name, names)
                g = d[d["design"] == name]
                for _, gg in g.groupby(keys, dropna=False) if keys else [(None, g)]:
                    statuses |= plot_status_series(ax, gg, "context_len", "v", color, marker,
                                                   series_label(name, gg.iloc[0], keys))
                    meas = gg[(gg["status"] == "measured") & gg["p25_ms"].notna() & gg["p75_ms"].notna()]
                    if not meas.empty:
                        ax.vlines(meas["context_len"], meas["p25_ms"], meas["p75_ms"], color=color, lw=1)
            x = metric(df, name_x)
            _crossovers(ax, x[x["device"].isna() | (x["device"] == device)] if device else x, names)
            len_axis(ax)
            if not d.empty and (d["v"] > 0).any():
                ax.set_yscale("log")
            ax.set_title(phase + (f" ({device})" if device else ""))
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("ms" + (" per token" if phase == "decode" else ""))
        design_legend(row[-1])
    status_legend(axes[-1][-1], statuses)
    return fig


def _crossovers(ax, x: pd.DataFrame, names: list[str]) -> None:
    for _, r in x.iterrows():
        if pd.isna(r["v"]):
            continue
        color, _ = style(r["design"], names)
        analytic = r["status"] in NOT_MEASURED or r.get("method") == "analytic"
        ax.axvline(r["v"], color=color, ls="--" if analytic else "-", lw=1, alpha=0.9)
        bracket = r.get("bracket")
        if isinstance(bracket, (list, tuple)) and len(bracket) == 2 and all(b is not None for b in bracket):
            ax.axvspan(bracket[0], bracket[1], color=color, alpha=0.10, lw=0)
        how = "analytic" if analytic else "measured"
        ax.annotate(f"{r['design']} = {r.get('vs') or 'baseline'}: {fmt_len(r['v'])} ({how})", (r["v"], 0.98),
                    xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=6.5, color=color)


@figure("efficiency", "Prefill: measured time against the compute roofline",
        ("eval/prefill_s",),
        "Left: wall time of one haystack's streaming prefill (solid) and the roofline, the cost model's FLOPs "
        "over the fp32 matmul peak calibrated at the start of the run (dashed). Right: the fraction of that "
        "peak reached. Hollow markers: noisy (the load average exceeded the core count while it ran).")
def efficiency(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "eval/prefill_s")
    d = d[(d["status"] == "measured") & d["roofline_s"].notna()] if not d.empty else d
    if d.empty:
        return None
    fig, axes = new_figure(2, 1, height=3.2)
    ax_t, ax_f = axes[0]
    names = designs(df)
    for name in designs(d):
        color, marker = style(name, names)
        g = d[d["design"] == name].copy()
        g["noisy"] = g["noisy"].fillna(False).astype(bool)
        by = g.groupby("context_len").agg(v=("v", "median"), roof=("roofline_s", "median"), frac=("peak_fraction", "median"),
                                          noisy=("noisy", "any")).reset_index()
        ax_t.plot(by["context_len"], by["v"], ls="-", marker=marker, color=color, label=name)
        ax_t.plot(by["context_len"], by["roof"], ls="--", color=color)
        ax_f.plot(by["context_len"], by["frac"], ls="-", marker=marker, color=color, label=name)
        for ax, col in ((ax_t, "v"), (ax_f, "frac")):
            hollow = by[by["noisy"]]
            ax.plot(hollow["context_len"], hollow[col], ls="none", marker=marker, mfc="white", mec=color)
    for ax in (ax_t, ax_f):
        len_axis(ax)
        ax.set_xlabel("context length (tokens)")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("s per haystack")
    ax_t.set_title("measured (solid) and roofline (dashed)")
    ax_f.set_ylabel("fraction of the fp32 peak")
    ax_f.set_title("efficiency")
    design_legend(ax_f)
    return fig


@figure("memory", "Cache memory: bytes per token, and total at 128K / 1M / 4M",
        ("memory/cache_bytes_per_token", "memory/total_bytes"),
        "Designs (this model) and production presets (their published configs). Hatched hollow bars are "
        "projected from the formula, solid bars measured from the cache objects.")
def memory(df: pd.DataFrame) -> Figure | None:
    per_tok = metric(df, "memory/cache_bytes_per_token")
    total = metric(df, "memory/total_bytes")
    if per_tok.empty and total.empty:
        return None
    fig, axes = new_figure(2, 1, height=max(2.6, 0.28 * max(len(per_tok), 4) + 1))
    names = designs(df)

    def who(r):
        return str(r["preset"]) if pd.notna(r["preset"]) and r["preset"] != "" else str(r["design"])

    def bar_style(r, color):
        if r["status"] in NOT_MEASURED:
            return dict(facecolor="white", edgecolor=color, hatch="////", lw=1)
        if r["status"] in ("skipped", "failed"):
            return dict(facecolor="#dddddd", edgecolor="red" if r["status"] == "failed" else "grey", hatch="xx", lw=1)
        return dict(facecolor=color, edgecolor=color, lw=1)

    presets = sorted({who(r) for _, r in pd.concat([per_tok, total]).iterrows() if pd.notna(r["preset"]) and r["preset"] != ""})

    def color_of(r):
        p = who(r)
        return PRESET_COLORS[presets.index(p) % len(PRESET_COLORS)] if p in presets else style(r["design"], names)[0]

    ax = axes[0][0]
    if per_tok.empty:
        ax.text(0.5, 0.5, "no records for this yet", ha="center", va="center", transform=ax.transAxes)
    else:
        p = per_tok.assign(who=per_tok.apply(who, axis=1), kind=is_preset(per_tok).map({True: 1, False: 0}))
        p = p.sort_values(["kind", "who"]).drop_duplicates(["who", "dtype", "status"], keep="last")
        labels = [f"{r.who}" + (f" ({r.dtype})" if pd.notna(r.dtype) else "") for r in p.itertuples()]
        for i, (_, r) in enumerate(p.iterrows()):
            value = r["v"] if r["status"] in ("measured",) + NOT_MEASURED and pd.notna(r["v"]) else 0
            ax.barh(i, value, **bar_style(r, color_of(r)))
            text = f" {fmt_bytes(value)}" if r["status"] in ("measured",) + NOT_MEASURED else f" {r['status']}"
            if value > 0:
                ax.text(value, i, text, va="center", fontsize=7)
            else:  # a log axis has no 0: write it at the axis
                ax.text(0.01, i, text.strip() + (" (no growing cache)" if value == 0 and pd.notna(r["v"]) else ""),
                        va="center", fontsize=7, transform=ax.get_yaxis_transform())
        ax.set_yticks(range(len(p)), labels)
        ax.invert_yaxis()
        if (p["v"] > 0).any():
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y).replace(".0 ", " ")))
        ax.set_xlabel("cache bytes per token")
        ax.tick_params(axis="x", labelrotation=30)
        ax.grid(axis="y", visible=False)
    ax.set_title("per token")

    ax = axes[0][1]
    if total.empty:
        ax.text(0.5, 0.5, "no records for this yet", ha="center", va="center", transform=ax.transAxes)
    else:
        t = total.assign(who=total.apply(who, axis=1), kind=is_preset(total).map({True: 1, False: 0}))
        t = t.sort_values(["kind", "who"]).drop_duplicates(["who", "context_len", "dtype", "status"], keep="last")
        whos = list(dict.fromkeys(t["who"]))
        lens = sorted(t["context_len"].dropna().unique())
        width = 0.8 / max(len(whos), 1)
        for k, w in enumerate(whos):
            g = t[t["who"] == w]
            for i, (_, r) in enumerate(g.dropna(subset=["context_len"]).iterrows()):
                x = lens.index(r["context_len"]) + (k - (len(whos) - 1) / 2) * width
                value = r["v"] if r["status"] in ("measured",) + NOT_MEASURED and pd.notna(r["v"]) else 0
                ax.bar(x, value, width, **bar_style(r, color_of(r)), label=w if i == 0 else None)
        ax.set_xticks(range(len(lens)), [fmt_len(x) for x in lens])
        if (t["v"] > 0).any():
            ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y).replace(".0 ", " ")))
        ax.set_xlabel("context length")
        ax.set_ylabel("total cache")
        ax.legend(fontsize=6.5, loc="upper left")
        ax.grid(axis="x", visible=False)
    ax.set_title("total")
    statuses = set(per_tok["status"]) | set(total["status"])
    handles = [Patch(facecolor="0.4", label="measured")] if "measured" in statuses else []
    if statuses & set(NOT_MEASURED):
        handles.append(Patch(facecolor="white", edgecolor="0.4", hatch="////", label="projected / analytic"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), title=None)
    return fig


def state_bytes_at(df: pd.DataFrame, name: str, length: float) -> tuple[float, str]:
    """Cache/state bytes of ``name`` at ``length``: a memory/total_bytes record there, else
    fixed_state + per_token x length from its records. (bytes, how) or (nan, '')."""
    own = df[(df["design"] == name) & ~is_preset(df) & df["status"].isin(("measured",) + NOT_MEASURED)]
    tot = own[(own["metric"] == "memory/total_bytes") & (own["context_len"] == length)]
    if not tot.empty:
        return float(tot["v"].mean()), "recorded total"
    per = own.loc[own["metric"] == "memory/cache_bytes_per_token", "v"]
    fixed = own.loc[own["metric"] == "memory/fixed_state_bytes", "v"]
    if per.empty and fixed.empty:
        return float("nan"), ""
    return float((fixed.mean() if not fixed.empty else 0) + (per.mean() if not per.empty else 0) * length), \
        "fixed state + per token x length"


@figure("pareto", "Recall against state size (the Pareto view)",
        ("niah/acc", "memory/cache_bytes_per_token", "memory/fixed_state_bytes", "memory/total_bytes"),
        "Recall: needle accuracy at the longest length every design was measured at (mean over depths and "
        "seeds). Size: the design's cache or state at that length. Up and left is better; the line joins "
        "the designs no other design beats on both.")
def pareto(df: pd.DataFrame) -> Figure | None:
    d = pooled(metric(df, "niah/acc"))
    d = d[d["status"] == "measured"]
    if d.empty:
        return None
    per_design = d.groupby("design")["context_len"].max()
    length = per_design.min()
    points = []
    for name in designs(d):
        acc = d[(d["design"] == name) & (d["context_len"] == length)]["v"].mean()
        size, how = state_bytes_at(df, name, length)
        if pd.notna(acc) and pd.notna(size) and size > 0:
            points.append((name, size, acc, how))
    if not points:
        return None
    fig, axes = new_figure(1, 1, height=3.2)
    ax = axes[0][0]
    names = designs(df)
    for name, size, acc, _ in points:
        color, marker = style(name, names)
        untrained = _learned(d[d["design"] == name]) is False
        ax.plot(size, acc, marker=marker, color=color, ms=8, ls="none", label=name, mfc="white" if untrained else color)
        ax.annotate(name + (" (did not learn)" if untrained else ""), (size, acc), xytext=(5, 4), textcoords="offset points",
                    fontsize=7.5, color=color)
    front, best = [], -1.0
    for name, size, acc, _ in sorted(points, key=lambda p: (p[1], -p[2])):
        if acc > best:
            front.append((size, acc))
            best = acc
    if len(front) > 1:
        xs, ys = zip(*front)
        ax.step(xs, ys, where="post", color="0.5", ls="-", lw=1, zorder=0)
    _levels(ax, d[d["context_len"] == length])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y)))
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"cache / state bytes at {fmt_len(length)} tokens")
    ax.set_ylabel(f"needle accuracy at {fmt_len(length)}")
    return fig


@figure("msa_speedup", "MSA (M3) against full attention (M2): speedup against context length",
        ("msa_speedup/prefill", "msa_speedup/decode"),
        "Ratio of full-attention time to MSA time (above 1: MSA faster), one series per hardware; dashed "
        "hollow: analytic (cost model). Stars: MiniMax's reported ~9x prefill and ~15x decode at 1M tokens.")
def msa_speedup(df: pd.DataFrame) -> Figure | None:
    parts = [("prefill", "msa_speedup/prefill", 9.0), ("decode", "msa_speedup/decode", 15.0)]
    if all(metric(df, m).empty for _, m, _ in parts):
        return None
    fig, axes = new_figure(2, 1, height=3.0, sharey=True)
    statuses: set[str] = set()
    for ax, (phase, name, claim) in zip(axes[0], parts):
        d = metric(df, name).copy()
        d["where"] = d["hardware"].fillna(d["device"]).astype(str)
        for i, (where, g) in enumerate(d.groupby("where", sort=True)):
            color = SERIES_COLORS[i % len(SERIES_COLORS)]
            statuses |= plot_status_series(ax, g, "context_len", "v", color, MARKERS[i % len(MARKERS)], f"M3/M2 on {where}")
        ax.plot([LEN_1M], [claim], marker="*", ms=12, color="black", ls="none", label="MiniMax's reported, at 1M")
        ax.annotate(f"~{claim:g}x", (LEN_1M, claim), xytext=(-8, 6), textcoords="offset points", ha="right", fontsize=7.5)
        ax.axhline(1, color="0.5", lw=0.8)
        len_axis(ax)
        ax.set_yscale("log")
        ax.set_title(phase)
        ax.set_xlabel("context length (tokens)")
    axes[0][0].set_ylabel("speedup (x)")
    design_legend(axes[0][1])
    status_legend(axes[0][1], statuses)
    return fig


# ---------------------------------------------------------------- training and parity


@figure("train_loss", "Training loss", ("train/loss",), "Each line one seed of one design.")
def train_loss(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "train/loss").dropna(subset=["step", "v"])
    if d.empty:
        return None
    fig, axes = new_figure(1, 1, height=3.0)
    ax = axes[0][0]
    names = designs(df)
    for name in designs(d):
        color, _ = style(name, names)
        for i, (_, g) in enumerate(d[d["design"] == name].groupby(["seed", "run_dir"], dropna=False)):
            g = g.sort_values("step")
            ax.plot(g["step"], g["v"], color=color, lw=1.2, alpha=0.9, label=name if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.legend(fontsize=7)
    return fig


@figure("params", "Parameters per design (the shared backbone's budget)",
        ("params/total", "params/active", "params/attention"),
        "Same backbone for every design; the attention parameters differ by design.")
def params(df: pd.DataFrame) -> Figure | None:
    parts = ["params/total", "params/active", "params/attention"]
    d = df[df["metric"].isin(parts) & (df["status"] == "measured") & ~is_preset(df)]
    if d.empty:
        return None
    names = designs(d)
    fig, axes = new_figure(1, 1, height=0.9 + 0.42 * len(names))
    ax = axes[0][0]
    height = 0.8 / len(parts)
    shades = {"params/total": 1.0, "params/active": 0.65, "params/attention": 0.35}
    for i, name in enumerate(names):
        color, _ = style(name, names)
        for k, part in enumerate(parts):
            v = d[(d["design"] == name) & (d["metric"] == part)]["v"].mean()
            if pd.isna(v):
                continue
            y = i + (k - 1) * height
            ax.barh(y, v, height, color=color, alpha=shades[part], label=part.split("/")[1] if i == 0 else None)
            ax.text(v, y, f" {v:,.0f}", va="center", fontsize=6.5)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("parameters")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.grid(axis="y", visible=False)
    design_legend(ax)
    return fig
