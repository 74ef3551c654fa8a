"""The tables of experiments/external/README.md (exp=needle_external, multihop_external: issue 46) and of
experiments/roofline_cpu/README.md (exp=kernels_cpu's two-term roofline fields: issue 42), from their records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.report.frame import RunData
from attnbench.report.readme.registry import Tables
from attnbench.verdicts.readings import metric

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table


@table("external/routes")
def routes(data: RunData) -> pd.DataFrame:
    """Hits / requests and the median seconds a request, by model, task cell and route (attnbench, hf, endpoint)."""
    acc, answers = metric(data.records, "external/acc"), metric(data.records, "external/answer")
    rows: list[dict] = []
    if acc.empty:
        return pd.DataFrame(rows)
    names = acc["design"].astype(str).str.split(":", n=1)
    acc = acc.assign(route=names.str[0], model=names.str[1].str.rsplit("/", n=1).str[-1])  # an endpoint names its folder
    for (model, task, n, h), g in acc.groupby(["model", "task", "context_len", acc["hops"].fillna(0)], sort=True):
        row = {"model": model, "task": task, "length": f"{int(n):,}", "hops": int(h) or "—"}
        for route in ("attnbench", "hf", "endpoint"):
            r = g[g["route"] == route]
            if r.empty:
                row[route] = "—"
                continue
            r = r.iloc[-1]
            a = answers[(answers["design"] == r["design"]) & (answers["context_len"] == n) & (answers["hops"].fillna(0) == h)]
            secs = pd.to_numeric(a["total_s"], errors="coerce").dropna()
            row[route] = (
                f"{int(r['k'])}/{int(r['n'])}"
                + (f", {int(r['failed'])} failed" if r["failed"] else "")
                + (f", {secs.median():.3f} s" if len(secs) else "")
            )
        rows.append(row)
    return pd.DataFrame(rows)


@table("roofline_cpu/ops")
def ops(data: RunData) -> pd.DataFrame:
    """Each timed op: median ms, its least FLOPs and bytes, intensity, bound, two-term limit and the fraction reached."""
    d = metric(data.records, "latency/prefill_ms")
    d = d[d["status"] == "measured"] if not d.empty else d
    rows = [
        {
            "run": Path(str(r["run_dir"])).name,
            "T": f"{int(r['context_len']):,}",
            "op": r["op"],
            "backend": r["backend"],
            "ms (median)": f"{r['v']:.1f}",
            "GFLOP (least)": f"{r['min_flops'] / 1e9:.1f}",
            "MB (least)": f"{r['min_bytes'] / 1e6:.0f}",
            "FLOP/byte": f"{r['intensity']:.1f}",
            "bound": r["bound"],
            "limit ms": f"{r['limit_s'] * 1e3:.1f}",
            "of the limit": f"{r['limit_fraction']:.2f}",
        }
        for _, r in d.sort_values(["context_len"], kind="stable").iterrows()
        if pd.notna(r.get("limit_fraction"))
    ]
    return pd.DataFrame(rows)
