"""The report's tables beside the decision table (report/tables/decision.py): how each design's model
was trained (from the checkpoints' records), the production presets' cache sizes with their
licenses, and every metric no figure or summary column shows, in the cells of tables/decision.py.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from attnbench.verdicts.readings import NOT_MEASURED, is_preset, metric

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.frame import designs
from attnbench.report.tables.decision import TOTAL_LENGTHS, Cell, Table, acc_cell, rule_text, summarize


def training_table(train: pd.DataFrame) -> Table | None:
    """How each design's model was trained, from the checkpoints' records."""
    if train is None or train.empty:
        return None
    cols = [
        ("", "design"),
        ("", "trained to (tokens)"),
        ("", "stage reached"),
        ("", "steps"),
        ("", "tokens"),
        ("", "status"),
        ("", "stop reason"),
        ("", "rule"),
        ("last stage", "tokens/s"),
        ("last stage", "GFLOP/s"),
        ("last stage", "% of peak"),
        ("", "source"),
    ]
    table = Table(
        "training",
        cols,
        note="Copied from each checkpoint's record.json (source). Trained to: the longest "
        "context of a curriculum stage the model passed (0: none). Last stage: the rate of the last "
        "curriculum stage it trained on (train/stage_rate), GFLOP/s by the cost model's FLOPs of a "
        "training token, % of the fp32 matmul peak calibrated when it trained (— for models trained "
        "before that was recorded).",
    )
    rules = dict.fromkeys(rule_text(r) for r in train["rule"] if isinstance(r, dict) and rule_text(r))
    if rules:  # each rule in full once, under the table; a row names its rule
        table.note += " Rules: " + "; ".join(rules) + "."
    several = "exp" in train and train["exp"].nunique() > 1  # the same design's models of different experiments
    seeded = "seed" in train and train["seed"].nunique(dropna=True) > 1  # models of several seeds
    for _, t in train.iterrows():
        rule = t["rule"] if isinstance(t["rule"], dict) else {}
        name = f"{t['design']} ({t['exp']})" if several else t["design"]
        table.rows.append(
            [
                Cell(f"{name}, seed {t['seed']:.0f}" if seeded and pd.notna(t["seed"]) else name),
                Cell(f"{int(t['train_len']):,}" if pd.notna(t["train_len"]) else "—"),
                Cell(t["stage"] or "—"),
                Cell((("" if t.get("steps_exact", True) is not False else "~") + f"{int(t['steps']):,}") if pd.notna(t["steps"]) else "—"),
                Cell(f"{int(t['tokens']):,}" if pd.notna(t["tokens"]) else "—"),
                Cell(str(t["status"])),
                Cell(str(t["stop_reason"])),
                Cell(str(rule.get("name") or "—"), "", rule_text(rule)),
                *_rate_cells(t.get("rate")),
                Cell(str(t["source"])),
            ]
        )
    return table


def _rate_cells(rate) -> list[Cell]:
    """tokens/s, GFLOP/s and % of peak of a training's last stage (train/stage_rate), or dashes."""
    if not isinstance(rate, dict) or rate.get("v") is None:
        return [Cell("—")] * 3
    frac, gflops = rate.get("fraction_of_peak"), rate.get("gflops")
    return [
        Cell(f"{float(rate['v']):,.0f}"),
        Cell("—" if gflops is None or pd.isna(gflops) else f"{float(gflops):.1f}"),
        Cell("—" if frac is None or pd.isna(frac) else f"{100 * float(frac):.0f}"),
    ]


def license_cell(preset: str) -> Cell:
    """A preset's license (bench/presets.py), its quoted source as the hover text; "not stated" for unknown names."""
    from attnbench.bench.presets import NOT_STATED, PRESETS

    arch = PRESETS.get(preset)
    if arch is None:
        return Cell(NOT_STATED, "none", "not a preset of bench/presets.py")
    return Cell(arch.license, "" if arch.license != NOT_STATED else "none", arch.sources.get("license", "the write-up does not state it"))


def presets_table(df: pd.DataFrame) -> Table | None:
    d = df[is_preset(df) & df["metric"].isin(["memory/cache_bytes_per_token", "memory/total_bytes"])]
    if d.empty:
        return None
    cols = [("", "preset"), ("", "dtype"), ("cache", "bytes/token")] + [("total cache", fmt_len(n)) for n in TOTAL_LENGTHS]
    cols.append(("", "license"))
    table = Table(
        "presets",
        cols,
        note="Production models' published configs, through the same cache formulas. License: as the write-up states it "
        "(hover for the quote; bench/presets.py); read the license file of the exact release you serve.",
    )
    for (preset, dtype), g in d.groupby([d["preset"].astype(str), d["dtype"].fillna("")], sort=True):
        row = [Cell(preset), Cell(dtype or "—"), summarize(metric(g, "memory/cache_bytes_per_token"), fmt_bytes)]
        tot = metric(g, "memory/total_bytes")
        row += [summarize(tot[tot["context_len"] == n], fmt_bytes) for n in TOTAL_LENGTHS]
        row.append(license_cell(preset))
        table.rows.append(row)
    return table


def other_table(df: pd.DataFrame, shown: Iterable[str]) -> Table | None:
    """Every metric no figure or summary column shows, as metric x design (mean over seeds)."""
    d = df[~df["metric"].isin(set(shown))]
    if d.empty:
        return None
    names = designs(d) + sorted(set(d.loc[is_preset(d), "preset"].astype(str)))
    table = Table(
        "other",
        [("", "metric"), ("", "unit"), ("", "context")] + [("design", n if n != "-" else "no design (the machine)") for n in names],
        note="Mean over seeds and repeats; lists show their length. No design: records of the machine, not of a design (its calibration).",
        keys=3,
    )
    d = d.assign(
        who=d["preset"].where(is_preset(d), d["design"]).astype(str), ctx=d["context_len"].map(lambda n: fmt_len(n) if pd.notna(n) else "")
    )
    for (name, ctx), g in d.groupby(["metric", "ctx"], sort=True):
        unit = ", ".join(dict.fromkeys(g["unit"].dropna().astype(str)))
        row = [Cell(str(name)), Cell(unit), Cell(ctx)]
        for who in names:
            w = g[g["who"] == who]
            if name in ("multihop/lookup_acc", "train/acc") and (w["status"] == "measured").any():
                row.append(acc_cell(w))  # accuracies carry their interval here too
            elif not w.empty and w["v"].isna().all() and w["status"].isin(("measured",) + NOT_MEASURED).any():
                first = w["value"].iloc[-1]
                row.append(Cell(f"list of {len(first)}" if isinstance(first, list) else str(first)[:40]))
            else:
                row.append(summarize(w))
        table.rows.append(row)
    return table


EXTERNAL_METRICS = ("external/acc", "external/answer")


def external_table(df: pd.DataFrame) -> Table | None:
    """Models attnbench did not train in-process (exp=needle_external / multihop_external): one row a
    model, task, length and hop count, apart from the trained models' tables and never judged."""
    d = metric(df, "external/acc")
    if d.empty:
        return None
    answers = metric(df, "external/answer")
    table = Table(
        "external",
        [
            ("", "model"),
            ("", "task"),
            ("", "length"),
            ("", "hops"),
            ("", "accuracy"),
            ("requests", "scored"),
            ("requests", "failed"),
            ("seconds a request", "median"),
        ],
        note="External checkpoints (exp=needle_external, multihop_external): attnbench checkpoints in-process (attnbench:), "
        "transformers folders (hf:) and OpenAI-compatible servers (endpoint:) on attnbench's own tasks, one request a probe, "
        "the first generated word scored; 95% Wilson interval over requests. Not read by any verdict.",
        keys=4,
    )
    hops = d["hops"] if "hops" in d.columns else pd.Series(float("nan"), index=d.index)
    d = d.assign(h=hops.fillna(0).astype(int))
    for (name, task, n, h), g in d.groupby([d["design"].astype(str), d["task"].astype(str), "context_len", "h"], sort=True):
        r = g.iloc[-1]
        if r["status"] != "measured":
            cells = [Cell(str(r["status"]), kind=str(r["status"]), title=str(r.get("note") or ""))] + [Cell("—", kind="none")] * 3
        else:
            k, m = int(r["k"]), int(r["n"])
            a = answers[(answers["design"].astype(str) == name) & (answers["context_len"] == n) & (answers["task"].astype(str) == task)]
            if "hops" in a.columns and h:
                a = a[a["hops"] == h]
            secs = pd.to_numeric(a["total_s"], errors="coerce").dropna() if "total_s" in a.columns else pd.Series(dtype=float)
            cells = [
                Cell(f"{k / m:.2f}" if m else "—", sub=f"[{float(r['ci_low']):.2f}–{float(r['ci_high']):.2f}]", title=f"{k}/{m}"),
                Cell(str(m)),
                Cell(str(int(r.get("failed") or 0))),
                Cell(f"{secs.median():.3g}" if len(secs) else "—"),
            ]
        table.rows.append([Cell(name), Cell(task), Cell(fmt_len(n)), Cell(str(h) if h else "—"), *cells])
    return table
