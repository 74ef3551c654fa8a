"""The claims attnbench tests (DESIGN.md C1-C6), each with its source quote and a verdict rule.

A verdict comes only from records: no records, "not yet measured". Each rule is written out
in ``rule`` so a reader can check it; thresholds are the claims' own numbers where they have
one. Verdicts on trained models hold "at this scale" (tiny models, short contexts): the
caveats section of the report says so. Quotes are verbatim from ../shared/seeds/ (a test
checks that where the seeds are present).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from .data import LEN_1M, fmt_bytes, fmt_len, is_preset, metric, pooled

SEED_000 = "seed 000, \u201cMiniMax: Lightning Attention, Agents, and What They Tried\u201d"
SEED_001 = "seed 001, MiniMax-01 release article"

SUPPORTED, NOT_SUPPORTED, PARTLY, INCONCLUSIVE, NOT_MEASURED = (
    "supported", "not supported", "partly supported", "inconclusive", "not yet measured")


@dataclass
class Verdict:
    verdict: str = NOT_MEASURED
    evidence: list[str] = field(default_factory=list)
    projected_only: bool = False  # every number behind the verdict comes from the cost model

    @property
    def kind(self) -> str:  # css class
        return self.verdict.replace(" ", "-").replace("yet-", "")


@dataclass
class Claim:
    id: str
    text: str
    quotes: list[tuple[str, str]]  # (verbatim quote, source)
    experiment: str
    rule: str
    judge: Callable[[pd.DataFrame], Verdict]


def _ok(df: pd.DataFrame, status=("measured",)) -> pd.DataFrame:
    return df[df["status"].isin(status) & df["v"].notna()]


def _acc(df: pd.DataFrame, name: str, design: str, length=None) -> float:
    d = pooled(_ok(metric(df, name)))
    d = d[d["design"] == design]
    if length is not None:
        d = d[d["context_len"] == length]
    return float(d["v"].mean()) if not d.empty else float("nan")


# ---------------------------------------------------------------- C1

TEXT01 = r"text.?01|minimax.?01|\bm1\b"
TEXT01_BYTES = 8 * 128 * 2 * 2 * 10  # 40,960 B: 8 KV heads x 128 dims x K,V x 2 B x 10 softmax layers


def judge_c1(df: pd.DataFrame) -> Verdict:
    d = _ok(metric(df, "memory/cache_bytes_per_token"), ("measured", "projected"))
    p = d[is_preset(d) & d["preset"].astype(str).str.contains(TEXT01, case=False, regex=True)]
    v = Verdict()
    if p.empty:
        return v
    bf16 = p[p["dtype"].astype(str).str.lower().isin(["bf16", "bfloat16", "torch.bfloat16"])]
    use = bf16 if not bf16.empty else p
    value = float(use["v"].iloc[-1])
    v.projected_only = (use["status"] == "projected").all()
    v.evidence.append(f"{use['preset'].iloc[-1]} ({use['dtype'].iloc[-1]}): {fmt_bytes(value)} per token "
                      f"({value:,.0f} B; claim {TEXT01_BYTES:,} B)")
    if bf16.empty:
        v.evidence.append("no BF16 record: compared in the dtype recorded")
    v.verdict = SUPPORTED if abs(value - TEXT01_BYTES) <= 0.02 * TEXT01_BYTES else NOT_SUPPORTED
    own = _ok(metric(df, "memory/cache_bytes_per_token"), ("measured",))
    own = own[~is_preset(own)]
    hyb, soft = own[own["design"] == "lightning_hybrid"]["v"], own[own["design"] == "softmax"]["v"]
    if not hyb.empty and not soft.empty and soft.mean() > 0:
        v.evidence.append(f"this model: lightning_hybrid keeps {hyb.mean() / soft.mean():.3f} of softmax's growing "
                          f"cache per token (the Text-01 layout's 10/80 = 0.125), measured")
    return v


# ---------------------------------------------------------------- C2, C5 (lookup), C6: retrieval


def _longest_common(df: pd.DataFrame, a: str, b: str) -> float:
    d = _ok(metric(df, "niah/acc"))
    la, lb = set(d[d["design"] == a]["context_len"].dropna()), set(d[d["design"] == b]["context_len"].dropna())
    common = la & lb
    return max(common) if common else float("nan")


LEARNED = 0.9  # train/acc at the training length below which a design "did not learn the task"


def judge_c2(df: pd.DataFrame) -> Verdict:
    d = _ok(metric(df, "niah/acc"))
    d = d[d["design"] == "lightning_hybrid"]
    v = Verdict()
    if d.empty:
        return v
    longest = d["context_len"].max()
    train = d["train_len"].max()
    at = d[d["context_len"] == longest]
    acc = pooled(at)["v"]
    depths = at.loc[at["depth"].notna(), "v"]
    worst = f", min over depths {depths.min():.3f}" if not depths.empty else ""
    v.evidence.append(f"lightning_hybrid NIAH accuracy at {fmt_len(longest)} tokens: {acc.mean():.3f} "
                      f"({len(acc)} records{worst})")
    soft = _acc(df, "niah/acc", "softmax", longest)
    if pd.notna(soft):
        v.evidence.append(f"softmax at the same length: {soft:.3f}")
    if pd.isna(train) or train <= 0:
        v.evidence.append("no train_len recorded: extrapolation factor unknown")
        v.verdict = INCONCLUSIVE
        return v
    factor = longest / train
    v.evidence.append(f"trained at {fmt_len(train)}: tested at {factor:g}x the training length (claim: 4x)")
    learned = _acc(df, "train/acc", "lightning_hybrid")
    if pd.notna(learned) and learned < LEARNED:
        # a model that cannot retrieve at its own training length says nothing about extrapolation
        v.evidence.append(f"lightning_hybrid single-needle accuracy at its training length: {learned:.3f} "
                          f"(below {LEARNED}: it did not learn the task)")
        v.verdict = INCONCLUSIVE
    elif acc.mean() < 0.9:
        v.verdict = NOT_SUPPORTED
    elif factor < 4:
        v.verdict = INCONCLUSIVE
    else:
        v.verdict = SUPPORTED if acc.mean() >= 0.99 else PARTLY
    return v


def judge_c6(df: pd.DataFrame) -> Verdict:
    v = Verdict()
    length = _longest_common(df, "lightning", "softmax")
    if pd.isna(length):
        return v
    lin, soft = _acc(df, "niah/acc", "lightning", length), _acc(df, "niah/acc", "softmax", length)
    v.evidence.append(f"NIAH accuracy at {fmt_len(length)}: lightning {lin:.3f}, softmax {soft:.3f}")
    state = _ok(metric(df, "memory/fixed_state_bytes"), ("measured", "projected"))
    state = state[(state["design"] == "lightning") & ~is_preset(state)]["v"]
    if not state.empty:
        v.evidence.append(f"lightning's fixed state: {fmt_bytes(state.mean())}, whatever the length")
    if soft < 0.8:
        v.evidence.append("softmax itself retrieves below 0.8 here: the task does not separate the designs")
        v.verdict = INCONCLUSIVE
    else:
        v.verdict = SUPPORTED if lin <= soft - 0.2 else (PARTLY if lin < soft - 0.05 else NOT_SUPPORTED)
    return v


# ---------------------------------------------------------------- C3


def _ci_below(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """a is below b: confidence intervals apart when recorded, else by more than 0.05."""
    if a["ci_high"].notna().all() and b["ci_low"].notna().all():
        return a["ci_high"].mean() < b["ci_low"].mean()
    return a["v"].mean() < b["v"].mean() - 0.05


def judge_c3(df: pd.DataFrame) -> Verdict:
    d = _ok(metric(df, "multihop/acc"))
    v = Verdict()
    soft = d[d["design"] == "softmax"]
    if soft.empty or d[d["design"] == "lightning_hybrid"].empty:
        return v
    verdicts = {}
    for name in ("lightning_hybrid", "swa_hybrid"):
        own = d[d["design"] == name]
        cells = sorted(set(zip(own["hops"], own["context_len"])) & set(zip(soft["hops"], soft["context_len"])))
        if not cells:
            continue
        hops, length = max(cells)
        o = own[(own["hops"] == hops) & (own["context_len"] == length)]
        s = soft[(soft["hops"] == hops) & (soft["context_len"] == length)]
        below = _ci_below(o, s)
        verdicts[name] = below
        v.evidence.append(f"{hops:g} hops at {fmt_len(length)}: {name} {o['v'].mean():.3f} vs softmax "
                          f"{s['v'].mean():.3f} ({'deficit' if below else 'no clear deficit'})")
    if "lightning_hybrid" not in verdicts:
        return v
    if soft["v"].max() < 0.5:
        v.evidence.append("softmax stays below 0.5 on every cell: the task is too hard at this scale to separate them")
        v.verdict = INCONCLUSIVE
    elif verdicts["lightning_hybrid"]:
        v.verdict = SUPPORTED if verdicts.get("swa_hybrid", True) else PARTLY
    else:
        v.verdict = NOT_SUPPORTED
    return v


# ---------------------------------------------------------------- C4


def judge_c4(df: pd.DataFrame) -> Verdict:
    v = Verdict()
    d = metric(df, "crossover/prefill_len")
    d = d[d["design"].isin(["lightning", "lightning_hybrid"]) & d["v"].notna() & d["status"].isin(["measured", "projected"])]
    if d.empty:
        return v
    analytic = d[(d["method"] == "analytic") | (d["status"] == "projected")]
    measured = d[(d["method"] != "analytic") & (d["status"] == "measured")]
    for _, r in d.iterrows():
        how = "analytic" if r["method"] == "analytic" or r["status"] == "projected" else "measured"
        where = f", {r['device']}" if pd.notna(r["device"]) else ""
        where += f", backend {r['backend']}" if pd.notna(r["backend"]) else ""
        v.evidence.append(f"{r['design']} vs {r['vs'] or 'softmax'}, prefill: {fmt_len(r['v'])} tokens ({how}{where})")
    few_thousand = not analytic.empty and analytic["v"].between(1_000, 16_384).all()
    if measured.empty:
        v.projected_only = True
        v.verdict = PARTLY if few_thousand else NOT_SUPPORTED
        v.evidence.append("no measured crossover yet: only the theory half of the claim is tested")
        return v
    later = analytic.empty or (measured["v"].min() > analytic["v"].max())
    if few_thousand and later:
        v.verdict = SUPPORTED
    elif few_thousand or later:
        v.verdict = PARTLY
    else:
        v.verdict = NOT_SUPPORTED
    return v


# ---------------------------------------------------------------- C5


def judge_c5(df: pd.DataFrame) -> Verdict:
    v = Verdict()
    ratios = []
    for phase, claim in (("prefill", 9.0), ("decode", 15.0)):
        d = metric(df, f"msa_speedup/{phase}")
        d = d[d["status"].isin(["measured", "projected"]) & d["v"].notna()]
        if d.empty:
            continue
        at = d[d["context_len"] == LEN_1M]
        at = at if not at.empty else d[d["context_len"] == d["context_len"].max()]
        meas = at[(at["status"] == "measured") & (at["method"] != "analytic")]
        use = meas if not meas.empty else at
        value = float(use["v"].mean())
        how = "measured" if not meas.empty else "analytic"
        ratios.append((value / claim, how))
        v.evidence.append(f"{phase}: {value:.1f}x at {fmt_len(use['context_len'].iloc[0])} ({how}; claim ~{claim:g}x at 1M)")
        if how == "analytic":
            m = d[(d["status"] == "measured") & (d["method"] != "analytic")]
            if not m.empty:
                top = m[m["context_len"] == m["context_len"].max()]
                v.evidence.append(f"{phase} measured up to {fmt_len(top['context_len'].iloc[0])}: {top['v'].mean():.1f}x")
    length = _longest_common(df, "msa", "softmax")
    if pd.notna(length):
        msa, soft = _acc(df, "niah/acc", "msa", length), _acc(df, "niah/acc", "softmax", length)
        v.evidence.append(f"exact lookup: NIAH accuracy at {fmt_len(length)}: msa {msa:.3f}, softmax {soft:.3f}")
    if not ratios:
        if pd.notna(length):
            v.verdict = INCONCLUSIVE
            v.evidence.append("no speedup records yet: only the lookup half is measured")
        return v
    v.projected_only = all(how == "analytic" for _, how in ratios)
    worst = min(r for r, _ in ratios)
    best = max(r for r, _ in ratios)
    v.verdict = SUPPORTED if worst >= 0.75 else (NOT_SUPPORTED if best < 0.5 else PARTLY)
    return v


CLAIMS = [
    Claim("C1", "Text-01 keeps a growing cache in only 10 of 80 layers: ~40 KiB per token in BF16 "
                "(8 KV heads x 128 dims x K,V x 2 B x 10 layers = 40,960 B)",
          [("So Text-01 mixes the two: seven lightning layers, then one softmax layer, repeated ten times. "
            "Only 10 of its 80 layers keep a cache that grows with the context, about 40 KiB per token in BF16.", SEED_000)],
          "kv_memory", "supported if the Text-01 preset's BF16 cache per token is 40,960 B within 2%",
          judge_c1),
    Claim("C2", "Text-01: 100% needle-in-a-haystack retrieval at 4M tokens, trained at 1M (4x extrapolation)",
          [("In MiniMax's own \"Needle-In-A-Haystack\" test at 4 million tokens, the model reported 100 percent "
            "retrieval accuracy.", SEED_001),
           ("trained with contexts \"up to 1 million tokens\" and able to \"extrapolate to 4 million tokens during "
            "inference\"", SEED_000)],
          "needle_4m", "lightning_hybrid at its longest tested length: below 0.90 not supported; tested at >= 4x "
                       "the training length: >= 0.99 supported, else partly; at < 4x inconclusive",
          judge_c2),
    Claim("C3", "M2: the lightning hybrid showed deficits on multi-hop reasoning at scale; a sliding-window "
                "hybrid \"wasn't good enough\"",
          [("The lightning hybrid matched full attention on the benchmarks of the time, but \"at a larger scale ... "
            "had clear deficits in complex, multi-hop reasoning tasks\", the kind agents rely on.", SEED_000),
           ("A sliding-window hybrid they also tried \"wasn't good enough\".", SEED_000)],
          "multihop", "at the most hops and longest length both were run: lightning_hybrid below softmax "
                      "(confidence intervals apart, or by > 0.05 without them) supported, and partly if "
                      "swa_hybrid is not also below; inconclusive while softmax stays under 0.5",
          judge_c3),
    Claim("C4", "Linear attention is cheaper than full attention only past a few thousand tokens in theory, "
                "and much later in practice",
          [("Linear attention only becomes cheaper than full attention past a context length that, \"in theory\", "
            "is a few thousand tokens, and in practice, with optimized full-attention kernels, much more.", SEED_000)],
          "crossover", "analytic prefill crossover (lightning vs softmax) within 1K-16K and the measured one "
                       "later: supported; one of the two: partly",
          judge_c4),
    Claim("C5", "M3 (MSA): ~9x faster prefill and ~15x faster decode than M2 at 1M tokens; every layer keeps a "
                "full cache, so any token can be looked up exactly",
          [("MiniMax reports 9 times faster prefill and 15 times faster decoding than M2 at a million tokens.", SEED_000),
           ("sparse attention keeps everything, so any earlier token can still be looked up exactly, and saves "
            "time by reading only a little of it.", SEED_000)],
          "msa_speedup, needle_4m", "speedups at 1M (else the longest length) at least 75% of the claim: "
                                    "supported; both under 50%: not supported; else partly",
          judge_c5),
    Claim("C6", "Linear attention keeps a fixed-size state and cannot look up an exact earlier token",
          [("The price is that the summary is lossy: the model cannot look up an exact earlier token the way full "
            "attention can.", SEED_000)],
          "needle_4m (pure lightning row)", "at the longest length both were tested: lightning at least 0.2 below "
                                            "softmax supported, 0.05-0.2 partly, else not supported; inconclusive "
                                            "while softmax itself is under 0.8",
          judge_c6),
]


def judge_all(df: pd.DataFrame) -> list[tuple[Claim, Verdict]]:
    out = []
    for claim in CLAIMS:
        try:
            verdict = claim.judge(df)
        except Exception as ex:  # a malformed record must not take the report down
            verdict = Verdict(INCONCLUSIVE, [f"could not evaluate: {type(ex).__name__}: {ex}"])
        out.append((claim, verdict))
    return out
