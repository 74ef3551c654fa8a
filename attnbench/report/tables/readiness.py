"""The serving table of the report (exp=serving, claim C7): what attnbench/verdicts/claims/c7_serving.py
judges, drawn as one table."""

from __future__ import annotations

import pandas as pd

from attnbench.names import SERVING_FORMATS as FORMATS

from attnbench.verdicts.readings import metric

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.tables.decision import NONE, Cell, Table


def _col(d: pd.DataFrame, col: str, want) -> pd.DataFrame:
    return d[d[col] == want] if col in d.columns else d.iloc[0:0]


def serving_table(df: pd.DataFrame):
    """Per design (and storage mode): accuracy by storage format at the longest length with records,
    the stored cache's bytes per token, prefix-cache cost and rollback cost (exp=serving)."""
    acc = metric(df, "serving/acc")
    if acc.empty:
        return None
    cols = [("", "design"), ("", "state stored"), ("", "length")] + [("accuracy (bytes/token)", f) for f in FORMATS]
    cols += [
        ("prefix cache", "bytes @ 64K"),
        ("prefix cache", "recompute / hit"),
        ("rollback k=8", "measured"),
        ("rollback k=8", "states (proj.)"),
    ]
    table = Table(
        "serving",
        cols,
        note="exp=serving. Accuracy with its 95% interval (haystack as unit) with the cache stored in each format, compute "
        "fp32; 'chunk': the lightning state stored after every prefill chunk. Prefix cache: bytes kept to serve a 64K "
        "prefix with states saved every 256 tokens, and tokens recomputed on an average hit (bf16, projected). Rollback: "
        "bytes this implementation keeps (snapshot), and the cost model's k saved states.",
    )
    by_bytes = metric(df, "serving/cache_bytes")
    for (design, when), g in acc.groupby(["design", "when"], sort=True):
        n = g["context_len"].max()
        row = [Cell(str(design)), Cell(str(when)), Cell(fmt_len(n))]
        for f in FORMATS:
            r = g[(g["context_len"] == n) & (g["fmt"] == f)]
            if r.empty:
                row.append(NONE)
                continue
            r = r.iloc[-1]
            b = by_bytes[
                (by_bytes["design"] == design) & (by_bytes["when"] == when) & (by_bytes["fmt"] == f) & (by_bytes["context_len"] == n)
            ]
            per = f" ({b['bytes_per_token'].iloc[-1]:,.0f} B)" if not b.empty else ""
            row.append(
                Cell(
                    f"{r['value']:.2f}{per}",
                    "",
                    f"{int(r['n'])} probes, {int(r['haystacks'])} haystacks",
                    f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]",
                )
            )

        def proj(name: str, **where) -> Cell:
            d = metric(df, name)
            d = d[(d["design"] == design) & (d["status"] == "projected")] if "status" in d.columns else d.iloc[0:0]
            for k, v in where.items():
                d = _col(d, k, v)
            if d.empty:
                return NONE
            v = float(d["v"].iloc[-1])
            return Cell(fmt_bytes(v) if name.endswith("bytes") else f"{v:g}", "projected", "cost model")

        rb = _col(_col(metric(df, "serving/rollback_bytes"), "k", 8), "method", "snapshot")
        rb = rb[rb["design"] == design]
        row += [
            proj("serving/prefix_bytes", context_len=65536),
            proj("serving/prefix_recompute_tokens"),
            Cell(fmt_bytes(float(rb["v"].iloc[-1])), "", "measured: the snapshot's tensors") if not rb.empty else NONE,
            proj("serving/rollback_bytes", k=8, method="states"),
        ]
        table.rows.append(row)
    return table


def serving_chain_table(df: pd.DataFrame):
    """Per chain model (and storage mode) and hop count: chain accuracy by storage format at each length
    (exp=serving +curriculum=chain, ``serving/chain_acc``); None without such records."""
    acc = metric(df, "serving/chain_acc")
    if acc.empty:
        return None
    cols = [("", "design"), ("", "state stored"), ("", "length"), ("", "hops")] + [("accuracy (bytes/token)", f) for f in FORMATS]
    table = Table(
        "serving_chains",
        cols,
        note="exp=serving +curriculum=chain: the chain models (exp=multihop's) answer chains scored on the final value, "
        "with the cache stored in each format, compute fp32; 95% interval with the haystack as the unit.",
    )
    for (design, when, n, hops), g in acc.groupby(["design", "when", "context_len", "hops"], sort=True):
        row = [Cell(str(design)), Cell(str(when)), Cell(fmt_len(n)), Cell(f"{int(hops)}")]
        for f in FORMATS:
            r = g[g["fmt"] == f]
            if r.empty:
                row.append(NONE)
                continue
            r = r.iloc[-1]
            row.append(
                Cell(
                    f"{r['value']:.2f} ({r['bytes_per_token']:,.0f} B)",
                    "",
                    f"{int(r['n'])} probes, {int(r['haystacks'])} haystacks",
                    f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]",
                )
            )
        table.rows.append(row)
    return table
