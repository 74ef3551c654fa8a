"""The serving figure (exp=serving, claim C7): retrieval against the bytes a stored cache holds,
one point per design and storage format, the undominated points joined (a quality-against-memory
frontier, as Zoology and Based plot recall against state size)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from attnbench.report.frame import design_order, designs
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.style import error_bars, figure, figure_legend, new_figure, style


FORMAT_MARKERS = {"float32": "o", "bfloat16": "s", "float8_e4m3fn": "^", "float8_e5m2": "v", "int8": "D"}


@figure(
    "serving_frontier",
    "Low-precision storage: retrieval against the bytes the stored cache holds (the frontier)",
    ("serving/acc", "serving/cache_bytes"),
    "exp=serving: each point one design with its cache or state stored in one format (marker), compute fp32, "
    "stored once after the prefill; accuracy on multi-key needles with its 95% interval (bars), against the "
    "bytes per token the stored cache holds at that length. Up and left is better; the grey step joins the "
    "points no other point beats on both (by the point estimates, so a point just off it may not differ).",
)
def serving_frontier(df: pd.DataFrame) -> Figure | None:
    acc, size = metric(df, "serving/acc"), metric(df, "serving/cache_bytes")
    keys = ["design", "context_len", "fmt", "when"]
    if acc.empty or size.empty or not set(keys) <= set(acc.columns) or "bytes_per_token" not in size.columns:
        return None
    acc = acc[(acc["status"] == "measured") & (acc["when"] == "end")]
    size = size[size["status"] == "measured"].groupby(keys, as_index=False)["bytes_per_token"].mean()
    # a cell measured by several runs: the one with the most probes (a GPU run's 5 beside the CPU's 100)
    acc = acc[[*keys, "n", "v", "ci_low", "ci_high"]].sort_values("n", kind="stable").groupby(keys).tail(1)
    d = acc.rename(columns={"ci_low": "lo", "ci_high": "hi"})
    d = d.merge(size, on=keys).dropna(subset=["bytes_per_token"])
    if d.empty:
        return None
    lens = sorted(d["context_len"].unique())
    cols = min(len(lens), 2)  # two panels a row: four in one row left no room for their axis labels
    fig, axes = new_figure(cols, -(-len(lens) // cols), height=3.0, sharey=True)
    for ax in axes.flat[len(lens) :]:
        ax.set_visible(False)
    names = designs(df)
    for ax, length in zip(axes.flat, lens):
        t = d[d["context_len"] == length]
        for r in t.itertuples():
            color, _ = style(str(r.design), names)
            ax.errorbar(
                r.bytes_per_token,
                r.v,
                yerr=error_bars(r.v, r.lo, r.hi),
                marker=FORMAT_MARKERS.get(str(r.fmt), "o"),
                color=color,
                ms=6,
                lw=0.8,
                capsize=2,
                ls="none",
            )
        front, best = [], -1.0
        for r in t.sort_values(["bytes_per_token", "v"], ascending=[True, False]).itertuples():
            if r.v > best:
                front.append((r.bytes_per_token, r.v))
                best = r.v
        if len(front) > 1:
            xs, ys = zip(*front)
            ax.step(xs, ys, where="post", color="0.5", lw=1, zorder=0)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y)))
        ax.set_ylim(-0.02, 1.05)
        ax.set_title(f"context {fmt_len(length)}")
        ax.set_xlabel("bytes per token, as stored")
    first = axes[0][0]
    for row in axes:
        row[0].set_ylabel("multi-key needle accuracy")
    for n in design_order(set(d["design"])):  # legend entries only: a design's colour, then a format's marker
        first.plot([], [], color=style(n, names)[0], marker="o", ls="none", label=n)
    for f, m in FORMAT_MARKERS.items():
        if f in set(d["fmt"]):
            first.plot([], [], color="0.3", marker=m, ls="none", label=f)
    figure_legend(fig, ncols=5)
    return fig
