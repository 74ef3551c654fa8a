"""Run directories -> one tidy pandas table of records, plus the runs' headers and footers.

Several run directories (a multirun sweep, a CPU and a GPU run) load into one table; each row
keeps the run directory it came from. Everything the report and W&B draw comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd

from attnbench.verdicts.readings import NOT_MEASURED, is_preset
from attnbench.designs import DESIGN_ORDER  # the order tables and legends list designs in; unknown names follow alphabetically
from attnbench.names import EXPERIMENTS
from attnbench.records.integrity import scan
from attnbench.verdicts.quality import add_learned, add_levels
from attnbench.verdicts.quality_training import training

# Columns every figure may ask for, present (as None) even when no record carries them.
COLUMNS = (
    "exp",
    "design",
    "layout",
    "metric",
    "value",
    "unit",
    "status",
    "config_hash",
    "time",
    "cell",
    "note",
    "context_len",
    "depth",
    "seed",
    "backend",
    "device",
    "dtype",
    "task",
    "hops",
    "n",
    "ci_low",
    "ci_high",
    "train_len",
    "scope",
    "op",
    "p25_ms",
    "p75_ms",
    "preset",
    "vs",
    "method",
    "bracket",
    "step",
    "hardware",
    "noisy",
    "load",
    "roofline_s",
    "peak_fraction",
    "gflop_per_s",
    "hop_task",
    "scoring",
    "rule",
    "stop_reason",
    "steps",
    "tokens",
    "train_status",
    "final_stage",
    "n_stages",
    "source",
    "shape",
    "relation",
    "impl",
    "sample",
    "haystacks",
    "haystacks_planned",
)
FIGURE_DIR = "figures"  # the report's PNGs, beside report.html (W&B logs them as images)


@dataclass
class RunData:
    # one row per record: COLUMNS + run_dir + run_start and cpu (its header's started and hardware.cpu, hardware.gpu for a
    # CUDA record: a file can hold runs of several machines) + checkout (its header's code: CHECKOUT_STATES) + v (the value
    # as a float, NaN if not a number)
    records: pd.DataFrame
    headers: list[dict]  # one per (re)start, with run_dir added
    footers: list[dict]  # one per (re)start that ended through attnbench.cli.main (completed | interrupted | failed)
    files: list[Path]
    problems: list[str] = field(default_factory=list)  # per damaged file, one line naming what was left out
    train: pd.DataFrame | None = None  # how each design's model was trained (attnbench/verdicts/quality.py: training)

    @property
    def empty(self) -> bool:
        return self.records.empty


class ResultsError(ValueError):
    """A path given to the report that holds no results file (the message is one line)."""


# what ``load`` says of a results file that is empty, or has records but no header (a problem:
# exit 2 and a caveat, whether the file or its directory is named)
EMPTY = "empty: no header or record line"
NO_HEADER = "no header line: the run's config, hardware, versions and seeds are unknown; its records are shown"
# what ``load`` says of records of another config than the run directory's own (its first run's):
# the run refuses such a directory, the report sets them aside (a problem: exit 2 and a caveat)
OTHER_CONFIG = "set aside, not shown: a run directory holds one config's records"


def find_results(paths: Iterable[Path | str]) -> list[Path]:
    """results.jsonl files: a run directory's own, or every one below a sweep directory."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            hits = [p]
        elif (p / "results.jsonl").is_file():
            hits = [p / "results.jsonl"]
        else:
            hits = sorted(f for f in p.rglob("results.jsonl") if "wandb" not in f.parts)
        if not p.exists():
            raise ResultsError(f"{p}: no results.jsonl (no such file or directory)")
        if not hits:
            raise ResultsError(f"{p}: no results.jsonl here or below")
        found += [h for h in hits if h not in found]
    return found


NUMERIC = (  # record fields read as numbers (a missing or malformed one is NaN)
    "context_len",
    "depth",
    "hops",
    "train_len",
    "seed",
    "step",
    "ci_low",
    "ci_high",
    "p25_ms",
    "p75_ms",
    "n",
    "roofline_s",
    "peak_fraction",
    "gflop_per_s",
    "steps",
    "tokens",
    "final_stage",
    "n_stages",
    "sample",
    "haystacks",
    "haystacks_planned",
)
CHECKOUT_STATES = ("committed", "diff", "uncommitted", "unknown")  # what a header says of the code that made its records


def checkout_state(git: dict | None) -> str:
    """committed (a clean checkout), diff (uncommitted changes stored beside the records), uncommitted (changes
    nobody can recover), unknown (no git: an installed wheel, a device machine's copied tree)."""
    git = git or {}
    if git.get("dirty") is None:
        return "unknown"
    return "uncommitted" if git["dirty"] and not git.get("diff") else "diff" if git["dirty"] else "committed"


def load(names: Iterable[Path | str]) -> RunData:
    paths = [Path(p) for p in names]
    files = find_results(paths)
    rows, headers, footers, problems, empty = [], [], [], [], []
    for f in files:
        run_dir = str(f.parent)
        found = scan(f)
        if not found.lines:  # the same answer whether the file or its directory is named
            empty.append(f)
            continue
        if not any(o.get("type") in ("header", "record") for o in found.objects):
            first = found.damaged[0] if found.damaged else None
            why = f" (line {first.no}: {first.problem})" if first else ""
            raise ResultsError(f"{f}: not an attnbench results file: no header or record line{why}")
        if found.summary():
            problems.append(found.summary())
        elif not any(o.get("type") == "header" for o in found.objects):  # (damage names a damaged header itself)
            problems.append(f"{f}: {NO_HEADER}")
        started = cpu = gpu = checkout = None  # the (re)start that wrote the records that follow: its header's time, CPU, GPU, code
        objects, own, aside = own_config(found.objects, found.config_hashes())
        for obj in objects:
            kind = obj.get("type")
            if kind == "record":  # "cpu": the processor that computed it (a CUDA record's GPU, not its host)
                rows.append(
                    {
                        **obj,
                        "run_dir": run_dir,
                        "run_start": started,
                        "cpu": gpu if obj.get("device") == "cuda" and gpu else cpu,
                        "checkout": checkout,
                    }
                )
            elif kind == "header":
                headers.append({**obj, "run_dir": run_dir})
                hw = obj.get("hardware") or {}
                started, cpu, gpu, checkout = obj.get("started"), hw.get("cpu"), hw.get("gpu"), checkout_state(obj.get("git"))
            elif kind == "footer":
                footers.append({**obj, "run_dir": run_dir})
        if aside:
            what = ", ".join(f"{n} records of config {h}" for h, n in aside.items())
            problems.append(f"{f}: {what} {OTHER_CONFIG} (config {own})")
    if empty and len(empty) == len(files):
        raise ResultsError(
            f"{empty[0]}: {EMPTY}" if len(empty) == 1 else f"{len(empty)} results files, every one {EMPTY} ({empty[0]}, ...)"
        )
    problems += [f"{f}: {EMPTY}; left out" for f in empty]
    df = pd.DataFrame(rows)
    for col in (*COLUMNS, "run_dir", "run_start", "cpu", "checkout"):
        if col not in df.columns:
            df[col] = None
    df = df.astype({c: object for c in df.columns}).copy()  # keep ints ints and lists lists; one block
    df["v"] = pd.to_numeric(df["value"].map(_number), errors="coerce").astype(float)
    for col in NUMERIC:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    # Older runs wrote some formula results (method "analytic") as measured: they are analytic.
    relabel = (df["status"] == "measured") & (df["method"] == "analytic")
    df.loc[relabel, "status"] = "analytic"
    df["relabelled"] = relabel
    df = add_levels(df.copy(), headers)
    train = training(df, headers)
    df = add_learned(df, train).copy()  # one block per dtype again after the added columns
    return RunData(df, headers, footers, files, problems, train)


def own_config(objects: list[dict], hashes: list[str]) -> tuple[list[dict], str | None, dict[str, int]]:
    """A file's lines of its own config (its first run's, as the CLI holds a run directory to one
    config): the lines kept, that config's hash, and the record count set aside per other config
    hash. A standalone probe's file (an exp the CLI does not run) may hold several configs."""
    if not objects or objects[0].get("exp") not in EXPERIMENTS:
        return objects, None, {}
    own, current, kept = (hashes[0] if hashes else None), None, []
    aside: dict[str, int] = {}
    for obj in objects:
        kind = obj.get("type")
        current = obj.get("config_hash", current) if kind == "header" else current
        theirs = obj.get("config_hash") if kind == "record" else current
        if own is not None and theirs is not None and theirs != own:
            aside[theirs] = aside.get(theirs, 0) + (kind == "record")
        else:
            kept.append(obj)
    return kept, own, aside


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


ACC_METRICS = ("niah/acc", "multihop/acc")
CELL_KEYS = ["design", "task", "context_len", "hops"]  # an accuracy cell, runs and seeds pooled


def haystack_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per accuracy cell (CELL_KEYS): haystacks run and planned, over runs and seeds.

    From the pooled accuracy records' ``haystacks`` / ``haystacks_planned``; for records written
    before those fields, from the cell's measured prefills (one ``eval/prefill_s`` a haystack)
    plus its haystacks skipped after the plan (skipped accuracy records with a ``sample``).
    Columns: CELL_KEYS, ran, planned, partial (ran < planned).
    """
    cols = [*CELL_KEYS, "ran", "planned", "partial"]
    acc = df[df["metric"].isin(ACC_METRICS) & df["depth"].isna()]
    if acc.empty:
        return pd.DataFrame(columns=cols)
    per_run = [*CELL_KEYS, "run_dir", "seed"]

    def keyed(d: pd.DataFrame) -> pd.DataFrame:
        d = d.copy()
        for k in ("task", "hops"):
            d[k] = d[k].astype(object).where(d[k].notna(), "")
        return d

    new = keyed(acc[(acc["status"] == "measured") & acc["haystacks_planned"].notna()])
    got = new.groupby(per_run, dropna=False)[["haystacks", "haystacks_planned"]].max().reset_index()
    got = got.rename(columns={"haystacks": "ran", "haystacks_planned": "planned"})
    old = keyed(acc[(acc["status"] == "measured") & acc["haystacks_planned"].isna()])[per_run].drop_duplicates()
    if not old.empty:
        runs = keyed(df[(df["metric"] == "eval/prefill_s") & (df["status"] == "measured") & df["sample"].notna()])
        late = keyed(acc[(acc["status"] == "skipped") & acc["sample"].notna()])
        ran = runs.groupby(per_run, dropna=False)["sample"].nunique().rename("ran")
        cut = late.groupby(per_run, dropna=False)["sample"].nunique().rename("late")
        old = old.join(ran, on=per_run).join(cut, on=per_run).fillna({"late": 0})
        old = old[old["ran"].notna()].assign(planned=lambda o: o["ran"] + o["late"]).drop(columns="late")
        got = pd.concat([got, old], ignore_index=True)
    if got.empty:
        return pd.DataFrame(columns=cols)
    out = got.groupby(CELL_KEYS, dropna=False)[["ran", "planned"]].sum().reset_index()
    out["partial"] = out["ran"] < out["planned"]
    return out[cols]


def mark_partial(d: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """``d`` (accuracy records) with ``partial``, ``ran`` and ``planned`` from haystack_counts."""
    if d.empty:
        return d.assign(partial=False, ran=float("nan"), planned=float("nan"))
    key = d[CELL_KEYS].astype(object).where(d[CELL_KEYS].notna(), "").astype(str).agg("|".join, axis=1)
    ckey = counts[CELL_KEYS].astype(object).where(counts[CELL_KEYS].notna(), "").astype(str).agg("|".join, axis=1)
    by = dict(zip(ckey, counts[["ran", "planned", "partial"]].itertuples(index=False)))
    got = [by.get(k) for k in key]
    return d.assign(
        partial=[bool(g.partial) if g else False for g in got],
        ran=[g.ran if g else float("nan") for g in got],
        planned=[g.planned if g else float("nan") for g in got],
    )


def design_order(names: Iterable[str]) -> list[str]:
    names = {str(n) for n in names if n is not None and not (isinstance(n, float) and pd.isna(n))}
    known = [d for d in DESIGN_ORDER if d in names]
    return known + sorted(names - set(known))


def designs(df: pd.DataFrame) -> list[str]:
    """The trained/timed designs of these records (production presets excluded)."""
    return design_order(df.loc[~is_preset(df), "design"])


def varying(df: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """Which of ``keys`` take more than one value in ``df`` (they must label series apart)."""
    return [k for k in keys if df[k].dropna().astype(str).nunique() > 1]


def fmt_num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and pd.isna(x)):
        return "—"
    if isinstance(x, (int,)) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1000):
        return f"{int(x):,}"
    return f"{x:.{digits}g}"


CELL_STATES = ("measured", "projected", "skipped", "failed", "not run")


def cell_state(g: pd.DataFrame) -> tuple[str, str]:
    """The state of one cell from all its records (a table cell, a heatmap square, a point of a
    line: the one source all three read), with the records' reason: measured where any record
    has a measured value, else projected (or analytic), else failed, else skipped, whether the
    whole cell was skipped before it started or each of its haystacks after the plan (the note
    says why: the budget, or a cache that did not fit), else not run (no records)."""
    if g.empty:
        return "not run", ""
    valued = g[g["v"].notna()] if "v" in g else g.iloc[0:0]
    if (valued["status"] == "measured").any():
        return "measured", ""
    if valued["status"].isin(NOT_MEASURED).any():
        return "projected", ""
    status = "failed" if (g["status"] == "failed").any() else "skipped" if (g["status"] == "skipped").any() else "not run"
    return status, "; ".join(dict.fromkeys(g["note"].dropna().astype(str))) if "note" in g else ""
