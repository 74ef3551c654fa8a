"""The report figures' shared look and their registry: colours, markers, legends, the page
width, the status conventions every figure follows, and ``@figure`` (report/figures.py and
report/figures_quality.py hold the figures themselves).

One print-readable style; a design keeps its colour and marker in every figure. Status is
always visible:

  measured   solid line, filled markers, solid bars
  projected  dashed line, hollow markers, hatched hollow bars, "(projected)" in the label
             (analytic records, computed from a formula, are drawn the same way)
  skipped    an x on the axis (heatmaps: a hatched grey cell saying "skipped")
  failed     a red x (heatmaps: a hatched cell saying "failed")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from attnbench.designs import DESIGNS

from .data import NOT_MEASURED, design_order, fmt_len

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
# Okabe-Ito: tells apart in colour-blind vision and in greyscale print (with the markers).
# Its yellow (#F0E442) is left out: it does not read on white.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#999999"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]
SERIES_COLORS = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#000000"]  # series that are not designs
PRESET_COLORS = ["#332288", "#882255", "#117733", "#999933", "#AA4499", "#44AA99"]  # Tol's muted, for presets
_GREEN, _SKY = "#009E73", "#56B4E9"  # the two hybrids' colours


def _family(name: str, marker: str | None = None) -> tuple[str, str]:
    """The colour of a design's family (a registry design or a hybrid), with its own marker."""
    colour, own = FIXED[name]
    return colour, marker or own


# Every named design (conf/attention/*.yaml) has its (colour, marker) here, the same in every
# figure. Single-letter designs take theirs from the registry (attnbench/designs.py); a variant
# (one setting changed) takes its family's colour and a marker of its own, so it reads as its
# family's. tests/test_designs.py holds every conf/attention design to an entry here.
FIXED: dict[str, tuple[str, str]] = {d.name: (d.colour, d.marker) for d in DESIGNS.values() if d.colour}
FIXED |= {"lightning_hybrid": (_GREEN, "^"), "swa_hybrid": (_SKY, "v")}
FIXED |= {
    "lightning_hybrid16": _family("lightning_hybrid", "X"),
    "lightning_hybrid31": _family("lightning_hybrid", "*"),
    "lightning_hybrid_h8": _family("lightning_hybrid", "h"),
    "lightning_hybrid_nope": _family("lightning_hybrid", "p"),
    "lightning_conv_nope": _family("lightning_hybrid", "d"),
    "softmax_logn": _family("softmax", ">"),
}
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
    return PALETTE[::-1][i % len(PALETTE)], MARKERS[::-1][i % len(MARKERS)]


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
        ax.add_artist(
            Legend(
                ax,
                handles,
                [str(h.get_label()) for h in handles],
                loc="lower left",
                bbox_to_anchor=(1.01, 0.0),
                title="status",
                title_fontsize=7.5,
                borderaxespad=0,
                alignment="left",
            )
        )


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
        ax.plot(
            part[x], [0.03] * len(part), transform=ax.get_xaxis_transform(), ls="none", marker="x", color=c, ms=7, mew=1.8, clip_on=False
        )
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
    return d.groupby(keys, dropna=False, sort=True)["v"].agg(["mean", "min", "max", "count"]).reset_index().rename(columns={"mean": "v"})


def facet_grid(n: int, max_cols: int = 3, height: float = 2.6, **kw):
    ncols = min(n, max_cols)
    nrows = -(-n // ncols)
    fig, axes = new_figure(ncols, nrows, height=height, **kw)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


# ---------------------------------------------------------------- quality
