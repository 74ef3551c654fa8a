"""README tables of experiments/needle_4m_loaded: the main command on a busy machine,
one row per run directory (the runs are kept apart: each saw its own load)."""

from __future__ import annotations

import pandas as pd

from attnbench.report.frame import RunData, designs
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_len
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table

SHORT = (1024, 4096, 16384)  # the cells the plan guarantees every learned design (30 probes each)


def _run(path) -> str:
    return str(path).rstrip("/").split("/")[-1]


@table("needle_4m_loaded/runs")
def loaded_runs(data: RunData) -> pd.DataFrame:
    """Per run: the load its prefills saw (min-max of the load average at each cell's start),
    the load the summary reports (mean over the plan and every cell's start), the wall time,
    the compile time, and the run's last line (eval/budget_summary)."""
    df = data.records
    rows = []
    for run, g in df.groupby(df["run_dir"].map(_run)):
        pre = metric(g, "eval/prefill_s")
        summary = metric(g, "eval/budget_summary")
        comp = metric(g, "eval/compile_s")
        rows.append(
            {
                "run": run,
                "load at cells (min-max)": f"{pre['load_before'].min():.1f}-{pre['load_before'].max():.1f}" if not pre.empty else "",
                "load (summary)": f"{summary['load'].iloc[-1]:.1f}" if not summary.empty else "",
                "noisy prefills": f"{int(pre['noisy'].fillna(False).astype(bool).sum())} of {len(pre)}" if not pre.empty else "",
                "compile (s)": ", ".join(f"{r.design} {r.v:.1f}" for r in comp.itertuples()),
                "haystack most over its estimate (s / estimated s)": _slowest(pre),
                "elapsed (s)": f"{summary['elapsed_s'].iloc[-1]:.1f}" if not summary.empty else "",
                "last line": summary["note"].iloc[-1] if not summary.empty else "",
            }
        )
    return pd.DataFrame(rows)


def _slowest(pre: pd.DataFrame) -> str:
    """The prefill the most seconds over its estimate: design, length, sample, seconds / estimate."""
    pre = pre[pre["estimated_s"].notna() & (pre["estimated_s"] > 0)]
    if pre.empty:
        return ""
    r = pre.loc[(pre["v"] - pre["estimated_s"]).idxmax()]
    return f"{r['design']} {fmt_len(r['context_len'])} #{int(r['sample'])}: {r['v']:.1f} / {r['estimated_s']:.1f}"


@table("needle_4m_loaded/short")
def loaded_short(data: RunData) -> pd.DataFrame:
    """Per run and design: accuracy at 1K, 4K and 16K as 'acc (probes, haystacks run/planned)',
    'skipped' where the cell has no measured record."""
    d = metric(data.records, "niah/acc")
    d = d[d["depth"].isna()]
    rows = []
    for run, g in d.groupby(d["run_dir"].map(_run)):
        for name in designs(g):
            row = {"run": run, "design": name, "learned": "no" if (g[g["design"] == name]["learned"] == False).any() else "yes"}  # noqa: E712
            for L in SHORT:
                c = g[(g["design"] == name) & (g["context_len"] == L) & (g["status"] == "measured")]
                if c.empty:
                    row[fmt_len(L)] = "skipped"
                    continue
                r = c.iloc[-1]
                row[fmt_len(L)] = f"{r['v']:.2f} ({int(r['n'])} probes, {int(r['haystacks'])}/{int(r['haystacks_planned'])})"
            rows.append(row)
    return pd.DataFrame(rows)


@table("needle_4m_loaded/checks")
def loaded_checks(data: RunData) -> pd.DataFrame:
    """Per run and design: where its training-length checks came from and the seconds spent on them."""
    d = metric(data.records, "train/acc")
    rows = []
    for (run, name), g in d.groupby([d["run_dir"].map(_run), "design"], sort=False):
        rows.append(
            {"run": run, "design": name, "checks": ", ".join(sorted(set(g["checks"].dropna()))), "check_s": f"{g['check_s'].max():g}"}
        )
    return pd.DataFrame(rows)


@table("needle_4m_loaded/long")
def loaded_long(data: RunData) -> pd.DataFrame:
    """Per run and design: the cells past 16K that were measured, as 'length acc (probes,
    haystacks run/planned)', and the seconds a haystack took at the longest of them (the median
    of its prefills)."""
    d = metric(data.records, "niah/acc")
    d = d[d["depth"].isna() & (d["status"] == "measured") & (d["context_len"] > max(SHORT))]
    pre = metric(data.records, "eval/prefill_s")
    rows = []
    for run, g in d.groupby(d["run_dir"].map(_run)):
        for name in designs(g):
            c = g[g["design"] == name].drop_duplicates("context_len", keep="last").sort_values("context_len")
            longest = int(c["context_len"].max())
            p = pre[(pre["run_dir"].map(_run) == run) & (pre["design"] == name) & (pre["context_len"] == longest)]
            rows.append(
                {
                    "run": run,
                    "design": name,
                    "cells past 16K": "; ".join(
                        f"{fmt_len(r.context_len)} {r.v:.2f} ({int(r.n)} probes, {int(r.haystacks)}/{int(r.haystacks_planned)})"
                        for r in c.itertuples()
                    ),
                    "s a haystack at the longest": f"{p['v'].median():.1f}" if not p.empty else "",
                }
            )
    return pd.DataFrame(rows)
