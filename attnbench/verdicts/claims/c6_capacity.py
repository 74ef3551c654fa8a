"""Claim C6 (a linear state's capacity): pure lightning at several state sizes against softmax
on exp=capacity's MQAR pair counts, judged per state size (``_c6_state``) and then together."""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.quality import Acc, learned, pooled_acc
from attnbench.verdicts.readings import metric
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Verdict, combine_parts, deficit, same_rule

CAPACITY = "capacity/acc"  # accuracy at the training length by key-value pairs (experiments/capacity.py)
CUT_SHORT = ("budget", "partial")  # training statuses that end outside the rule (the wall clock), not by it


def _capacity_acc(df: pd.DataFrame, name: str, pairs: float) -> Acc | None:
    d = metric(df, CAPACITY)
    return pooled_acc(d[(d["design"] == name) & (d["n_pairs"] == pairs)])


FALLS, HOLDS, UNDECIDED_STATE, NOT_LEARNED = "falls", "keeps up", "undecided", "did not learn"


def _c6_state(df: pd.DataFrame, d: pd.DataFrame, name: str, label: str, state: float, above: list, t: dict, train, v: Verdict) -> str:
    """One lightning state size along the pair ladder: falls (somewhere softmax is above the
    floor, its deficit's lower bound exceeds the gap) | keeps up (the deficit's upper bound is
    under the gap wherever softmax is above the floor) | undecided | did not learn (not evidence)."""
    exp = d[d["design"] == name]["exp"].iloc[-1]
    ok, rule_text = same_rule(train, ["softmax", name], exp)
    got = learned(df, name, "mqar", train=train, threshold=t["learned_lb"])
    mine = train[(train["design"] == name) & (train["exp"] == exp)] if train is not None else None
    status = str(mine["status"].iloc[-1]) if mine is not None and not mine.empty else ""
    if not ok:
        v.evidence.append(f"{label}: {rule_text}: not compared")
        return INCONCLUSIVE
    if not got.flag:
        cut = f"; the wall clock stopped its training (status {status})" if status in CUT_SHORT else ""
        v.evidence.append(f"{label}: {NOT_LEARNED} ({got.why}){cut}: listed, not evidence about what a state can hold")
        return NOT_LEARNED
    falls: list[float] = []
    holds: list[float] = []
    for P in above:
        a, s = _capacity_acc(df, name, P), _capacity_acc(df, "softmax", P)
        if a is None or s is None:
            continue
        lo, hi = deficit(a, s)
        (falls if lo > t["gap"] else holds if hi < t["gap"] else []).append(P)
        v.evidence.append(
            f"{label} at {P:g} pairs ({P / state:.3g} pairs per state float): {a.text()} vs softmax {s.text()}, "
            f"deficit [{lo:+.2f}, {hi:+.2f}]"
        )
    if falls:
        v.evidence.append(f"{label}: falls from {min(falls):g} pairs (deficit's lower bound above {t['gap']})")
        return FALLS
    if above and len(holds) == len(above):
        v.evidence.append(f"{label}: keeps up at every pair count where softmax is above the floor")
        return HOLDS
    return UNDECIDED_STATE


def _fall_point(df: pd.DataFrame, name: str, above: list, gap: float) -> float | None:
    for P in above:
        a, s = _capacity_acc(df, name, P), _capacity_acc(df, "softmax", P)
        if a is not None and s is not None and deficit(a, s)[0] > gap:
            return P
    return None


def _common_seeds(df: pd.DataFrame, train, d: pd.DataFrame, lightning: list[str], v: Verdict):
    """Like with like: the capacity records (and training records) of the seeds at which softmax and a
    lightning state size both have capacity records; softmax's other seeds wait for their lightning models."""
    seeds_of = lambda names: {int(x) for x in d[d["design"].isin(names)]["seed"].dropna()}  # noqa: E731
    common, soft = seeds_of(["softmax"]) & seeds_of(lightning), seeds_of(["softmax"])
    if soft <= common:
        return df, train, d
    v.evidence.append(
        f"softmax's capacity records at seed(s) {', '.join(map(str, sorted(soft - common)))} set aside: no lightning state size "
        f"has records of a model that learned at that seed yet (compared: seed(s) {', '.join(map(str, sorted(common))) or 'none'})"
    )
    keep = ~(df["exp"].eq("capacity") | df["metric"].eq(CAPACITY)) | df["seed"].isin(common)
    if train is not None and "seed" in train.columns and "exp" in train.columns:
        train = train[train["exp"].ne("capacity") | train["seed"].isin(common)]
    return df[keep], train, d[d["seed"].isin(common)]


def _learned_models_only(df: pd.DataFrame, train, d: pd.DataFrame, lightning: list[str], t: dict, v: Verdict):
    """A model is a (design, seed): where one seed of a state size learned and another did not, the
    one that did not is listed and its capacity records set aside, so a state size's accuracy pools
    only models that learned (a model that never trained says nothing about what a state holds).
    A state size no seed of which learned stays whole: _c6_state lists it as "did not learn"."""
    drop = []
    for name in lightning:
        seeds = sorted({int(x) for x in d[d["design"] == name]["seed"].dropna()})
        if len(seeds) < 2:
            continue
        flags = {}
        for s in seeds:
            own_train = train[train["seed"] == s] if train is not None and "seed" in train.columns else train
            flags[s] = learned(df[df["seed"] == s], name, "mqar", train=own_train, threshold=t["learned_lb"])
        if any(f.flag for f in flags.values()):
            for s, f in flags.items():
                if not f.flag:
                    drop.append((name, s))
                    v.evidence.append(f"{name} seed {s}: {NOT_LEARNED} ({f.why}): listed, its capacity records set aside (not evidence)")
    if not drop:
        return df, d
    out = pd.Series(False, index=df.index)
    for name, s in drop:
        out |= df["design"].eq(name) & df["seed"].eq(s) & (df["exp"].eq("capacity") | df["metric"].eq(CAPACITY))
    df = df[~out]
    return df, d.loc[d.index.intersection(df.index)]


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
    df, d = _learned_models_only(df, train, d, lightning, t, v)
    df, train, d = _common_seeds(df, train, d, lightning, v)
    soft = learned(df, "softmax", "mqar", train=train, threshold=t["learned_lb"])
    v.evidence.append(("learned: " if soft.flag else "did not learn: " if soft.flag is False else "no check: ") + soft.why)
    if not soft.flag:
        v.verdict = INCONCLUSIVE
        v.evidence.append("inconclusive: softmax did not learn the task: the experiment separates nothing")
        return v
    pairs = sorted(d["n_pairs"].dropna().unique())
    above = [p for p in pairs if (s := _capacity_acc(df, "softmax", p)) is not None and s.lo >= t["softmax_above"]]
    v.evidence.append(
        f"softmax is above the floor (95% lower bound >= {t['softmax_above']}) at {', '.join(f'{p:g}' for p in above) or 'no'} "
        f"pairs of {', '.join(f'{p:g}' for p in pairs)}"
    )
    results = {}
    for name in lightning:
        state = float(d[d["design"] == name]["state_size"].max())
        label = f"{name} (state {state:,.0f} per layer)"
        results[name] = v.parts[label] = _c6_state(df, d, name, label, state, above, t, train, v)
    learned_sizes = [n for n, r in results.items() if r != NOT_LEARNED]
    seeds = sorted({int(x) for x in d[d["design"].isin(learned_sizes + ["softmax"])]["seed"].dropna()})
    v.models = ["softmax", *learned_sizes]
    v.verdict = combine_parts({FALLS: SUPPORTED, HOLDS: NOT_SUPPORTED}.get(results[n], INCONCLUSIVE) for n in learned_sizes)
    if not learned_sizes:  # no model here is evidence: a seed without one cannot judge the claim (judge.SEED_RULE)
        v.verdict, v.no_learned_model = INCONCLUSIVE, True
        v.evidence.append("inconclusive: no lightning state size learned the task: nothing says what a state can hold")
    falls_at = {n: _fall_point(df, n, above, t["gap"]) for n in learned_sizes if results[n] == FALLS}
    if len(falls_at) >= 2:
        moves = len(set(falls_at.values())) > 1
        v.evidence.append(
            "fall point by state size: "
            + ", ".join(f"{n} {p:g} pairs" for n, p in falls_at.items())
            + (": it moves with the state size" if moves else ": it does not move with the state size")
        )
    short = len(learned_sizes) < t["min_states"] or len(seeds) < t["min_seeds"]
    if short and learned_sizes:
        v.evidence.append(
            f"provisional: rests on {len(learned_sizes)} learned state size(s) at seed(s) {', '.join(map(str, seeds))}; "
            f"the rule asks for >= {t['min_states']} learned sizes at >= {t['min_seeds']} seeds"
        )
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items())
    if falls_at:
        v.headline = f"falls from {', '.join(f'{p:g} pairs ({n})' for n, p in falls_at.items())}; " + v.headline
    if short and learned_sizes:  # said where the verdict is read, not only in the evidence
        v.headline = f"provisional ({len(learned_sizes)} learned state size(s), seed(s) {', '.join(map(str, seeds))}): " + v.headline
    v.change = (
        f"{t['min_states']} learned state sizes at {t['min_seeds']} seeds (lightning heads' dimension varied at fixed heads, or the width)"
        if short
        else "a learned lightning state size that keeps up with softmax wherever softmax is above the floor"
    )
    return v
