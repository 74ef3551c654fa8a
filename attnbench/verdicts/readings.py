"""What the verdicts read from the record table (attnbench/report/frame.py loads it): one metric's
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
