"""The report's tables: the cells every table is made of (``Cell``, ``Table``, ``summarize``) and
the one-screen decision table; training, production presets and other measurements are in
report/tables/extra.py, serving's table in report/tables/readiness.py.

A cell says how it was obtained: measured (plain), projected or analytic (cost model or a
formula: italic, marked), skipped or failed (say so), or no records yet ("—"); its hover text
says where it comes from. A cell never averages measured and projected values together: it
shows the measured mean when there is one. Accuracies carry their 95% interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from attnbench.designs import layout_letters, of

from attnbench.verdicts.readings import LEN_1M, LEN_4M, LEN_128K, NOT_MEASURED, is_preset, metric, pooled

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.frame import cell_state, designs, fmt_num, haystack_counts, mark_partial
from attnbench.verdicts.quality import (
    EFFECTIVE_LOWER_BOUND,
    KEPT_SHARE,
    LEARNED_LOWER_BOUND,
    RELATIVE_RULE,
    effective_length,
    experiment_task,
    learned,
    levels_of,
    per_seed,
    pooled_acc,
    relative_effective_length,
    seed_spread,
)

from attnbench.report.tables.training_cells import primary_training, training_cells

BASELINE = "softmax"
TOTAL_LENGTHS = (LEN_128K, LEN_1M, LEN_4M)


@dataclass
class Cell:
    text: str
    kind: str = ""  # "" (measured) | projected | skipped | failed | none
    title: str = ""  # hover text: how the value was obtained
    sub: str = ""  # a second, smaller line (an interval)


@dataclass
class Table:
    id: str
    columns: list[tuple[str, str]]  # (group, label); a group spans its consecutive columns
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""
    keys: int = 1  # the leading columns that name a row: repeated in each part of a split table (pages.py)
    font_pt: float = 8.5  # its print size (the template's), for the width it needs

    @property
    def groups(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for group, _ in self.columns:
            if out and out[-1][0] == group:
                out[-1] = (group, out[-1][1] + 1)
            else:
                out.append((group, 1))
        return out


NONE = Cell("—", "none", "no records for this yet")


def summarize(g: pd.DataFrame, fmt: Callable[[float], str] = fmt_num) -> Cell:
    """The measured mean if any, else the projected mean (marked), else skipped/failed, else —."""
    if g.empty:
        return NONE
    for status in ("measured", "projected", "analytic"):
        s = g.loc[g["status"] == status, "v"].dropna()
        if not s.empty:
            other = "; projected values exist too" if status == "measured" and g["status"].isin(NOT_MEASURED).any() else ""
            return Cell(fmt(s.mean()), "" if status == "measured" else "projected", f"mean of {len(s)} {status} record(s){other}")
    state, notes = cell_state(g)  # the figures read the same state (data.cell_state)
    status = "failed" if state == "failed" else "skipped"
    return Cell(status, status, notes or status)


def acc_cell(d: pd.DataFrame, title: str = "") -> Cell:
    """Accuracy with its 95% Wilson interval (runs and seeds pooled), or skipped/failed, or —."""
    if d.empty:
        return NONE
    acc = pooled_acc(d)
    if acc is None:
        return summarize(d)
    count = f"{acc.fraction} probes; " if pd.notna(acc.n) else ""
    chance, floor = levels_of(d)
    levels = f"; chance {chance:.3g}, values-in-context floor {floor:.3g}" if pd.notna(chance) else ""
    # (records of other metrics carry a field of that name too, eval/budget_summary's: NaN elsewhere)
    part = d[d["partial"].eq(True)] if "partial" in d else d.iloc[0:0]
    partial = f"{part['ran'].iloc[0]:.0f} of {part['planned'].iloc[0]:.0f} haystacks" if not part.empty else ""
    seeds = per_seed(d)  # several seeds' models pooled: each seed's own value beside the pooled one
    by_seed = "; per seed " + ", ".join(f"seed {s} {a.fraction}" for s, a in sorted(seeds.items())) if seeds else ""
    return Cell(
        f"{acc.p:.2f}" + (" ◐" if partial else ""),
        "",
        f"{acc.text()}: {count}95% Wilson interval{levels}{by_seed}{'; ' + title if title else ''}"
        + (f"; partial: {partial} ran, the budget ran out for the rest" if partial else ""),
        sub=f"[{acc.lo:.2f}–{acc.hi:.2f}]" + (f" {partial}" if partial else "") + (f" {seed_spread(seeds)}" if seeds else ""),
    )


def learned_cell(df: pd.DataFrame, name: str, task: str | None, train: pd.DataFrame, hops=None) -> Cell:
    got = learned(df, name, task, hops=hops, train=train)
    if got.flag is None:
        return Cell("no check", "none", got.why)
    return Cell(
        ("yes" if got.flag else "no") + (" *" if got.fallback else ""),
        "" if got.flag else "failed",
        got.why,
        sub=got.acc.text() if got.acc else "",
    )


def design_times(df: pd.DataFrame, name: str, phase: str, layout: str) -> pd.DataFrame:
    """Measured times of ``name`` (exp, device, scope, dtype, context_len -> ms); a design timed
    only through its letters (a hybrid) is composed from its letters' measured layer times."""
    d = metric(df, f"latency/{phase}_ms")
    d = d[(d["status"] == "measured") & d["v"].notna()]
    keys = ["exp", "device", "scope", "dtype", "context_len"]
    own = d[d["design"] == name]
    if not own.empty:
        return own.groupby(keys, dropna=False)["v"].median().reset_index().assign(how="measured")
    letters = {c: layout.count(c) / len(layout) for c in set(layout)} if layout else {}
    if not letters or not all(c in layout_letters() for c in letters):
        return pd.DataFrame(columns=keys + ["v", "how"])
    parts = []
    for c, w in letters.items():
        g = d[(d["design"] == of(c).name) & (d["scope"] == "layer")].groupby(keys, dropna=False)["v"].median()
        parts.append(g * w)
    total = parts[0]
    for p in parts[1:]:
        total = total.add(p, fill_value=None)
    return total.dropna().reset_index().assign(how="composed from its layers' measured times")


def speed_cell(df: pd.DataFrame, name: str, phase: str, layout: str) -> Cell:
    """softmax time / design time at the longest length both were measured (one experiment,
    device, scope and dtype; layer scope preferred)."""
    if name == BASELINE:
        return Cell("1 (baseline)") if not metric(df, f"latency/{phase}_ms").empty else NONE
    own, base = design_times(df, name, phase, layout), design_times(df, BASELINE, phase, "S")
    if own.empty or base.empty:
        return NONE
    both = own.merge(base, on=["exp", "device", "scope", "dtype", "context_len"], suffixes=("", "_base"))
    if both.empty:
        return NONE
    both = both.assign(pref=(both["scope"] == "layer").astype(int)).sort_values(["pref", "context_len"])
    r = both.iloc[-1]
    ratio = r["v_base"] / r["v"]
    return Cell(
        f"{ratio:.2f}x at {fmt_len(r['context_len'])}",
        "",
        f"{BASELINE} {phase} time / {name} {phase} time, {r['scope']} scope, {r['device']}, {r['dtype']}, "
        f"exp {r['exp']} ({r['how']}; measured)",
    )


def cache_cell(df: pd.DataFrame, name: str) -> Cell:
    """Bytes the cache grows by per token: a recorded per-token figure, else the slope of the
    measured cache bytes between the two longest lengths of one experiment (task models first)."""
    d = metric(df, "memory/cache_bytes_per_token")
    d = d[(d["design"] == name) & ~is_preset(d)]
    if not d.empty:
        cells = [(dt, summarize(g, fmt_bytes)) for dt, g in d.groupby(d["dtype"].fillna(""), sort=True)]
        text = " / ".join(c.text + (f" ({dt})" if dt and len(cells) > 1 else "") for dt, c in cells)
        kinds = {c.kind for _, c in cells}
        return Cell(text, kinds.pop() if len(kinds) == 1 else "", cells[0][1].title)
    slope, how = cache_slope(df, name)
    return Cell(fmt_bytes(slope), "", how) if how else NONE


def cache_slope(df: pd.DataFrame, name: str) -> tuple[float, str]:
    """(bytes per token, how) from the measured cache bytes between the two longest lengths of one
    experiment (task models first); (NaN, "") where nothing was measured twice."""
    for m in ("eval/cache_bytes", "memory/total_bytes"):
        g = metric(df, m)
        g = g[(g["design"] == name) & (g["status"] == "measured") & g["v"].notna() & g["context_len"].notna() & ~is_preset(g)]
        for (exp, dtype), gg in g.groupby(["exp", g["dtype"].fillna("")], sort=False):
            by = gg.groupby("context_len")["v"].max().sort_index()
            if len(by) < 2:
                continue
            (l1, b1), (l2, b2) = list(by.items())[-2:]
            slope = (b2 - b1) / (l2 - l1)
            return (
                slope,
                f"measured: ({fmt_bytes(b2)} at {fmt_len(l2)} - {fmt_bytes(b1)} at {fmt_len(l1)}) / tokens, {m}, exp {exp}, {dtype}",
            )
    return float("nan"), ""


def crossover_cell(df: pd.DataFrame, name: str, phase: str) -> Cell:
    """Measured crossovers (each scope) and, beside them, the analytic one on each GPU profile's
    range; a crossover that was never reached in range says so (< or > the range)."""
    d = metric(df, f"crossover/{phase}_len")
    d = d[d["design"] == name]
    if d.empty:
        return NONE
    parts, kinds = [], set()
    for _, r in d[d["status"].isin(["measured", "skipped", "failed"])].iterrows():
        if r["status"] != "measured":
            parts.append(f"{r['status']} ({r['scope']})")
            kinds.add(r["status"])
            continue
        rel = r.get("relation")
        b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) else [None, None]
        value = fmt_len(r["v"]) if pd.notna(r["v"]) else (f"< {fmt_len(b[1])}" if rel == "<" else f"> {fmt_len(b[0])}")
        parts.append(f"{value} ({r['scope']})")
        kinds.add("")
    ana = d[d["status"].isin(NOT_MEASURED) & d["v"].notna() & (d["impl"] == "fused")]
    if "shape" in ana.columns and (ana["shape"] == "text01").any():
        ana = ana[ana["shape"] == "text01"]
    if not ana.empty:
        lo, hi = ana["v"].min(), ana["v"].max()
        parts.append(f"GPUs {fmt_len(lo)}–{fmt_len(hi)}†" if lo != hi else f"GPUs {fmt_len(lo)}†")
        kinds.add("projected")
    if not parts:
        return NONE
    kind = "" if "" in kinds else ("projected" if "projected" in kinds else kinds.pop())
    return Cell(
        "; ".join(dict.fromkeys(parts)),
        kind,
        f"context length past which {name} is cheaper than {BASELINE} "
        f"in {phase}: measured on this machine (op or layer scope); GPUs†: "
        f"the cost model's analytic crossover on the GPU profiles",
    )


ROW_METRICS = (
    "params/total",
    "niah/acc",
    "multihop/acc",
    "train/steps_to_floor",
    "latency/prefill_ms",
    "latency/decode_ms",
    "crossover/prefill_len",
    "crossover/decode_len",
    "memory/total_bytes",
    "memory/cache_bytes_per_token",
)


def params_cell(g: pd.DataFrame) -> Cell:
    """Parameters of the design's task model (copied from its checkpoint record), else of the
    models its records measured; different models are listed apart, never averaged."""
    p = metric(g, "params/total")
    p = p[(p["status"] == "measured") & p["v"].notna()]
    if p.empty:
        return NONE
    task = p[(p["source"].notna() & (p["source"].astype(str) != "")) | p["note"].astype(str).str.startswith("checkpoint:")]
    use = task if not task.empty else p
    values = sorted(set(use["v"]), reverse=True)
    where = "the task model (its checkpoint record)" if not task.empty else ", ".join(sorted(set(use["exp"].astype(str))))
    return Cell(" / ".join(f"{v:,.0f}" for v in values), "", f"parameters of {where}")


def row_designs(df: pd.DataFrame) -> list[str]:
    """The designs the decision table has a row for: those with a model, timing or cache record."""
    d = df[df["metric"].isin(ROW_METRICS) & ~is_preset(df)]
    return designs(d)


def decision_table(df: pd.DataFrame, train: pd.DataFrame | None = None, *, drop_empty: bool = True) -> Table:
    """The one-screen table: per design, how it was trained, whether it learned the task,
    accuracy with intervals, effective context length, multi-hop, cache, speed, crossovers."""
    train = train if train is not None else pd.DataFrame(columns=["design", "train_len", "steps", "tokens", "stop_reason"])
    counts = haystack_counts(df)
    niah = mark_partial(pooled(metric(df, "niah/acc")), counts)
    niah_lens = sorted(niah["context_len"].dropna().unique())
    mh = mark_partial(metric(df, "multihop/acc"), counts)
    final = mh["scoring"] == "final value"
    mh = mh[final] if final.any() else mh
    mh_scoring = "final value" if final.any() else "older per-hop scoring, not composition"
    mh_len = mh["context_len"].min() if not mh.empty else None
    mh_hops = sorted(mh["hops"].dropna().unique())
    niah_task = experiment_task(df, "niah/acc")
    chance, floor = levels_of(niah) if not niah.empty else (float("nan"), float("nan"))
    acc_group = "NIAH accuracy [95% interval]" + (f" (chance {chance:.2f}, floor {floor:.2f})" if pd.notna(chance) else "")
    cols = [
        ("", "design"),
        ("", "layout"),
        ("", "params"),
        ("training", "trained to"),
        ("training", "steps / tokens"),
        ("training", "stopped"),
        ("learned the task", "at its training length"),
        ("NIAH", "effective length"),
        ("NIAH", "relative effective length"),
    ]
    cols += [(acc_group, fmt_len(n)) for n in niah_lens]
    cols += [(f"multi-hop at {fmt_len(mh_len)} ({mh_scoring}) [95% interval]", f"{h:g} hops") for h in mh_hops]
    cols += [("cache", "bytes/token")]
    cols += [(f"speed vs {BASELINE} (measured)", "prefill"), (f"speed vs {BASELINE} (measured)", "decode")]
    cols += [(f"crossover vs {BASELINE}", "prefill"), (f"crossover vs {BASELINE}", "decode")]
    rules = {json.dumps(r, sort_keys=True, default=str) for r in train["rule"]} if "rule" in train else set()
    rule_note = (" Training rule: " + "; ".join(rule_text(json.loads(r)) for r in sorted(rules)) + ".") if rules else ""
    table = Table("decision", cols, note=_decision_note(rule_note), font_pt=7.5)
    own = df[~is_preset(df)]
    for name in row_designs(df):
        g = own[own["design"] == name]
        layouts = g["layout"].dropna().astype(str)
        layouts = layouts[layouts.str.fullmatch(r"[A-Z]+")]  # records of no one layout write "-" or ""
        layout = str(layouts.mode().iloc[0]) if not layouts.empty else ""
        tr = primary_training(train[train["design"] == name])
        row = [Cell(name), Cell(layout), params_cell(g)]
        if tr.empty:
            row += [NONE, NONE, NONE]
        else:
            row += [Cell(*c) for c in training_cells(tr)]
        hops = mh_hops[-1] if mh_hops and niah_task is None else None
        row.append(learned_cell(df, name, niah_task or ("multihop" if mh_hops else None), train, hops=hops))
        eff, text = effective_length(df, name)
        row.append(
            Cell(
                text,
                "" if pd.notna(eff) else "none",
                f"longest length whose lower bound (and every shorter one's) stays above {EFFECTIVE_LOWER_BOUND}",
            )
        )
        rel, rel_text = relative_effective_length(df, name, tr.iloc[-1]["train_len"] if not tr.empty else float("nan"))
        row.append(
            Cell(rel_text, "" if pd.notna(rel) else "none", f"lower bound >= {KEPT_SHARE:.0%} of its own accuracy at its training length")
        )
        gn = niah[niah["design"] == name]
        row += [acc_cell(gn[gn["context_len"] == n]) for n in niah_lens]
        gm = mh[(mh["design"] == name) & (mh["context_len"] == mh_len)] if mh_len is not None else mh.iloc[0:0]
        row += [acc_cell(gm[gm["hops"] == h]) for h in mh_hops]
        row.append(cache_cell(df, name))
        row += [speed_cell(own, name, phase, layout) for phase in ("prefill", "decode")]
        row += [crossover_cell(own, name, phase) for phase in ("prefill", "decode")]
        table.rows.append(row)
    if drop_empty and table.rows:
        keep = [i for i in range(len(cols)) if i < 3 or any(r[i].kind != "none" for r in table.rows)]
        table.columns = [cols[i] for i in keep]
        table.rows = [[r[i] for i in keep] for r in table.rows]
    return table


def _decision_note(rule_note: str) -> str:
    """The decision table's note: how each column is computed."""
    return (
        "Accuracy: exact match, depths and seeds pooled, 95% Wilson interval (where models of several seeds were "
        "measured, each seed's own accuracy follows, s0 s1 ..., with the spread, max minus min); a haystack two runs share "
        "counted once; chance = a uniform guess among the task's "
        "answers, floor = a uniform guess among this context's needle values (no lookup). Learned: the 95% lower bound "
        f"of the task at the model's own training length >= {LEARNED_LOWER_BOUND} (* decided on single needles: no "
        "experiment-task check recorded); a design that did not learn is shown, never used for a verdict. Trained to: "
        "the longest curriculum stage the model passed. Effective length: the longest length up to which every "
        f"accuracy's lower bound stays above {EFFECTIVE_LOWER_BOUND}; the "
        + RELATIVE_RULE
        + f". Speed: {BASELINE} time / design time at the longest "
        "length both were measured (above 1: faster). ◐ n of m haystacks: a partial cell, fewer haystacks ran than "
        "planned (the budget ran out). Italic with a dagger: projected or analytic, not measured. "
        "—: no records for this yet." + rule_note
    )


def rule_text(rule: dict) -> str:
    """The training rule in words: its name, then its limits."""
    if not isinstance(rule, dict):
        return ""
    limits = ", ".join(
        f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}"
        for k, v in rule.items()
        if k != "name" and v is not None
    )
    return str(rule.get("name", "")) + (f" ({limits})" if limits else "")


DECISION_METRICS = (
    "params/total",
    "niah/acc",
    "multihop/acc",
    "memory/cache_bytes_per_token",
    "memory/total_bytes",
    "train/acc",
    "train/steps_to_floor",
    "eval/cache_bytes",
    "latency/prefill_ms",
    "latency/decode_ms",
    "crossover/prefill_len",
    "crossover/decode_len",
)
