"""Claim C3 (multi-hop reasoning): the 7:1 hybrids (verdicts/claims/c1_c2_text01.py) and the sliding-window
hybrid against softmax on the k-hop chain, each only where softmax learned it, a design that
did not learn within the shared budget counted as a finding (``DID_NOT_LEARN``), a needle
prefix that never passed named (``_needle_prefix_failed``). The thresholds and rules are in
judge.py's ``CLAIMS``.
"""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.readings import metric

from attnbench.basics import fmt_len
from attnbench.verdicts.quality import FINAL, haystack_acc, learned
from attnbench.verdicts.rules import (
    DID_NOT_LEARN,
    INCONCLUSIVE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    compare,
    reference_lengths,
    same_rule,
)

from attnbench.verdicts.claims.c1_c2_text01 import seven_to_one, what_changes


# ---------------------------------------------------------------- C3


def _policy_line(df: pd.DataFrame, k: float) -> str:
    """The floors of the k-hop chain, every simple policy run on the generator (tasks/policies.py)."""
    d = metric(df, "multihop/acc")
    d = d[(d["hops"] == k) & (d.get("scoring") == FINAL)] if "scoring" in d.columns else d.iloc[0:0]
    pol = next((p for p in d["policies"] if isinstance(p, tuple) and p), None) if "policies" in d.columns else None
    if not pol:
        return ""
    return f"floors at {k:g} hops (simple policies run on the generator): " + ", ".join(f"{name} {acc:.3g}" for name, acc in pol)


def _c3_half(df: pd.DataFrame, d: pd.DataFrame, name: str, k: float, t: dict, train, v: Verdict) -> str:
    """One design against softmax on the k-hop chain: supported | not supported | DID_NOT_LEARN | inconclusive."""
    exp = d[d["design"] == name]["exp"].iloc[-1]
    ok, rule_text = same_rule(train, ["softmax", name], exp)
    v.evidence.append(f"{name} ({'the sliding-window hybrid' if name == 'swa_hybrid' else what_changes(name)}): {rule_text}")
    prefix = _needle_prefix_failed(train, name, exp)
    if prefix:
        v.evidence.append(f"finding: {name} did not learn within the shared budget: {prefix}")
        return DID_NOT_LEARN
    if not ok:
        return INCONCLUSIVE
    got = learned(df, name, "multihop", hops=k, train=train, threshold=t["learned_lb"])
    v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
    lens = reference_lengths(df, "multihop/acc", name, "softmax", t["min_ref"], hops=k, scoring=FINAL)
    a = s = None
    if lens:
        L = max(lens)
        a = haystack_acc(df, "multihop/acc", name, L, hops=k, scoring=FINAL)
        s = haystack_acc(df, "multihop/acc", "softmax", L, hops=k, scoring=FINAL)
    if a is not None and s is not None:
        below = a.hi < s.lo
        v.evidence.append(
            f"{k:g} hops at {fmt_len(L)}: {name} {a.text()} ({a.counted}) vs softmax {s.text()} ({s.counted}); {a.how}: "
            + (f"{name}'s upper bound is below softmax's lower bound" if below else "the intervals overlap")
        )
    if not got.flag:
        tr = train[train["exp"] == exp] if train is not None else pd.DataFrame()
        mine = tr[tr["design"] == name]["chain_tokens"] if "chain_tokens" in tr.columns else pd.Series(dtype=float)
        soft = tr[tr["design"] == "softmax"]
        need = soft["chain_tokens"].iloc[-1] if len(soft) and "chain_tokens" in soft.columns else float("nan")
        soft_done = len(soft) and str(soft["status"].iloc[-1]) == "done"
        had = mine.iloc[-1] if len(mine) else float("nan")
        if got.flag is None:
            v.evidence.append(f"inconclusive: {name} has no check of the {k:g}-hop chain at its training length")
            return INCONCLUSIVE
        if pd.notna(had) and pd.notna(need) and soft_done and had < need:
            v.evidence.append(
                f"inconclusive: {name} spent {had / 1e6:.1f}M tokens from its first chain stage, fewer than the "
                f"{need / 1e6:.1f}M softmax needed to pass them: it was not given the chain budget softmax needed"
            )
            return INCONCLUSIVE
        if pd.notna(had) and pd.notna(need) and soft_done:
            how = f"it spent {had / 1e6:.1f}M tokens from its first chain stage, softmax passed every chain stage in {need / 1e6:.1f}M"
        elif pd.notna(had) and pd.notna(need):  # softmax too stopped at the chain budget, having learned k hops within it
            how = (
                f"it spent {had / 1e6:.1f}M tokens from its first chain stage, softmax {need / 1e6:.1f}M, both stopped by the chain budget"
            )
        else:
            how = "chain-stage tokens not recorded: the shared budget is the rule's whole token budget"
        v.evidence.append(
            f"finding: {name} did not learn the {k:g}-hop chain within the budget softmax needed ({how}); "
            f"a model that did not learn is not compared as a design, so this is its own verdict, not a deficit shown"
        )
        return DID_NOT_LEARN
    if a is None or s is None:
        v.evidence.append(f"inconclusive: softmax's 95% lower bound stays under {t['min_ref']} at every length both ran {k:g} hops")
        return INCONCLUSIVE
    if min(a.n, s.n) < t["min_probes"]:
        v.evidence.append(f"inconclusive: {min(a.n, s.n):.0f} probes in a cell; the rule needs >= {t['min_probes']} per hop count")
        return INCONCLUSIVE
    if a.hi < s.lo:
        return SUPPORTED
    if compare(a, s, t["gap"]) == "not below":
        v.evidence.append(f"the intervals exclude a deficit of {t['gap']} or more")
        return NOT_SUPPORTED
    v.evidence.append(f"inconclusive: the intervals neither show a deficit nor exclude one of {t['gap']}")
    return INCONCLUSIVE


def _needle_prefix_failed(train, name: str, exp) -> str | None:
    """Why ``name`` never reached a chain stage, where that is a finding: its needle model (the
    prefix its chain model continues) ran out of the needle rule's budget (or patience) without
    passing the needle curriculum that softmax passed under the same needle rule, and its chain
    model stopped where the prefix stopped (no chain-stage tokens). None otherwise."""
    if train is None or train.empty:
        return None
    needle = train[(train["exp"] == "needle_4m") & train["design"].isin([name, "softmax"])]
    mine, soft = needle[needle["design"] == name], needle[needle["design"] == "softmax"]
    chain = train[(train["exp"] == exp) & (train["design"] == name)]["chain_tokens"]
    if mine.empty or soft.empty or (len(chain) and pd.notna(chain.iloc[-1]) and chain.iloc[-1] > 0):
        return None
    m, sm = mine.iloc[-1], soft.iloc[-1]
    ok, _ = same_rule(needle, ["softmax", name], "needle_4m")
    if not ok or str(m["status"]) not in ("tokens", "stalled") or str(sm["status"]) != "done" or not m["train_len"] < sm["train_len"]:
        return None
    return (
        f"its needle model stopped ({m['status']}) on stage {m['stage']} after {m['tokens'] / 1e6:.1f}M tokens, trained to "
        f"{fmt_len(m['train_len'])}, where softmax passed the needle curriculum (to {fmt_len(sm['train_len'])}) under the "
        f"same needle rule; so its chain model has no chain step (a prefix that did not pass stops the curriculum)"
    )


def judge_c3(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = metric(df, "multihop/acc")
    d = d[(d["status"] == "measured") & (d["hops"] >= t["min_hops"])]
    hybrids = [n for n in seven_to_one(df) if not d[d["design"] == n].empty]
    if d[d["design"] == "softmax"].empty or not hybrids:
        return v
    if "scoring" in d.columns and not (d["scoring"] == FINAL).any():
        v.evidence.append(
            "these records scored every hop with every intermediate key given (k single lookups, "
            "not composition): they cannot test a multi-hop deficit"
        )
        v.verdict = INCONCLUSIVE
        return v
    d = d[d["scoring"] == FINAL]
    hops = sorted(d["hops"].dropna().unique(), reverse=True)
    k = next((h for h in hops if learned(df, "softmax", "multihop", hops=h, train=train, threshold=t["learned_lb"]).flag), None)
    if k is None:
        got = learned(df, "softmax", "multihop", hops=min(hops), train=train, threshold=t["learned_lb"])
        v.evidence.append("did not learn: " + got.why)
        v.verdict = INCONCLUSIVE
        v.evidence.append(f"inconclusive: softmax learned no chain of >= {t['min_hops']} hops: the task separates nothing here")
        return v
    v.evidence.append("learned: " + learned(df, "softmax", "multihop", hops=k, train=train, threshold=t["learned_lb"]).why)
    v.evidence.append(f"the cell: {k:g} hops, the most that softmax learned")
    if line := _policy_line(df, k):
        v.evidence.append(line)
    results = {}
    for name in hybrids + (["swa_hybrid"] if not d[d["design"] == "swa_hybrid"].empty else []):
        results[name] = _c3_half(df, d, name, k, t, train, v)
        v.parts[f"{name}, {k:g} hops"] = results[name]
    head = hybrids[0]
    lead = results[head]
    if len(hybrids) > 1:
        v.evidence.insert(
            0,
            f"headline: {head} ({what_changes(head)}), the first 7:1 hybrid with multihop records in order of closeness to "
            f"Text-01; the others are shown, not used",
        )
    v.models = [head, "softmax"] + (["swa_hybrid"] if "swa_hybrid" in results else [])
    cell = reference_lengths(df, "multihop/acc", head, "softmax", t["min_ref"], hops=k, scoring=FINAL)
    if cell and (a := haystack_acc(df, "multihop/acc", head, max(cell), hops=k, scoring=FINAL)) is not None:
        s_acc = haystack_acc(df, "multihop/acc", "softmax", max(cell), hops=k, scoring=FINAL)
        v.headline = f"{k:g} hops at {fmt_len(max(cell))}: {head} {a.text()} vs softmax " + (s_acc.text() if s_acc else "—")
    else:
        v.headline = f"{k:g} hops: no length where softmax's lower bound is >= {t['min_ref']} and {head} ran"
    v.change = {
        DID_NOT_LEARN: f"{head} learning the {k:g}-hop chain within the budget softmax needed (another seed, or a larger model)",
        SUPPORTED: "an interval from more probes or seeds in which the hybrid's upper bound reaches softmax's lower bound",
        NOT_SUPPORTED: f"a deficit of {t['gap']} or more at another length, seed or scale",
    }.get(lead, f">= {t['min_probes']} probes a hop count, or a second seed, whose intervals separate")
    swa = results.get("swa_hybrid")
    if swa is None:
        v.evidence.append("the claim's second half (a sliding-window hybrid) has no multihop records: untested")
    if lead == SUPPORTED:
        v.verdict = PARTLY if swa == NOT_SUPPORTED else SUPPORTED
    else:
        v.verdict = lead
    return v
