"""The cost claims' rules (C4: lightning vs softmax time per token; C5: MSA vs softmax speed-up),
split from claims.py, which lists every claim (``CLAIMS``) and re-exports these judges."""

from __future__ import annotations

import math

import pandas as pd

from .data import NOT_MEASURED, fmt_len, metric
from .quality import experiment_task
from .verdicts import INCONCLUSIVE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, acc_at, compare, needs_learned, reference_lengths


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
    theory, practice = {}, {}
    for phase in ("prefill", "decode"):
        d = metric(df, f"crossover/{phase}_len")
        d = d[(d["design"] == "lightning") & (d["scope"] == "op")]
        gpu = d[d["status"].isin(NOT_MEASURED) & (d["impl"] == "fused") & d["v"].notna()]
        shape = "text01" if (gpu["shape"] == "text01").any() else "scaled"
        gpu = gpu[gpu["shape"] == shape]
        if not gpu.empty:
            inside = gpu["v"].between(lo_k, hi_k)
            theory[phase] = "yes" if inside.all() else ("no" if not inside.any() else "mixed")
            where = ", ".join(f"{r['hardware']} {fmt_len(r['v'])}" for _, r in gpu.iterrows())
            v.evidence.append(
                f"theory, {phase}: analytic op-level crossover at the {shape} shape, fused kernels: {where} "
                f"-> {'within' if theory[phase] == 'yes' else 'outside' if theory[phase] == 'no' else 'partly within'} "
                f"{fmt_len(lo_k)}–{fmt_len(hi_k)}"
            )
        meas = d[(d["status"] == "measured") & (d["method"] == "measured")]
        for _, r in meas.iterrows():
            hw = r["hardware"]
            ana = d[d["status"].isin(NOT_MEASURED) & (d["impl"] == "as run") & (d["shape"] == "scaled") & d["v"].notna()]
            if ana.empty:
                continue
            a = float(ana["v"].iloc[-1])
            lo, hi = _bracket(r)
            lengths = [x for x in (lo, hi) if 0 < x < math.inf]
            spread = timing_spread(df, phase, lengths)
            s = 0.0 if math.isnan(spread) else spread
            r_lo, r_hi = lo / (1 + s) / a, hi * (1 + s) / a
            later = t["later_factor"]
            practice[phase] = "yes" if r_lo >= later else ("no" if r_hi < later else "undecided")
            shown = (
                f"{fmt_len(r['v'])} [{fmt_len(lo)}–{fmt_len(hi)}]"
                if pd.notna(r["v"])
                else f"{r.get('relation') or ''} {fmt_len(hi if lo == 0 else lo)}"
            )
            v.evidence.append(
                f"practice, {phase}: measured op-level crossover on {hw}: {shown}; analytic for the same "
                f"machine and shape {fmt_len(a)}; timing spread (p25–p75) {s:.0%}: measured / analytic in "
                f"[{r_lo:.2f}, {r_hi:.2f}] -> "
                f"{'later by ' + format(later, 'g') + 'x or more' if practice[phase] == 'yes' else 'not ' + format(later, 'g') + 'x later' if practice[phase] == 'no' else 'undecided within the spread'}"
            )
            break
    if not theory and not practice:
        return v
    v.projected_only = not practice
    halves = []
    for name, part in (("theory", theory), ("practice", practice)):
        vals = set(part.values())
        halves.append(
            "none"
            if not vals
            else "yes"
            if vals == {"yes"}
            else "no"
            if vals == {"no"}
            else "undecided"
            if "undecided" in vals
            else "mixed"
        )
    if "no" in halves:
        v.verdict = NOT_SUPPORTED
    elif halves == ["yes", "yes"]:
        v.verdict = SUPPORTED
    elif "undecided" in halves or "none" in halves:
        v.verdict = INCONCLUSIVE
    else:
        v.verdict = PARTLY
    if "none" in halves:
        v.evidence.append(
            f"no {'measured' if halves[1] == 'none' else 'analytic'} op-level crossover recorded: only half of the claim is tested"
        )
    return v


# ---------------------------------------------------------------- C5


def judge_c5(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    parts = {}
    for phase in ("prefill", "decode"):
        claim = t[phase]
        d = metric(df, f"msa_speedup/{phase}")
        d = d[d["v"].notna() & (d["vs"] == t["vs"])]
        like = d[(d["scope"] == t["scope"]) & (d["hardware"] == t["hardware"]) & (d["context_len"] == t["length"])]
        if like.empty:
            continue
        meas = like[like["status"] == "measured"]
        use = meas if not meas.empty else like
        value = float(use["v"].mean())
        ratio = value / claim
        parts[phase] = SUPPORTED if ratio >= t["supported_frac"] else NOT_SUPPORTED if ratio < t["not_frac"] else PARTLY
        how = "measured" if not meas.empty else "projected by the cost model, no measured record carries M3 vs M2"
        v.evidence.append(
            f"{phase}: M3 vs {t['vs'].upper()}, {t['scope']} only, {t['hardware'].upper()}, "
            f"{fmt_len(t['length'])} tokens: {value:.1f}x ({how}); claim ~{claim:g}x -> {ratio:.0%} of it"
        )
        other = d[(d["scope"] != t["scope"]) & (d["hardware"] == t["hardware"]) & (d["context_len"] == t["length"])]
        for scope, g in other.groupby("scope"):
            v.evidence.append(f"  the same for the whole {scope}: {g['v'].mean():.1f}x ({g['status'].iloc[0]}; not judged)")
        v.projected_only |= meas.empty
    # exact lookup: msa keeps every token, so it should not fall below softmax
    task = experiment_task(df, "niah/acc")
    if not metric(df, "niah/acc")[metric(df, "niah/acc")["design"] == "msa"].empty:
        sub = Verdict()
        if needs_learned(sub, df, ["softmax", "msa"], task, t, train):
            lens = reference_lengths(df, "niah/acc", "msa", "softmax", t["min_ref"])
            if not lens:
                parts["lookup"] = INCONCLUSIVE
                sub.evidence.append(
                    f"lookup: softmax's 95% lower bound stays under {t['min_ref']} at every length both "
                    f"ran: the task separates nothing here"
                )
            else:
                L = max(lens)
                m, s = acc_at(df, "niah/acc", "msa", L), acc_at(df, "niah/acc", "softmax", L)
                assert m is not None and s is not None  # a reference length: both were measured there
                res = compare(m, s, t["gap"])
                parts["lookup"] = {"not below": SUPPORTED, "below": NOT_SUPPORTED}.get(res, INCONCLUSIVE)
                sub.evidence.append(
                    f"lookup at {fmt_len(L)}: msa {m.text()} vs softmax {s.text()} -> msa {res} softmax (by {t['gap']} or more)"
                )
        else:
            parts["lookup"] = INCONCLUSIVE
        v.evidence += sub.evidence
    if not parts:
        return v
    vals = list(parts.values())
    if NOT_SUPPORTED in vals:
        v.verdict = NOT_SUPPORTED
    elif all(x == SUPPORTED for x in vals) and len(vals) == 3:
        v.verdict = SUPPORTED
    elif INCONCLUSIVE in vals or len(vals) < 3:
        v.verdict = INCONCLUSIVE
        missing = [p for p in ("prefill", "decode", "lookup") if p not in parts]
        if missing:
            v.evidence.append(f"not recorded here: {', '.join(missing)}")
    else:
        v.verdict = PARTLY
    v.evidence.append("parts: " + ", ".join(f"{k} {x}" for k, x in parts.items()))
    return v
