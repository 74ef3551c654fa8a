"""The report's tables: the one-screen decision table, production presets, other measurements.

A cell says how it was obtained: measured (plain), projected (cost model: italic, marked),
skipped or failed (say so), or no records yet ("—"). A cell never averages measured and
projected values together: it shows the measured mean when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import pandas as pd

from .data import LEN_1M, LEN_4M, LEN_128K, designs, fmt_bytes, fmt_len, fmt_num, is_preset, metric, pooled

BASELINE = "softmax"
SPEED_LENGTHS = (LEN_128K, LEN_1M)
TOTAL_LENGTHS = (LEN_128K, LEN_1M, LEN_4M)


@dataclass
class Cell:
    text: str
    kind: str = ""  # "" (measured) | projected | skipped | failed | none
    title: str = ""  # hover text: how the value was obtained


@dataclass
class Table:
    id: str
    columns: list[tuple[str, str]]  # (group, label); a group spans its consecutive columns
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""

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
    for status in ("measured", "projected"):
        s = g.loc[g["status"] == status, "v"].dropna()
        if not s.empty:
            other = "; projected values exist too" if status == "measured" and (g["status"] == "projected").any() else ""
            return Cell(fmt(s.mean()), "" if status == "measured" else "projected",
                        f"mean of {len(s)} {status} record(s){other}")
    status = "failed" if (g["status"] == "failed").any() else "skipped"
    notes = "; ".join(dict.fromkeys(g["note"].dropna().astype(str)))
    return Cell(status, status, notes or status)


def _acc_cells(df: pd.DataFrame, name: str, metric_name: str, lengths: list) -> list[Cell]:
    d = pooled(metric(df, metric_name))
    d = d[d["design"] == name]
    return [summarize(d[d["context_len"] == n], lambda v: f"{v:.2f}") for n in lengths] if lengths else [NONE]


def speed_vs_baseline(df: pd.DataFrame, name: str, phase: str, length: int) -> Cell:
    """Baseline time / design time at ``length`` (above 1: faster), per device, same scope and dtype."""
    d = metric(df, f"latency/{phase}_ms")
    d = d[d["context_len"] == length]
    if name == BASELINE:
        return Cell("1 (baseline)", "", "the baseline") if not d[d["design"] == BASELINE].empty else NONE
    own, base = d[d["design"] == name], d[d["design"] == BASELINE]
    if own.empty:
        return NONE
    parts, kinds = [], set()
    keys = ["device", "scope", "dtype"]
    for key, o in own.groupby(keys, dropna=False):
        b = base
        for k, v in zip(keys, key):
            b = b[b[k].isna()] if pd.isna(v) else b[b[k] == v]
        co, cb = summarize(o), summarize(b)
        if co.kind in ("", "projected") and cb.kind in ("", "projected"):
            ratio = b.loc[b["status"] == ("measured" if cb.kind == "" else "projected"), "v"].mean() / \
                o.loc[o["status"] == ("measured" if co.kind == "" else "projected"), "v"].mean()
            kinds.add("projected" if "projected" in (co.kind, cb.kind) else "")
            where = f" ({key[0]})" if own["device"].nunique() > 1 else ""
            parts.append(f"{ratio:.2f}x{where}")
        elif co.kind in ("skipped", "failed"):
            parts.append(co.text)
            kinds.add(co.kind)
    if not parts:
        return Cell("no baseline", "none", f"no {BASELINE} timing at {fmt_len(length)} to compare with")
    kind = "projected" if "projected" in kinds else (kinds.pop() if len(kinds) == 1 else "")
    return Cell(" / ".join(parts), kind, f"{BASELINE} {phase} time / {name} {phase} time at {fmt_len(length)}")


def crossover_cell(df: pd.DataFrame, name: str, phase: str) -> Cell:
    d = metric(df, f"crossover/{phase}_len")
    d = d[d["design"] == name]
    if d.empty:
        return NONE
    parts, kinds = [], set()
    for _, r in d.iterrows():
        if r["status"] in ("skipped", "failed") or pd.isna(r["v"]):
            parts.append(r["status"])
            kinds.add(r["status"])
            continue
        analytic = r["status"] == "projected" or r["method"] == "analytic"
        bracket = r["bracket"]
        br = f" [{fmt_len(bracket[0])}–{fmt_len(bracket[1])}]" if isinstance(bracket, (list, tuple)) and len(bracket) == 2 else ""
        where = f" ({r['device']})" if not analytic and d["device"].nunique() > 1 and pd.notna(r["device"]) else ""
        parts.append(f"{fmt_len(r['v'])}{br} {'analytic' if analytic else 'measured'}{where}")
        kinds.add("projected" if analytic else "")
    parts = list(dict.fromkeys(parts))  # merged runs repeat the same analytic crossover
    kind = "projected" if kinds == {"projected"} else ("" if "" in kinds else kinds.pop())
    vs = ", ".join(dict.fromkeys(d["vs"].dropna().astype(str))) or BASELINE
    return Cell("; ".join(parts), kind, f"context length past which {name} is cheaper than {vs}")


def cache_cell(df: pd.DataFrame, name: str) -> Cell:
    d = metric(df, "memory/cache_bytes_per_token")
    d = d[(d["design"] == name) & ~is_preset(d)]
    if d.empty:
        return NONE
    cells = [(dt, summarize(g, fmt_bytes)) for dt, g in d.groupby(d["dtype"].fillna(""), sort=True)]
    text = " / ".join(c.text + (f" ({dt})" if dt and len(cells) > 1 else "") for dt, c in cells)
    kinds = {c.kind for _, c in cells}
    return Cell(text, kinds.pop() if len(kinds) == 1 else "", cells[0][1].title)


def decision_table(df: pd.DataFrame) -> Table:
    niah_lens = sorted(metric(df, "niah/acc")["context_len"].dropna().unique())
    mh_lens = sorted(metric(df, "multihop/acc")["context_len"].dropna().unique())
    cols = [("", "design"), ("", "layout"), ("", "params")]
    cols += [("NIAH accuracy", fmt_len(n)) for n in niah_lens] or [("NIAH accuracy", "")]
    cols += [("multi-hop accuracy", fmt_len(n)) for n in mh_lens] or [("multi-hop accuracy", "")]
    cols += [("cache", "bytes/token")]
    cols += [(f"prefill speed vs {BASELINE}", fmt_len(n)) for n in SPEED_LENGTHS]
    cols += [(f"decode speed vs {BASELINE}", fmt_len(n)) for n in SPEED_LENGTHS]
    cols += [(f"crossover vs {BASELINE}", "prefill"), (f"crossover vs {BASELINE}", "decode")]
    table = Table("decision", cols, note=(
        "Accuracy: mean over depths (NIAH) or hops (multi-hop) and seeds. Speed: baseline time / design time "
        "(above 1: faster). Italic with a dagger: projected by the cost model, not measured. —: no records yet."))
    own = df[~is_preset(df)]
    for name in designs(df):
        g = own[own["design"] == name]
        layout = next((str(x) for x in g["layout"].dropna() if str(x)), "")
        row = [Cell(name), Cell(layout), summarize(metric(g, "params/total"), lambda v: f"{v:,.0f}")]
        row += _acc_cells(own, name, "niah/acc", niah_lens)
        row += _acc_cells(own, name, "multihop/acc", mh_lens)
        row.append(cache_cell(df, name))
        row += [speed_vs_baseline(own, name, phase, n) for phase in ("prefill", "decode") for n in SPEED_LENGTHS]
        row += [crossover_cell(own, name, phase) for phase in ("prefill", "decode")]
        table.rows.append(row)
    return table


def presets_table(df: pd.DataFrame) -> Table | None:
    d = df[is_preset(df) & df["metric"].isin(["memory/cache_bytes_per_token", "memory/total_bytes"])]
    if d.empty:
        return None
    cols = [("", "preset"), ("", "dtype"), ("cache", "bytes/token")] + [("total cache", fmt_len(n)) for n in TOTAL_LENGTHS]
    table = Table("presets", cols, note="Production models' published configs, through the same cache formulas.")
    for (preset, dtype), g in d.groupby([d["preset"].astype(str), d["dtype"].fillna("")], sort=True):
        row = [Cell(preset), Cell(dtype or "—"), summarize(metric(g, "memory/cache_bytes_per_token"), fmt_bytes)]
        tot = metric(g, "memory/total_bytes")
        row += [summarize(tot[tot["context_len"] == n], fmt_bytes) for n in TOTAL_LENGTHS]
        table.rows.append(row)
    return table


def other_table(df: pd.DataFrame, shown: Iterable[str]) -> Table | None:
    """Every metric no figure or summary column shows, as metric x design (mean over seeds)."""
    d = df[~df["metric"].isin(set(shown))]
    if d.empty:
        return None
    names = designs(d) + sorted(set(d.loc[is_preset(d), "preset"].astype(str)))
    table = Table("other", [("", "metric"), ("", "unit"), ("", "context")] + [("design", n) for n in names],
                  note="Mean over seeds and repeats; lists show their length.")
    d = d.assign(who=d["preset"].where(is_preset(d), d["design"]).astype(str),
                 ctx=d["context_len"].map(lambda n: fmt_len(n) if pd.notna(n) else ""))
    for (name, ctx), g in d.groupby(["metric", "ctx"], sort=True):
        unit = ", ".join(dict.fromkeys(g["unit"].dropna().astype(str)))
        row = [Cell(str(name)), Cell(unit), Cell(ctx)]
        for who in names:
            w = g[g["who"] == who]
            if not w.empty and w["v"].isna().all() and w["status"].isin(["measured", "projected"]).any():
                first = w["value"].iloc[-1]
                row.append(Cell(f"list of {len(first)}" if isinstance(first, list) else str(first)[:40]))
            else:
                row.append(summarize(w))
        table.rows.append(row)
    return table


DECISION_METRICS = ("params/total", "niah/acc", "multihop/acc", "memory/cache_bytes_per_token", "memory/total_bytes",
                    "latency/prefill_ms", "latency/decode_ms", "crossover/prefill_len", "crossover/decode_len")
