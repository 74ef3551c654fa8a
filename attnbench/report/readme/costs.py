"""README tables of the cost experiments (smoke, kv_memory, kernels, msa_speedup, crossover,
presets), registered with ``@table`` like the task-model tables in report/readme/task_models.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.designs import BASELINE_OP

from attnbench.report.frame import DESIGN_ORDER, RunData, designs
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.readme.registry import Tables
from attnbench.report.readme.task_models import run_facts

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table

# ---------------------------------------------------------------- smoke


@table("smoke/designs")
def smoke_designs(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for name in designs(df):
        g = df[df["design"] == name]

        def val(m):
            return g[g["metric"] == m]["v"].iloc[-1] if (g["metric"] == m).any() else float("nan")

        rows.append(
            {
                "design": name,
                "layout": g["layout"].dropna().iloc[0],
                "params": f"{val('params/total'):,.0f}",
                "cache bytes (T=64, B=2)": f"{val('cache/bytes'):,.0f}",
                "prefill vs full": f"{val('smoke/prefill_vs_full_rel_err'):.1e}",
                "decode vs full": f"{val('smoke/decode_vs_full_rel_err'):.1e}",
                "train loss (nats)": f"{val('smoke/train_loss'):.2f}",
            }
        )
    return pd.DataFrame(rows)


@table("smoke/run")
def smoke_run(data: RunData) -> pd.DataFrame:
    return run_facts(data)


# ---------------------------------------------------------------- kv_memory


@table("kv_memory/presets")
def kv_presets(data: RunData) -> pd.DataFrame:
    df = data.records
    p = df[df["preset"].notna() & (df["dtype"] == "bfloat16")]
    rows = []
    for preset, g in p.groupby("preset", sort=False):
        per = g[g["metric"] == "memory/cache_bytes_per_token"]["v"]
        fixed = g[g["metric"] == "memory/fixed_state_bytes"]["v"]
        tot = g[g["metric"] == "memory/total_bytes"]
        row = {
            "preset": preset,
            "bytes/token (BF16)": f"{per.iloc[0]:,.0f}" if len(per) else "—",
            "fixed state": fmt_bytes(fixed.iloc[0]) if len(fixed) else "—",
        }
        for _, r in tot.sort_values("context_len").iterrows():
            row[f"at {fmt_len(r['context_len'])}"] = fmt_bytes(r["v"])
        row["status"] = ", ".join(sorted(set(g["status"])))
        rows.append(row)
    return pd.DataFrame(rows)


@table("kv_memory/check")
def kv_check(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "memory/total_bytes")
    d = d[(d["status"] == "measured") & d["preset"].isna()]
    return pd.DataFrame(
        [
            {
                "design": r["design"],
                "dtype": r["dtype"],
                "tokens": f"{r['context_len']:.0f}",
                "cache objects hold (B)": f"{r['v']:,.0f}",
                "formula (B)": f"{r['analytic']:,.0f}",
                "equal": "yes" if r["equal"] else "NO",
            }
            for _, r in d.iterrows()
        ]
    )


# ---------------------------------------------------------------- kernels


def _by_cpu_and_length(data: RunData, d: pd.DataFrame, peak: bool = False):
    """(row label columns, records) per CPU and length (a machine's ratios are not another's), the
    CPUs in the order their runs started; with peak, the CPU's label adds its run's calibrated fp32
    matmul peak."""
    cpus = d["cpu"].fillna("?")
    if peak:  # the last calibration of that run directory on that CPU (a resumed run calibrates again)
        cal = metric(data.records, "calibration/matmul_flops").assign(cpu=lambda c: c["cpu"].fillna("?"))
        last = cal.groupby(["run_dir", "cpu"])["v"].last()
        rate = pd.Series([last.get((r, c)) for r, c in zip(d["run_dir"], cpus)], index=d.index, dtype=float)
        cpus = cpus + rate.map(lambda f: "" if pd.isna(f) else f" (peak {f / 1e9:.1f} GFLOP/s)")
    for cpu in d.assign(label=cpus).groupby("label")["run_start"].min().sort_values().index:
        for L, g in d[cpus == cpu].groupby("context_len"):
            yield {"CPU": cpu, "T": f"{L:.0f}"}, g


def on_cpu(d: pd.DataFrame) -> pd.DataFrame:
    """The CPU's records (a CUDA run's beside them has tables of its own: readme_tables_gpu)."""
    return d[d["device"].astype(str) != "cuda"] if "device" in d.columns else d


@table("kernels/cpu")
def kernels_cpu(data: RunData) -> pd.DataFrame:
    d = on_cpu(metric(data.records, "latency/prefill_ms"))
    rows = []
    for row, g in _by_cpu_and_length(data, d):
        base = g[(g["op"] == BASELINE_OP) & (g["status"] == "measured")]["v"]
        for (op, backend), gg in g.groupby(["op", "backend"], sort=False):
            if (gg["status"] != "measured").all():
                row[f"{op} ({backend}) ms"] = f"{gg['status'].iloc[0]}"
                continue
            ms = gg[gg["status"] == "measured"]["v"].iloc[0]
            ratio = f" ({base.iloc[0] / ms:.1f}x)" if len(base) and op != BASELINE_OP else ""
            row[f"{op} ({backend}) ms"] = f"{ms:.1f}{ratio}"
        load = g["loadavg"].dropna()
        row["load avg (1 min)"] = f"{load.iloc[0][0]:.2f}" if len(load) else "—"
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("kernels/efficiency")
def kernels_efficiency(data: RunData) -> pd.DataFrame:
    """Achieved GFLOP/s of each timed op (the cost model's FLOP count) and its fraction of the fp32
    matmul peak calibrated at the start of the run (older records carry neither: —)."""
    d = on_cpu(metric(data.records, "latency/prefill_ms"))
    d = d[d["status"] == "measured"]
    rows = []
    for row, g in _by_cpu_and_length(data, d, peak=True):
        for (op, backend), gg in g.groupby(["op", "backend"], sort=False):
            r = gg.iloc[0]
            rate = r.get("gflop_per_s")
            frac = r.get("peak_fraction")
            row[f"{op} ({backend})"] = "—" if pd.isna(rate) else f"{rate:.1f}" + ("" if pd.isna(frac) else f" ({100 * frac:.0f}%)")
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("kernels/alternating")
def kernels_alternating(data: RunData) -> pd.DataFrame:
    """Per length and op: the speedup over causal SDPA as the median of round-by-round ratios (SDPA and
    the ops timed in turn, bench.timing.time_alternating) with its p25-p75, and each timing's fraction of
    its roofline (the cost model's FLOPs at the calibrated peak) with the peak it was read against."""
    rec = data.records
    sp = on_cpu(metric(rec, "kernels/speedup"))
    sp = sp[(sp["status"] == "measured") & sp["method"].astype(str).str.startswith("alternating")]
    lat = on_cpu(metric(rec, "latency/prefill_ms"))
    lat = lat[(lat["status"] == "measured") & (lat["method"] == "alternating")]
    cal = metric(rec, "calibration/matmul_flops")
    rows = []
    for (run, L), g in lat.groupby(["run_dir", "context_len"]):  # one row per run and length
        row = {"run": Path(run).name, "T": f"{L:.0f}"}
        for _, r in g.iterrows():
            native = r.get("backend") == "native"  # a fused native kernel: its own column, its own speedup
            s_ = sp[(sp["run_dir"] == run) & (sp["context_len"] == L) & (sp["op"] == r["op"])]
            s_ = s_[s_["backend"].eq("native") == native] if "backend" in s_ else s_
            ratio = f", {s_['v'].iloc[0]:.1f}x [{s_['ratio_p25'].iloc[0]:.1f}, {s_['ratio_p75'].iloc[0]:.1f}]" if len(s_) else ""
            row[r["op"] + (" (native)" if native else "")] = f"{100 * r['peak_fraction']:.0f}% of roofline{ratio}"
        p_ = cal.loc[cal["run_dir"] == run, "v"]
        row["peak (GFLOP/s)"] = f"{p_.iloc[-1] / 1e9:.0f}" if len(p_) else "—"
        row["load (1 min)"] = f"{g['load'].max():.2f}"
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


# ---------------------------------------------------------------- msa_speedup


@table("msa_speedup/predicted")
def msa_predicted(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(df, f"msa_speedup/{phase}")
        d = d[(d["status"] != "measured") & (d["hardware"] == "h200")]
        for (vs, scope), g in d.groupby(["vs", "scope"], sort=False):
            row = {"H200": f"{phase}, {scope}, vs {vs}"}
            for _, r in g.sort_values("context_len").iterrows():
                row[fmt_len(r["context_len"])] = f"{r['v']:.1f}x"
            rows.append(row)
    return pd.DataFrame(rows)


@table("msa_speedup/verdicts")
def msa_verdicts(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "msa_speedup/verdict")
    return pd.DataFrame(
        [
            {
                "claim": f"{r['claim']} ({r['hardware']})",
                "published": f"{r['published']:g}x",
                "predicted, attention": f"{r['predicted_attention']:.1f}x",
                "predicted, whole model": f"{r['predicted_model']:.1f}x" if pd.notna(r.get("predicted_model")) else "—",
                "verdict (status projected)": r["value"],
            }
            for _, r in d.iterrows()
        ]
    )


@table("msa_speedup/measured")
def msa_measured(data: RunData) -> pd.DataFrame:
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(data.records, f"msa_speedup/{phase}")
        for _, r in d[d["status"] == "measured"].sort_values("context_len").iterrows():
            rows.append(
                {
                    "phase": phase,
                    "n": f"{r['context_len']:.0f}",
                    "t(softmax) / t(msa), measured": f"{r['v']:.2f}",
                    "cost model": f"{r['predicted']:.2f}",
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- crossover


def _xo(r) -> str:
    if pd.notna(r["v"]):
        b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) else None
        br = f" [{b[0]:,.0f}, {b[1]:,.0f}]" if b and r["status"] == "measured" and None not in b else ""
        return f"{r['v']:,.0f}{br}"
    b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) else [None, None]
    return f"< {fmt_len(b[1])}" if r.get("relation") == "<" else f"> {b[0]:,.0f}" if b[0] else "never"


@table("crossover/measured")
def crossover_measured(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for name in designs(df[df["metric"].str.startswith("crossover/")]):
        row = {"design vs softmax": name}
        for phase in ("prefill", "decode", "memory"):
            d = metric(df, f"crossover/{phase}_len")
            d = d[(d["design"] == name) & (d["method"] == "measured")]
            for _, r in d.iterrows():
                row[f"{phase}, {r['scope']} (measured)"] = _xo(r)
            a = metric(df, f"crossover/{phase}_len")
            a = a[(a["design"] == name) & (a["status"] == "analytic")]
            if phase == "memory" and not a.empty:
                row["memory (analytic)"] = ", ".join(f"{_xo(r)} {r['dtype']}" for _, r in a.iterrows())
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("crossover/analytic")
def crossover_analytic(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(df, f"crossover/{phase}_len")
        d = d[(d["status"] == "projected") & d["design"].isin(["lightning", "sliding_window", "msa"])]
        for (shape, name, scope), g in d.groupby(["shape", "design", "scope"], sort=True):
            row = {"shape": shape, "design": name, "phase": phase, "scope": scope}
            for _, r in g.iterrows():
                row[str(r["hardware"])] = _xo(r)
            rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("crossover/costmodel")
def crossover_costmodel(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "costmodel/rel_error")
    if d.empty:
        return pd.DataFrame()
    rows = []
    for (scope, op, phase), g in d.groupby(["scope", "op", "phase"], sort=True):
        worst = g.loc[(g["v"].map(lambda x: max(x, 1 / x))).idxmax()]
        rows.append(
            {
                "scope": scope,
                "op": op,
                "phase": phase,
                "lengths": f"{g['context_len'].min():.0f}–{g['context_len'].max():.0f}",
                "predicted / measured": f"{g['v'].min():.2f}–{g['v'].max():.2f}",
                "worst at": f"{worst['context_len']:.0f}",
                "within 2x": "all" if g["within"].all() else f"{int(g['within'].sum())} of {len(g)}",
            }
        )
    return pd.DataFrame(rows)


@table("crossover/calibration")
def crossover_calibration(data: RunData) -> pd.DataFrame:
    d = data.records[data.records["metric"].str.startswith("calibration/")]
    return pd.DataFrame([{"rate": r["metric"].split("/")[1], "value": f"{r['v']:.3g}", "unit": r["unit"]} for _, r in d.iterrows()])


@table("crossover/skipped")
def crossover_skipped(data: RunData) -> pd.DataFrame:
    d = data.records[data.records["status"] == "skipped"]
    return pd.DataFrame(
        [
            {
                "metric": r["metric"],
                "design": r["design"],
                "scope": r["scope"],
                "n": f"{r['context_len']:.0f}",
                "why": r.get("reason") or r.get("note"),
            }
            for _, r in d.iterrows()
        ]
    )


@table("msa_speedup/terms")
def msa_terms(data: RunData) -> pd.DataFrame:
    """Where the time goes at 1M tokens on H200 (attention, vs M2): the cost model's terms."""
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(data.records, f"msa_speedup/{phase}")
        d = d[(d["hardware"] == "h200") & (d["vs"] == "m2") & (d["scope"] == "attention") & (d["context_len"] == 2**20)]
        for _, r in d.iterrows():
            unit, k = ("s", 1.0) if phase == "prefill" else ("ms", 1e3)
            for who, terms, total in (("M2", r["baseline_terms_s"], r["baseline_s"]), ("M3", r["m3_terms_s"], r["m3_s"])):
                parts = "; ".join(f"{t} {v * k:,.1f}" for t, v in sorted(terms.items(), key=lambda kv: -kv[1]))
                rows.append(
                    {
                        "phase": phase,
                        "model": who,
                        "total": f"{total * k:,.1f} {unit}",
                        "terms": parts,
                        "bytes read": f"{(r['baseline_bytes'] if who == 'M2' else r['m3_bytes']) / 1e9:,.1f} GB",
                    }
                )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- presets


@table("presets/params")
def preset_params(data: RunData) -> pd.DataFrame:
    """Parameter counts of every design at each preset, in millions (params/* records)."""
    df = data.records[data.records["metric"].astype(str).str.startswith("params/")]
    order = {p: i for i, p in enumerate(("tiny", "small", "base", "base24"))}
    rows = []
    for (preset, name), g in df.groupby(["preset", "design"], sort=False):
        val = {m.split("/", 1)[1]: v for m, v in zip(g["metric"], g["v"])}
        rows.append(
            {
                "preset": preset,
                "design": name,
                "layers": f"{int(g['n_layers'].iloc[-1])}" if "n_layers" in g else "",
                **{k: f"{val[k] / 1e6:.2f}M" for k in ("total", "active", "attention", "experts", "embedding") if k in val},
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_p"], out["_d"] = out["preset"].map(order), out["design"].map(lambda d: (DESIGN_ORDER + (d,)).index(d))
    return out.sort_values(["_p", "_d"]).drop(columns=["_p", "_d"])
