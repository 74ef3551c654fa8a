"""The questions beside the claims (docs/DESIGN.md, "Questions beside the claims"): Q-delta, does
the delta rule change the hybrid's multi-hop deficit or a fixed state's capacity, and Q-tokens, does
token-level selection (dsa) retrieve differently from block-level selection (msa) at the same
attended tokens, and what does each pay to select.

They are not claims of the seed write-ups (no quote, no "supported"): each answer is "differ" (an
interval of a difference that excludes 0 at every seed compared), "no difference shown" (measured,
no such interval) or "not yet measured" (naming the models that are missing). Their cells and
thresholds are C3's and C6's (judge.py's ``CLAIMS``), so a question cannot pick its cells from the
data; a model that did not learn its task is listed, never compared.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from attnbench.basics import fmt_len
from attnbench.verdicts.claims.c3_multihop import SeedPair, _pair
from attnbench.verdicts.claims.c6_capacity import CAPACITY, _capacity_acc, _fall_point
from attnbench.verdicts.claims.judge import CLAIMS, Claim, readable
from attnbench.verdicts.quality import FINAL, experiment_task, haystack_acc, learned
from attnbench.verdicts.readings import metric
from attnbench.verdicts.rules import NOT_MEASURED_YET, Verdict, deficit

DIFFER, NO_DIFFERENCE = "differ", "no difference shown"
ANSWERS = (DIFFER, NO_DIFFERENCE, NOT_MEASURED_YET)

DELTA_PAIRS = (("gdn_hybrid", "lightning_hybrid_h8"),)  # (delta-rule hybrid, the lightning hybrid of its width, heads and state)
SEEDS = (0, 1, 2)  # the seeds each question's models are trained at
QTOKENS_LENGTHS = (1024, 4096, 16384, 65536)  # the lengths Q-tokens compares (1K-64K, fixed before the data)


def _thresholds(claim_id: str) -> dict:
    return dict(next(c for c in CLAIMS if c.id == claim_id).thresholds)


def _interval(lo: float, hi: float) -> str:
    return f"[{lo:+.2f}, {hi:+.2f}]"


def _sign(lo: float, hi: float) -> int:
    """+1 / -1 where the interval excludes 0 above / below it, else 0."""
    return 1 if lo > 0 else -1 if hi < 0 else 0


def _answer(signs: list[int]) -> str:
    """A cell differs where every compared seed's interval excludes 0 on the same side."""
    return DIFFER if signs and len(set(signs)) == 1 and signs[0] != 0 else NO_DIFFERENCE


# ---------------------------------------------------------------- Q-delta


def _chain_pairs(df: pd.DataFrame, train, exp: str, name: str, t: dict) -> dict[int, SeedPair]:
    return {s: p for s in SEEDS if (p := _pair(df, train, exp, name, s, t)) is not None and p.rule_ok}


def _delta_multihop(df: pd.DataFrame, train, v: Verdict) -> dict[str, str]:
    """Per hybrid pair: the difference of the two deficits at C3's cells, seed by seed."""
    t = _thresholds("C3")
    d = metric(df, "multihop/acc")
    d = d[(d["status"] == "measured") & (d["scoring"] == FINAL)] if "scoring" in d.columns else d.iloc[0:0]
    parts: dict[str, str] = {}
    for gdn, lightning in DELTA_PAIRS:
        label = f"multi-hop deficit: {gdn} vs {lightning}"
        have = {n: not d[d["design"] == n].empty for n in (gdn, lightning, "softmax")}
        if not all(have.values()):
            missing = ", ".join(n for n, ok in have.items() if not ok)
            v.evidence.append(
                f"{label}: not yet measured: no chain records of {missing} (exp=multihop, seeds {', '.join(map(str, SEEDS))})"
            )
            parts[label] = NOT_MEASURED_YET
            continue
        exp = str(d["exp"].iloc[-1])
        mine, theirs = _chain_pairs(df, train, exp, gdn, t), _chain_pairs(df, train, exp, lightning, t)
        seeds = sorted(set(mine) & set(theirs))
        cells: dict[tuple[int, float], list[int]] = {}
        for s in seeds:
            for cell in sorted(set(mine[s].bounds) & set(theirs[s].bounds)):
                if mine[s].not_learned or theirs[s].not_learned:  # listed, never compared
                    continue
                (g_lo, g_hi), (l_lo, l_hi) = mine[s].bounds[cell], theirs[s].bounds[cell]
                lo, hi = l_lo - g_hi, l_hi - g_lo  # lightning's deficit minus gdn's
                cells.setdefault(cell, []).append(_sign(lo, hi))
                v.evidence.append(
                    f"{label}, seed {s}, {cell[0]} hops at {fmt_len(cell[1])}: deficits {lightning} {_interval(l_lo, l_hi)}, "
                    f"{gdn} {_interval(g_lo, g_hi)}; difference {_interval(lo, hi)}"
                )
            for name, p in ((gdn, mine[s]), (lightning, theirs[s])):
                if p.not_learned:
                    v.evidence.append(
                        f"{label}, seed {s}: {name} did not learn the chain of {'; '.join(p.not_learned)}: listed, not compared"
                    )
        full = {c: signs for c, signs in cells.items() if len(signs) == len(seeds)}
        if not full:
            parts[label] = NOT_MEASURED_YET
            v.evidence.append(f"{label}: no pre-stated cell with both hybrids learned at a seed trained under one rule")
            continue
        differ = {c: signs[0] for c, signs in full.items() if _answer(signs) == DIFFER}
        parts[label] = DIFFER if differ else NO_DIFFERENCE
        for (hops, length), sign in differ.items():
            smaller = gdn if sign > 0 else lightning
            v.evidence.append(
                f"{label}: at {hops} hops, {fmt_len(length)}, {smaller}'s deficit is smaller at every seed ({', '.join(map(str, seeds))})"
            )
        v.models += [gdn, lightning, "softmax"]
        v.seeds = sorted(set(v.seeds) | set(seeds))
    return parts


def _pure(d: pd.DataFrame, letter: str) -> dict[float, str]:
    """state size -> the capacity design whose every layer is ``letter``."""
    out = {}
    for n, lo in zip(d["design"], d["layout"]):
        if isinstance(lo, str) and lo and set(lo) == {letter}:
            out[float(d[d["design"] == n]["state_size"].max())] = str(n)
    return out


def _delta_capacity(df: pd.DataFrame, train, v: Verdict) -> dict[str, str]:
    """Per state size both pure designs have: C6's fall point of each, seed by seed."""
    t = _thresholds("C6")
    d = metric(df, CAPACITY)
    d = d[d["status"] == "measured"] if "n_pairs" in d.columns and "layout" in d.columns else d.iloc[0:0]
    gdn, lightning = _pure(d, "G"), _pure(d, "L")
    sizes = sorted(set(gdn) & set(lightning))
    if not sizes or d[d["design"] == "softmax"].empty:
        v.evidence.append(
            "capacity fall point: not yet measured: needs exp=capacity records of pure gdn at three state sizes beside pure "
            f"lightning at the same sizes (gdn's: {', '.join(f'{s:,.0f}' for s in sorted(gdn)) or 'none'})"
        )
        return {"capacity fall point": NOT_MEASURED_YET}
    parts = {}
    for size in sizes:
        g, li = gdn[size], lightning[size]
        label = f"capacity fall point at state {size:,.0f}: {g} vs {li}"
        signs = []
        for s in SEEDS:
            ds = df[df["seed"] == s]
            ts = train[train["seed"] == s] if train is not None and "seed" in train.columns else train
            if ds[ds["design"].isin([g, li, "softmax"])].empty:
                continue
            gone = [n for n in (g, li) if not learned(ds, n, "mqar", train=ts, threshold=t["learned_lb"]).flag]
            if gone:
                v.evidence.append(f"{label}, seed {s}: {', '.join(gone)} did not learn the task: listed, not compared")
                continue
            pairs = sorted(metric(ds, CAPACITY)["n_pairs"].dropna().unique())
            above = [p for p in pairs if (a := _capacity_acc(ds, "softmax", p)) is not None and a.lo >= t["softmax_above"]]
            fg, fl = _fall_point(ds, g, above, t["gap"]), _fall_point(ds, li, above, t["gap"])
            said = ["no fall" if f is None else f"{f:g} pairs" for f in (fg, fl)]
            v.evidence.append(f"{label}, seed {s}: falls at {said[0]} ({g}), {said[1]} ({li})")
            inf = float("inf")  # a state that never falls holds past the ladder
            gp, lp = inf if fg is None else fg, inf if fl is None else fl
            signs.append(0 if gp == lp else 1 if gp > lp else -1)
            v.seeds = sorted(set(v.seeds) | {s})
        parts[label] = NOT_MEASURED_YET if not signs else _answer(signs)
        v.models += [g, li, "softmax"]
    return parts


def judge_delta(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    v.parts = {**_delta_multihop(df, train, v), **_delta_capacity(df, train, v)}
    measured = [x for x in v.parts.values() if x != NOT_MEASURED_YET]
    v.verdict = NOT_MEASURED_YET if not measured else DIFFER if DIFFER in measured else NO_DIFFERENCE
    v.models = list(dict.fromkeys(v.models))
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items())
    v.change = (
        "the chain models of gdn_hybrid and lightning_hybrid_h8 at seeds 0-2 under one rule; gdn's capacity models at three state sizes"
    )
    return v


# ---------------------------------------------------------------- Q-tokens


def projected_cost(v: Verdict, selection_cost: Callable[[str, int], tuple[float, float]]) -> None:
    """Q-tokens' projected half: ``selection_cost(op, n)`` (the cost model's FLOPs and bytes of one
    decode query's selection at context n, bench.costmodel.selection_cost, handed in by the report:
    a verdict reads records, not the cost model) for dsa's indexer and msa's block scores."""
    for n in QTOKENS_LENGTHS:
        (fd, bd), (fm, bm) = selection_cost("dsa", n), selection_cost("msa", n)
        v.evidence.append(
            f"selection cost a decode query at {fmt_len(n)} (projected, the cost model at the kernel experiments' op shape): "
            f"dsa's indexer {fd:,.0f} FLOPs, {bd:,.0f} B; msa's block scores {fm:,.0f} FLOPs, {bm:,.0f} B ({fd / fm:.2g}x the FLOPs)"
        )


TOKEN_PARTS = (("dsa_select", "msa_select"), ("dsa_attn", "msa_attn"), ("dsa", "msa"))  # (token-level, block-level) timed pairs


def _of_limit(r) -> str:
    """A timing's fraction of its two-term limit (a reference far below it costs more than its design needs)."""
    f = getattr(r, "limit_fraction", None)
    return f" ({f:.2f} of its limit)" if f is not None and f == f else ""


def _measured_cost(df: pd.DataFrame, v: Verdict) -> str:
    """Q-tokens' measured half: each length at which one kernels_cpu run timed both selections (and both
    attentions, both whole ops) alternately in one process; dsa's time over msa's, with both medians.
    Returns the headline's cost clause ("" where no run timed both whole ops)."""
    t = metric(df, "latency/prefill_ms")
    if "op" in t.columns and "method" in t.columns:  # kernels_cpu's timings: alternated with SDPA (not crossover's one-by-one)
        t = t[
            (t["status"] == "measured")
            & t["op"].isin({n for pair in TOKEN_PARTS for n in pair})
            & t["method"].astype(str).str.startswith("alternating")
            & (
                t["backend"].eq("reference") if "backend" in t.columns else True
            )  # like with like: both references (a native kernel is another implementation)
        ]
    else:
        t = t.iloc[0:0]
    seen, whole = False, []
    for (run, n), g in t.groupby(["run_dir", "context_len"], sort=True):
        ms = {r.op: r for r in g.itertuples()}
        pairs = [(a, b) for a, b in TOKEN_PARTS if a in ms and b in ms]
        if not pairs:
            continue
        seen = True
        if ("dsa", "msa") in pairs:
            whole.append((int(n), ms["dsa"].value / ms["msa"].value))
        timed = "; ".join(
            f"{a} {ms[a].value:,.1f} ms{_of_limit(ms[a])} vs {b} {ms[b].value:,.1f} ms{_of_limit(ms[b])} ({ms[a].value / ms[b].value:.2g}x)"
            for a, b in pairs
        )
        v.evidence.append(f"cost measured at {fmt_len(int(n))} ({run}, forward, medians timed alternately in one process): {timed}")
    if not seen:
        v.evidence.append(
            "selection cost measured: not yet measured: no run timed dsa's and msa's ops side by side (exp=kernels_cpu with both among its ops)"
        )
    if not whole:
        return ""
    ratios = sorted({f"{r:.2g}x" for _, r in whole}, key=lambda x: float(x[:-1]))
    lengths = sorted({n for n, _ in whole})
    span = lambda xs: xs[0] if len(xs) == 1 else f"{xs[0]} to {xs[-1]}"  # noqa: E731
    return f"cost: dsa's forward takes {span(ratios)} msa's time at {span([fmt_len(n) for n in lengths])} (CPU references, measured)"


def judge_tokens(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = metric(df, "niah/acc")
    d = d[d["status"] == "measured"] if "exp" in d.columns else d.iloc[0:0]
    d = d[d["exp"] == t["exp"]]
    missing = [n for n in ("dsa", "msa") if d[d["design"] == n].empty]
    if missing:
        v.evidence.append(f"retrieval: not yet measured: no needle_4m records of {', '.join(missing)} (dsa's needle models at seeds 0-2)")
    else:
        for length in t["lengths"]:
            signs, seen = [], []
            for s in SEEDS:
                ds = df[(df["seed"] == s) & (df["exp"] == t["exp"])]
                ts = train[train["seed"] == s] if train is not None and "seed" in train.columns else train
                task = experiment_task(ds, "niah/acc")
                dsa, msa = (haystack_acc(ds, "niah/acc", n, length, task=task) for n in ("dsa", "msa"))
                if dsa is None or msa is None:
                    continue
                gone = [n for n in ("dsa", "msa") if not learned(ds, n, task, train=ts).flag]
                if gone:
                    v.evidence.append(
                        f"retrieval at {fmt_len(length)}, seed {s}: {', '.join(gone)} did not learn the task: listed, not compared"
                    )
                    continue
                few = min(dsa.n, msa.n) < t["min_probes"]
                lo, hi = deficit(msa, dsa)  # dsa minus msa
                v.evidence.append(
                    f"retrieval at {fmt_len(length)}, seed {s}: dsa {dsa.text()} ({dsa.fraction}), msa {msa.text()} "
                    f"({msa.fraction}); dsa minus msa {_interval(lo, hi)}"
                    + (f" (fewer than {t['min_probes']} probes a design: not decided)" if few else "")
                )
                signs.append(0 if few else _sign(lo, hi))
                seen.append(s)
            if seen:
                v.parts[f"retrieval at {fmt_len(length)}"] = _answer(signs)
                v.seeds = sorted(set(v.seeds) | set(seen))
            else:  # a length the rule names and no run measured: said, not dropped
                v.parts[f"retrieval at {fmt_len(length)}"] = NOT_MEASURED_YET
        v.models = ["dsa", "msa"]
    cost = _measured_cost(df, v)
    measured = [x for x in v.parts.values() if x != NOT_MEASURED_YET]
    v.verdict = NOT_MEASURED_YET if not measured else DIFFER if DIFFER in measured else NO_DIFFERENCE
    v.headline = "; ".join([f"{k}: {x}" for k, x in v.parts.items()] or ["retrieval not yet measured"]) + (f"; {cost}" if cost else "")
    if v.seeds and len(v.seeds) < len(SEEDS):  # said where the answer is read (C6's "provisional")
        v.headline = f"provisional (seed {', '.join(map(str, v.seeds))} of {SEEDS[0]}-{SEEDS[-1]}): " + v.headline
    unmeasured = [k.removeprefix("retrieval at ") for k, x in v.parts.items() if x == NOT_MEASURED_YET]
    v.change = (
        f"dsa's and msa's needle cells at {', '.join(unmeasured)} (seeds 0-2, >= 200 probes a design and seed)"
        if unmeasured
        else "dsa's needle models at seeds 0-2 evaluated beside msa's at 1K-64K (>= 200 probes a design and seed)"
    )
    return v


QUESTIONS = [
    Claim(
        "Q-delta",
        "At equal state size and one training rule, does the delta-rule hybrid's multi-hop deficit against softmax, or "
        "a fixed state's capacity fall point, differ from the lightning hybrid's?",
        [],
        "multihop, capacity",
        {
            **_thresholds("C3"),
            "softmax_above": _thresholds("C6")["softmax_above"],
            "pairs": ", ".join(f"{g} against {li}" for g, li in DELTA_PAIRS),
            "each_hop": " and ".join(map(str, _thresholds("C3")["hops"])),
        },
        "Pairs: {pairs} (7:1, same width, heads and state), pure gdn against pure lightning at each state size. Multi-hop: "
        "at {each_hop} hops, at the chain models' common training length and at {length} (C3's cells, fixed in advance), each "
        "seed's deficit (softmax minus the hybrid, bounds from the two 95% intervals, haystack-clustered) for both hybrids; "
        "the two deficits differ where the interval of their difference (lightning's deficit minus gdn's: [its low - gdn's "
        "high, its high - gdn's low]) excludes 0 on the same side at every seed with both models learned; otherwise no "
        "difference shown. Capacity: the smallest pair count at which each learned state size falls (C6's rule: deficit "
        "lower bound above {gap} where softmax's lower bound is >= {softmax_above}); the fall points differ where they "
        "differ the same way at every seed. A model that did not learn its task (95% lower bound < {learned_lb} at its "
        "training length) is listed, never compared.",
        judge_delta,
    ),
    Claim(
        "Q-tokens",
        "At equal attended tokens (dsa's top tokens = msa's top_k blocks x block_size), does dsa's needle retrieval at "
        "1K-64K differ from msa's, and what does each pay for its selection?",
        [],
        "needle_4m, the cost model, kernels_cpu",
        {"exp": "needle_4m", "lengths": QTOKENS_LENGTHS, "min_probes": 200, "each_length": ", ".join(map(fmt_len, QTOKENS_LENGTHS))},
        "Retrieval: at each of {each_length}, dsa minus msa (bounds from the two 95% intervals, haystack-clustered, >= "
        "{min_probes} probes a design at each seed, {exp}'s records); a difference where that interval excludes 0 on the "
        "same side at every seed, none shown otherwise; a design that did not learn is listed, never compared. Cost: the "
        "indexer's FLOPs and bytes per query against msa's block scores, from the cost model (projected), and the time of "
        "each part (`dsa_select` against `msa_select`, `dsa_attn` against `msa_attn`, the whole ops) where one "
        "`exp=kernels_cpu` run timed both at one length, alternately in one process (measured), each timing with its "
        "fraction of its two-term limit; each labelled. The cost is reported, not judged: it has no threshold.",
        judge_tokens,
    ),
]


def judge_questions(df: pd.DataFrame, train: pd.DataFrame | None = None, selection_cost=None) -> list[tuple[Claim, Verdict]]:
    """Every question's answer from shipped models' records of committed code (SHIPPED_RULE and COMMITTED_RULE,
    as the claims); with
    ``selection_cost`` (bench.costmodel.selection_cost), Q-tokens' projected cost beside it."""
    kept, _, _ = readable(df)
    out = []
    for q in QUESTIONS:
        try:
            v = q(kept, train)
        except Exception as ex:  # a malformed record must not take the report down
            v = Verdict(NOT_MEASURED_YET, [f"could not evaluate: {type(ex).__name__}: {ex}"])
        if q.id == "Q-tokens" and selection_cost is not None:
            projected_cost(v, selection_cost)
        out.append((q, v))
    return out
