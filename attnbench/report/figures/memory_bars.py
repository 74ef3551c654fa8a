"""The memory figure's panels (report/figures/cost_figures.py registers the figure): bytes per token as one bar
per design or preset and dtype, totals grouped by context length, both coloured by
``MemoryColors`` (presets in Tol's muted colours, designs in their report colours) and styled by
status; and ``state_bytes_at``, a design's cache or state bytes at a length from its records
(the Pareto figure's x axis).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator

from attnbench.verdicts.readings import NOT_MEASURED, is_preset

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.style import PRESET_COLORS, style


def _who(r: pd.Series) -> str:
    """A memory bar's name: the production preset it describes, else its design."""
    return str(r["preset"]) if pd.notna(r["preset"]) and r["preset"] != "" else str(r["design"])


def _bar_style(status: str, color: str) -> dict:
    """Bar colours by status: measured solid, projected/analytic hatched hollow, skipped/failed crossed grey."""
    if status in NOT_MEASURED:
        return dict(facecolor="white", edgecolor=color, hatch="////", lw=1)
    if status in ("skipped", "failed"):
        return dict(facecolor="#dddddd", edgecolor="red" if status == "failed" else "grey", hatch="xx", lw=1)
    return dict(facecolor=color, edgecolor=color, lw=1)


def _bar_value(r: pd.Series) -> float:
    """The bar's length: the value where there is one (measured or computed), else 0."""
    return r["v"] if r["status"] in ("measured",) + NOT_MEASURED and pd.notna(r["v"]) else 0


class MemoryColors:
    """Presets in Tol's muted colours (in name order), designs in their own report colours."""

    def __init__(self, records: pd.DataFrame, names: list[str]):
        self.names = names
        self.presets = sorted({_who(r) for _, r in records.iterrows() if pd.notna(r["preset"]) and r["preset"] != ""})

    def __call__(self, r: pd.Series) -> str:
        p = _who(r)
        if p in self.presets:
            return PRESET_COLORS[self.presets.index(p) % len(PRESET_COLORS)]
        return style(r["design"], self.names)[0]


def _no_records(ax) -> None:
    ax.text(0.5, 0.5, "no records for this yet", ha="center", va="center", transform=ax.transAxes)


def _bytes_axis(axis) -> None:
    axis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y).replace(".0 ", " ")))


DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # presets' short names, designs' torch names


def memory_per_token(ax, per_tok: pd.DataFrame, color_of: MemoryColors) -> None:
    """Horizontal bars, one per (design or preset, dtype): designs first, then presets."""
    ax.set_title("per token")
    if per_tok.empty:
        return _no_records(ax)
    p = per_tok.assign(who=per_tok.apply(_who, axis=1), kind=is_preset(per_tok).map({True: 1, False: 0}))
    p = p.sort_values(["kind", "who"]).drop_duplicates(["who", "dtype", "status"], keep="last")
    dtypes = p["dtype"].map(lambda t: DTYPE_NAMES.get(t, t) if pd.notna(t) else None)
    one = dtypes.nunique() == 1 and dtypes.notna().all()  # then said once, in the axis label
    labels = [f"{r.who}" + (f" ({t})" if t and not one else "") for r, t in zip(p.itertuples(), dtypes)]
    for i, (_, r) in enumerate(p.iterrows()):
        value = _bar_value(r)
        ax.barh(i, value, **_bar_style(r["status"], color_of(r)))
        text = f" {fmt_bytes(value)}" if r["status"] in ("measured",) + NOT_MEASURED else f" {r['status']}"
        if value > 0:
            ax.text(value, i, text, va="center", fontsize=7)
        else:  # a log axis has no 0: write it at the axis
            ax.text(
                0.01,
                i,
                text.strip() + (" (no growing cache)" if value == 0 and pd.notna(r["v"]) else ""),
                va="center",
                fontsize=7,
                transform=ax.get_yaxis_transform(),
            )
    ax.set_yticks(range(len(p)), labels)
    ax.invert_yaxis()
    if (p["v"] > 0).any():
        ax.set_xscale("log", base=2)
        _bytes_axis(ax.xaxis)
        ax.xaxis.set_major_locator(LogLocator(base=16))  # 256 B, 4 KiB, 64 KiB: labels that do not collide
        ax.set_xlim(right=float(p["v"].max()) * 24)  # room for the bars' labels inside the axes
    ax.set_xlabel("cache bytes per token" + (f" ({dtypes.iloc[0]})" if one else ""))
    ax.grid(axis="y", visible=False)


def memory_total(ax, total: pd.DataFrame, color_of: MemoryColors) -> None:
    """Grouped bars: one group per context length, one bar per design or preset."""
    ax.set_title("total")
    if total.empty:
        return _no_records(ax)
    t = total.assign(who=total.apply(_who, axis=1), kind=is_preset(total).map({True: 1, False: 0}))
    t = t.sort_values(["kind", "who"]).drop_duplicates(["who", "context_len", "dtype", "status"], keep="last")
    whos = list(dict.fromkeys(t["who"]))
    lens = sorted(t["context_len"].dropna().unique())
    width = 0.8 / max(len(whos), 1)
    for k, w in enumerate(whos):
        g = t[t["who"] == w]
        for i, (_, r) in enumerate(g.dropna(subset=["context_len"]).iterrows()):
            x = lens.index(r["context_len"]) + (k - (len(whos) - 1) / 2) * width
            ax.bar(x, _bar_value(r), width, **_bar_style(r["status"], color_of(r)), label=w if i == 0 else None)
    ax.set_xticks(range(len(lens)), [fmt_len(x) for x in lens], rotation=90 if len(lens) > 8 else 0)  # many lengths: upright labels collide
    if (t["v"] > 0).any():
        ax.set_yscale("log", base=2)
    _bytes_axis(ax.yaxis)
    ax.set_xlabel("context length")
    ax.set_ylabel("total cache")
    ax.legend(fontsize=6.5, loc="upper left")
    ax.grid(axis="x", visible=False)


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
    return float(
        (fixed.mean() if not fixed.empty else 0) + (per.mean() if not per.empty else 0) * length
    ), "fixed state + per token x length"
