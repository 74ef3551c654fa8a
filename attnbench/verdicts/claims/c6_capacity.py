"""Claim C6 (a linear state's capacity): pure lightning at several state sizes against softmax
on exp=capacity's MQAR pair counts, judged per state size (``_c6_state``) and then together."""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.quality import Acc, learned, pooled_acc
from attnbench.verdicts.readings import metric
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, compare, same_rule

CAPACITY = "capacity/acc"  # accuracy at the training length by key-value pairs (experiments/capacity.py)
CUT_SHORT = ("budget", "partial")  # training statuses that end outside the rule (the wall clock), not by it


def _capacity_acc(df: pd.DataFrame, name: str, pairs: float) -> Acc | None:
    d = metric(df, CAPACITY)
    return pooled_acc(d[(d["design"] == name) & (d["n_pairs"] == pairs)])


def _c6_state(df: pd.DataFrame, d: pd.DataFrame, name: str, label: str, state: float, holds, pairs, t: dict, train, v: Verdict) -> str:
    """One lightning state size against softmax at the most pairs softmax holds: falls | holds |
    never learned | inconclusive, with its evidence appended to ``v``."""
    ok, rule_text = same_rule(train, ["softmax", name], d[d["design"] == name]["exp"].iloc[-1])
    got = learned(df, name, "mqar", train=train, threshold=t["learned_lb"])
    v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
    mine = train[(train["design"] == name) & (train["exp"] == d[d["design"] == name]["exp"].iloc[-1])] if train is not None else None
    status = str(mine["status"].iloc[-1]) if mine is not None and not mine.empty else ""
    if not ok:
        result = INCONCLUSIVE
        v.evidence.append(f"{label}: {rule_text}: not compared")
    elif got.flag is False and status in CUT_SHORT:
        result = INCONCLUSIVE
        v.evidence.append(f"{label}: did not learn, but the wall clock stopped its training (status {status}): no evidence")
    elif got.flag is False:
        result = "never learned"
        v.evidence.append(
            f"{label}: never learned the task under the rule that softmax learned it ({rule_text}): counted as evidence "
            f"for the claim, though it is not a capacity curve"
        )
    elif not holds or got.flag is None:
        result = INCONCLUSIVE
        v.evidence.append(f"{label}: no pair count where softmax holds" if not holds else f"{label}: no learned check")
    else:
        P, small = max(holds), min(pairs)
        a, s, a0 = _capacity_acc(df, name, P), _capacity_acc(df, "softmax", P), _capacity_acc(df, name, small)
        assert a is not None and s is not None and a0 is not None
        res = compare(a, s, t["gap"])
        falls = res == "below" and a.hi < a0.lo
        result = "falls" if falls else "holds" if res == "not below" else INCONCLUSIVE
        floor = metric(df, CAPACITY)
        floor = floor[(floor["design"] == name) & (floor["n_pairs"] == P)]["floor"].mean()
        v.evidence.append(
            f"{label} at {P:g} pairs ({P / state:.3g} pairs per state float): {a.text()} vs softmax {s.text()}; at "
            f"{small:g} pairs {a0.text()}; values-in-context floor {floor:.3g} -> "
            + {
                "falls": f"falls toward the floor as pairs grow (below softmax by >= {t['gap']})",
                "holds": f"keeps up (a deficit of {t['gap']} excluded)",
            }.get(result, "undecided")
        )
    return result


def judge_c6(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = metric(df, CAPACITY)
    d = d[d["status"] == "measured"] if "n_pairs" in d.columns else d.iloc[0:0]
    lightning = sorted(
        {str(n) for n, lo in zip(d["design"], d["layout"]) if isinstance(lo, str) and lo and set(lo) == {"L"}},
        key=lambda n: float(d[d["design"] == n]["state_size"].max()),
    )
    if d[d["design"] == "softmax"].empty or not lightning:
        needles = not metric(df, "niah/acc")[metric(df, "niah/acc")["design"] == "lightning"].empty
        v.evidence.append(
            "C6 rests on exp=capacity (pure lightning and softmax against key-value pairs), which has no records here"
            + (": the needle records of pure lightning measure length extrapolation, not state capacity" if needles else "")
            + " (experiments/capacity/README.md: how to run it)"
        )
        return v
    soft = learned(df, "softmax", "mqar", train=train, threshold=t["learned_lb"])
    v.evidence.append(("learned: " if soft.flag else "did not learn: " if soft.flag is False else "no check: ") + soft.why)
    if not soft.flag:
        v.verdict = INCONCLUSIVE
        v.evidence.append("inconclusive: softmax did not learn the task: the experiment separates nothing")
        return v
    pairs = sorted(d["n_pairs"].dropna().unique())
    holds = [p for p in pairs if (s := _capacity_acc(df, "softmax", p)) is not None and s.lo >= t["softmax_holds"]]
    v.evidence.append(
        f"softmax holds (95% lower bound >= {t['softmax_holds']}) at {', '.join(f'{p:g}' for p in holds) or 'no'} pairs "
        f"of {', '.join(f'{p:g}' for p in pairs)}"
    )
    results = {}
    for name in lightning:
        state = float(d[d["design"] == name]["state_size"].max())
        label = f"{name} (state {state:,.0f} per layer)"
        results[name] = v.parts[label] = _c6_state(df, d, name, label, state, holds, pairs, t, train, v)
    v.models = ["softmax", *lightning]
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items())
    v.change = (
        "a lightning state size that learns the task and keeps up with softmax past its state"
        if set(results.values()) <= {"falls", "never learned"}
        else "a lightning state size that falls toward the floor as pairs grow, where softmax holds"
    )
    vals = set(results.values())
    if len(lightning) < t["min_states"]:  # a trend over state sizes needs several of them
        v.verdict = INCONCLUSIVE
        v.evidence.append(f"inconclusive: only {len(lightning)} lightning state sizes (the rule asks for >= {t['min_states']})")
    elif vals <= {"falls", "never learned"}:
        v.verdict = SUPPORTED
        if vals == {"never learned"}:
            v.evidence.append("supported only because no lightning model learned the task where softmax did: no capacity curve")
    elif vals == {"holds"}:
        v.verdict = NOT_SUPPORTED
    elif "holds" in vals and vals & {"falls", "never learned"} and INCONCLUSIVE not in vals:
        v.verdict = PARTLY
        kept = ", ".join(n for n, r in results.items() if r == "holds")
        v.evidence.append(f"partly: {kept} keeps up where softmax holds; the other state sizes fall or never learned")
    else:
        v.verdict = INCONCLUSIVE
    return v
