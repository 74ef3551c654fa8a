"""The width ladder's figures (exp=scale): accuracy against active parameters per task, and the
gap to softmax with its fitted slope (verdicts/scale_fit.py computes; this module draws).

Imported by report/figures/cost_figures.py after the other figures, so these come last in a report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from attnbench.verdicts import scale_fit as F
from attnbench.report.style import error_bars, figure, figure_legend, new_figure, style

NEEDLE_FACTORS = (1, 4, 16)
CHAIN_HOPS = (1, 2, 3, 4)
# The gaps the figure fits: C3's (chains of 2 or more hops at the training length) and the
# multi-key needles at 4x the training length (length extrapolation, C2's ratio).
GAPS = (("chain", 1, (2, 3, 4), "chains of 2-4 hops at the training length"), ("niah_multikey", 4, (), "multi-key needles at 4x"))
LEARN_NOTE = "Hollow markers: a model behind the point passed no curriculum stage (it did not learn the task at all)."


def _params_axis(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: F.fmt_params(x)))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    ax.set_xlabel("active parameters")


def _accuracy_panels(df: pd.DataFrame, task: str, panels: list[tuple[str, int, tuple[int, ...]]]) -> Figure | None:
    if F.select(df, task, panels[0][1], panels[0][2]).empty and all(F.select(df, task, f, h).empty for _, f, h in panels):
        return None
    names = sorted(set(F.records(df)["design"]))
    fig, axes = new_figure(len(panels), 1, height=2.8, sharey=True)
    for ax, (title, factor, hops) in zip(axes[0], panels):
        pts = F.points(df, task, factor, hops)
        for name in sorted({p.design for p in pts}):
            color, marker = style(name, names)
            mine = sorted((p for p in pts if p.design == name), key=lambda p: p.params)
            xs, ys = [p.params for p in mine], [p.p for p in mine]
            ax.plot(xs, ys, color=color, lw=1.2, label=name)
            for p in mine:
                ax.errorbar(
                    p.params,
                    p.p,
                    yerr=error_bars(p.p, p.lo, p.hi),
                    color=color,
                    marker=marker,
                    mfc=color if p.learned else "white",
                    capsize=2,
                    lw=0.8,
                )
        if not pts:
            ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
        _params_axis(ax)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(title)
    axes[0][0].set_ylabel("accuracy")
    figure_legend(fig)
    return fig


def _caption(what: str) -> str:
    return (
        f"{what} One line per design; each point pools a design's seeds at one width (x: its own active parameters, "
        f"log axis), whiskers its 95% Wilson interval over probes. {LEARN_NOTE} Widths and parameter counts: the "
        "scale/model records; 0.1-3M parameters say nothing directly about models of hundreds of billions."
    )


@figure(
    "scale_niah_single",
    "Width ladder: single-needle accuracy against active parameters",
    (F.ACC, F.MODEL),
    _caption("Single needle (one needle a context) at 1x, 4x and 16x each model's training length."),
)
def scale_niah_single(df: pd.DataFrame) -> Figure | None:
    return _accuracy_panels(df, "niah_single", [(f"{f}x the training length", f, ()) for f in NEEDLE_FACTORS])


@figure(
    "scale_niah_multikey",
    "Width ladder: multi-key needle accuracy against active parameters",
    (F.ACC,),
    _caption("Multi-key needles (one needle a depth, each probed) at 1x, 4x and 16x each model's training length."),
)
def scale_niah_multikey(df: pd.DataFrame) -> Figure | None:
    return _accuracy_panels(df, "niah_multikey", [(f"{f}x the training length", f, ()) for f in NEEDLE_FACTORS])


@figure(
    "scale_chain",
    "Width ladder: chain accuracy against active parameters",
    (F.ACC,),
    _caption("Compositional chains (start key given, final value scored) of 1-4 hops at each chain model's training length."),
)
def scale_chain(df: pd.DataFrame) -> Figure | None:
    return _accuracy_panels(df, "chain", [(f"{h} hop{'s' if h > 1 else ''}", 1, (h,)) for h in CHAIN_HOPS])


@figure(
    "scale_gap",
    "Width ladder: softmax's accuracy minus each design's, against parameters, with the fitted trend",
    (F.ACC,),
    "Points: the gap at each width (seeds pooled; x: softmax's active parameters at that width), whiskers its "
    f"{F.LEVEL:.0%} bootstrap interval over seeds and haystacks ({F.RESAMPLES:,} resamples, seed {F.SEED}); dashed: the "
    "least-squares line against log10 parameters; the legend gives its slope per tenfold of parameters with the "
    "bootstrap interval. Above 0: softmax ahead. Left: C3's cell (its 'at scale' part reads this slope for the "
    "headline hybrid); right: length extrapolation. A slope over 3 widths says nothing about hundreds of billions "
    "of parameters.",
)
def scale_gap(df: pd.DataFrame) -> Figure | None:
    others = F.designs_against(df)
    fits = {(task, name): F.fit_gap(df, name, task, factor, hops, label) for task, factor, hops, label in GAPS for name in others}
    if not any(fits.values()):
        return None
    names = sorted(set(F.records(df)["design"]))
    fig, axes = new_figure(len(GAPS), 1, height=3.0, sharey=True)
    for ax, (task, _, _, label) in zip(axes[0], GAPS):
        drawn = False
        for name in others:
            fit = fits[(task, name)]
            if fit is None:
                continue
            drawn = True
            color, marker = style(name, names)
            yerr = error_bars(fit.gap, fit.gap_lo, fit.gap_hi)
            ax.errorbar(fit.params, fit.gap, yerr=yerr, color=color, marker=marker, lw=0, elinewidth=0.8, capsize=2)
            if fit.slope == fit.slope:
                xs = np.array([min(fit.params), max(fit.params)])
                text = f"{name}: {fit.slope:+.2f} per 10x [{fit.slope_lo:+.2f}, {fit.slope_hi:+.2f}]"
                ax.plot(xs, fit.intercept + fit.slope * np.log10(xs), color=color, ls="--", lw=1.2, label=text)
            else:
                ax.plot([], [], color=color, marker=marker, lw=0, label=f"{name}: one width, no slope")
        ax.axhline(0, color="0.4", lw=0.8)
        if not drawn:
            ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
        _params_axis(ax)
        ax.set_title(label)
    axes[0][0].set_ylabel("softmax minus design (accuracy)")
    figure_legend(fig, ncols=2)
    return fig
