"""What the verdicts read from the record table (attnbench/report/data.py loads it): one metric's
records, accuracy pooled over depths, which records are production presets, and the lengths
and byte counts as the evidence writes them. Plain pandas: the report's renderers share these.
"""

from __future__ import annotations

import pandas as pd

# Statuses of numbers that were not timed or counted here: drawn hollow/dashed, marked with a dagger.
NOT_MEASURED = ("projected", "analytic")
LEN_128K, LEN_1M, LEN_4M = 131072, 1048576, 4194304


def metric(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[df["metric"] == name]


def pooled(d: pd.DataFrame) -> pd.DataFrame:
    """Accuracy pooled over depths: where an experiment wrote a depth-less record for a (design,
    length, task, hops, run, seed), that one alone; elsewhere the per-depth records (averaged by the caller)."""
    if d.empty:
        return d
    keys = ["design", "context_len", "task", "hops", "run_dir", "seed"]
    key = pd.Series(["|".join(map(str, row)) for row in d[keys].itertuples(index=False)], index=d.index)
    no_depth = d["depth"].isna()
    return d[no_depth | ~key.isin(set(key[no_depth]))]


def is_preset(df: pd.DataFrame) -> pd.Series:
    return df["preset"].notna() & (df["preset"].astype(str) != "")


def fmt_len(n) -> str:
    """131072 -> 128K, 1048576 -> 1M, 1536 -> 1.5K, 1000 -> 1000."""
    if n is None or pd.isna(n):
        return "—"
    n = int(n)
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and (n * 2) % size == 0:
            q = n / size
            return f"{q:g}{unit}"
    return str(n)


def fmt_bytes(n) -> str:
    if n is None or pd.isna(n):
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
