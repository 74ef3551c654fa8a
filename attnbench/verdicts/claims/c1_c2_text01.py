"""Claims C1 and C2, on Text-01's 7:1 hybrid: C1 its cache arithmetic (bytes per token of the
published config, against the formula and the cache objects), C2 its needle retrieval at 4x the
training length (``retrieval_cell``: one needle cell against the claim's 100%); and the 7:1
hybrids themselves (``HYBRIDS``, ``seven_to_one``), in order of closeness to Text-01, which C3
(verdicts/claims/c3_multihop.py) judges too. The thresholds and rules are in judge.py's ``CLAIMS``.
"""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.readings import LEN_4M, NOT_MEASURED, is_preset, metric, pooled

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.verdicts.quality import Acc, experiment_task, haystack_acc, learned
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_MEASURED_YET, NOT_SUPPORTED, SUPPORTED, Verdict, levels_note


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


def judge_c2(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = pooled(metric(df, "niah/acc"))
    d = d[d["status"] == "measured"]
    names = [n for n in seven_to_one(df) if not d[d["design"] == n].empty]
    if not names:
        return v
    for name in seven_to_one(df):  # a 7:1 hybrid with other records (its training) but no needle cell: shown, not judged
        if name not in names:
            v.parts[f"{name}: no needle records"] = NOT_MEASURED_YET
            v.evidence.append(f"{name} ({what_changes(name)}): no needle records, so not judged")
    task = experiment_task(df, "niah/acc")
    results: dict[str, str] = {}
    judged_at: dict[str, float] = {}  # each judged hybrid's cell: factor x its true training length
    for name in names:
        got = learned(df, name, task, train=train, threshold=t["learned_lb"])
        v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
        if not got.flag:
            v.parts[f"{name} at {t['factor']}x"] = INCONCLUSIVE
            v.evidence.append(f"{name} ({what_changes(name)}): not judged, it did not learn the task at its training length")
            continue
        L = t["factor"] * got.train_len
        judged_at[name] = L
        acc = haystack_acc(df, "niah/acc", name, L, task=task)
        if acc is None:
            tested = ", ".join(fmt_len(x) for x in sorted(d[d["design"] == name]["context_len"].dropna().unique()))
            verdict, why = INCONCLUSIVE, f"not tested at {fmt_len(L)} (tested at {tested})"
            shown = ""
        else:
            verdict, why = retrieval_cell(acc, t)
            shown = f"{acc.text()}, {acc.counted} ({acc.how}): "
        results[name] = verdict
        v.parts[f"{name} at {t['factor']}x ({fmt_len(L)})"] = verdict
        v.evidence.append(
            f"{name} ({what_changes(name)}) at {fmt_len(L)} tokens, {t['factor']}x its true training length {fmt_len(got.train_len)}: {shown}{verdict}: {why}"
        )
        if L != LEN_4M and (a4 := haystack_acc(df, "niah/acc", name, LEN_4M, task=task)) is not None:
            v4, why4 = retrieval_cell(a4, t)
            v.parts[f"{name} at 4M ({LEN_4M / got.train_len:g}x)"] = v4
            v.evidence.append(
                f"{name} at 4M tokens, {LEN_4M / got.train_len:g}x its training length (its own row; the claim's ratio is "
                f"{t['factor']}x): {a4.text()}, {a4.counted} ({a4.how}): {v4}: {why4}"
            )
    if note := levels_note(df, "niah/acc"):
        v.evidence.append(note)
    if not results:
        v.verdict = INCONCLUSIVE
        v.evidence.append("inconclusive: no 7:1 hybrid learned the task at its training length")
        return v
    head = next(iter(results))
    v.verdict = results[head]
    v.models = [head]
    head_len = judged_at[head]
    if (ha := haystack_acc(df, "niah/acc", head, head_len, task=task)) is not None:
        v.headline = f"{head} at {fmt_len(head_len)} ({t['factor']}x its training length): {ha.text()}, {ha.counted}"
    else:
        v.headline = f"{head}: no needle cell at {fmt_len(head_len)} ({t['factor']}x its training length)"
    v.change = {
        SUPPORTED: f"more haystacks at {t['factor']}x whose lower bound falls below {t['retrieval']}",
        NOT_SUPPORTED: f"a model of {head}'s design that retrieves at {t['factor']}x (another seed or training rule)",
    }.get(
        v.verdict,
        f">= {t['min_probes']} probes from >= {t['min_haystacks']} haystacks at {fmt_len(head_len)} whose interval "
        f"clears or excludes {t['retrieval']}",
    )
    others = [f"{n}: {r}" for n, r in results.items() if n != head]
    v.evidence.insert(
        0,
        f"headline: {head} ({what_changes(head)}), the first 7:1 hybrid in order of closeness to Text-01 "
        f"({', '.join(HYBRIDS)}) that learned the task; fixed before looking at its accuracy, so the pick "
        f"cannot follow the result" + (f". The others, shown, not used: {'; '.join(others)}" if others else ""),
    )
    return v
