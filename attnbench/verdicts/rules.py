"""The evidence rules every claim's judge shares (claims/): verdict names, pooled
accuracies at a length, the learned-the-task gate, and comparisons of 95% intervals.

A comparison reads interval bounds, never point estimates: "below" needs the whole deficit
interval above the gap, "not below" needs it under the gap; anything else is undecided.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from attnbench.verdicts.readings import metric, pooled
from .quality import LEARNED_LOWER_BOUND, Acc, learned, pooled_acc

SUPPORTED, NOT_SUPPORTED, PARTLY, INCONCLUSIVE, NOT_MEASURED_YET = (
    "supported",
    "not supported",
    "partly supported",
    "inconclusive",
    "not yet measured",
)
# C3's separate finding: the design compared with softmax did not learn the task within the
# budget softmax needed, under the same rule. Not "inconclusive": it is an answer, and not
# "supported": a model that did not learn is not compared as a design.
DID_NOT_LEARN = "did not learn within the shared budget"
VERDICTS = (SUPPORTED, PARTLY, NOT_SUPPORTED, DID_NOT_LEARN, INCONCLUSIVE, NOT_MEASURED_YET)


@dataclass
class Verdict:
    verdict: str = NOT_MEASURED_YET
    evidence: list[str] = field(default_factory=list)
    projected_only: bool = False  # every number behind the verdict comes from a formula or the cost model
    # the claim's parts, each judged on its own (C2: one per 7:1 hybrid and the 4M row; C4: phase x
    # half; C5b: phase x scope): label -> its verdict; the evidence says what each rests on
    parts: dict[str, str] = field(default_factory=dict)
    # the decision report's first screen (one row a claim): the one number the verdict rests on
    # with its interval, the models (designs) it used, the seeds of their records (judge_all), and
    # what would change the verdict
    headline: str = ""
    models: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    change: str = ""
    # the parts whose verdict comes from a formula or the cost model (C4's theory, C7's prefix
    # caching): shown beside the verdict, and left out of the headline verdict (measured parts only)
    projected_parts: list[str] = field(default_factory=list)
    # the verdict rests on no model that learned (C6 where no lightning state size learned): a
    # seed whose verdict this is cannot judge the claim, so the seed rule does not count it
    no_learned_model: bool = False

    @property
    def kind(self) -> str:  # css class
        return self.verdict.replace(" ", "-").replace("yet-", "")

    @property
    def note(self) -> str:
        """What the banner says beside the verdict: '(projected only)', or the projected parts."""
        if self.verdict == NOT_MEASURED_YET:
            return ""
        if self.projected_only:
            return "(projected only)"
        if self.projected_parts:
            return "(measured parts; projected: " + "; ".join(f"{p} {self.parts.get(p, '')}".strip() for p in self.projected_parts) + ")"
        return ""


def combine_parts(vals) -> str:
    """A claim of several parts, each judged alone: every part supported: supported; some
    supported and some not: partly; none supported and some not: not supported (an undecided
    part does not hide a part that is decided against the claim); else inconclusive."""
    vals = [x for x in vals if x != NOT_MEASURED_YET]
    if vals and all(x == SUPPORTED for x in vals):
        return SUPPORTED
    if (SUPPORTED in vals or PARTLY in vals) and NOT_SUPPORTED in vals:
        return PARTLY
    if NOT_SUPPORTED in vals and SUPPORTED not in vals and PARTLY not in vals:
        return NOT_SUPPORTED
    if PARTLY in vals and INCONCLUSIVE not in vals:
        return PARTLY
    return INCONCLUSIVE


def acc_at(df: pd.DataFrame, name: str, design: str, length=None, **group) -> Acc | None:
    """Pooled accuracy (depths, runs, seeds) of ``design`` at ``length`` (and group fields)."""
    d = pooled(metric(df, name))
    d = d[d["design"] == design]
    if length is not None:
        d = d[d["context_len"] == length]
    for k, v in group.items():
        d = d[d[k] == v]
    return pooled_acc(d)


def needs_learned(v: Verdict, df: pd.DataFrame, names: list[str], task: str | None, t: dict, train, hops=None) -> bool:
    """Add each model's learned check to the evidence; False (and the verdict inconclusive,
    naming who) if any did not learn the task at its training length."""
    ok = True
    for name in names:
        got = learned(df, name, task, hops=hops, train=train, threshold=t.get("learned_lb", LEARNED_LOWER_BOUND))
        v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
        ok &= bool(got.flag)
    if not ok:
        v.verdict = INCONCLUSIVE
        bad = [
            n for n in names if not learned(df, n, task, hops=hops, train=train, threshold=t.get("learned_lb", LEARNED_LOWER_BOUND)).flag
        ]
        v.evidence.append(
            f"inconclusive: {', '.join(bad)} did not learn the task at its training length "
            f"(95% lower bound < {t.get('learned_lb', LEARNED_LOWER_BOUND)}), so its accuracy elsewhere "
            f"says nothing about the claim"
        )
    return ok


def same_rule(train: pd.DataFrame | None, names: list[str], exp=None) -> tuple[bool, str]:
    """Were these models trained under one rule (their training records' ``rule``, equal)? (ok, text).

    Models are compared seed by seed, over the seeds every named design has (a seed's models were
    trained together; another seed's may have run under a later budget); without a seed in common,
    each design's latest record."""
    if train is None or train.empty:
        return False, "no training records: the rule each model was trained under is unknown"
    t = train[train["design"].isin(names)]
    if exp is not None:
        t = t[t["exp"] == exp]
    if set(t["design"]) != set(names):
        return False, f"no training record for {', '.join(sorted(set(names) - set(t['design'])))}"
    seeds = t["seed"] if "seed" in t.columns else pd.Series(0, index=t.index)
    common = set.intersection(*(set(seeds[t["design"] == n].dropna()) for n in names))
    groups = [t[seeds == s] for s in sorted(common)] or [t]
    first, seen, finished = None, [], []
    for g in groups:
        last = {n: x.iloc[-1] for n, x in g.groupby("design")}
        rules = {n: r["rule"] for n, r in last.items()}
        first = next((r for r in rules.values() if isinstance(r, dict)), None)
        target = next((r for r in rules.values() if all(_as_under(last[n], r) for n in last)), None)
        if target is None:
            at = f" (seed {int(g['seed'].iloc[0])})" if common else ""
            return False, f"trained under different rules{at}: " + "; ".join(f"{n}: {_rule_text(r)}" for n, r in rules.items())
        first = target
        finished += [f"{n} (finished under {_rule_text(rules[n])})" for n in last if rules[n] != target]
        seen.append((int(g["seed"].iloc[0]) if common else None, first))
    assert isinstance(first, dict)
    also = f"; {', '.join(finished)}: it ended before either version's limits, so it is the model this one makes" if finished else ""
    if len({str(r) for _, r in seen}) > 1:  # one rule within each seed, another version of it at another seed
        return True, "each seed's models trained under one rule: " + "; ".join(f"seed {s}: {_rule_text(r)}" for s, r in seen) + also
    at = f", seed{'s' if len(common) > 1 else ''} {', '.join(str(int(s)) for s in sorted(common))}" if common else ""
    return (
        True,
        f"all trained under {first.get('name')} (token budget {first.get('token_budget', 0):,}, patience {first.get('patience')}{at})"
        + also,
    )


LIMITS = ("token_budget", "chain_token_budget")  # the parts of a rule that only cut a training short


def _as_under(row, rule) -> bool:
    """Did this model train as it would under ``rule``: its own rule, or another version of it that differs only
    in limits (LIMITS) when the model finished every stage (stop reason done) before reaching any of ``rule``'s.
    A limit only stops a training; one that never binds changes no step, so such a model is the one ``rule``
    makes (training is a function of the rule's other parts and the seed)."""
    mine = row["rule"]
    if not isinstance(mine, dict) or not isinstance(rule, dict):
        return False
    if mine == rule:
        return True
    if row.get("stop_reason") != "done" or {k: v for k, v in mine.items() if k not in LIMITS} != {
        k: v for k, v in rule.items() if k not in LIMITS
    }:
        return False
    spent = {"token_budget": row.get("tokens"), "chain_token_budget": row.get("chain_tokens")}
    for k in LIMITS:
        if rule.get(k) and not (pd.notna(spent[k]) and spent[k] < rule[k]):
            return False
    return True


def _rule_text(r) -> str:
    """A rule by its name and budgets (two versions of one named rule differ there)."""
    if not isinstance(r, dict):
        return str(r)
    extra = f", chain budget {r['chain_token_budget']:,}" if r.get("chain_token_budget") else ""
    return f"{r.get('name')} (token budget {r.get('token_budget', 0):,}{extra})"


def deficit(a: Acc, b: Acc) -> tuple[float, float]:
    """Bounds on b - a from the two 95% intervals: (b.lo - a.hi, b.hi - a.lo)."""
    return b.lo - a.hi, b.hi - a.lo


def compare(a: Acc, b: Acc, gap: float) -> str:
    """Is ``a`` below ``b`` by at least ``gap``? below | not below | undecided (intervals)."""
    lo, hi = deficit(a, b)
    if lo >= gap:
        return "below"
    if hi < gap:
        return "not below"
    return "undecided"


def reference_lengths(df: pd.DataFrame, name: str, a: str, b: str, min_ref: float, **group) -> list:
    """Lengths where both were measured and ``b`` (the reference) does the task: its lower bound >= min_ref."""
    d = pooled(metric(df, name))
    d = d[d["status"] == "measured"]
    for k, val in group.items():
        d = d[d[k] == val]
    la, lb = set(d[d["design"] == a]["context_len"].dropna()), set(d[d["design"] == b]["context_len"].dropna())
    out = []
    for L in sorted(la & lb):
        ref = acc_at(df, name, b, L, **group)
        if ref is not None and ref.lo >= min_ref:
            out.append(L)
    return out


def levels_note(df: pd.DataFrame, name: str) -> str:
    """The task's chance level and values-in-context floor, as evidence text ('' if not recorded)."""
    d = metric(df, name)
    if d["chance"].notna().any():
        return f"chance {d['chance'].mean():.3g}, values-in-context floor {d['floor'].mean():.3g}"
    return ""
