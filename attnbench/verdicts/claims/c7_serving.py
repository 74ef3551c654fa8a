"""Claim C7 (serving readiness, exp=serving); the decision report draws its records as the
"serving" table (attnbench/report/tables/readiness.py).

Three parts, each its own verdict (judge.py holds the quotes and the rule text):

- low-precision state: at the longest length where the hybrid and softmax both have >= min_probes
  probes in fp32 and in fp8 (e4m3) and both fp32 lower bounds are >= min_ref, each design's loss
  interval is [fp32 low - fp8 high, fp32 high - fp8 low] (the hybrid's with its state stored after
  every chunk where recorded); the hybrid's loss lower bound above softmax's loss upper bound:
  supported; the hybrid's loss upper bound below softmax's loss lower bound + gap (an extra loss of
  gap excluded): not supported; else inconclusive.
- prefix caching: Text-01's projected prefix cost against M2's (tokens recomputed on a hit between
  saved states, bytes to keep the saved states): an overhead where M2 has none: supported
  (projected only); none: not supported.
- speculative decoding: the measured verify-k speedup at k = max_k (k single steps / one forward
  of k, paired by repeat, p25-p75), on one device both were timed on (a GPU where there is one), after
  the longest context both were timed at: the hybrid's p75 below softmax's p25: supported; its p25
  above softmax's p75: not supported; else inconclusive; rollback bytes shown beside it.

Engine maturity (the claim's words "lacked mature support") is no part: its dated, sourced table
(c7_engines.py) is appended to the evidence, unjudged.
"""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.claims.c7_engines import engine_lines  # the engines' state: data, not a verdict
from attnbench.verdicts.readings import metric

from attnbench.basics import fmt_bytes, fmt_len
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_MEASURED_YET, NOT_SUPPORTED, SUPPORTED, Verdict, combine_parts

FP8 = "float8_e4m3fn"
SERVING_METRICS = (  # shown in the serving table and C7, not in the report's "other" table
    "serving/acc",
    "serving/chain_acc",
    "serving/cache_bytes",
    "serving/verify_ms",
    "serving/verify_speedup",
    "serving/rollback_bytes",
    "serving/prefix_bytes",
    "serving/prefix_plain_bytes",
    "serving/prefix_recompute_tokens",
)


def _col(d: pd.DataFrame, col: str, want) -> pd.DataFrame:
    return d[d[col] == want] if col in d.columns else d.iloc[0:0]


def _acc(df: pd.DataFrame, design: str, length, fmt: str, when: str) -> pd.Series | None:
    d = _col(_col(_col(metric(df, "serving/acc"), "fmt", fmt), "when", when), "context_len", length)
    d = d[(d["design"] == design) & (d["status"] == "measured")]
    # several runs of one cell (a GPU run's 5 probes beside the CPU run's 100): the most probes stand
    return None if d.empty else d.sort_values("n", kind="stable").iloc[-1]


def _hybrid(df: pd.DataFrame, order: list[str]) -> str | None:
    names = set(metric(df, "serving/acc")["design"])
    return next((h for h in order if h in names), None)


def judge_storage(df: pd.DataFrame, t: dict, hybrid: str) -> tuple[str, list[str]]:
    acc = metric(df, "serving/acc")
    lengths = sorted({n for n in acc["context_len"].dropna()}, reverse=True)
    for n in lengths:
        loss = {}
        for design in (hybrid, "softmax"):
            base = _acc(df, design, n, "float32", "end")
            low = _acc(df, design, n, FP8, "chunk") if design == hybrid else None
            low = low if low is not None else _acc(df, design, n, FP8, "end")
            if base is None or low is None or min(base["n"], low["n"]) < t["min_probes"] or base["ci_low"] < t["min_ref"]:
                break
            loss[design] = (base["ci_low"] - low["ci_high"], base["ci_high"] - low["ci_low"], base, low)
        if len(loss) < 2:
            continue
        h, s = loss[hybrid], loss["softmax"]
        ev = [
            f"{fmt_len(n)}: {d} fp32 {r[2]['value']:.2f} [{r[2]['ci_low']:.2f}, {r[2]['ci_high']:.2f}], fp8 e4m3 ({r[3]['when']}) "
            f"{r[3]['value']:.2f} [{r[3]['ci_low']:.2f}, {r[3]['ci_high']:.2f}]: loss [{r[0]:+.2f}, {r[1]:+.2f}]"
            for d, r in ((hybrid, h), ("softmax", s))
        ]
        if h[0] > s[1]:
            return SUPPORTED, ev
        if h[1] < s[0] + t["gap"]:
            return NOT_SUPPORTED, ev
        return INCONCLUSIVE, ev
    if acc.empty:
        return NOT_MEASURED_YET, ["no serving/acc records (exp=serving)"]
    return INCONCLUSIVE, [
        f"no length where {hybrid} and softmax both have >= {t['min_probes']} probes in fp32 and fp8 with fp32 lower bound >= {t['min_ref']}"
    ]


def _projected(df: pd.DataFrame, name: str, preset: str, **where) -> float | None:
    d = _col(metric(df, name), "preset", preset)
    for k, v in where.items():
        d = _col(d, k, v)
    return None if d.empty else float(d["v"].iloc[-1])


def judge_prefix(df: pd.DataFrame, t: dict) -> tuple[str, list[str]]:
    P = t["prefix_len"]
    got: dict[str, tuple[float, float]] = {}
    for p in ("minimax_text01", "minimax_m2"):
        r, b = _projected(df, "serving/prefix_recompute_tokens", p), _projected(df, "serving/prefix_bytes", p, context_len=P)
        if r is None or b is None:
            return NOT_MEASURED_YET, ["no projected prefix-cache records for the Text-01 and M2 presets (exp=serving)"]
        got[p] = (r, b)
    ev = [
        f"{p}: {r:.1f} tokens recomputed on an average hit, {fmt_bytes(b)} kept to serve a {fmt_len(P)} prefix (bf16, states every 256)"
        for p, (r, b) in got.items()
    ]
    over = got["minimax_text01"][0] > got["minimax_m2"][0]
    return (SUPPORTED if over else NOT_SUPPORTED), ev


def judge_speculative(df: pd.DataFrame, t: dict, hybrid: str) -> tuple[str, list[str]]:
    d = _col(metric(df, "serving/verify_speedup"), "k", t["max_k"])
    d = d[d["status"] == "measured"]
    rows = {x: d[d["design"] == x] for x in (hybrid, "softmax")}
    if any(r.empty for r in rows.values()):
        return NOT_MEASURED_YET, [f"no measured verify-k records at k = {t['max_k']} for {hybrid} and softmax"]
    if "device" in d.columns:  # timings compare on one device: a GPU both were timed on, else the CPU
        shared = set(rows[hybrid]["device"].dropna()) & set(rows["softmax"]["device"].dropna())
        if shared:
            dev = "cuda" if "cuda" in shared else sorted(shared)[0]
            rows = {x: r[r["device"] == dev] for x, r in rows.items()}
    both = set(rows[hybrid]["context_len"]) & set(rows["softmax"]["context_len"]) if "context_len" in d.columns else set()
    if both:  # the longest context both were timed after
        rows = {x: r[r["context_len"] == max(both)] for x, r in rows.items()}
    h, s = rows[hybrid].iloc[-1], rows["softmax"].iloc[-1]
    ev = [
        f"verify {t['max_k']} drafts at once vs {t['max_k']} steps ({r['hardware']}, {r.get('device', '?')}, {fmt_len(r['context_len'])}): {d_}: {r['value']:.2f}x (p25-p75 {r['p25']:.2f}-{r['p75']:.2f})"
        for d_, r in ((hybrid, h), ("softmax", s))
    ]
    rb = metric(df, "serving/rollback_bytes")
    for design in (hybrid, "softmax"):
        r = _col(_col(rb, "k", t["max_k"]), "method", "snapshot")
        r = r[r["design"] == design]
        if not r.empty:
            ev.append(f"{design}: {fmt_bytes(float(r['v'].iloc[-1]))} kept to roll back (measured snapshot)")
    if h["p75"] < s["p25"]:
        return SUPPORTED, ev
    if h["p25"] > s["p75"]:
        return NOT_SUPPORTED, ev
    return INCONCLUSIVE, ev


def judge_c7(df: pd.DataFrame, t: dict, train: pd.DataFrame | None = None) -> Verdict:
    order = [x.strip() for x in t["hybrids"].split(",")]
    hybrid = _hybrid(df, order) or order[0]
    v = Verdict()
    parts = {
        f"low-precision state ({hybrid} vs softmax, fp8)": judge_storage(df, t, hybrid),
        "prefix caching (Text-01 vs M2, projected)": judge_prefix(df, t),
        f"speculative decoding ({hybrid} vs softmax, measured)": judge_speculative(df, t, hybrid),
    }
    for label, (verdict, ev) in parts.items():
        v.parts[label] = verdict
        v.evidence += [f"{label}: {e}" for e in ev]
    projected = "prefix caching (Text-01 vs M2, projected)"
    measured = [p for label, (p, _) in parts.items() if label != projected and p != NOT_MEASURED_YET]
    if not measured and parts[projected][0] == NOT_MEASURED_YET:
        v.verdict = NOT_MEASURED_YET
    elif not measured:  # only the projection: its verdict, said to be one
        v.verdict, v.projected_only = parts[projected][0], True
    else:  # the headline verdict from the measured parts; the projected part shown beside it
        v.verdict = combine_parts(measured)
        v.projected_parts = [projected]
    v.evidence += engine_lines()  # beside the parts, never judged: no measurement here reaches an engine's maturity
    v.models = [hybrid, "softmax"]
    v.headline = "; ".join(f"{k}: {x}" for k, x in v.parts.items())
    timed_on_gpu = "cuda" in set(_col(metric(df, "serving/verify_speedup"), "status", "measured").get("device", pd.Series(dtype=object)))
    v.change = "fp8 accuracy of the hybrid vs softmax at a longer context both still retrieve at" + (
        "; verify-k on a GPU at a model size where a forward is not launch-bound" if timed_on_gpu else "; a verify-k timing on a GPU"
    )
    return v
