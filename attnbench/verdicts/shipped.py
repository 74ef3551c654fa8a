"""Which trained model each record evaluated, and whether that model is shipped (attnbench/trained/).

A verdict must rest only on models a reader can load again: a folder <design>-<key> in
attnbench/trained/ holding final.pt. A cache source ("cache: <design>-<key>/record.json"), a
shipped folder without final.pt (a partial training) or a key with no shipped folder is not
shipped; ``split`` sets such records aside and counts them per model, and judge_all names them.

Records name their model three ways: ``source`` or ``checkpoint`` holding the folder
("attnbench/trained/<design>-<key>/record.json", "cache: <design>-<key>/record.json",
"attnbench/trained/<design>-<key>"), or a ``key`` beside the record's design (exp=scale). A run
writes the source on its model's parameter records only, so every record of the same run
directory, design and seed takes the model those name. A record that names no model (a formula,
a timing of an untrained model, an in-run probe) is no trained model's and is kept.

A verdict must also rest on code a reader can check out again: ``committed`` sets aside the records
of runs whose header says they were made from uncommitted changes with no diff stored beside them
(report.frame's ``checkout`` column, "uncommitted"); a run from a clean checkout, or a dirty one whose
diff is stored, is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from attnbench.basics import SHIPPED

_FOLDER = re.compile(r"^(?:attnbench/trained/|cache: )(?P<folder>[A-Za-z0-9_]+-[0-9a-f]{16})(?:/record\.json)?/?$")
# where a record's source would leave the repository: a machine's own folders, never reproducible from a clone
MACHINE_PATHS = ("/root", "/tmp", "/work", "/home")


def _named(row_source, row_checkpoint, design, key) -> str | None:
    for v in (row_source, row_checkpoint):
        m = _FOLDER.match(v) if isinstance(v, str) else None
        if m:
            return m.group("folder")
    if isinstance(key, str) and re.fullmatch(r"[0-9a-f]{16}", key) and isinstance(design, str):
        return f"{design}-{key}"
    return None


def models(df: pd.DataFrame) -> pd.Series:
    """Per record, the folder name <design>-<key> of the trained model it evaluated, or None."""
    if df.empty:
        return pd.Series([], index=df.index, dtype=object)
    cols = [df[c] if c in df.columns else pd.Series(None, index=df.index, dtype=object) for c in ("source", "checkpoint", "design", "key")]
    named = pd.Series([_named(*vals) for vals in zip(*cols)], index=df.index, dtype=object)
    if "run_dir" not in df.columns:
        return named
    # the run's model, named on its parameter records, for the rest of its records (one model a run, design and seed)
    group = ["run_dir", "design", "seed"]
    keys = pd.Series(["|".join(map(str, k)) for k in zip(*(df[c] for c in group))], index=df.index)
    one = named.dropna().groupby(keys[named.notna()]).agg(lambda s: s.iloc[0] if s.nunique() == 1 else None)
    filled = keys.map(one)
    return named.where(named.notna(), filled)


def is_shipped(folder: str, root: Path = SHIPPED) -> bool:
    """A finished model in the shipped folder (a partial.pt alone is a training not finished)."""
    return (root / folder / "final.pt").is_file()


def split(df: pd.DataFrame, root: Path = SHIPPED) -> tuple[pd.DataFrame, dict[str, int]]:
    """(the records of shipped models and of no trained model, {unshipped model: records set aside})."""
    named = models(df)
    folders = named.dropna().unique()
    unshipped = {f for f in folders if not is_shipped(f, root)}
    out = named.isin(unshipped)
    counts = named[out].value_counts()
    return df[~out], {str(k): int(v) for k, v in sorted(counts.items())}


UNCOMMITTED = "uncommitted"  # report.frame.checkout_state: a dirty checkout whose diff was not stored


def committed(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records made by code a reader can check out again, records of runs made from uncommitted changes)."""
    if "checkout" not in df.columns:
        return df, df.iloc[0:0]
    out = df["checkout"] == UNCOMMITTED
    return df[~out], df[out]


def run_name(run_dir: object) -> str:
    """A run folder as the repository names it (experiments/needle_4m/run -> needle_4m/run)."""
    parts = Path(str(run_dir)).parts
    return "/".join(parts[parts.index("experiments") + 1 :]) if "experiments" in parts else str(run_dir)


def runs(df: pd.DataFrame) -> dict[str, int]:
    """{run folder: records} of the records given, in folder order."""
    counts = df["run_dir"].map(run_name).value_counts() if not df.empty else pd.Series(dtype=int)
    return {str(k): int(v) for k, v in sorted(counts.items())}


def by_exp(df: pd.DataFrame, aside: dict[str, int]) -> dict[str, dict[str, int]]:
    """The models set aside, grouped by the experiment whose records they are: exp -> {model: records}."""
    named = models(df)
    out: dict[str, dict[str, int]] = {}
    for (exp, model), n in named[named.isin(list(aside))].groupby(df["exp"]).value_counts().items():
        out.setdefault(str(exp), {})[str(model)] = int(n)
    return out


def leaving(df: pd.DataFrame) -> pd.DataFrame:
    """Records whose source or checkpoint names a path outside the repository (a machine's own folder)."""
    hit = pd.Series(False, index=df.index)
    for c in ("source", "checkpoint"):
        if c in df.columns:
            hit |= df[c].map(lambda v: isinstance(v, str) and v.removeprefix("cache: ").strip().startswith(MACHINE_PATHS))
    return df[hit]


def describe(aside: dict[str, int]) -> str:
    """'softmax-1e0d… (102 records), ...' for a caveat."""
    return ", ".join(f"{m} ({n} records)" for m, n in aside.items())
