"""The report's caveats: what limits the reading of its numbers (the models' scale and
training, the tasks' levels, what is projected or copied, what is partial, skipped, failed or
damaged, and what makes two numbers hard to compare), each a sentence written from the records.
build.py puts them on the page."""

from __future__ import annotations

import json
import re
from collections import Counter

import pandas as pd

from attnbench.report.frame import EMPTY, NO_HEADER, OTHER_CONFIG, RunData, haystack_counts
from attnbench.verdicts.readings import NOT_MEASURED, is_preset
from attnbench.basics import fmt_len


def reasons(notes: pd.Series, shown: int = 6) -> str:
    """Why records were skipped, grouped: notes that differ only in their numbers (each cell's
    estimate) are one reason, each with its count, and the counts add up to len(notes)."""

    def reason(note) -> str:
        text = re.sub(r"(?<![\w.])~?\d[\d,.]*(\s*(GiB|MiB|min|s|h|m)\b)?", "N", str(note))
        return text if len(text) <= 160 else text[:157] + "..."

    counts = Counter(reason(n) for n in notes.fillna("no reason recorded"))
    top = counts.most_common(shown)
    rest = sum(counts.values()) - sum(n for _, n in top)
    why = "; ".join(f"{n} x {r}" for r, n in top)
    return why + (f"; {rest} x {len(counts) - len(top)} other reasons" if rest else "")


def caveats(data: RunData) -> list[str]:
    """The report's caveats, in order: scale, training, tasks, provenance, coverage, comparisons,
    then how lengths are written."""
    df = data.records
    out = _scale_caveats(data) + _training_caveats(data) + _task_caveats(df) + _provenance_caveats(df)
    out += _coverage_caveats(data) + _comparison_caveats(data)
    out.append("Lengths: K = 1,024 and M = 1,048,576 tokens (128K = 131,072; 1M = 1,048,576; 4M = 4,194,304).")
    return out


def _scale_caveats(data: RunData) -> list[str]:
    """The model scale of each config: a verdict from these models holds at this scale only."""
    df = data.records
    out = []
    models = {json.dumps((h.get("config") or {}).get("model"), sort_keys=True) for h in data.headers if h.get("config")}
    total = df.loc[(df["metric"] == "params/total") & ~is_preset(df), "v"]
    for text in sorted(models):
        m = json.loads(text) or {}
        size = f", {int(total.max()):,} parameters at most" if not total.empty else ""
        out.append(
            f"Model scale: d_model {m.get('d_model')}, {m.get('n_layers')} layers, {m.get('n_heads')} heads of "
            f"{m.get('head_dim')}, {m.get('n_experts')} experts top-{m.get('top_k_experts')}{size}; the production "
            f"models in the claims have 10-460 billion. A verdict from trained models holds at this scale only."
        )
    return out


def _training_caveats(data: RunData) -> list[str]:
    """Each model's true training length, and whether a common training rule held."""
    out = []
    train = data.train
    if train is not None and not train.empty:
        parts = [
            f"{r['design']} {int(r['train_len']):,}"
            if pd.notna(r["train_len"]) and r["train_len"] > 0
            else f"{r['design']} none (passed no stage)"
            for _, r in train.iterrows()
        ]
        out.append(
            f"True training length (the longest curriculum stage each model passed): {'; '.join(parts)}. "
            f"Accuracy beyond it is extrapolation; a model that passed no stage was never trained on the task."
        )
        if (train["rule"].map(lambda r: isinstance(r, dict) and str(r.get("name", "")).startswith("none"))).any():
            out.append(
                "No common training rule: these checkpoints were trained before the fair rule, each under its "
                "own budget and patience (see 'How the models were trained'), so their training budgets differ."
            )
    return out


def _task_caveats(df: pd.DataFrame) -> list[str]:
    """The tasks' chance levels and floors, and the older checks and probes the records come from."""
    out = []
    acc = df[df["metric"].isin(["niah/acc", "multihop/acc"])]
    if not acc.empty and acc["chance"].notna().any():
        lv = acc.groupby(["metric", "task", "hops"], dropna=False)[["chance", "floor"]].mean().reset_index()
        text = "; ".join(
            f"{r['metric']}"
            + (f" {r['hops']:g} hops" if pd.notna(r["hops"]) else "")
            + f": chance {r['chance']:.3g}, floor {r['floor']:.3g}"
            for _, r in lv.iterrows()
        )
        out.append(
            f"Chance and floor, computed from each task's generator: {text}. Chance is a uniform guess among the "
            f"task's answers; the floor is a uniform guess among this context's needle values (no lookup)."
        )
    single = df[(df["metric"] == "train/acc") & (df["task"] == "niah_single")]
    own = df[(df["metric"] == "train/acc") & df["task"].notna() & (df["task"] != "niah_single")]
    if not single.empty and own.empty:
        out.append(
            "Learned flags come from the single-needle check at the training length (no check of the "
            "experiment's own task was recorded): one needle has a floor of 1, so it shows a model finds the "
            "needle, not that it looks keys up."
        )
    mh = df[df["metric"] == "multihop/acc"]
    if not mh.empty and not (mh["scoring"] == "final value").any():
        out.append(
            "The multi-hop records here come from the older probe, which gave every intermediate key and "
            "scored all k answers: k independent lookups, not composition. They cannot test C3."
        )
    if not df[df["metric"] == "eval/peak_rss_bytes"].empty:
        out.append(
            "eval/peak_rss_bytes (older runs) is the process's high-water mark while a cell ran, not the cell's "
            "own memory: a cell that ran after a larger one shows the larger one's peak. Newer runs record "
            "eval/peak_rss_increase_bytes, the increase over the cell's start."
        )
    return out


def _provenance_caveats(df: pd.DataFrame) -> list[str]:
    """What is projected or analytic rather than measured, and what was copied from checkpoints."""
    out = []
    proj = df[df["status"].isin(NOT_MEASURED)]
    if not proj.empty:
        by = ", ".join(f"{m} ({n})" for m, n in proj["metric"].value_counts().sort_index().items())
        out.append(
            f"Projected or analytic, not measured: {len(proj)} records from the cost model or a formula: {by}. "
            f"They are drawn hollow, dashed or hatched and marked with a dagger in tables, never as measurements."
        )
        if df["relabelled"].any():
            out.append(
                f"{int(df['relabelled'].sum())} records were written as measured although computed from a formula "
                f"(method analytic); the report counts them as analytic."
            )
    else:
        out.append("Nothing projected or analytic: every number is measured.")
    old_copies = df[(df["metric"] == "train/loss") & df["note"].astype(str).str.startswith("checkpoint:") & df["source"].isna()]
    if not old_copies.empty:
        out.append(
            f"{len(old_copies)} training-curve records were copied from checkpoints by an older version, which "
            f"stamped them with the time of the copy, not of the training, and did not name the source file; "
            f"newer runs keep the checkpoint's own times and its record.json path."
        )
    copied = df[df["source"].notna() & (df["source"].astype(str) != "")]
    if not copied.empty:
        no_time = copied["time"].isna().sum()
        out.append(
            f"{len(copied)} training records are copied from the checkpoints' record.json files (column source)"
            + (f"; {no_time} of them carry no time because the checkpoint recorded none" if no_time else "")
            + "."
        )
    return out


def _coverage_caveats(data: RunData) -> list[str]:
    """Partial, skipped and failed cells, failed runs, and damaged or incomplete results files."""
    df = data.records
    out = []
    counts = haystack_counts(df)
    partial = counts[counts["partial"]]
    if not partial.empty:
        cells = "; ".join(
            f"{r.design} {fmt_len(r.context_len)}" + (f" {r.hops:g} hops" if r.hops != "" else "") + f": {r.ran:.0f} of {r.planned:.0f}"
            for r in partial.itertuples()
        )
        out.append(
            f"Partial cells: {len(partial)} accuracy cells ran fewer haystacks than planned ({cells}); the budget ran out "
            f"for the rest. Their intervals are wider; they are marked ◐ in the tables and half-filled or dotted in the figures."
        )
    for status in ("skipped", "failed"):
        part = df[df["status"] == status]
        if not part.empty:
            out.append(f"{status.capitalize()}: {len(part)} records ({reasons(part['note'])}).")
    for f in data.footers:
        if f.get("status") == "failed":
            out.append(
                f"Run {f['run_dir']} failed ({f.get('ended', 'time unknown')}): "
                f"{f.get('error') or 'no error recorded'}. Its records up to the failure are shown."
            )
    for problem in data.problems:
        if problem.endswith((NO_HEADER, EMPTY + "; left out")) or OTHER_CONFIG in problem:
            out.append(f"Results file: {problem}.")
            continue
        out.append(
            f"Damaged results: {problem}. Damaged lines and the records of cells that are not whole are left out, "
            f"duplicate records are counted once; rerunning the run redoes the cells that are not whole and repairs the file."
        )
    return out


def _comparison_caveats(data: RunData) -> list[str]:
    """What limits comparisons: noisy timings, merged configs, devices, uncommitted changes."""
    df = data.records
    out = []
    if "noisy" in df.columns:
        noisy = df[df["noisy"].map(lambda x: x is True)]
        if not noisy.empty:
            by = ", ".join(f"{m} ({n})" for m, n in noisy["metric"].value_counts().sort_index().items())
            out.append(
                f"Noisy timings: {len(noisy)} were taken while the load average exceeded the core count by half a core "
                f"({by}; each record says noisy=true, hollow markers in the efficiency figure). Other processes "
                f"shared the cores: such a time is an upper bound and a ratio between two of them is uncertain."
            )
    hashes = {h.get("config_hash") for h in data.headers}
    if len(hashes) > 1:
        out.append(
            f"This report merges {len(data.files)} results files with {len(hashes)} different configs: "
            f"compare numbers across them with care (see Exact config)."
        )
    devices = sorted({str(d) for d in df["device"].dropna()})
    if len(devices) > 1:
        out.append(f"Devices: {', '.join(devices)}; timings are compared only within one device.")
    if any((h.get("git") or {}).get("dirty") for h in data.headers):
        out.append("Some runs were made from a checkout with uncommitted changes (see Environment).")
    out.append("Lengths: K = 1,024 and M = 1,048,576 tokens (128K = 131,072; 1M = 1,048,576; 4M = 4,194,304).")
    return out
