"""Claim C3 (multi-hop reasoning), two parts as the claim has two: the 7:1 hybrid *matched*
softmax on simple tasks, and showed a *clear multi-hop deficit*. Judged seed by seed on pairs of
models trained under one rule, at cells fixed before the data were read (2 and 3 hops, at the
chain models' common training length and at 1K). A hybrid that did not learn a chain is named as
the reason for its deficit, never in place of it. The thresholds and the rule's words are in
judge.py's ``CLAIMS``; the sliding-window hybrid (the claim's second sentence) is judged by the
same deficit rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from attnbench.basics import fmt_len
from attnbench.verdicts.claims.c1_c2_text01 import seven_to_one, what_changes
from attnbench.verdicts.quality import FINAL, Acc, haystack_acc, learned, pooled_acc
from attnbench.verdicts.readings import metric
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, deficit, same_rule

SHOWN, EXCLUDED, UNDECIDED, MISSING = "shown", "excluded", "undecided", "not measured"


def _policy_line(df: pd.DataFrame, k: float) -> str:
    """The floors of the k-hop chain, every simple policy run on the generator (tasks/policies.py)."""
    d = metric(df, "multihop/acc")
    d = d[(d["hops"] == k) & (d.get("scoring") == FINAL)] if "scoring" in d.columns else d.iloc[0:0]
    pol = next((p for p in d["policies"] if isinstance(p, tuple) and p), None) if "policies" in d.columns else None
    if not pol:
        return ""
    return f"floors at {k:g} hops (simple policies run on the generator): " + ", ".join(f"{name} {acc:.3g}" for name, acc in pol)


def chain_acc(df: pd.DataFrame, design: str, length: float, hops: int) -> Acc | None:
    """A design's k-hop chain accuracy at one length: the evaluation's cell (haystack as the unit)
    where one was run there, else the check at the training length (``train/acc``, the same task)."""
    a = haystack_acc(df, "multihop/acc", design, length, hops=hops, scoring=FINAL)
    if a is not None:
        return a
    t = df[(df["metric"] == "train/acc") & (df["design"] == design) & (df["status"] == "measured") & (df["context_len"] == length)]
    t = t[(t["task"] == "multihop") & (t["hops"] == hops)]
    return pooled_acc(t) if not t.empty else None


def _state(lo: float, hi: float, gap: float) -> str:
    return SHOWN if lo > gap else EXCLUDED if hi < gap else UNDECIDED


@dataclass
class SeedPair:
    """One seed's hybrid and softmax chain models, compared at the pre-stated cells."""

    seed: int
    rule_ok: bool
    rule_text: str
    common_len: float  # the shorter of the two models' true training lengths
    deficit: dict[tuple[int, float], tuple[str, str]] = field(default_factory=dict)  # (hops, length) -> (state, text)
    matched: dict[str, tuple[str, str]] = field(default_factory=dict)  # simple task -> (state, text)
    not_learned: list[str] = field(default_factory=list)  # the chains the hybrid did not learn (the reason, not the verdict)
    bounds: dict[tuple[int, float], tuple[float, float]] = field(default_factory=dict)  # (hops, length) -> deficit bounds
    rule: str = ""  # the rule both models were trained under (rule_ok)


def _train_row(train: pd.DataFrame | None, exp: str, design: str, seed: int) -> pd.Series | None:
    if train is None or train.empty:
        return None
    r = train[(train["exp"] == exp) & (train["design"] == design) & (train["seed"] == seed)]
    return None if r.empty else r.iloc[-1]


def _pair(df: pd.DataFrame, train, exp: str, name: str, seed: int, t: dict) -> SeedPair | None:
    ds = df[df["seed"] == seed]
    tr = train[train["seed"] == seed] if train is not None and not train.empty else train
    mine, soft = _train_row(train, exp, name, seed), _train_row(train, exp, "softmax", seed)
    if mine is None or soft is None:
        return None
    ok, rule_text = same_rule(tr, ["softmax", name], exp)
    common = float(min(mine["train_len"], soft["train_len"]))
    p = SeedPair(
        seed, ok, rule_text, common, rule=str(sorted(mine["rule"].items())) if isinstance(mine["rule"], dict) else str(mine["rule"])
    )
    if not ok:
        return p
    for hops in t["hops"]:
        for length in sorted({common, float(t["length"])}):
            a, s = chain_acc(ds, name, length, hops), chain_acc(ds, "softmax", length, hops)
            if a is None or s is None:
                p.deficit[(hops, length)] = (MISSING, f"{hops} hops at {fmt_len(length)}: not measured for both")
                continue
            if s.lo < t["min_ref"]:  # softmax itself does not do the task here: the cell separates nothing
                p.deficit[(hops, length)] = (
                    MISSING,
                    f"{hops} hops at {fmt_len(length)}: softmax {s.text()}, under {t['min_ref']}: separates nothing",
                )
                continue
            lo, hi = p.bounds[(hops, length)] = deficit(a, s)
            state = _state(lo, hi, t["gap"]) if min(a.n, s.n) >= t["min_probes"] else UNDECIDED
            few = f" ({min(a.n, s.n):.0f} probes, fewer than {t['min_probes']})" if min(a.n, s.n) < t["min_probes"] else ""
            p.deficit[(hops, length)] = (
                state,
                f"{hops} hops at {fmt_len(length)}: softmax {s.text()} ({s.fraction}) - {name} {a.text()} ({a.fraction}) = "
                f"[{lo:+.2f}, {hi:+.2f}]: deficit of {t['gap']} {state}{few}",
            )
        got = learned(ds, name, "multihop", hops=hops, train=tr, threshold=t["learned_lb"])
        if got.flag is False:
            p.not_learned.append(f"{hops} hops ({got.why})")
    a, s = chain_acc(ds, name, common, 1), chain_acc(ds, "softmax", common, 1)
    if a is not None and s is not None:
        lo, hi = deficit(a, s)
        m = t["matched"]
        state = SUPPORTED if -m <= lo and hi <= m else NOT_SUPPORTED if lo > m or hi < -m else INCONCLUSIVE
        p.matched["1-hop chain"] = (
            state,
            f"1 hop at {fmt_len(common)}: softmax {s.text()} - {name} {a.text()} = [{lo:+.2f}, {hi:+.2f}] "
            + {SUPPORTED: f"within +-{m}", NOT_SUPPORTED: f"outside +-{m}"}.get(state, f"neither within nor outside +-{m}"),
        )
    return p


def _deficit_part(pairs: list[SeedPair]) -> tuple[str, list[str]]:
    """The deficit part over the compared seeds: a cell shows the deficit when every compared seed
    shows it there; supported when some pre-stated cell shows it; not supported when every
    measured cell excludes it at every seed; else inconclusive."""
    use = [p for p in pairs if p.rule_ok]
    if not use:
        return INCONCLUSIVE, ["no seed whose two models were trained under one rule: not compared"]
    cells = sorted({c for p in use for c in p.deficit})
    shown = [c for c in cells if all(p.deficit.get(c, (MISSING,))[0] == SHOWN for p in use)]
    measured = [c for c in cells if any(p.deficit.get(c, (MISSING,))[0] != MISSING for p in use)]
    excluded = measured and all(p.deficit.get(c, (MISSING,))[0] in (EXCLUDED, MISSING) for c in measured for p in use)
    seeds = ", ".join(str(p.seed) for p in use)
    if shown:
        where = "; ".join(f"{h} hops at {fmt_len(L)}" for h, L in shown)
        return SUPPORTED, [f"the deficit is shown at every compared seed ({seeds}) at: {where}"]
    if excluded:
        return NOT_SUPPORTED, [f"every measured pre-stated cell excludes the deficit at every compared seed ({seeds})"]
    return INCONCLUSIVE, [f"no pre-stated cell shows the deficit at every compared seed ({seeds}), and not every cell excludes it"]


def _matched_part(pairs: list[SeedPair]) -> str:
    states = [s for p in pairs if p.rule_ok for s, _ in p.matched.values()]
    if not states:
        return INCONCLUSIVE
    if all(s == SUPPORTED for s in states):
        return SUPPORTED
    return NOT_SUPPORTED if any(s == NOT_SUPPORTED for s in states) else INCONCLUSIVE


def _judge_design(df: pd.DataFrame, train, exp: str, name: str, t: dict, v: Verdict) -> tuple[str, str, list[SeedPair]]:
    """(matched part, deficit part, the seed pairs) of one design against softmax, evidence appended."""
    seeds = sorted(
        {int(s) for s in df[(df["design"] == name)]["seed"].dropna()} & {int(s) for s in df[df["design"] == "softmax"]["seed"].dropna()}
    )
    pairs = [p for s in seeds if (p := _pair(df, train, exp, name, s, t)) is not None]
    # every seed of a comparison under one rule: the rule most compared seeds share (the latest
    # seed's on a tie); a seed whose pair ran under another version of the rule is listed, not compared
    rules = [p.rule for p in pairs if p.rule_ok]
    if len(set(rules)) > 1:
        top = max(set(rules), key=lambda r: (rules.count(r), max(p.seed for p in pairs if p.rule == r)))
        shared = next(p.rule_text for p in pairs if p.rule == top)
        for p in pairs:
            if p.rule_ok and p.rule != top:
                p.rule_ok = False
                p.rule_text = f"its pair ran under another rule than the other seeds' ({p.rule_text}; theirs: {shared}): dropped from the comparison until retrained"
    label = "the sliding-window hybrid" if name == "swa_hybrid" else what_changes(name)
    v.evidence.append(f"{name} ({label}) against softmax, seed by seed:")
    for p in pairs:
        if not p.rule_ok:
            v.evidence.append(f"  seed {p.seed}: not compared: {p.rule_text}")
            continue
        v.evidence.append(f"  seed {p.seed}: {p.rule_text}; common training length {fmt_len(p.common_len)}")
        v.evidence.extend(f"    {text}" for _, text in p.matched.values())
        v.evidence.extend(f"    {text}" for _, text in p.deficit.values())
        if p.not_learned:
            v.evidence.append(f"    why it falls short: {name} did not learn the chain of " + "; ".join(p.not_learned))
    deficit_verdict, lines = _deficit_part(pairs)
    v.evidence.extend(f"  {line}" for line in lines)
    return _matched_part(pairs), deficit_verdict, pairs


def _headline(head: str, pairs: list[SeedPair], t: dict) -> str:
    """Each seed's deficit at 3 hops at 1K (the longest pre-stated chain at the fixed length)."""
    key = (max(t["hops"]), float(t["length"]))
    got = [f"s{p.seed} [{p.bounds[key][0]:+.2f}, {p.bounds[key][1]:+.2f}]" for p in pairs if p.rule_ok and key in p.bounds]
    return f"softmax minus {head} at {key[0]} hops, {fmt_len(key[1])}: " + (", ".join(got) if got else "not measured")


def judge_c3(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = metric(df, "multihop/acc")
    d = d[d["status"] == "measured"]
    hybrids = [n for n in seven_to_one(df) if not d[d["design"] == n].empty]
    if d[d["design"] == "softmax"].empty or not hybrids:
        return v
    if "scoring" not in d.columns or not (d["scoring"] == FINAL).any():
        v.evidence.append(
            "these records scored every hop with every intermediate key given (k single lookups, "
            "not composition): they cannot test a multi-hop deficit"
        )
        v.verdict = INCONCLUSIVE
        return v
    d = d[d["scoring"] == FINAL]
    exp = str(d["exp"].iloc[-1])
    for k in t["hops"]:
        if line := _policy_line(df, k):
            v.evidence.append(line)
    head = hybrids[0]
    if len(hybrids) > 1:
        v.evidence.append(
            f"headline: {head} ({what_changes(head)}), the first 7:1 hybrid with chain records in order of closeness to Text-01"
        )
    results: dict[str, tuple[str, str]] = {}
    head_pairs: list[SeedPair] = []
    for name in hybrids + (["swa_hybrid"] if not d[d["design"] == "swa_hybrid"].empty else []):
        matched, deficit_verdict, pairs = _judge_design(df, train, exp, name, t, v)
        results[name] = (matched, deficit_verdict)
        if name == head:
            head_pairs = pairs
        if name != "swa_hybrid":
            v.parts[f"{name}: matched on simple tasks"] = matched
        v.parts[f"{name}: clear multi-hop deficit"] = deficit_verdict
    v.models = [head, "softmax"] + (["swa_hybrid"] if "swa_hybrid" in results else [])
    v.headline = _headline(head, head_pairs, t)
    v.seeds = sorted(p.seed for p in head_pairs if p.rule_ok)  # the seeds compared (a seed under another rule is not)
    matched, shown = results[head]
    # the claim's point is the deficit: shown, the claim holds at least in part; excluded, it fails
    # whatever the simple tasks say; undecided, nothing is decided
    v.verdict = {SUPPORTED: SUPPORTED if matched == SUPPORTED else PARTLY, NOT_SUPPORTED: NOT_SUPPORTED}.get(shown, INCONCLUSIVE)
    if v.verdict == PARTLY:
        v.evidence.append(f"partly: the deficit is shown; matched on simple tasks is {matched}")
    swa = results.get("swa_hybrid")
    if swa is None:
        v.evidence.append("the claim's second sentence (a sliding-window hybrid) has no chain records: untested")
    elif v.verdict == SUPPORTED and swa[1] == NOT_SUPPORTED:
        v.verdict = PARTLY
    v.change = {
        SUPPORTED: "a seed or more probes at which a pre-stated cell no longer shows the deficit",
        NOT_SUPPORTED: f"a deficit of {t['gap']} or more at a pre-stated cell, at every seed",
        PARTLY: "the part not supported turning (matched on simple tasks, or the sliding-window hybrid's deficit)",
    }.get(v.verdict, "more probes or seeds whose intervals decide each part")
    return v
