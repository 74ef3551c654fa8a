"""The decision brief: the report's first section, what a reader decides from, before the tables
and the appendix. ``brief`` is its one entry point (report/build.py calls it, the template
renders what it returns); None leaves the section out.

It answers "which attention, at which length, at what cost" from the needle task models alone
(one task model a row: the needle models of needle_4m, never mixed with chain or capacity
models), by bands of context length, and lists each claim's verdict with its one number, its
seeds and what would change it, taken from the same verdicts the claims section shows.

The pick a band names (``CHEAPEST_RULE``): among the designs that learned the task, the one with
the fewest cache bytes per token whose accuracy is not below the band's best by its 95% interval
(the best's lower bound does not exceed its upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.report.tables.decision import Cell, Table, cache_cell, cache_slope, speed_cell
from attnbench.verdicts.quality import Acc, experiment_task, haystack_acc, learned
from attnbench.verdicts.readings import is_preset, metric

BANDS: list[tuple[str, float, float]] = [
    ("1K", 1024, 1024),
    ("4K-16K", 4096, 16384),
    ("64K-256K", 65536, 262144),
    ("1M-4M", 1 << 20, 1 << 22),
]
NEEDLE_EXP = "needle_4m"  # the needle task models: every row of the brief's table is one of them
CHEAPEST_RULE = (
    "Cheapest that holds: among the designs that learned the task, the one with the fewest cache bytes per token whose "
    "accuracy is not below the band's best by the 95% intervals (the best's lower bound does not exceed its upper bound). "
    "A band compares its designs at one length, the longest inside it that the most of them were measured at; a design "
    "measured only at other lengths of the band is shown there, not compared."
)


@dataclass
class Brief:
    title: str
    lines: list[str] = field(default_factory=list)  # one finding a line, first the one to decide on
    table: Table | None = None  # a small table under the lines (optional)
    note: str = ""  # how the brief was made, in small print
    claims: list[str] = field(default_factory=list)  # one line a claim: verdict, number, seeds, what would change it
    questions: list[str] = field(default_factory=list)  # one line a question beside the claims (Q-delta, Q-tokens), the same way


def _bytes_per_token(df: pd.DataFrame, name: str) -> float:
    """The design's cache bytes per token: the smallest recorded figure, else the measured slope (NaN if neither)."""
    d = metric(df, "memory/cache_bytes_per_token")
    d = d[(d["design"] == name) & ~is_preset(d) & d["v"].notna()]
    return float(d["v"].min()) if not d.empty else cache_slope(df, name)[0]  # the decision table's own figure


def _band_acc(df: pd.DataFrame, name: str, lo: float, hi: float, task) -> tuple[float, Acc] | None:
    """The design's needle accuracy at the longest measured length inside the band."""
    d = metric(df, "niah/acc")
    d = d[(d["design"] == name) & (d["status"] == "measured") & d["context_len"].between(lo, hi)]
    for length in sorted(d["context_len"].dropna().unique(), reverse=True):
        a = haystack_acc(df, "niah/acc", name, length, task=task) if task else None
        if a is not None:
            return float(length), a
    return None


def _band_pick(
    df: pd.DataFrame, names: list[str], lo: float, hi: float, task, cost: dict[str, float]
) -> tuple[str | None, float, Acc | None]:
    """The band's cheapest design that holds, compared like with like: at one length, the longest inside
    the band that the most designs were measured at (CHEAPEST_RULE)."""
    at: dict[float, dict[str, Acc]] = {}
    d = metric(df, "niah/acc")
    d = d[d["design"].isin(names) & (d["status"] == "measured") & d["context_len"].between(lo, hi)]
    for length in sorted(d["context_len"].dropna().unique()):
        got = {n: a for n in names if (a := haystack_acc(df, "niah/acc", n, length, task=task) if task else None) is not None}
        if got:
            at[float(length)] = got
    if not at:
        return None, float("nan"), None
    length = max(at, key=lambda L: (len(at[L]), L))
    name = _cheapest(at[length], cost)
    return name, length, at[length].get(name) if name else None


def needle_exp(df: pd.DataFrame) -> str | None:
    """The experiment whose needle task models the brief reads: needle_4m's where it has records,
    else the experiment with the most needle records (a single run's report), one task model a design."""
    niah = metric(df, "niah/acc")
    if niah.empty:
        return None
    exps = niah["exp"].dropna().astype(str)
    return NEEDLE_EXP if (exps == NEEDLE_EXP).any() else str(exps.mode().iloc[0])


def _train_len(train: pd.DataFrame | None, name: str, exp: str | None = NEEDLE_EXP) -> float:
    if train is None or train.empty:
        return float("nan")
    t = train[(train["design"] == name) & (train["exp"] == exp)]
    return float(t["train_len"].max()) if not t.empty else float("nan")


def _seeds(df: pd.DataFrame, name: str, length: float) -> str:
    """Which seeds' models a needle cell pools: "seed 0" or "seeds 0, 1, 2" (a one-seed pick is weaker)."""
    d = metric(df, "niah/acc")
    seeds = sorted({int(s) for s in d[(d["design"] == name) & (d["context_len"] == length)]["seed"].dropna()})
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds)) if seeds else "seeds —"


def _cheapest(accs: dict[str, Acc], cost: dict[str, float]) -> str | None:
    if not accs:
        return None
    best = max(accs.values(), key=lambda a: a.p)
    holds = [n for n, a in accs.items() if not best.lo > a.hi]
    # a design without a cache figure sorts last (NaN is never the cheapest), ties by name
    return min(holds, key=lambda n: (pd.isna(cost.get(n, float("nan"))), cost.get(n, 0.0), n)) if holds else None


def brief_table(df: pd.DataFrame, train: pd.DataFrame | None) -> tuple[Table | None, dict[str, tuple[str | None, float, Acc | None]]]:
    """(the table by band, each band's cheapest design that holds and its length)."""
    exp = needle_exp(df)
    d = df[df["exp"] == exp]
    task = experiment_task(d, "niah/acc")
    names = [n for n in dict.fromkeys(metric(d, "niah/acc")["design"].dropna().astype(str))]
    names = [n for n in names if learned(d, n, task, train=train).flag]
    if not names:
        return None, {}
    cost = {n: _bytes_per_token(df, n) for n in names}
    cols = [("", "design"), ("cache", "bytes/token"), ("speed vs softmax", "prefill"), ("speed vs softmax", "decode")]
    cols += [("needle accuracy [95% interval]", band) for band, _, _ in BANDS]
    table = Table("brief", cols, note=CHEAPEST_RULE, font_pt=8)
    picks: dict[str, tuple[str | None, float, Acc | None]] = {}
    per_band: dict[str, dict[str, tuple[float, Acc]]] = {}
    for band, lo, hi in BANDS:
        per_band[band] = {n: got for n in names if (got := _band_acc(d, n, lo, hi, task)) is not None}
        picks[band] = _band_pick(d, names, lo, hi, task, cost)
    own = df[~is_preset(df)]
    for n in names:
        layout = str(own[own["design"] == n]["layout"].dropna().astype(str).mode().iloc[0]) if not own[own["design"] == n].empty else ""
        row = [Cell(n), cache_cell(df, n), speed_cell(own, n, "prefill", layout), speed_cell(own, n, "decode", layout)]
        for band, _, _ in BANDS:
            got = per_band[band].get(n)
            if got is None:
                row.append(Cell("—", "none"))
                continue
            L, a = got
            name, at, _ = picks[band]
            if name is not None and L != at:  # its longest cell here is not the band's compared length
                compared = haystack_acc(d, "niah/acc", n, at, task=task) if task else None
                L, a = (at, compared) if compared is not None else (L, a)
            trained_to = _train_len(train, n, exp)
            beyond = pd.notna(trained_to) and L > trained_to
            mark = " ★" if name == n else "" if L == at else f" (not compared: none at {fmt_len(at)})"
            row.append(
                Cell(
                    f"{a.text()} at {fmt_len(L)}" + (" (extrapolated)" if beyond else "") + mark,
                    "",
                    f"{a.fraction} probes, {_seeds(d, n, L)}; trained to {fmt_len(trained_to) if pd.notna(trained_to) else '—'}",
                )
            )
        table.rows.append(row)
    return table, picks


def _bottom_line(
    picks: dict[str, tuple[str | None, float, Acc | None]], df: pd.DataFrame, claims: list[tuple[Any, Any]], train
) -> list[str]:
    def pick(band: str) -> str:
        name, length, acc = picks.get(band, (None, float("nan"), None))
        if name is None or acc is None:
            return f"no design that learned has a measured needle cell at {band}"
        b = _bytes_per_token(df, name)
        cache = f", {fmt_bytes(b)} of cache a token" if pd.notna(b) else ""
        return f"{name} ({acc.text()} at {fmt_len(length)}, {_seeds(df[df['exp'] == needle_exp(df)], name, length)}{cache})"

    verdicts = {c.id: v for c, v in claims}
    lines = [
        f"Retrieval of one fact: at 1K and 4K-16K the cheapest design that holds the best accuracy is {pick('1K')} and "
        f"{pick('4K-16K')}; at 64K-256K {pick('64K-256K')}; at 1M-4M {pick('1M-4M')} (beyond every model's training length: extrapolation)."
    ]
    c3 = verdicts.get("C3")
    if c3 is not None and c3.verdict != "not yet measured":
        lines.append(
            f"Composing lookups (multi-hop, C3 {c3.verdict}, seeds {', '.join(map(str, c3.seeds)) or '—'}): {c3.headline}; "
            "a cheaper design that holds single lookups is not evidence that it composes them."
        )
    exp = needle_exp(df)
    trained_to = train[train["exp"] == exp]["train_len"].max() if train is not None and not train.empty else float("nan")
    params = metric(df[df["exp"] == exp], "params/total")["v"].dropna()
    size = f"{params.min() / 1e6:.2g}M-{params.max() / 1e6:.2g}M parameters" if not params.empty else "small models"
    lines.append(
        f"Scale: these are task models of {size}, trained to at most {fmt_len(trained_to) if pd.notna(trained_to) else '—'} "
        "tokens on a CPU; every verdict holds at that scale, not at the claims' 10B-456B."
    )
    return lines


def _claim_line(claim, v) -> str:
    seeds = ("seed " if len(v.seeds) == 1 else "seeds ") + ", ".join(map(str, v.seeds)) if v.seeds else "no trained model"
    note = f" {v.note}" if getattr(v, "note", "") else ""
    return f"{claim.id} {v.verdict}{note}: {v.headline or '—'} ({seeds}); would change with: {v.change or '—'}"


def brief(
    df: pd.DataFrame, train: pd.DataFrame, claims: list[tuple[Any, Any]], questions: list[tuple[Any, Any]] | None = None
) -> Brief | None:
    """The brief of these records: ``df`` the records, ``train`` the checkpoints' training facts,
    ``claims`` the judged claims ((claim, verdict) pairs of verdicts.claims.judge_all), ``questions``
    the answered questions beside them (verdicts.claims.questions.judge_questions)."""
    from attnbench.verdicts.claims.judge import readable

    measured = [(c, v) for c, v in claims if v.verdict != "not yet measured"]
    kept, aside, dirty = readable(df)  # the records the verdicts read: shipped models, code a reader can check out
    table, picks = brief_table(kept, train) if "exp" in kept.columns else (None, {})
    if not measured and table is None:
        return None
    lines = _bottom_line(picks, kept, claims, train) if table is not None else []
    left = ([f"{len(aside)} unshipped model(s)"] if aside else []) + (
        [f"{len(dirty)} records of runs from uncommitted code"] if len(dirty) else []
    )
    return Brief(
        "Decision brief",
        lines,
        table=table,
        claims=[_claim_line(c, v) for c, v in measured],
        questions=[_claim_line(q, v) for q, v in questions or []],
        note=f"Rows: the needle task models ({needle_exp(df)}) that learned their task; ★ the band's pick. "
        + CHEAPEST_RULE
        + (f" Set aside, as the verdicts set them aside: {', '.join(left)}." if left else ""),
    )


__all__ = ["Brief", "brief", "BANDS", "CHEAPEST_RULE"]
