"""Claims C1 and C2, on Text-01's 7:1 hybrid: C1 its cache arithmetic (bytes per token of the
published config, against the formula and the cache objects), C2 its needle retrieval at 4x the
training length (``retrieval_cell``: one needle cell against the claim's 100%); and the 7:1
hybrids themselves (``HYBRIDS``, ``seven_to_one``), in order of closeness to Text-01, which C3
(verdicts/claims/c3_multihop.py) judges too. The thresholds and rules are in judge.py's ``CLAIMS``.
"""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.readings import LEN_4M, NOT_MEASURED, is_preset, metric

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.records.stats import wilson
from attnbench.verdicts.quality import WILSON, Acc, experiment_task, haystack_acc, learned
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Verdict, levels_note


# ---------------------------------------------------------------- C1

TEXT01 = r"text.?01|minimax.?01|\bm1\b"


def judge_c1(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    d = metric(df, "memory/cache_bytes_per_token")
    d = d[d["status"].isin(("measured",) + NOT_MEASURED) & d["v"].notna()]
    p = d[is_preset(d) & d["preset"].astype(str).str.contains(TEXT01, case=False, regex=True)]
    v = Verdict()
    if p.empty:
        return v
    bf16 = p[p["dtype"].astype(str).str.lower().isin(["bf16", "bfloat16", "torch.bfloat16"])]
    use = bf16 if not bf16.empty else p
    value = float(use["v"].iloc[-1])
    v.projected_only = use["status"].isin(NOT_MEASURED).all()
    how = "analytic: the cache formula applied to the published config" if v.projected_only else "measured"
    v.evidence.append(
        f"{use['preset'].iloc[-1]} ({use['dtype'].iloc[-1]}): {fmt_bytes(value)} per token ({value:,.0f} B; claim {t['bytes']:,} B) ({how})"
    )
    if bf16.empty:
        v.evidence.append("no BF16 record: compared in the dtype recorded")
    v.verdict = SUPPORTED if abs(value - t["bytes"]) <= t["tolerance"] * t["bytes"] else NOT_SUPPORTED
    v.headline = f"{value:,.0f} B per token against the claim's {t['bytes']:,} B (within {t['tolerance']:.0%}: exact arithmetic)"
    v.models = [str(use["preset"].iloc[-1])]
    v.change = "a different published config (cache dims or dtype); no measurement can, the number is a formula"
    check = metric(df, "memory/total_bytes")
    check = check[(check["status"] == "measured") & ~is_preset(check)]
    if "equal" in check.columns and check["equal"].notna().any():
        eq = check["equal"].dropna().astype(bool)
        v.evidence.append(
            f"the formula against the bytes this model's cache objects hold: equal in {int(eq.sum())} of "
            f"{len(eq)} measured cases (each design, fp32 and bf16)"
        )
    return v


# ---------------------------------------------------------------- the 7:1 hybrids

SEVEN_TO_ONE = "LLLLLLLS"  # Text-01's period: 7 lightning layers, then 1 softmax layer
# The 7:1 hybrids in order of closeness to Text-01, with what each changes. A headline verdict
# uses the first of them that the claim's rule can use; every other one is shown beside it.
HYBRIDS = {
    "lightning_hybrid": "Text-01's layer as configured, 2 lightning heads at this width",
    "lightning_hybrid_h8": "Text-01's layer with 8 lightning heads, its decay schedule over more heads",
    "lightning_hybrid16": "Text-01's period tiled twice, 16 layers with two softmax layers",
    "lightning_hybrid_nope": "lightning_hybrid_h8 whose softmax layer has no RoPE and a log-n scale, not in Text-01",
    "lightning_conv_nope": "a labelled variant with a convolution on the lightning q, k, v, not Text-01's layer",
}


def seven_to_one(df: pd.DataFrame) -> list[str]:
    """Every design whose recorded layout is Text-01's period tiled (LLLLLLLS, LLLLLLLSLLLLLLLS, ...),
    the known ones in HYBRIDS' order, then any other alphabetically."""
    lay = df.loc[df["layout"].notna() & ~is_preset(df), ["design", "layout"]].drop_duplicates()
    names = {str(d) for d, lo in zip(lay["design"], lay["layout"]) if isinstance(lo, str) and lo and lo == SEVEN_TO_ONE * (len(lo) // 8)}
    return [h for h in HYBRIDS if h in names] + sorted(names - set(HYBRIDS))


def what_changes(name: str) -> str:
    """What a 7:1 hybrid changes from Text-01's layer (HYBRIDS), "a 7:1 layout" for one not listed."""
    return HYBRIDS.get(name, "a 7:1 layout")


# ---------------------------------------------------------------- C2


def retrieval_cell(acc: Acc | None, t: dict) -> tuple[str, str]:
    """(verdict, why) of one needle cell against the claim's 100%: decidable only on >= min_probes
    probes from >= min_haystacks haystacks; then supported if the lower bound is >= retrieval, not
    supported if the upper bound is below it."""
    if acc is None:
        return INCONCLUSIVE, "not measured"
    if not (acc.n >= t["min_probes"] and pd.notna(acc.haystacks) and acc.haystacks >= t["min_haystacks"]):
        return (
            INCONCLUSIVE,
            f"undecidable: {acc.counted}; the rule needs >= {t['min_probes']} probes from >= {t['min_haystacks']} haystacks",
        )
    if acc.lo >= t["retrieval"]:
        return SUPPORTED, f"the lower bound {acc.lo:.2f} is >= {t['retrieval']}"
    if acc.hi < t["retrieval"]:
        return NOT_SUPPORTED, f"the upper bound {acc.hi:.2f} excludes retrieval of {t['retrieval']} or more"
    return INCONCLUSIVE, f"the interval [{acc.lo:.2f}, {acc.hi:.2f}] straddles {t['retrieval']}"


SINGLE = "scale/acc"  # single-needle cells (exp=scale: one needle a context, so each probe its own haystack)


def single_needle(df: pd.DataFrame, name: str, factor: float, model: str) -> dict[int, pd.Series]:
    """Each seed's single-needle cell of ``name`` at ``factor`` x its true training length on the
    ``model`` backbone: the record with the most probes (a run with more haystacks nests the
    smaller one: a haystack is seeded by the seed and its index alone)."""
    d = metric(df, SINGLE)
    if d.empty or "factor" not in d.columns:
        return {}
    d = d[(d["design"] == name) & (d["status"] == "measured") & (d["task"] == "niah_single") & (d["factor"] == factor)]
    d = d[d["model"] == model] if "model" in d.columns else d.iloc[0:0]
    return {int(s): g.sort_values("n").iloc[-1] for s, g in d.groupby("seed")}


def _single_acc(rows: list[pd.Series]) -> Acc:
    k, n = float(sum(r["k"] for r in rows)), float(sum(r["n"] for r in rows))
    lo, hi = wilson(int(k), int(n))
    return Acc(
        k,
        n,
        k / n if n else float("nan"),
        lo,
        hi,
        haystacks=float(sum(r["haystacks"] for r in rows)),
        how=WILSON + " (one needle a haystack)",
    )


def judge_c2(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    task = experiment_task(df, "niah/acc")
    needles = df[df["metric"].isin(["niah/acc", SINGLE])]
    names = [n for n in seven_to_one(df) if not needles[needles["design"] == n].empty]
    if not names:
        return v
    results: dict[str, str] = {}
    heads: dict[str, str] = {}
    for name in names:
        got = learned(df, name, task, train=train, threshold=t["learned_lb"])
        v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
        if not got.flag:
            v.parts[f"{name}: did not learn"] = INCONCLUSIVE
            v.evidence.append(f"{name} ({what_changes(name)}): did not learn the task at its training length: shown, not judged")
            continue
        cells = single_needle(df, name, t["factor"], t["model"])
        if not cells:
            results[name] = INCONCLUSIVE
            v.parts[f"{name}, single needle at {t['factor']}x"] = INCONCLUSIVE
            v.evidence.append(f"{name}: no single-needle cell at {t['factor']}x its training length (exp=scale records)")
            continue
        few = [s for s, r in cells.items() if r["n"] < t["min_probes"] or r["haystacks"] < t["min_haystacks"]]
        for s, r in sorted(cells.items()):
            a = _single_acc([r])
            v.evidence.append(
                f"{name} seed {s}: single needle at {fmt_len(r['context_len'])} ({t['factor']}x its true training length "
                f"{fmt_len(r['train_len'])}): {a.text()}, {a.fraction} from {r['haystacks']:.0f} haystacks"
            )
        acc = _single_acc(list(cells.values()))
        verdict, why = retrieval_cell(acc, t)
        if few:
            verdict, why = (
                INCONCLUSIVE,
                f"seed(s) {', '.join(map(str, few))} with fewer than {t['min_probes']} probes or {t['min_haystacks']} haystacks",
            )
        L = float(next(iter(cells.values()))["context_len"])
        results[name] = verdict
        heads[name] = (
            f"{name}, single needle at {fmt_len(L)} ({t['factor']}x), seeds {', '.join(map(str, sorted(cells)))}: {acc.text()}, {acc.fraction}"
        )
        v.parts[f"{name}, single needle at {t['factor']}x ({fmt_len(L)})"] = verdict
        v.evidence.append(f"{name} pooled over seeds {', '.join(map(str, sorted(cells)))}: {acc.text()}, {acc.fraction}: {verdict}: {why}")
        multi = haystack_acc(df, "niah/acc", name, L, task=task)
        if multi is not None:
            v.evidence.append(
                f"{name}, multi-key needles at {fmt_len(L)} (the harder variant, shown without a verdict): {multi.text()}, {multi.counted}"
            )
        if (a4 := haystack_acc(df, "niah/acc", name, LEN_4M, task=task)) is not None:
            v.evidence.append(f"{name}, multi-key needles at 4M (shown without a verdict): {a4.text()}, {a4.counted}")
    if note := levels_note(df, "niah/acc"):
        v.evidence.append(note)
    if not results:
        v.verdict = INCONCLUSIVE
        v.evidence.append("inconclusive: no 7:1 hybrid learned the task at its training length")
        return v
    head = next(iter(results))
    v.verdict = results[head]
    v.models = [head]
    v.headline = heads.get(head, f"{head}: no single-needle cell at {t['factor']}x")
    v.change = {
        SUPPORTED: f"more haystacks at {t['factor']}x whose lower bound falls below {t['retrieval']}",
        NOT_SUPPORTED: f"a model of {head}'s design that retrieves single needles at {t['factor']}x (another seed or training rule)",
    }.get(
        v.verdict,
        f">= {t['min_probes']} probes from >= {t['min_haystacks']} haystacks a seed whose interval clears or excludes {t['retrieval']}",
    )
    others = [f"{n}: {r}" for n, r in results.items() if n != head]
    v.evidence.insert(
        0,
        f"headline: {head} ({what_changes(head)}), the first 7:1 hybrid in order of closeness to Text-01 "
        f"({', '.join(HYBRIDS)}) that learned the task; fixed before looking at its accuracy"
        + (f". The others, shown: {'; '.join(others)}" if others else ""),
    )
    return v
