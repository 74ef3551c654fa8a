"""The report's figures: one function each, keyed on the shared metric names (results_record.METRICS).

Every function takes the records table (report.data) and returns a matplotlib Figure, or
None when its metrics have no records yet (the report then says so). The accuracy figures
are in report/figures/accuracy.py, the shared style, status conventions and registry in
report/style.py; this module holds the cost figures (latency, efficiency, memory, Pareto,
MSA speedup, training loss, parameters; the memory figure's panels in report/figures/memory_bars.py)
and imports the accuracy figures first, so ``FIGURES`` lists every figure in report order.

To add a figure (an experiment's own): write a function taking the records table and
returning a Figure or None, and decorate it with ``@figure(id, title, metrics, caption)``.
The report shows figures in the order they are registered.
"""

from __future__ import annotations


import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from attnbench.verdicts.readings import LEN_1M, NOT_MEASURED, is_preset, metric, pooled

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.frame import designs, varying
from attnbench.report.figures.accuracy import draw_levels, learned_of  # importing it registers the accuracy figures first (report order)
from attnbench.report.figures import ladder, frontier  # noqa: F401  registering the ladder's and serving figures (report order)
from attnbench.report.figures.memory_bars import MemoryColors, memory_per_token, memory_total, state_bytes_at

from attnbench.report.style import (
    MARKERS,
    SERIES_COLORS,
    figure,
    figure_legend,
    len_axis,
    new_figure,
    plot_status_series,
    point_labels,
    series_label,
    style,
)


@figure(
    "latency",
    "Latency against context length (log-log), with crossovers",
    ("latency/prefill_ms", "latency/decode_ms", "crossover/prefill_len", "crossover/decode_len"),
    "Median of repeats; whiskers p25-p75. Vertical lines, in the design's colour: where it becomes cheaper "
    "than its baseline (crossover), shaded over its bracket; solid where measured on that row's machine, "
    "dashed where analytic (the cost model's, drawn only for a design with no measured crossover there). "
    "Their lengths are in the summary table's crossover columns.",
)
def latency(df: pd.DataFrame) -> Figure | None:
    phases = [("prefill", "latency/prefill_ms", "crossover/prefill_len"), ("decode", "latency/decode_ms", "crossover/decode_len")]
    if all(metric(df, m).empty and metric(df, c).empty for _, m, c in phases):
        return None
    lat = df[df["metric"].isin([m for _, m, _ in phases])]
    # one row per device, and per CPU where runs of several CPUs are pooled: never compared across
    by_cpu = "cpu" in lat.columns and bool((lat.groupby("device")["cpu"].nunique() > 1).any())
    cpus = lat["cpu"] if by_cpu else [None] * len(lat)
    rows_of: list[tuple[str | None, str | None]] = sorted(
        {(str(dev), None if cpu is None else str(cpu)) for dev, cpu in zip(lat["device"], cpus) if pd.notna(dev)}
    ) or [(None, None)]
    fig, axes = new_figure(2, len(rows_of), height=3.2)
    names = designs(df)
    statuses: set[str] = set()
    for row, (device, cpu) in zip(axes, rows_of):
        for ax, (phase, name_ms, name_x) in zip(row, phases):
            d = metric(df, name_ms)
            d = d[d["device"] == device] if device else d
            d = d[d["cpu"].astype(str) == cpu] if cpu else d
            for name in designs(d):
                color, marker = style(name, names)
                g = d[d["design"] == name]
                keys = varying(
                    g, [k for k in ("backend", "scope", "dtype", "op") if k in g.columns]
                )  # what tells this design's series apart
                for _, gg in g.groupby(keys, dropna=False) if keys else [(None, g)]:
                    statuses |= plot_status_series(ax, gg, "context_len", "v", color, marker, series_label(name, gg.iloc[0], keys))
                    meas = gg[(gg["status"] == "measured") & gg["p25_ms"].notna() & gg["p75_ms"].notna()]
                    if not meas.empty:
                        ax.vlines(meas["context_len"], meas["p25_ms"], meas["p75_ms"], color=color, lw=1)
            statuses |= _crossovers(ax, _crossovers_of(metric(df, name_x), device, cpu), names)
            len_axis(ax)
            if not d.empty and (d["v"] > 0).any():
                ax.set_yscale("log")
            if d.empty:
                ax.text(
                    0.5,
                    0.5,
                    f"no {phase} timings" + (f" on this {'GPU' if device == 'cuda' else 'CPU'}" if cpu else ""),
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(phase + (f" ({device})" if device else "") + (f", {cpu}" if cpu else ""))
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("ms" + (" per token" if phase == "decode" else ""))
    labels = {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}
    rows = -(-(len(labels) + len(statuses)) // 3)  # the key's rows: a series per backend and scope can make many
    fig.set_size_inches(fig.get_size_inches()[0], 3.2 * len(rows_of) + 0.19 * rows)  # the axes keep their height
    figure_legend(fig, statuses)
    return fig


def _crossovers_of(x: pd.DataFrame, device: str | None, cpu: str | None) -> pd.DataFrame:
    """The crossovers a latency panel draws: those of its device (and CPU, where rows are per
    CPU); an analytic one only for a design with no measured one there, and only for the
    panel's kind of hardware (the cost model's CPU profile on a CPU row, its GPU profiles on a
    GPU row). Labels are left to the summary table: dozens of them pile up over the series."""
    if x.empty:
        return x
    if device:
        x = x[x["device"].isna() | (x["device"] == device)]
    if cpu and "cpu" in x.columns:
        x = x[x["cpu"].isna() | (x["cpu"].astype(str) == cpu)]
    analytic = x["status"].isin(NOT_MEASURED) | (x["method"] == "analytic" if "method" in x.columns else False)
    measured_designs = set(x.loc[~analytic, "design"])
    keep = ~analytic | ~x["design"].isin(measured_designs)
    if "hardware" in x.columns and device:
        on_cpu = x["hardware"].astype(str).isin(("cpu", "this cpu"))
        keep &= ~analytic | x["hardware"].isna() | (on_cpu if device == "cpu" else ~on_cpu)
    return x[keep]


def _crossovers(ax, x: pd.DataFrame, names: list[str]) -> set[str]:
    """Draw each crossover as a vertical line in its design's colour (its bracket shaded); the
    kinds drawn, for the legend (style.STATUS_HANDLES)."""
    kinds = set()
    for _, r in x.iterrows():
        if pd.isna(r["v"]):
            continue
        color, _ = style(r["design"], names)
        analytic = r["status"] in NOT_MEASURED or r.get("method") == "analytic"
        ax.axvline(r["v"], color=color, ls="--" if analytic else "-", lw=1, alpha=0.9)
        bracket = r.get("bracket")
        if isinstance(bracket, (list, tuple)) and len(bracket) == 2 and all(b is not None for b in bracket):
            ax.axvspan(bracket[0], bracket[1], color=color, alpha=0.10, lw=0)
        kinds.add("crossover analytic" if analytic else "crossover measured")
    return kinds


@figure(
    "efficiency",
    "Prefill: measured time against the compute roofline",
    ("eval/prefill_s",),
    "Left: wall time of one haystack's streaming prefill (solid) and the roofline, the cost model's FLOPs "
    "over the fp32 matmul peak calibrated at the start of the run (dashed). Right: the fraction of that "
    "peak reached. Hollow markers: noisy (the load average exceeded the core count by half a core while it ran).",
)
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
        by = (
            g.groupby("context_len")
            .agg(v=("v", "median"), roof=("roofline_s", "median"), frac=("peak_fraction", "median"), noisy=("noisy", "any"))
            .reset_index()
        )
        ax_t.plot(by["context_len"], by["v"], ls="-", marker=marker, color=color, label=name)
        ax_t.plot(by["context_len"], by["roof"], ls="--", marker=marker, mfc="white", mec=color, color=color)  # the marker says whose
        ax_f.plot(by["context_len"], by["frac"], ls="-", marker=marker, color=color, label=name)
        for ax, col in ((ax_t, "v"), (ax_f, "frac")):
            hollow = by[by["noisy"]]
            ax.plot(hollow["context_len"], hollow[col], ls="none", marker=marker, mfc="white", mec=color)
    for ax in (ax_t, ax_f):
        len_axis(ax)
        ax.set_xlabel("context length (tokens)")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("s per haystack")
    ax_t.set_title("measured (solid) and roofline (dashed, hollow)")
    ax_f.set_ylabel("fraction of the fp32 peak")
    ax_f.set_title("efficiency")
    figure_legend(fig)
    return fig


@figure(
    "roofline",
    "Kernels against the two-term roofline: achieved FLOP rate by arithmetic intensity",
    ("latency/prefill_ms",),
    "Each op timed by exp=kernels_cpu: its minimal FLOPs (the cost model's fused kernel) over its measured time, "
    "against its minimal FLOPs a byte moved. Lines: the fp32 matmul peak (flat) and the copy bandwidth (diagonal), "
    "both calibrated in the run that timed it; an op's limit is the lower of the two at its intensity. One panel "
    'a processor; one line a run and op (an earlier run\'s faint; a fused native kernel hollow, named "op (native)"), '
    "the op named at its newest run's longest length.",
)
def roofline(df: pd.DataFrame) -> Figure | None:
    d = metric(df, "latency/prefill_ms")
    if d.empty or "intensity" not in d.columns:
        return None
    d = d[(d["status"] == "measured") & pd.to_numeric(d["intensity"], errors="coerce").notna() & d["v"].gt(0)].copy()
    if d.empty:
        return None
    d["intensity"] = pd.to_numeric(d["intensity"])
    d["rate"] = pd.to_numeric(d["min_flops"]) / (d["v"] / 1e3)  # FLOP/s of the minimal work
    cpus = sorted(d["cpu"].fillna("?").unique())[:2]
    fig, axes = new_figure(len(cpus), 1, height=3.4)
    names = designs(df)
    for ax, cpu in zip(axes[0], cpus):
        g = d[d["cpu"].fillna("?") == cpu]
        runs = set(g["run_dir"])
        cal = {m: metric(df, f"calibration/{m}") for m in ("matmul_flops", "copy_bandwidth")}
        peak, bw = (float(c[c["run_dir"].isin(runs)]["v"].median()) for c in cal.values())
        lo, hi = g["intensity"].min() / 2, g["intensity"].max() * 2
        xs = [lo * (hi / lo) ** (i / 50) for i in range(51)]
        if peak == peak and bw == bw:  # both ceilings calibrated (not NaN)
            ax.plot(xs, [min(peak, bw * x) / 1e9 for x in xs], color="0.4", lw=1.2)
            ax.axvline(peak / bw, color="0.7", ls=":", lw=0.8)  # the ridge: left of it memory bounds an op
        labels = []
        native = g["backend"].eq("native") if "backend" in g else pd.Series(False, index=g.index)
        for op, o in g.assign(series=g["op"].astype(str) + native.map({True: " (native)", False: ""})).groupby("series"):
            color, marker = style(str(o["design"].iloc[0]), names)
            hollow = {"mfc": "white"} if str(op).endswith(" (native)") else {}  # a fused native kernel: hollow, its own line
            newest = o.loc[o["time"].astype(str).idxmax(), "run_dir"]
            for run, r in o.groupby("run_dir"):  # one line a run: two runs' lengths never joined
                r = r.sort_values("context_len")
                ax.plot(
                    r["intensity"],
                    r["rate"] / 1e9,
                    ls="-",
                    marker=marker,
                    color=color,
                    ms=4,
                    lw=0.8,
                    alpha=1 if run == newest else 0.35,
                    **hollow,
                )
            last = o[o["run_dir"] == newest].sort_values("context_len").iloc[-1]
            labels.append((str(op), (last["intensity"], last["rate"] / 1e9), "0.1"))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("FLOPs a byte (minimal)")
        ax.set_ylabel("GFLOP/s achieved")
        ax.set_title(str(cpu)[:40], fontsize=8)
        point_labels(ax, labels, fontsize=6)  # each op at its longest length, no two labels overlapping
    return fig


@figure(
    "memory",
    "Cache memory: bytes per token, and total at 128K / 1M / 4M",
    ("memory/cache_bytes_per_token", "memory/total_bytes"),
    "Designs (this model) and production presets (their published configs). Hatched hollow bars are "
    "projected from the formula, solid bars measured from the cache objects.",
)
def memory(df: pd.DataFrame) -> Figure | None:
    per_tok = metric(df, "memory/cache_bytes_per_token")
    total = metric(df, "memory/total_bytes")
    if per_tok.empty and total.empty:
        return None
    fig, axes = new_figure(2, 1, height=max(2.6, 0.28 * max(len(per_tok), 4) + 1))
    colors = MemoryColors(pd.concat([per_tok, total]), designs(df))
    memory_per_token(axes[0][0], per_tok, colors)
    memory_total(axes[0][1], total, colors)
    statuses = set(per_tok["status"]) | set(total["status"])
    handles = [Patch(facecolor="0.4", label="measured")] if "measured" in statuses else []
    if statuses & set(NOT_MEASURED):
        handles.append(Patch(facecolor="white", edgecolor="0.4", hatch="////", label="projected / analytic"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), title=None)
    return fig


@figure(
    "pareto",
    "Recall against state size (the Pareto view)",
    ("niah/acc", "memory/cache_bytes_per_token", "memory/fixed_state_bytes", "memory/total_bytes"),
    "Recall: needle accuracy at the longest length every design was measured at (mean over depths and "
    "seeds). Size: the design's cache or state at that length. Up and left is better; the line joins "
    "the designs no other design beats on both.",
)
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
    labels = []
    for name, size, acc, _ in points:
        color, marker = style(name, names)
        untrained = learned_of(d[d["design"] == name]) is False
        ax.plot(size, acc, marker=marker, color=color, ms=8, ls="none", label=name, mfc="white" if untrained else color)
        labels.append((name + (" (did not learn)" if untrained else ""), (size, acc), color))
    front, best = [], -1.0
    for name, size, acc, _ in sorted(points, key=lambda p: (p[1], -p[2])):
        if acc > best:
            front.append((size, acc))
            best = acc
    if len(front) > 1:
        xs, ys = zip(*front)
        ax.step(xs, ys, where="post", color="0.5", ls="-", lw=1, zorder=0)
    draw_levels(ax, d[d["context_len"] == length])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y)))
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"cache / state bytes at {fmt_len(length)} tokens")
    ax.set_ylabel(f"needle accuracy at {fmt_len(length)}")
    point_labels(ax, labels)  # last: the boxes are measured in the final axes
    return fig


@figure(
    "msa_speedup",
    "MSA (M3) against full attention (M2): speedup against context length",
    ("msa_speedup/prefill", "msa_speedup/decode"),
    "Ratio of full-attention time to MSA time (above 1: MSA faster), one series per hardware; dashed "
    "hollow: analytic (cost model). Stars: MiniMax's reported ~9x prefill and ~15x decode at 1M tokens.",
)
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
    figure_legend(fig, statuses)
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
        color, marker = style(name, names)  # a colour per design, a marker per family
        for i, (_, g) in enumerate(d[d["design"] == name].groupby(["seed", "run_dir"], dropna=False)):
            g = g.sort_values("step")
            every = max(1, len(g) // 10)
            ax.plot(g["step"], g["v"], color=color, lw=1.2, alpha=0.9, marker=marker, ms=4, markevery=every, label=name if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    figure_legend(fig)
    return fig


@figure(
    "params",
    "Parameters per design (the shared backbone's budget)",
    ("params/total", "params/active", "params/attention"),
    "Same backbone for every design; the attention parameters differ by design.",
)
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
    figure_legend(fig)
    return fig
