"""The tables of experiments/serving/README.md (exp=serving, claim C7), from its records."""

from __future__ import annotations

import pandas as pd

from attnbench.names import SERVING_FORMATS as FORMATS

from attnbench.report.frame import RunData
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_bytes
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table


def most_probes(d: pd.DataFrame) -> pd.DataFrame:
    """A cell's records, the one with the most probes last (a GPU run's 5 probes beside the CPU run's 100)."""
    return d.sort_values("n", kind="stable") if "n" in d.columns else d


@table("serving/storage")
def storage(data: RunData) -> pd.DataFrame:
    """Accuracy [95% interval] (bytes per token) by storage format, per design and storage mode."""
    df = data.records
    acc, by = metric(df, "serving/acc"), metric(df, "serving/cache_bytes")
    rows: list[dict] = []
    if acc.empty or "when" not in acc.columns:
        return pd.DataFrame(rows)
    for (design, when, n), g in acc.groupby(["design", "when", "context_len"], sort=False):
        row = {"design": design, "stored": when, "length": f"{int(n):,}"}
        for f in FORMATS:
            r, b = (
                most_probes(g[g["fmt"] == f]),
                by[(by["design"] == design) & (by["when"] == when) & (by["fmt"] == f) & (by["context_len"] == n)],
            )
            row[f] = (
                "—"
                if r.empty
                else f"{r['v'].iloc[-1]:.2f} [{r['ci_low'].iloc[-1]:.2f}, {r['ci_high'].iloc[-1]:.2f}] ({b['bytes_per_token'].iloc[-1]:,.1f} B)"
            )
        rows.append(row)
    return pd.DataFrame(rows)


@table("serving/chains")
def chain_storage(data: RunData) -> pd.DataFrame:
    """Chain accuracy [95% interval] (bytes per token) by storage format, per chain model, storage mode, length and hops."""
    acc = metric(data.records, "serving/chain_acc")
    rows: list[dict] = []
    if acc.empty:
        return pd.DataFrame(rows)
    for (design, when, n, hops), g in acc.groupby(["design", "when", "context_len", "hops"], sort=False):
        row = {"design": design, "stored": when, "length": f"{int(n):,}", "hops": int(hops)}
        for f in FORMATS:
            r = most_probes(g[g["fmt"] == f])
            row[f] = (
                "—"
                if r.empty
                else f"{r['v'].iloc[-1]:.2f} [{r['ci_low'].iloc[-1]:.2f}, {r['ci_high'].iloc[-1]:.2f}] ({r['bytes_per_token'].iloc[-1]:,.1f} B)"
            )
        rows.append(row)
    return pd.DataFrame(rows)


@table("serving/verify")
def verify(data: RunData) -> pd.DataFrame:
    """Measured verify-k speedups (median [p25, p75]) and the bytes kept to roll back."""
    df = data.records
    sp = metric(df, "serving/verify_speedup")
    sp = sp[sp["status"] == "measured"] if not sp.empty else sp
    rb = metric(df, "serving/rollback_bytes")
    rows: list[dict] = []
    if sp.empty:
        return pd.DataFrame(rows)
    for _, r in sp.iterrows():
        kept = rb[(rb["design"] == r["design"]) & (rb["k"] == r["k"]) & (rb["method"] == "snapshot")] if not rb.empty else rb
        if not kept.empty and "context_len" in kept.columns:
            kept = kept[kept["context_len"] == r["context_len"]]
        if not kept.empty and "device" in kept.columns:
            kept = kept[kept["device"] == r["device"]]
        rows.append(
            {
                "design": r["design"],
                "device": r["device"],
                "after (tokens)": f"{int(r['context_len']):,}",
                "k": int(r["k"]),
                "k steps / one forward": f"{r['v']:.2f} [{r['p25']:.2f}, {r['p75']:.2f}]",
                "kept to roll back (measured)": fmt_bytes(kept["v"].iloc[-1]) if not kept.empty else "—",
                "k states (projected)": fmt_bytes(kept["projected_states"].iloc[-1]) if not kept.empty else "—",
            }
        )
    return pd.DataFrame(rows)


@table("serving/costs")
def costs(data: RunData) -> pd.DataFrame:
    """Projected prefix-cache and rollback costs per design and preset."""
    df = data.records
    d = df[df["metric"].astype(str).str.startswith("serving/") & (df["status"] == "projected")]
    rows: list[dict] = []
    if d.empty:
        return pd.DataFrame(rows)
    who = d["preset"].where(d["preset"].notna(), d["design"])
    for name in dict.fromkeys(who):
        g = d[who == name]

        def one(m: str, **where) -> float | None:
            x = g[g["metric"] == m]
            for k, v in where.items():
                x = x[x[k] == v]
            return None if x.empty else float(x["v"].iloc[-1])

        pb, pp = one("serving/prefix_bytes", context_len=65536), one("serving/prefix_plain_bytes", context_len=65536)
        rt, rb = one("serving/prefix_recompute_tokens"), one("serving/rollback_bytes", k=8, method="states")
        vs = one("serving/verify_speedup", k=8, hardware="h200")
        rows.append(
            {
                "design or preset": name,
                "prefix cache, 64K (states every 256)": fmt_bytes(pb) if pb is not None else "—",
                "plain cache, 64K": fmt_bytes(pp) if pp is not None else "—",
                "ratio": f"{pb / pp:.1f}x" if pb and pp else "—",
                "recomputed / hit (mean)": f"{rt:g}" if rt is not None else "—",
                "8 saved states (rollback)": fmt_bytes(rb) if rb is not None else "—",
                "verify 8 vs 8 steps, H200": f"{vs:.2f}x" if vs is not None else "—",
            }
        )
    return pd.DataFrame(rows)
