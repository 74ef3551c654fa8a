"""The claims attnbench tests (docs/DESIGN.md C1-C7; C5 judged as C5a, lookup, and C5b, speed):
source quotes, thresholds, rules, verdicts. Here: each claim's entry (``CLAIMS``) and
``judge_all``; the judges are in verdicts/claims/c1_c2_text01.py (C1, C2), verdicts/claims/c3_multihop.py (C3),
verdicts/claims/c4_c5_cost.py (C4, C5a, C5b), verdicts/claims/c6_capacity.py (C6), verdicts/claims/c7_serving.py (C7) and
verdicts/claims/c3_scale.py (C3 at scale).

Each claim's thresholds live in its ``Claim`` entry (``thresholds``), and the rule a reader
sees is generated from them (``Claim.rule``), so the text cannot drift from the code. Every
rule follows the claim's own conditions (C2: 4x the true training length; C3: the k-hop chain
softmax learned; C6: key-value pairs against the state size) and the same discipline:

- a model that did not learn the task at its training length (quality.learned, the one
  definition) is not compared as a design: the claim is "inconclusive", naming it, or the
  rule shows it beside what it judges (C2: shown, not judged; C3: named as the reason for its
  deficit, never in its place; C6: listed as "did not learn", never evidence);
- it compares 95% interval bounds, never point estimates; where probes share a haystack, the
  interval counts the haystack as the unit (quality.haystack_acc);
- "not supported" needs evidence of absence: an interval that excludes the claimed effect;
  two designs that both fail make a task that separates nothing, which is "inconclusive";
- a number computed from a formula or the cost model says so (``projected_only``).

A verdict comes only from records: no records, "not yet measured". Verdicts on trained
models hold at this scale (tiny models, short contexts): the caveats section says so. Quotes
are verbatim from the project's seed write-ups (a test checks that where they are present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from attnbench.verdicts.claims.c6_capacity import judge_c6  # MQAR capacity against lightning state sizes (exp=capacity)
from attnbench.verdicts.claims.c4_c5_cost import judge_c4, judge_c5a, judge_c5b  # the cost claims (and C5's lookup half)
from attnbench.verdicts.claims.c3_scale import SCALE_RULE, with_scale  # C3 at scale (exp=scale): a sub-verdict of its own
from attnbench.verdicts.claims.c7_serving import judge_c7  # serving readiness (exp=serving)
from attnbench.verdicts.claims.c3_multihop import judge_c3  # multi-hop chains, the 7:1 hybrids and sliding-window against softmax
from attnbench.verdicts.claims.c1_c2_text01 import HYBRIDS, judge_c1, judge_c2  # Text-01's cache arithmetic and its retrieval
from attnbench.verdicts.readings import LEN_1M
from attnbench.basics import fmt_len
from attnbench.verdicts.quality import ACC_METRICS, LEARNED_LOWER_BOUND
from attnbench.verdicts import shipped
from attnbench.verdicts.rules import INCONCLUSIVE, NOT_MEASURED_YET, Verdict

SEED_000 = "seed 000, \u201cMiniMax: Lightning Attention, Agents, and What They Tried\u201d"
SEED_001 = "seed 001, MiniMax-01 release article"


@dataclass
class Claim:
    id: str
    text: str
    quotes: list[tuple[str, str]]  # (verbatim quote, source)
    experiment: str
    thresholds: dict
    rule_template: str  # str.format over the formatted thresholds
    judge: Callable[[pd.DataFrame, dict, pd.DataFrame | None], Verdict]
    seeded: bool = False  # its verdict rests on trained models: judged per seed too (SEED_RULE)
    seeds_within: bool = False  # its judge compares seed by seed itself (C3): judge_all lists each seed's verdict, does not override

    @property
    def rule(self) -> str:
        return self.rule_template.format(**{k: _fmt(k, v) for k, v in self.thresholds.items()})

    def __call__(self, df: pd.DataFrame, train: pd.DataFrame | None = None) -> Verdict:
        return self.judge(df, self.thresholds, train)


def _fmt(key: str, v):
    if isinstance(v, dict):  # a group of thresholds, read field by field ("{paper[prefill]}")
        return v
    if key in ("length", "few_thousand") and not isinstance(v, (tuple, list)):
        return fmt_len(v)
    if isinstance(v, (tuple, list)):
        return "–".join(_fmt(key, x) for x in v)
    if isinstance(v, float) and key.endswith(("_frac", "tolerance")) and v < 1:
        return f"{v:.0%}"
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------- the claims: quotes, thresholds, rules

LEARNED_RULE = "Needs {models} to have learned the task (95% lower bound >= {learned_lb} at the training length), else inconclusive. "
HAYSTACK_RULE = (
    "Intervals count the haystack as the unit: the wider of a percentile cluster bootstrap over haystacks (seeded) and "
    "the Wilson interval over probes; records that do not name each probe's haystack cannot meet a haystack count. "
)

CLAIMS = [
    Claim(
        "C1",
        "Text-01 keeps a growing cache in only 10 of 80 layers: ~40 KiB per token in BF16 "
        "(8 KV heads x 128 dims x K,V x 2 B x 10 layers = 40,960 B)",
        [
            (
                "So Text-01 mixes the two: seven lightning layers, then one softmax layer, repeated ten times. "
                "Only 10 of its 80 layers keep a cache that grows with the context, about 40 KiB per token in BF16.",
                SEED_000,
            )
        ],
        "kv_memory",
        {"bytes": 40960, "tolerance": 0.02},
        "Supported if the Text-01 preset's BF16 cache per token is within {tolerance} of {bytes} B, else not supported. "
        "The preset's bytes come from the cache formula (analytic); the measured part is that this model's cache "
        "objects hold exactly what the formula says.",
        judge_c1,
    ),
    Claim(
        "C2",
        "Text-01: 100% needle-in-a-haystack retrieval at 4M tokens, trained at 1M (4x extrapolation)",
        [
            (
                'In MiniMax\'s own "Needle-In-A-Haystack" test at 4 million tokens, the model reported 100 percent retrieval accuracy.',
                SEED_001,
            ),
            ('trained with contexts "up to 1 million tokens" and able to "extrapolate to 4 million tokens during inference"', SEED_000),
        ],
        "needle_4m, position_probe",
        {
            "learned_lb": LEARNED_LOWER_BOUND,
            "factor": 4,
            "retrieval": 0.95,
            "min_probes": 200,
            "min_haystacks": 40,
            "model": "tiny",
            "hybrids": ", ".join(HYBRIDS),
        },
        "The vendor's test is a single needle: single-needle retrieval (one needle a context, so each probe its own "
        "haystack; exp=scale's records on the {model} backbone the other experiments use) at {factor}x each learned 7:1 "
        "hybrid's true training length (the longest curriculum stage it passed), the claim's ratio. Each needs to have "
        "learned the task (95% lower bound >= {learned_lb} at its training length); one that did not is shown, not "
        "judged. Decidable only with >= {min_probes} probes from >= {min_haystacks} haystacks at every seed; then, seeds "
        "pooled (Wilson over probes), the claim's 100 percent: supported if the lower bound is >= {retrieval}, not "
        "supported if the upper bound is < {retrieval}, else inconclusive. Multi-key needles at the same length (a harder "
        "variant) and at 4M are shown beside it without a verdict. The headline is Text-01's configuration if it learned, "
        "else the first learned hybrid in a fixed order of closeness to Text-01 ({hybrids}); every learned hybrid is shown.",
        judge_c2,
        seeded=True,
    ),
    Claim(
        "C3",
        'M2: the lightning hybrid showed deficits on multi-hop reasoning at scale; a sliding-window hybrid "wasn\'t good enough"',
        [
            (
                'The lightning hybrid matched full attention on the benchmarks of the time, but "at a larger scale ... '
                'had clear deficits in complex, multi-hop reasoning tasks", the kind agents rely on.',
                SEED_000,
            ),
            ('A sliding-window hybrid they also tried "wasn\'t good enough".', SEED_000),
        ],
        "multihop",
        {"learned_lb": LEARNED_LOWER_BOUND, "hops": (2, 3), "length": 1024, "gap": 0.1, "matched": 0.05, "min_probes": 100, "min_ref": 0.5},
        "Two parts, as the claim has two, each judged seed by seed on a pair of chain models (the hybrid's and softmax's "
        "at that seed) trained under one rule; a pair of two rules is not compared, and says so. Matched on simple tasks: "
        "1-hop chains at the pair's common training length (the shorter of the two true training lengths), softmax minus "
        "the hybrid within +-{matched} by its interval: supported; outside it: not supported. A clear multi-hop deficit: "
        "at {hops} hops (fixed before the data were read), at the common training length and at {length}, with >= "
        "{min_probes} probes a cell and softmax's lower bound >= {min_ref} (a cell softmax fails separates nothing), softmax minus the hybrid (bounds from the two 95% intervals: [softmax low - hybrid "
        "high, softmax high - hybrid low]); a cell shows the deficit when its lower bound is above {gap} at every "
        "compared seed (the seed is the unit: no pooling across seeds). Some pre-stated cell shows it: supported; every "
        "measured cell excludes it (upper bound below {gap}) at every seed: not supported; else inconclusive. A hybrid "
        "that did not learn a chain at its training length (95% lower bound < {learned_lb}) is named as the reason for "
        "its deficit, never in its place. Every seed of the comparison is under one rule: the rule most compared seeds "
        "share; a seed whose pair ran under another is listed and dropped until retrained (a model that finished every "
        "stage before any limit of its version counts under a version that differs only in limits it never reached: "
        "those limits changed none of its steps). The claim: the deficit shown "
        "and the match supported: supported; the deficit shown, the match not supported or undecided: partly; the "
        "deficit excluded: not supported; else inconclusive. The headline is the first 7:1 "
        "hybrid in order of closeness to Text-01 with chain records; the sliding-window hybrid (the claim's second "
        "sentence) is judged by the deficit rule and shown as its own part (its deficit excluded turns a supported "
        "claim into partly). " + HAYSTACK_RULE + "Floors: simple policies run on the generator, each listed." + SCALE_RULE,
        with_scale(judge_c3, HYBRIDS),
        seeded=True,
        seeds_within=True,
    ),
    Claim(
        "C4",
        "Linear attention is cheaper than full attention only past a few thousand tokens in theory, and much later in practice",
        [
            (
                'Linear attention only becomes cheaper than full attention past a context length that, "in theory", '
                "is a few thousand tokens, and in practice, with optimized full-attention kernels, much more.",
                SEED_000,
            )
        ],
        "crossover",
        {"few_thousand": (1024, 16384), "later_factor": 2.0},
        "Op-level crossovers of lightning against softmax, one verdict per phase (prefill, decode) and per half. Theory "
        "(from FLOP and byte counts on every GPU profile, fused kernels, Text-01's shape; analytic): the crossover lies "
        "within {few_thousand} tokens: supported; outside on every profile: not supported; mixed: partly. Practice "
        "(as measured on this CPU): the measured crossover is >= {later_factor}x the analytic one for the same machine "
        "and shape, judged on the measured bracket widened by the timing spread (p25–p75 of the op times): supported; "
        "< {later_factor}x: not supported; else inconclusive. The claim: every part supported: supported; parts "
        "supported and parts not: partly; none supported and some not: not supported; else inconclusive.",
        judge_c4,
    ),
    Claim(
        "C5a",
        "M3 (MSA): every layer keeps a full cache, so any token can be looked up exactly",
        [
            (
                "sparse attention keeps everything, so any earlier token can still be looked up exactly, and saves "
                "time by reading only a little of it.",
                SEED_000,
            )
        ],
        "needle_4m (msa against softmax)",
        {"learned_lb": LEARNED_LOWER_BOUND, "min_ref": 0.5, "gap": 0.1, "min_probes": 200},
        LEARNED_RULE.replace("{models}", "softmax and msa")
        + "The cell: the longest length where both have >= {min_probes} probes of the experiment's task (the checks at "
        "the training length count; runs and seeds pooled) and softmax's lower bound is >= {min_ref}. msa's deficit "
        "against softmax from the two intervals: {gap} excluded: supported; shown: not supported; else inconclusive.",
        judge_c5a,
        seeded=True,
    ),
    Claim(
        "C5b",
        "M3 (MSA): ~9x faster prefill and ~15x faster decode than M2 at 1M tokens",
        [("MiniMax reports 9 times faster prefill and 15 times faster decoding than M2 at a million tokens.", SEED_000)],
        "msa_speedup",
        {
            "prefill": 9.0,
            "decode": 15.0,
            "length": LEN_1M,
            "vs": "m2",
            "scope": "attention",
            "hardware": "h200",
            "supported_frac": 0.75,
            "not_frac": 0.5,
            # the second source: the MSA paper's own numbers, with its baseline and model
            "paper": {
                "source": "the MSA paper (arXiv 2606.13392)",
                "prefill": 14.2,
                "decode": 7.6,
                "attention_compute": 28.4,
                "baseline": "dense GQA",
                "model": "109B",
            },
        },
        "M3 against {vs}, on the {hardware} profile, at {length} tokens, per phase ({prefill}x prefill, {decode}x "
        "decode): a speedup >= {supported_frac} of the claim: supported, < {not_frac}: not supported, else partly. "
        "Both scopes are shown with their own verdict; the claim is judged on the {scope} scope, because the numbers "
        "come from MiniMax's write-up and the quote credits the saving to attention reading less, sparse-attention papers "
        "report attention-kernel speedups (NSA: forward and decoding against FlashAttention), and M3 and M2 differ in "
        "everything else (23B against 10B active parameters, 60 against 62 layers), so a whole-model ratio mostly "
        "measures the rest of the model. Measured records on that hardware are used first; without any, 'projected only'. "
        "The MSA paper's own numbers ({paper[prefill]}x prefill, {paper[decode]}x decode, {paper[attention_compute]}x less "
        "attention compute against {paper[baseline]} on a {paper[model]} model) are a second source, shown beside the "
        "verdict, not judged.",
        judge_c5b,
    ),
    Claim(
        "C6",
        "Linear attention keeps a fixed-size state and cannot look up an exact earlier token",
        [("The price is that the summary is lossy: the model cannot look up an exact earlier token the way full attention can.", SEED_000)],
        "capacity",
        {"learned_lb": LEARNED_LOWER_BOUND, "softmax_above": 0.5, "gap": 0.1, "min_states": 3, "min_seeds": 3},
        "exp=capacity (after Zoology's MQAR): accuracy at the training length against the number of key-value pairs, "
        "pure lightning at several state sizes (heads x head dim) against softmax at the same width, one training rule "
        "(a pair of two rules is not compared). Softmax must have learned the task (95% lower bound >= {learned_lb}; "
        "else inconclusive). A lightning state size that did not learn the task (the same bound) is listed as “did "
        "not learn” and is never evidence: a model that never trained says nothing about what a state can hold. "
        "Along the whole pair ladder, wherever softmax is above the floor (its lower bound >= {softmax_above}, the bar "
        "C3 and C5a use), a learned state size falls where its deficit against softmax (bounds from the two 95% "
        "intervals) has a lower bound above {gap}; it keeps up where the upper bound is under {gap} at every such pair "
        "count. Every learned size falls somewhere: supported; every one keeps up: not supported; some of each: partly; "
        "else inconclusive; no learned size: inconclusive. With two or more learned sizes the report says whether the "
        "fall point moves with the state size. The evidence should hold >= {min_states} learned state sizes at >= "
        "{min_seeds} seeds; with fewer, the verdict is given from what was learned and marked provisional.",
        judge_c6,
        seeded=True,
    ),
    Claim(
        "C7",
        "Linear attention lacked the engine support serving depends on (low-precision state storage, prefix caching, "
        "speculative decoding): an architecture is only as cheap as the engine support behind it",
        [
            (
                "The infrastructure was not ready. Linear attention lacked mature support for things production serving "
                "depends on: low-precision state storage, prefix caching, speculative decoding.",
                SEED_000,
            ),
            ("an architecture is only as cheap as the engine support behind it", SEED_000),
        ],
        "serving",
        {"min_probes": 100, "min_ref": 0.5, "gap": 0.1, "prefix_len": 65536, "max_k": 8, "hybrids": ", ".join(HYBRIDS)},
        "Per part. Low-precision state: the first 7:1 hybrid with serving records (in the order {hybrids}) against "
        "softmax, cache stored in fp8 e4m3, compute fp32 (the hybrid's lightning state stored after every prefill chunk "
        "where recorded), at the longest length where both have >= {min_probes} probes in fp32 and fp8 and fp32 lower "
        "bounds >= {min_ref}: loss interval = [fp32 low - fp8 high, fp32 high - fp8 low]; the hybrid's loss lower bound "
        "above softmax's upper bound: supported; an extra loss of {gap} excluded: not supported; else inconclusive. "
        "Prefix caching (cost model, projected only): Text-01 recomputes tokens on a hit between saved states "
        "(states every 256 tokens) where M2 recomputes none: supported; else not supported; bytes kept for a "
        "{prefix_len}-token prefix shown. Speculative decoding (measured on this machine): k single steps over one "
        "forward of k = {max_k} drafts, paired by repeat, after the longest context both were timed at; the hybrid's p75 below softmax's p25: supported; its p25 above "
        "softmax's p75: not supported; else inconclusive; the bytes kept to roll back shown. The claim: every part "
        "supported: supported; some: partly; every judged part not supported: not supported; else inconclusive.",
        judge_c7,
        seeded=True,
    ),
]


SEED_RULE = (
    "A verdict that rests on trained models holds only if it holds for each seed: with records of more than one seed, "
    "the claim is judged on all records pooled and again on each seed's records alone (the models trained at that seed, "
    "probes drawn at it). A seed whose records cannot judge the claim (not yet measured, or no model at it learned) does not count; where a "
    "counted seed's verdict differs from the pooled one, the verdict is inconclusive and the evidence lists each seed's. "
    "With 2 or 3 seeds a cluster bootstrap over seeds would have too few clusters, so the per-seed rule is used."
)


def _judge(claim: Claim, df: pd.DataFrame, train) -> Verdict:
    try:
        return claim(df, train)
    except Exception as ex:  # a malformed record must not take the report down
        return Verdict(INCONCLUSIVE, [f"could not evaluate: {type(ex).__name__}: {ex}"])


def model_seeds(df: pd.DataFrame, models: list[str]) -> list[int]:
    """The seeds of the accuracy and training records of these designs."""
    d = df[df["design"].isin(models) & df["metric"].isin(ACC_METRICS + ("train/steps_to_floor",))]
    return sorted({int(x) for x in d["seed"].dropna()})


def seed_train(train: pd.DataFrame | None, seed: int) -> pd.DataFrame | None:
    """The training records of the models trained at ``seed`` (a seed's verdict reads its own models' rules and budgets)."""
    if train is None or "seed" not in train.columns:
        return train
    return train[train["seed"] == seed]


def _judged(claim: Claim, df: pd.DataFrame, train) -> Verdict:
    """One claim's verdict, with the per-seed rule (SEED_RULE) applied."""
    verdict = _judge(claim, df, train)
    if verdict.verdict == NOT_MEASURED_YET:  # nothing rests on any model yet
        verdict.models, verdict.headline = [], ""
    verdict.seeds = verdict.seeds or model_seeds(df, verdict.models)  # a judge that compares seeds itself names them
    if claim.seeded and len(verdict.seeds) > 1 and verdict.verdict != NOT_MEASURED_YET:
        judged = {s: _judge(claim, df[df["seed"] == s], seed_train(train, s)) for s in verdict.seeds}
        per_seed = {s: x.verdict + (" (no model that learned)" if x.no_learned_model else "") for s, x in judged.items()}
        counted = {s: x.verdict for s, x in judged.items() if x.verdict != NOT_MEASURED_YET and not x.no_learned_model}
        listed = "; ".join(f"seed {s}: {x}" for s, x in per_seed.items())
        if not claim.seeds_within:
            verdict.seeds = sorted(counted)  # the seeds the verdict rests on
        if claim.seeds_within:  # the rule already asks every seed: each seed's verdict alone is shown, not a second test
            verdict.evidence.insert(0, f"each seed alone ({listed}); the rule above compares the seeds itself")
        elif any(x != verdict.verdict for x in counted.values()):
            verdict.evidence.insert(0, f"inconclusive: the seeds disagree (pooled: {verdict.verdict}; {listed}); " + SEED_RULE)
            verdict.change = "seeds that agree: " + (verdict.change or "more seeds")
            verdict.verdict = INCONCLUSIVE
        else:
            verdict.evidence.insert(0, f"every seed agrees with the pooled verdict ({listed})")
    return verdict


def _reading(v: Verdict) -> tuple:
    return v.verdict, tuple(sorted(v.parts.items()))


def _note_aside(claim: Claim, verdict: Verdict, df: pd.DataFrame, train, aside: dict[str, int]) -> None:
    """Name the unshipped models set aside where judging with them would read otherwise (SHIPPED_RULE): those of
    each experiment whose records alone change the reading, else all of them."""
    with_them = _judged(claim, df, train)
    if _reading(with_them) == _reading(verdict):
        return
    groups = shipped.by_exp(df, aside)
    named = aside
    if len(groups) > 1:
        kept = df[~shipped.models(df).isin(list(aside))]
        moving = {}
        for exp, group in groups.items():
            add = df[shipped.models(df).isin(list(group))]
            if _reading(_judged(claim, pd.concat([kept, add]), train)) != _reading(verdict):
                moving.update(group)
        named = moving or aside
    parts = "; ".join(f"{k}: {x}" for k, x in with_them.parts.items() if verdict.parts.get(k) != x)
    verdict.evidence.insert(
        0,
        f"set aside, not shipped in attnbench/trained/: {shipped.describe(named)}; with them this claim would read "
        f"{with_them.verdict}" + (f" (parts: {parts})" if parts else "") + ". " + SHIPPED_RULE,
    )


SHIPPED_RULE = (
    "A verdict reads only models shipped in attnbench/trained/ (their folder with final.pt): records of a model from a "
    "cache, a partial training or an unshipped key are set aside and named where they would change the verdict."
)


def _note_uncommitted(claim: Claim, verdict: Verdict, df: pd.DataFrame, dirty: pd.DataFrame, train) -> None:
    """Name the runs made from uncommitted code set aside where judging with them would read otherwise
    (COMMITTED_RULE): those whose records alone change the reading, else all of them."""
    with_them = _judged(claim, pd.concat([df, dirty]), train)
    if _reading(with_them) == _reading(verdict):
        return
    folders = dirty["run_dir"].map(shipped.run_name)
    moving = [r for r in sorted(set(folders)) if _reading(_judged(claim, pd.concat([df, dirty[folders == r]]), train)) != _reading(verdict)]
    named = shipped.runs(dirty[folders.isin(moving)] if moving else dirty)
    verdict.evidence.insert(
        0,
        f"set aside, made from uncommitted code with no diff stored: {', '.join(f'{r} ({n} records)' for r, n in named.items())}; "
        f"with them this claim would read {with_them.verdict}. " + COMMITTED_RULE,
    )


COMMITTED_RULE = (
    "A verdict reads only runs whose code a reader can check out again: a run recorded from a clean commit, or from a "
    "dirty checkout whose diff is stored beside its records; the others are set aside and named where they would "
    "change the verdict, until they are rerun from a commit."
)


def readable(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], pd.DataFrame]:
    """(the records a verdict reads, {unshipped model: records} set aside, the shipped models' records of runs made
    from uncommitted code, set aside): SHIPPED_RULE and COMMITTED_RULE."""
    shown, aside = shipped.split(df)
    kept, dirty = shipped.committed(shown)
    return kept, aside, dirty


def judge_all(df: pd.DataFrame, train: pd.DataFrame | None = None) -> list[tuple[Claim, Verdict]]:
    kept, aside, dirty = readable(df)  # every verdict rests on models a reader can load and code they can check out
    out = []
    for claim in CLAIMS:
        verdict = _judged(claim, kept, train)
        if not dirty.empty:
            _note_uncommitted(claim, verdict, kept, dirty, train)
        if aside:
            _note_aside(claim, verdict, shipped.committed(df)[0], train, aside)
        out.append((claim, verdict))
    return out
