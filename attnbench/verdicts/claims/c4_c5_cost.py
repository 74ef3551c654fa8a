"""The cost claims' rules (C4: lightning vs softmax time per token, per phase and per half; C5b:
MSA vs M2 speed-up, per phase and scope) and C5's other half (C5a: msa's exact lookup), split
beside judge.py, which lists every claim (``CLAIMS``) and calls these judges."""

from __future__ import annotations

import math

import pandas as pd

from attnbench.verdicts.readings import NOT_MEASURED, metric

from attnbench.basics import fmt_len
from attnbench.verdicts.quality import Acc, experiment_task, haystack_acc, pooled_acc
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, combine_parts, compare, deficit, needs_learned


# ---------------------------------------------------------------- C4


def _bracket(r) -> tuple[float, float]:
    """A crossover's interval: the measured bracket; '<' below the first length, '>' above the last."""
    b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) and len(r["bracket"]) == 2 else [r["v"], r["v"]]
    lo = 0.0 if b[0] is None else float(b[0])
    hi = math.inf if b[1] is None else float(b[1])
    return lo, hi


def timing_spread(df: pd.DataFrame, phase: str, lengths: list[float], designs=("lightning", "softmax")) -> float:
    """The largest relative p25-p75 spread of the measured op times at these lengths."""
    d = metric(df, f"latency/{phase}_ms")
    d = d[(d["status"] == "measured") & (d["scope"] == "op") & d["context_len"].isin(lengths) & d["design"].isin(designs)]
    d = d[d["p25_ms"].notna() & d["p75_ms"].notna() & (d["v"] > 0)]
    return float(((d["p75_ms"] - d["p25_ms"]) / d["v"]).max()) if not d.empty else float("nan")


def judge_c4(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    lo_k, hi_k = t["few_thousand"]
    measured = found = False  # a measured crossover behind the practice half; any crossover record
    for phase in ("prefill", "decode"):
        d = metric(df, f"crossover/{phase}_len")
        d = d[(d["design"] == "lightning") & (d["scope"] == "op")]
        found |= not d.empty
        gpu = d[d["status"].isin(NOT_MEASURED) & (d["impl"] == "fused") & d["v"].notna()]
        shape = "text01" if (gpu["shape"] == "text01").any() else "scaled"
        gpu = gpu[gpu["shape"] == shape]
        label = f"theory, {phase} (FLOP counts, GPU profiles)"
        if not gpu.empty:
            inside = gpu["v"].between(lo_k, hi_k)
            v.parts[label] = SUPPORTED if inside.all() else (NOT_SUPPORTED if not inside.any() else PARTLY)
            where = ", ".join(f"{r['hardware']} {fmt_len(r['v'])}" for _, r in gpu.iterrows())
            v.evidence.append(
                f"{label}: analytic op-level crossover at the {shape} shape, fused kernels: {where} "
                f"-> {'within' if inside.all() else 'outside' if not inside.any() else 'partly within'} "
                f"{fmt_len(lo_k)}–{fmt_len(hi_k)}: {v.parts[label]}"
            )
        else:
            v.parts[label] = INCONCLUSIVE
            v.evidence.append(f"{label}: no analytic crossover on a GPU profile recorded")
        meas = d[(d["status"] == "measured") & (d["method"] == "measured")]
        label = f"practice, {phase} (measured on this CPU)"
        v.parts[label] = INCONCLUSIVE
        for _, r in meas.iterrows():
            hw = r["hardware"]
            ana = d[d["status"].isin(NOT_MEASURED) & (d["impl"] == "as run") & (d["shape"] == "scaled") & d["v"].notna()]
            if ana.empty:
                continue
            a = float(ana["v"].iloc[-1])
            measured = True
            lo, hi = _bracket(r)
            lengths = [x for x in (lo, hi) if 0 < x < math.inf]
            spread = timing_spread(df, phase, lengths)
            s = 0.0 if math.isnan(spread) else spread
            r_lo, r_hi = lo / (1 + s) / a, hi * (1 + s) / a
            later = t["later_factor"]
            v.parts[label] = SUPPORTED if r_lo >= later else (NOT_SUPPORTED if r_hi < later else INCONCLUSIVE)
            shown = (
                f"{fmt_len(r['v'])} [{fmt_len(lo)}–{fmt_len(hi)}]"
                if pd.notna(r["v"])
                else f"{r.get('relation') or ''} {fmt_len(hi if lo == 0 else lo)}"
            )
            few = "contains" if lo <= hi_k and hi >= lo_k else "excludes"
            v.evidence.append(
                f"{label}: measured op-level crossover on {hw}: {shown} (its bracket {few} {fmt_len(lo_k)}–{fmt_len(hi_k)}); "
                f"analytic for the same machine and shape {fmt_len(a)}; timing spread (p25–p75) {s:.0%}: measured / analytic in "
                f"[{r_lo:.2f}, {r_hi:.2f}] -> "
                f"{'later by ' + format(later, 'g') + 'x or more' if v.parts[label] == SUPPORTED else 'not ' + format(later, 'g') + 'x later' if v.parts[label] == NOT_SUPPORTED else 'undecided within the spread'}: "
                f"{v.parts[label]}"
            )
            break
        else:
            v.evidence.append(f"{label}: no measured op-level crossover recorded")
    if not found:
        return Verdict()
    v.projected_only = not measured
    # the headline verdict from the measured parts (the practice half); the theory half comes from
    # FLOP and byte counts, shown beside it as projected
    v.projected_parts = [k for k in v.parts if k.startswith("theory")]
    use = v.parts if v.projected_only else {k: x for k, x in v.parts.items() if k not in v.projected_parts}
    v.verdict = combine_parts(use.values())
    v.models = ["lightning (op)", "softmax (op)"]
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items())
    v.change = f"crossover intervals (more calls near each crossover) that move across {fmt_len(lo_k)}-{fmt_len(hi_k)}"
    v.evidence.append("parts: " + "; ".join(f"{k} {x}" for k, x in v.parts.items()))
    return v


# ---------------------------------------------------------------- C5


def judge_c5b(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    """Speed, per phase and scope: every scope shown with its verdict, the claim's scope judged."""
    v = Verdict()
    judged: dict[str, str] = {}
    for phase in ("prefill", "decode"):
        claim = t[phase]
        d = metric(df, f"msa_speedup/{phase}")
        d = d[d["v"].notna() & (d["vs"] == t["vs"]) & (d["hardware"] == t["hardware"]) & (d["context_len"] == t["length"])]
        for scope in [t["scope"]] + sorted(set(d["scope"].dropna()) - {t["scope"]}):
            like = d[d["scope"] == scope]
            if like.empty:
                continue
            meas = like[like["status"] == "measured"]
            use = meas if not meas.empty else like
            value = float(use["v"].mean())
            ratio = value / claim
            verdict = SUPPORTED if ratio >= t["supported_frac"] else NOT_SUPPORTED if ratio < t["not_frac"] else PARTLY
            how = "measured" if not meas.empty else "projected by the cost model, no measured record carries M3 vs M2"
            mine = scope == t["scope"]
            v.parts[f"{phase}, {scope}" + ("" if mine else " (shown, not judged)")] = verdict
            v.evidence.append(
                f"{phase}: M3 vs {t['vs'].upper()}, {scope} only, {t['hardware'].upper()}, {fmt_len(t['length'])} tokens: "
                f"{value:.1f}x ({how}); claim ~{claim:g}x -> {ratio:.0%} of it: {verdict}" + ("" if mine else " (not the judged scope)")
            )
            if mine:
                judged[phase] = verdict
                v.projected_only |= meas.empty
                paper = t["paper"][phase]
                v.evidence.append(
                    f"{phase}, second source: {t['paper']['source']} reports {paper:g}x against {t['paper']['baseline']} on a "
                    f"{t['paper']['model']} model; the same {value:.1f}x is {value / paper:.0%} of it (shown, not judged: the "
                    f"write-up's {claim:g}x is the claim)"
                )
    if not judged:
        return Verdict()
    vals = list(judged.values())
    v.verdict = (
        NOT_SUPPORTED
        if NOT_SUPPORTED in vals
        else SUPPORTED
        if len(vals) == 2 and all(x == SUPPORTED for x in vals)
        else PARTLY
        if len(vals) == 2
        else INCONCLUSIVE
    )
    if len(vals) < 2:
        v.evidence.append(f"not recorded here: {', '.join(p for p in ('prefill', 'decode') if p not in judged)}")
    v.models = ["M3 preset", f"{t['vs'].upper()} preset"]
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items() if "not judged" not in k) + (
        f" (write-up {t['prefill']:g}x / {t['decode']:g}x; paper {t['paper']['prefill']:g}x / {t['paper']['decode']:g}x, "
        f"{t['paper']['attention_compute']:g}x less attention compute)"
    )
    v.evidence.append(
        f"{t['paper']['source']}: {t['paper']['attention_compute']:g}x less attention compute than {t['paper']['baseline']} "
        f"({t['paper']['model']} model), beside its {t['paper']['prefill']:g}x prefill and {t['paper']['decode']:g}x decode"
    )
    v.change = f"a measured M3 vs {t['vs'].upper()} time on {t['hardware'].upper()} ({t['scope']} scope)" + (
        "" if not v.projected_only else ": every number here is projected"
    )
    return v


def lookup_cells(df: pd.DataFrame, design: str, task: str | None) -> dict[float, Acc]:
    """Every length with an accuracy of ``design`` on ``task``: the evaluated cells (haystack as the
    unit) and the checks at the training length (train/acc; their records keep no per-probe
    results, so their interval is Wilson's over probes), pooled over runs and seeds."""
    out: dict[float, Acc] = {}
    d = metric(df, "niah/acc")
    for L in sorted(d[(d["design"] == design) & (d["status"] == "measured")]["context_len"].dropna().unique()):
        if (a := haystack_acc(df, "niah/acc", design, L, task=task)) is not None:
            out[float(L)] = a
    c = metric(df, "train/acc")
    c = c[(c["design"] == design) & (c["task"] == task) & (c["status"] == "measured")]
    for L, g in c.groupby("context_len"):
        a = pooled_acc(g)
        if a is not None and (float(L) not in out or a.n > out[float(L)].n):
            out[float(L)] = a
    return out


def judge_c5a(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    """Exact lookup: msa against softmax where both have enough probes (the 200-probe checks count)."""
    v = Verdict()
    task = experiment_task(df, "niah/acc")
    if metric(df, "niah/acc")[metric(df, "niah/acc")["design"] == "msa"].empty:
        return v
    if not needs_learned(v, df, ["softmax", "msa"], task, t, train):
        return v
    m, s = lookup_cells(df, "msa", task), lookup_cells(df, "softmax", task)
    both = [L for L in sorted(set(m) & set(s)) if min(m[L].n, s[L].n) >= t["min_probes"] and s[L].lo >= t["min_ref"]]
    if not both:
        v.verdict = INCONCLUSIVE
        v.evidence.append(
            f"inconclusive: no length where both have >= {t['min_probes']} probes and softmax's lower bound is >= {t['min_ref']}"
        )
        return v
    L = max(both)
    res = compare(m[L], s[L], t["gap"])
    lo, hi = deficit(m[L], s[L])
    seeds = sorted({int(x) for x in metric(df, "train/acc")[lambda x: x["design"].isin(["msa", "softmax"])]["seed"].dropna()})
    v.evidence.append(
        f"lookup at {fmt_len(L)} ({task}): msa {m[L].text()} ({m[L].fraction}) vs softmax {s[L].text()} ({s[L].fraction}); "
        f"msa's deficit in [{lo:.3f}, {hi:.3f}] -> {res} (by {t['gap']} or more); {m[L].how}; seeds {seeds}"
    )
    v.verdict = {"not below": SUPPORTED, "below": NOT_SUPPORTED}.get(res, INCONCLUSIVE)
    v.models = ["msa", "softmax"]
    v.headline = f"msa's deficit against softmax at {fmt_len(L)}: [{lo:.3f}, {hi:.3f}] ({m[L].fraction} vs {s[L].fraction})"
    v.change = (
        f"more probes or seeds whose deficit interval reaches {t['gap']}"
        if v.verdict == SUPPORTED
        else f"more probes or seeds whose deficit interval falls under {t['gap']}"
    )
    return v
