"""The report figures' shared look and their registry: colours, markers, legends, the page
width, the status conventions every figure follows, and ``@figure`` (report/figures/cost_figures.py and
report/figures/accuracy.py hold the figures themselves).

One print-readable style; a design keeps its colour and marker in every figure. Status is
always visible:

  measured   solid line, filled markers, solid bars
  projected  dashed line, hollow markers, hatched hollow bars, "(projected)" in the label
             (analytic records, computed from a formula, are drawn the same way)
  partial    a half-filled marker (heatmaps: dots over the cell): fewer haystacks than planned
  skipped    an x on the axis (heatmaps: a hatched grey cell)
  failed     a red x (heatmaps: a cell hatched in red)

Each figure has one legend (``figure_legend``), outside its axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from attnbench.designs import DESIGNS, MIXTURE_STYLES, PALETTE as DESIGN_PALETTE, VARIANT_COLOURS, VARIANTS  # noqa: N811

from attnbench.verdicts.readings import NOT_MEASURED

from attnbench.basics import fmt_len
from attnbench.report.frame import design_order

STYLE: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "savefig.dpi": 150,
    "figure.dpi": 100,
    "lines.linewidth": 1.6,
    "lines.markersize": 5,
}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]
SERIES_COLORS = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#000000"]  # series that are not designs
PRESET_COLORS = ["#332288", "#882255", "#117733", "#999933", "#AA4499", "#44AA99"]  # Tol's muted, for presets


def _fixed_styles() -> dict[str, tuple[str, str]]:
    """(colour, marker) of every named design: a letter's design's and a mixture's own, a
    variant's own colour with its family's marker; a name without a colour takes the first
    registry colour (designs.PALETTE) nobody holds, so no two designs share one."""
    own = {d.name: (d.colour, d.marker) for d in DESIGNS.values() if d.colour} | dict(MIXTURE_STYLES)
    variants = {name: (VARIANT_COLOURS.get(name), own[family][1]) for name, family in VARIANTS.items() if family in own}
    taken = {c for c, _ in own.values()} | {c for c, _ in variants.values() if c}
    free = iter(c for c in DESIGN_PALETTE if c not in taken)
    return own | {name: (colour or next(free), marker) for name, (colour, marker) in sorted(variants.items())}


# Every named design (conf/attention/*.yaml) has its (colour, marker) here, the same in every
# figure, all of it the registry's data (attnbench/designs.py): one colour per design, one marker
# per family. tests/test_designs.py holds every conf/attention design to an entry here.
FIXED: dict[str, tuple[str, str]] = _fixed_styles()
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
        return FIXED[name]
    others = [n for n in design_order(all_names) if n not in FIXED]  # unnamed designs (a config override)
    i = others.index(name) if name in others else 0
    free = [c for c in DESIGN_PALETTE if c not in {c for c, _ in FIXED.values()}]  # colours no named design holds
    return free[i % len(free)], MARKERS[::-1][i % len(MARKERS)]


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


def error_bars(v, lo, hi) -> list[list[float]]:
    """matplotlib's yerr for points v with interval ends lo, hi (scalars or sequences): the
    distances below and above, never negative (an interval computed apart can miss its point by
    a rounding error, e.g. Wilson's upper end at 1 - 1e-16 for a proportion of 1.0)."""
    v, lo, hi = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (v, lo, hi))
    return [np.maximum(v - lo, 0.0).tolist(), np.maximum(hi - v, 0.0).tolist()]


def new_figure(ncols: int = 1, nrows: int = 1, height: float = 3.0, **kw) -> tuple[Figure, np.ndarray]:
    """A figure of the report's width (call inside ``render``, which applies STYLE)."""
    fig = Figure(figsize=(WIDTH, height * nrows), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def len_axis(ax, log: int = 2) -> None:
    ax.set_xscale("log", base=log)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_len(x) if x >= 1 else f"{x:g}"))


STATUS_HANDLES: dict[str, dict[str, Any]] = {  # what a line style means, in the legend's order
    "measured": dict(color="0.3", marker="o", label="measured"),
    "partial": dict(color="0.3", marker="o", ls="none", fillstyle="left", mfcalt="white", label="partial: fewer haystacks than planned"),
    "projected": dict(color="0.3", marker="o", ls="--", mfc="white", label="projected (cost model)"),
    "skipped": dict(color="0.3", marker="x", ls="none", label="skipped"),
    "failed": dict(color="red", marker="x", ls="none", label="failed"),
    "crossover measured": dict(color="0.3", ls="-", lw=1, label="crossover (measured)"),  # the latency figure's vertical lines
    "crossover analytic": dict(color="0.3", ls="--", lw=1, label="crossover (analytic)"),
}


def figure_legend(fig: Figure, statuses: Iterable[str] = (), ncols: int = 3) -> None:
    """The figure's one legend: every labelled series of its axes once (the designs, the task's
    levels), then what the line styles mean. Below the axes, where the constrained layout makes
    room for it (an axes legend anchored outside its axes is not laid out), in ``ncols``
    columns: the axes keep the page's width."""
    entries: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    seen = set(statuses)
    if len(seen & set(STATUS_HANDLES)) > 1 or seen - {"measured"}:  # "measured" alone needs no key
        for status, kw in STATUS_HANDLES.items():
            if status in seen:
                entries.setdefault(kw["label"], Line2D([], [], **kw))
    if entries:
        fig.legend(list(entries.values()), list(entries.keys()), loc="outside lower center", ncols=min(ncols, len(entries)))
        keep_axes_share(fig)


AXES_SHARE = 0.55  # of the figure's area its axes keep when the legend below it grows (the test asks 0.5)


# Offsets (points) a point's label tries in turn: right-above, right-below, left-above, left-below,
# then further up and down; the first whose box overlaps no label placed before it is kept.
LABEL_OFFSETS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (5, 14), (5, -21), (-5, 14), (-5, -21), (5, 24), (5, -31))


def point_labels(ax, labels: list[tuple[str, tuple[float, float], str]], fontsize: float = 7.5) -> None:
    """Label points (text, (x, y), color) so that no label overlaps another, a point's marker or the
    axes' other texts (level labels, ticks), where one of LABEL_OFFSETS allows it (else the last is kept). Written here because matplotlib places each annotation on its
    own; the boxes are measured with the figure's renderer, in the axes' final limits."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    fig = ax.figure
    if not hasattr(fig.canvas, "get_renderer"):  # a Figure made without pyplot: the Agg canvas savefig uses too
        FigureCanvasAgg(fig)
    fig.draw_without_rendering()  # the layout engine's final axes, so the boxes are where they will be drawn
    renderer = fig.canvas.get_renderer()
    others = list(ax.texts) + ax.get_xticklabels() + ax.get_yticklabels() + [ax.xaxis.label, ax.yaxis.label]
    placed: list = [t.get_window_extent(renderer) for t in others if t.get_visible() and t.get_text()]
    for _, xy, _ in labels:  # the points' markers (about 8 points across)
        x, y = ax.transData.transform(xy)
        r = 4 * fig.dpi / 72
        placed.append(Bbox([[x - r, y - r], [x + r, y + r]]))
    for text, xy, color in labels:
        for dx, dy in LABEL_OFFSETS:
            t = ax.annotate(
                text, xy, xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, color=color, ha="left" if dx > 0 else "right"
            )
            box = t.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed) or (dx, dy) == LABEL_OFFSETS[-1]:
                placed.append(box)
                break
            t.remove()


def keep_axes_share(fig: Figure, share: float = AXES_SHARE) -> None:
    """Grow the figure's height until its plotting axes take ``share`` of its area: a long legend
    below (ten designs, the levels, the status key) otherwise squeezes the axes into the top of
    the image. The layout is run to measure; the extra height goes to the axes, so a height h
    with axes share s needs h (1 - s) / (1 - share)."""
    for _ in range(4):
        fig.draw_without_rendering()  # runs the constrained layout: the axes' positions are final
        plots = [ax for ax in fig.axes if ax.get_visible() and ax.axison]  # an axes without axis lines holds a key
        now = sum(ax.get_position().width * ax.get_position().height for ax in plots)
        if not plots or now >= share:
            return
        fig.set_figheight(fig.get_figheight() * (1 - now) / (1 - share) * 1.02)


def plot_status_series(
    ax, g: pd.DataFrame, x: str, y: str, color: str, marker: str, label: str, nudge: float = 1.0, **line: Any
) -> set[str]:
    """One series, measured and projected points drawn apart; skipped/failed marked on the x axis.

    The series is labelled once (the design's legend entry); ``figure_legend`` says what the
    line styles mean. The dashed projected part starts at the last measured point so the eye
    follows one series. A measured point whose ``partial`` column is true (a cell that ran fewer
    haystacks than planned) is half filled. ``nudge`` multiplies the x of the skip marks, so
    that several designs skipped at one length stay apart on a log axis.
    """
    seen = set()
    measured = g[g["status"] == "measured"].dropna(subset=[x, y]).sort_values(x)
    projected = g[g["status"].isin(NOT_MEASURED)].dropna(subset=[x, y]).sort_values(x)
    if not measured.empty:
        seen.add("measured")
        part = measured["partial"].fillna(False).astype(bool).to_numpy() if "partial" in measured else np.zeros(len(measured), bool)
        whole = [int(i) for i in np.flatnonzero(~part)]
        ax.plot(
            measured[x], measured[y], ls="-", marker=marker if whole else "none", markevery=whole or None, color=color, label=label, **line
        )
        if part.any():
            seen.add("partial")
            ax.plot(measured[x][part], measured[y][part], ls="none", marker=marker, color=color, fillstyle="left", mfcalt="white")
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
        ax.plot(
            part[x] * nudge,
            [0.03] * len(part),
            transform=ax.get_xaxis_transform(),
            ls="none",
            marker="x",
            color=c,
            ms=7,
            mew=1.8,
            clip_on=False,
        )
    return seen


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
    return d.groupby(keys, dropna=False, sort=True)["v"].agg(["mean", "min", "max", "count"]).reset_index().rename(columns={"mean": "v"})


def facet_grid(n: int, max_cols: int = 3, height: float = 2.6, **kw):
    """n panels in rows of at most max_cols; the grid's unused slots are hidden (``spare``
    returns them, for a key)."""
    ncols = min(n, max_cols)
    nrows = -(-n // ncols)
    fig, axes = new_figure(ncols, nrows, height=height, **kw)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def spare(fig: Figure, used) -> list:
    """The hidden slots of a facet_grid figure (made visible, without axis lines, to hold a key)."""
    out = [ax for ax in fig.axes if not ax.get_visible() and ax not in list(used)]
    for ax in out:
        ax.set_visible(True)
        ax.set_axis_off()
    return out


# ---------------------------------------------------------------- quality
