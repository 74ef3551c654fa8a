"""The claims attnbench tests (docs/DESIGN.md C1-C7, C7 in claims_serving.py; C5 judged as C5a, lookup, and C5b, speed):
source quotes, thresholds, rules, verdicts.

Each claim's thresholds live in its ``Claim`` entry (``thresholds``), and the rule a reader
sees is generated from them (``Claim.rule``), so the text cannot drift from the code. Every
rule follows the claim's own conditions (C2: 4x the true training length; C3: the k-hop chain
softmax learned; C6: key-value pairs against the state size) and the same discipline:

- a model that did not learn the task at its training length (quality.learned, the one
  definition) is not compared as a design: the claim is "inconclusive", naming it, except
  where the claim's own rule makes not learning a finding (C3: "did not learn within the
  shared budget"; C6: lightning that never learns where softmax does, counted as evidence);
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

from .claims_capacity import judge_c6  # MQAR capacity against lightning state sizes (exp=capacity)
from .claims_cost import judge_c4, judge_c5a, judge_c5b  # the cost claims (and C5's lookup half)
from .claims_scale import SCALE_RULE, with_scale  # C3 at scale (exp=scale): a sub-verdict of its own
from .claims_serving import judge_c7  # serving readiness (exp=serving)
from .records import LEN_1M, LEN_4M, NOT_MEASURED, fmt_bytes, fmt_len, is_preset, metric, pooled
from .quality import ACC_METRICS, FINAL, LEARNED_LOWER_BOUND, Acc, experiment_task, haystack_acc, learned
from .rules import (
    DID_NOT_LEARN,
    INCONCLUSIVE,
    NOT_MEASURED_YET,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    compare,
    levels_note,
    reference_lengths,
    same_rule,
)
from .rules import VERDICTS as VERDICTS

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

    @property
    def rule(self) -> str:
        return self.rule_template.format(**{k: _fmt(k, v) for k, v in self.thresholds.items()})

    def __call__(self, df: pd.DataFrame, train: pd.DataFrame | None = None) -> Verdict:
        return self.judge(df, self.thresholds, train)


def _fmt(key: str, v) -> str:
    if key in ("length", "few_thousand") and not isinstance(v, (tuple, list)):
        return fmt_len(v)
    if isinstance(v, (tuple, list)):
        return "–".join(_fmt(key, x) for x in v)
    if isinstance(v, float) and key.endswith(("_frac", "tolerance")) and v < 1:
        return f"{v:.0%}"
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------- shared pieces


# ---------------------------------------------------------------- C1

TEXT01 = r"text.?01|minimax.?01|\bm1\b"


def judge_c1(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    d = metric(df, "memory/cache_bytes_per_token")
    d = d[d["status"].isin(("measured",) + NOT_MEASURED) & d["v"].notna()]
    p = d[is_preset(d) & d["preset"].astype(str).str.contains(TEXT01, case=False, regex=True)]
    v = Verdict()
    if p.empty:
        return v
    bf16 = p[p["dtype"].astype(str).str.lower().isin(["bf16", "bfloat16", "torch.bfloat16"])]
    use = bf16 if not bf16.empty else p
    value = float(use["v"].iloc[-1])
    v.projected_only = use["status"].isin(NOT_MEASURED).all()
    how = "analytic: the cache formula applied to the published config" if v.projected_only else "measured"
    v.evidence.append(
        f"{use['preset'].iloc[-1]} ({use['dtype'].iloc[-1]}): {fmt_bytes(value)} per token ({value:,.0f} B; claim {t['bytes']:,} B) ({how})"
    )
    if bf16.empty:
        v.evidence.append("no BF16 record: compared in the dtype recorded")
    v.verdict = SUPPORTED if abs(value - t["bytes"]) <= t["tolerance"] * t["bytes"] else NOT_SUPPORTED
    v.headline = f"{value:,.0f} B per token against the claim's {t['bytes']:,} B (within {t['tolerance']:.0%}: exact arithmetic)"
    v.models = [str(use["preset"].iloc[-1])]
    v.change = "a different published config (cache dims or dtype); no measurement can, the number is a formula"
    check = metric(df, "memory/total_bytes")
    check = check[(check["status"] == "measured") & ~is_preset(check)]
    if "equal" in check.columns and check["equal"].notna().any():
        eq = check["equal"].dropna().astype(bool)
        v.evidence.append(
            f"the formula against the bytes this model's cache objects hold: equal in {int(eq.sum())} of "
            f"{len(eq)} measured cases (each design, fp32 and bf16)"
        )
    return v


# ---------------------------------------------------------------- the 7:1 hybrids

SEVEN_TO_ONE = "LLLLLLLS"  # Text-01's period: 7 lightning layers, then 1 softmax layer
# The 7:1 hybrids in order of closeness to Text-01, with what each changes. A headline verdict
# uses the first of them that the claim's rule can use; every other one is shown beside it.
HYBRIDS = {
    "lightning_hybrid": "Text-01's layer as configured, 2 lightning heads at this width",
    "lightning_hybrid_h8": "Text-01's layer with 8 lightning heads, its decay schedule over more heads",
    "lightning_hybrid16": "Text-01's period tiled twice, 16 layers with two softmax layers",
    "lightning_hybrid_nope": "lightning_hybrid_h8 whose softmax layer has no RoPE and a log-n scale, not in Text-01",
    "lightning_conv_nope": "a labelled variant with a convolution on the lightning q, k, v, not Text-01's layer",
}


def seven_to_one(df: pd.DataFrame) -> list[str]:
    """Every design whose recorded layout is Text-01's period tiled (LLLLLLLS, LLLLLLLSLLLLLLLS, ...),
    the known ones in HYBRIDS' order, then any other alphabetically."""
    lay = df.loc[df["layout"].notna() & ~is_preset(df), ["design", "layout"]].drop_duplicates()
    names = {str(d) for d, lo in zip(lay["design"], lay["layout"]) if isinstance(lo, str) and lo and lo == SEVEN_TO_ONE * (len(lo) // 8)}
    return [h for h in HYBRIDS if h in names] + sorted(names - set(HYBRIDS))


def _why(name: str) -> str:
    return HYBRIDS.get(name, "a 7:1 layout")


# ---------------------------------------------------------------- C2


def retrieval_cell(acc: Acc | None, t: dict) -> tuple[str, str]:
    """(verdict, why) of one needle cell against the claim's 100%: decidable only on >= min_probes
    probes from >= min_haystacks haystacks; then supported if the lower bound is >= retrieval, not
    supported if the upper bound is below it."""
    if acc is None:
        return INCONCLUSIVE, "not measured"
    if not (acc.n >= t["min_probes"] and pd.notna(acc.haystacks) and acc.haystacks >= t["min_haystacks"]):
        return (
            INCONCLUSIVE,
            f"undecidable: {acc.counted}; the rule needs >= {t['min_probes']} probes from >= {t['min_haystacks']} haystacks",
        )
    if acc.lo >= t["retrieval"]:
        return SUPPORTED, f"the lower bound {acc.lo:.2f} is >= {t['retrieval']}"
    if acc.hi < t["retrieval"]:
        return NOT_SUPPORTED, f"the upper bound {acc.hi:.2f} excludes retrieval of {t['retrieval']} or more"
    return INCONCLUSIVE, f"the interval [{acc.lo:.2f}, {acc.hi:.2f}] straddles {t['retrieval']}"


def judge_c2(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = pooled(metric(df, "niah/acc"))
    d = d[d["status"] == "measured"]
    names = [n for n in seven_to_one(df) if not d[d["design"] == n].empty]
    if not names:
        return v
    for name in seven_to_one(df):  # a 7:1 hybrid with other records (its training) but no needle cell: shown, not judged
        if name not in names:
            v.parts[f"{name}: no needle records"] = NOT_MEASURED_YET
            v.evidence.append(f"{name} ({_why(name)}): no needle records, so not judged")
    task = experiment_task(df, "niah/acc")
    results: dict[str, str] = {}
    judged_at: dict[str, float] = {}  # each judged hybrid's cell: factor x its true training length
    for name in names:
        got = learned(df, name, task, train=train, threshold=t["learned_lb"])
        v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
        if not got.flag:
            v.parts[f"{name} at {t['factor']}x"] = INCONCLUSIVE
            v.evidence.append(f"{name} ({_why(name)}): not judged, it did not learn the task at its training length")
            continue
        L = t["factor"] * got.train_len
        judged_at[name] = L
        acc = haystack_acc(df, "niah/acc", name, L, task=task)
        if acc is None:
            tested = ", ".join(fmt_len(x) for x in sorted(d[d["design"] == name]["context_len"].dropna().unique()))
            verdict, why = INCONCLUSIVE, f"not tested at {fmt_len(L)} (tested at {tested})"
            shown = ""
        else:
            verdict, why = retrieval_cell(acc, t)
            shown = f"{acc.text()}, {acc.counted} ({acc.how}): "
        results[name] = verdict
        v.parts[f"{name} at {t['factor']}x ({fmt_len(L)})"] = verdict
        v.evidence.append(
            f"{name} ({_why(name)}) at {fmt_len(L)} tokens, {t['factor']}x its true training length {fmt_len(got.train_len)}: {shown}{verdict}: {why}"
        )
        if L != LEN_4M and (a4 := haystack_acc(df, "niah/acc", name, LEN_4M, task=task)) is not None:
            v4, why4 = retrieval_cell(a4, t)
            v.parts[f"{name} at 4M ({LEN_4M / got.train_len:g}x)"] = v4
            v.evidence.append(
                f"{name} at 4M tokens, {LEN_4M / got.train_len:g}x its training length (its own row; the claim's ratio is "
                f"{t['factor']}x): {a4.text()}, {a4.counted} ({a4.how}): {v4}: {why4}"
            )
    if note := levels_note(df, "niah/acc"):
        v.evidence.append(note)
    if not results:
        v.verdict = INCONCLUSIVE
        v.evidence.append("inconclusive: no 7:1 hybrid learned the task at its training length")
        return v
    head = next(iter(results))
    v.verdict = results[head]
    v.models = [head]
    head_len = judged_at[head]
    if (ha := haystack_acc(df, "niah/acc", head, head_len, task=task)) is not None:
        v.headline = f"{head} at {fmt_len(head_len)} ({t['factor']}x its training length): {ha.text()}, {ha.counted}"
    else:
        v.headline = f"{head}: no needle cell at {fmt_len(head_len)} ({t['factor']}x its training length)"
    v.change = {
        SUPPORTED: f"more haystacks at {t['factor']}x whose lower bound falls below {t['retrieval']}",
        NOT_SUPPORTED: f"a model of {head}'s design that retrieves at {t['factor']}x (another seed or training rule)",
    }.get(
        v.verdict,
        f">= {t['min_probes']} probes from >= {t['min_haystacks']} haystacks at {fmt_len(head_len)} whose interval "
        f"clears or excludes {t['retrieval']}",
    )
    others = [f"{n}: {r}" for n, r in results.items() if n != head]
    v.evidence.insert(
        0,
        f"headline: {head} ({_why(head)}), the first 7:1 hybrid in order of closeness to Text-01 "
        f"({', '.join(HYBRIDS)}) that learned the task; fixed before looking at its accuracy, so the pick "
        f"cannot follow the result" + (f". The others, shown, not used: {'; '.join(others)}" if others else ""),
    )
    return v


# ---------------------------------------------------------------- C3


def _policy_line(df: pd.DataFrame, k: float) -> str:
    """The floors of the k-hop chain, every simple policy run on the generator (tasks/policies.py)."""
    d = metric(df, "multihop/acc")
    d = d[(d["hops"] == k) & (d.get("scoring") == FINAL)] if "scoring" in d.columns else d.iloc[0:0]
    pol = next((p for p in d["policies"] if isinstance(p, tuple) and p), None) if "policies" in d.columns else None
    if not pol:
        return ""
    return f"floors at {k:g} hops (simple policies run on the generator): " + ", ".join(f"{name} {acc:.3g}" for name, acc in pol)


def _c3_half(df: pd.DataFrame, d: pd.DataFrame, name: str, k: float, t: dict, train, v: Verdict) -> str:
    """One design against softmax on the k-hop chain: supported | not supported | DID_NOT_LEARN | inconclusive."""
    exp = d[d["design"] == name]["exp"].iloc[-1]
    ok, rule_text = same_rule(train, ["softmax", name], exp)
    v.evidence.append(f"{name} ({'the sliding-window hybrid' if name == 'swa_hybrid' else _why(name)}): {rule_text}")
    prefix = _needle_prefix_failed(train, name, exp)
    if prefix:
        v.evidence.append(f"finding: {name} did not learn within the shared budget: {prefix}")
        return DID_NOT_LEARN
    if not ok:
        return INCONCLUSIVE
    got = learned(df, name, "multihop", hops=k, train=train, threshold=t["learned_lb"])
    v.evidence.append(("learned: " if got.flag else "did not learn: " if got.flag is False else "no check: ") + got.why)
    lens = reference_lengths(df, "multihop/acc", name, "softmax", t["min_ref"], hops=k, scoring=FINAL)
    a = s = None
    if lens:
        L = max(lens)
        a = haystack_acc(df, "multihop/acc", name, L, hops=k, scoring=FINAL)
        s = haystack_acc(df, "multihop/acc", "softmax", L, hops=k, scoring=FINAL)
    if a is not None and s is not None:
        below = a.hi < s.lo
        v.evidence.append(
            f"{k:g} hops at {fmt_len(L)}: {name} {a.text()} ({a.counted}) vs softmax {s.text()} ({s.counted}); {a.how}: "
            + (f"{name}'s upper bound is below softmax's lower bound" if below else "the intervals overlap")
        )
    if not got.flag:
        tr = train[train["exp"] == exp] if train is not None else pd.DataFrame()
        mine = tr[tr["design"] == name]["chain_tokens"] if "chain_tokens" in tr.columns else pd.Series(dtype=float)
        soft = tr[tr["design"] == "softmax"]
        need = soft["chain_tokens"].iloc[-1] if len(soft) and "chain_tokens" in soft.columns else float("nan")
        soft_done = len(soft) and str(soft["status"].iloc[-1]) == "done"
        had = mine.iloc[-1] if len(mine) else float("nan")
        if got.flag is None:
            v.evidence.append(f"inconclusive: {name} has no check of the {k:g}-hop chain at its training length")
            return INCONCLUSIVE
        if pd.notna(had) and pd.notna(need) and soft_done and had < need:
            v.evidence.append(
                f"inconclusive: {name} spent {had / 1e6:.1f}M tokens from its first chain stage, fewer than the "
                f"{need / 1e6:.1f}M softmax needed to pass them: it was not given the chain budget softmax needed"
            )
            return INCONCLUSIVE
        how = (
            f"it spent {had / 1e6:.1f}M tokens from its first chain stage, softmax passed every chain stage in {need / 1e6:.1f}M"
            if pd.notna(had) and pd.notna(need) and soft_done
            else "chain-stage tokens not recorded: the shared budget is the rule's whole token budget"
        )
        v.evidence.append(
            f"finding: {name} did not learn the {k:g}-hop chain within the budget softmax needed ({how}); "
            f"a model that did not learn is not compared as a design, so this is its own verdict, not a deficit shown"
        )
        return DID_NOT_LEARN
    if a is None or s is None:
        v.evidence.append(f"inconclusive: softmax's 95% lower bound stays under {t['min_ref']} at every length both ran {k:g} hops")
        return INCONCLUSIVE
    if min(a.n, s.n) < t["min_probes"]:
        v.evidence.append(f"inconclusive: {min(a.n, s.n):.0f} probes in a cell; the rule needs >= {t['min_probes']} per hop count")
        return INCONCLUSIVE
    if a.hi < s.lo:
        return SUPPORTED
    if compare(a, s, t["gap"]) == "not below":
        v.evidence.append(f"the intervals exclude a deficit of {t['gap']} or more")
        return NOT_SUPPORTED
    v.evidence.append(f"inconclusive: the intervals neither show a deficit nor exclude one of {t['gap']}")
    return INCONCLUSIVE


def _needle_prefix_failed(train, name: str, exp) -> str | None:
    """Why ``name`` never reached a chain stage, where that is a finding: its needle model (the
    prefix its chain model continues) ran out of the needle rule's budget (or patience) without
    passing the needle curriculum that softmax passed under the same needle rule, and its chain
    model stopped where the prefix stopped (no chain-stage tokens). None otherwise."""
    if train is None or train.empty:
        return None
    needle = train[(train["exp"] == "needle_4m") & train["design"].isin([name, "softmax"])]
    mine, soft = needle[needle["design"] == name], needle[needle["design"] == "softmax"]
    chain = train[(train["exp"] == exp) & (train["design"] == name)]["chain_tokens"]
    if mine.empty or soft.empty or (len(chain) and pd.notna(chain.iloc[-1]) and chain.iloc[-1] > 0):
        return None
    m, sm = mine.iloc[-1], soft.iloc[-1]
    ok, _ = same_rule(needle, ["softmax", name], "needle_4m")
    if not ok or str(m["status"]) not in ("tokens", "stalled") or str(sm["status"]) != "done" or not m["train_len"] < sm["train_len"]:
        return None
    return (
        f"its needle model stopped ({m['status']}) on stage {m['stage']} after {m['tokens'] / 1e6:.1f}M tokens, trained to "
        f"{fmt_len(m['train_len'])}, where softmax passed the needle curriculum (to {fmt_len(sm['train_len'])}) under the "
        f"same needle rule; so its chain model has no chain step (a prefix that did not pass stops the curriculum)"
    )


def judge_c3(df: pd.DataFrame, t: dict, train=None) -> Verdict:
    v = Verdict()
    d = metric(df, "multihop/acc")
    d = d[(d["status"] == "measured") & (d["hops"] >= t["min_hops"])]
    hybrids = [n for n in seven_to_one(df) if not d[d["design"] == n].empty]
    if d[d["design"] == "softmax"].empty or not hybrids:
        return v
    if "scoring" in d.columns and not (d["scoring"] == FINAL).any():
        v.evidence.append(
            "these records scored every hop with every intermediate key given (k single lookups, "
            "not composition): they cannot test a multi-hop deficit"
        )
        v.verdict = INCONCLUSIVE
        return v
    d = d[d["scoring"] == FINAL]
    hops = sorted(d["hops"].dropna().unique(), reverse=True)
    k = next((h for h in hops if learned(df, "softmax", "multihop", hops=h, train=train, threshold=t["learned_lb"]).flag), None)
    if k is None:
        got = learned(df, "softmax", "multihop", hops=min(hops), train=train, threshold=t["learned_lb"])
        v.evidence.append("did not learn: " + got.why)
        v.verdict = INCONCLUSIVE
        v.evidence.append(f"inconclusive: softmax learned no chain of >= {t['min_hops']} hops: the task separates nothing here")
        return v
    v.evidence.append("learned: " + learned(df, "softmax", "multihop", hops=k, train=train, threshold=t["learned_lb"]).why)
    v.evidence.append(f"the cell: {k:g} hops, the most that softmax learned")
    if line := _policy_line(df, k):
        v.evidence.append(line)
    results = {}
    for name in hybrids + (["swa_hybrid"] if not d[d["design"] == "swa_hybrid"].empty else []):
        results[name] = _c3_half(df, d, name, k, t, train, v)
        v.parts[f"{name}, {k:g} hops"] = results[name]
    head = hybrids[0]
    lead = results[head]
    if len(hybrids) > 1:
        v.evidence.insert(
            0,
            f"headline: {head} ({_why(head)}), the first 7:1 hybrid with multihop records in order of closeness to "
            f"Text-01; the others are shown, not used",
        )
    v.models = [head, "softmax"] + (["swa_hybrid"] if "swa_hybrid" in results else [])
    cell = reference_lengths(df, "multihop/acc", head, "softmax", t["min_ref"], hops=k, scoring=FINAL)
    if cell and (a := haystack_acc(df, "multihop/acc", head, max(cell), hops=k, scoring=FINAL)) is not None:
        s_acc = haystack_acc(df, "multihop/acc", "softmax", max(cell), hops=k, scoring=FINAL)
        v.headline = f"{k:g} hops at {fmt_len(max(cell))}: {head} {a.text()} vs softmax " + (s_acc.text() if s_acc else "—")
    else:
        v.headline = f"{k:g} hops: no length where softmax's lower bound is >= {t['min_ref']} and {head} ran"
    v.change = {
        DID_NOT_LEARN: f"{head} learning the {k:g}-hop chain within the budget softmax needed (another seed, or a larger model)",
        SUPPORTED: "an interval from more probes or seeds in which the hybrid's upper bound reaches softmax's lower bound",
        NOT_SUPPORTED: f"a deficit of {t['gap']} or more at another length, seed or scale",
    }.get(lead, f">= {t['min_probes']} probes a hop count, or a second seed, whose intervals separate")
    swa = results.get("swa_hybrid")
    if swa is None:
        v.evidence.append("the claim's second half (a sliding-window hybrid) has no multihop records: untested")
    if lead == SUPPORTED:
        v.verdict = PARTLY if swa == NOT_SUPPORTED else SUPPORTED
    else:
        v.verdict = lead
    return v


# ---------------------------------------------------------------- C6

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
            "retrieval": 0.9,
            "min_probes": 200,
            "min_haystacks": 40,
            "hybrids": ", ".join(HYBRIDS),
        },
        "Every 7:1 hybrid (layout LLLLLLLS tiled) with records is judged and shown; each needs to have learned the task "
        "(95% lower bound >= {learned_lb} at its training length). The cell: {factor}x its true training length (the "
        "longest curriculum stage it passed), the claim's ratio. Decidable only on >= {min_probes} probes from >= "
        "{min_haystacks} haystacks; then supported if the lower bound is >= {retrieval} (the claim says 100%), not "
        "supported if the upper bound is < {retrieval}, else inconclusive. " + HAYSTACK_RULE + "The 4M cell is a row of "
        "its own under the same test (not the claim's ratio at this training length). The headline verdict is the "
        "first hybrid that learned, in a fixed order of closeness to Text-01 ({hybrids}).",
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
        {"learned_lb": LEARNED_LOWER_BOUND, "min_hops": 2, "min_ref": 0.5, "min_probes": 100, "gap": 0.1},
        "Compositional probes only (start key given, final value scored), >= {min_hops} hops, at this one width (the "
        "claim's larger scale is not tested here). k: the most hops whose chain softmax learned (95% lower bound >= "
        "{learned_lb} at its training length; none: inconclusive). Each design (every 7:1 hybrid, the headline the "
        "first in order of closeness to Text-01, and swa_hybrid for the second half) must have been trained under "
        "softmax's rule (else inconclusive). One that did not learn the k-hop chain is its own finding, \u201cdid not "
        "learn within the shared budget\u201d, when it spent at least the tokens softmax needed from the first chain "
        "stage (fewer: inconclusive, it was not given that budget), and when its needle model ran out of the needle rule's "
        "budget without passing the needle curriculum softmax passed under it (its chain model then has no chain step). "
        "Else, at the longest length where both ran k hops "
        "and softmax's lower bound is >= {min_ref}, with >= {min_probes} probes a cell: the design's upper bound below "
        "softmax's lower bound: supported (partly if swa_hybrid ran and is not below); a deficit of {gap} excluded: not "
        "supported; else inconclusive. " + HAYSTACK_RULE + "Floors: simple policies run on the generator, each listed." + SCALE_RULE,
        with_scale(judge_c3, HYBRIDS),
        seeded=True,
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
        },
        "M3 against {vs}, on the {hardware} profile, at {length} tokens, per phase ({prefill}x prefill, {decode}x "
        "decode): a speedup >= {supported_frac} of the claim: supported, < {not_frac}: not supported, else partly. "
        "Both scopes are shown with their own verdict; the claim is judged on the {scope} scope, because the numbers "
        "come from the MSA paper and the quote credits the saving to attention reading less, sparse-attention papers "
        "report attention-kernel speedups (NSA: forward and decoding against FlashAttention), and M3 and M2 differ in "
        "everything else (23B against 10B active parameters, 60 against 62 layers), so a whole-model ratio mostly "
        "measures the rest of the model. Measured records on that hardware are used first; without any, 'projected only'.",
        judge_c5b,
    ),
    Claim(
        "C6",
        "Linear attention keeps a fixed-size state and cannot look up an exact earlier token",
        [("The price is that the summary is lossy: the model cannot look up an exact earlier token the way full attention can.", SEED_000)],
        "capacity",
        {"learned_lb": LEARNED_LOWER_BOUND, "softmax_holds": 0.95, "gap": 0.2, "min_states": 3},
        "exp=capacity (after Zoology's MQAR): accuracy at the training length against the number of key-value pairs, "
        "pure lightning at several state sizes (heads x head dim, same width) against softmax at the same width, one "
        "training rule. Softmax must have learned the task (95% lower bound >= {learned_lb}; else inconclusive). Per "
        "lightning state size, at the most pairs where softmax holds (lower bound >= {softmax_holds}): it falls toward "
        "the floor when it is below softmax by >= {gap} (from the two intervals) and below its own accuracy at the "
        "fewest pairs; it keeps up when a deficit of {gap} is excluded. A lightning model that never learned the task "
        "under the rule softmax learned it counts as evidence for the claim (said so); one whose training the wall clock "
        "stopped before the rule's patience ran out (status budget) counts for nothing. Every state size falls or never "
        "learned: supported; every one keeps up: not supported; some of each: partly; else inconclusive, and inconclusive "
        "with fewer than {min_states} lightning state sizes.",
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
        "forward of k = {max_k} drafts, paired by repeat; the hybrid's p75 below softmax's p25: supported; its p25 above "
        "softmax's p75: not supported; else inconclusive; the bytes kept to roll back shown. The claim: every part "
        "supported: supported; some: partly; every judged part not supported: not supported; else inconclusive.",
        judge_c7,
        seeded=True,
    ),
]


SEED_RULE = (
    "A verdict that rests on trained models holds only if it holds for each seed: with records of more than one seed, "
    "the claim is judged on all records pooled and again on each seed's records alone (the models trained at that seed, "
    "probes drawn at it). A seed whose records cannot judge the claim (not yet measured) does not count; where a "
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


def judge_all(df: pd.DataFrame, train: pd.DataFrame | None = None) -> list[tuple[Claim, Verdict]]:
    out = []
    for claim in CLAIMS:
        verdict = _judge(claim, df, train)
        if verdict.verdict == NOT_MEASURED_YET:  # nothing rests on any model yet
            verdict.models, verdict.headline = [], ""
        verdict.seeds = model_seeds(df, verdict.models)
        if claim.seeded and len(verdict.seeds) > 1 and verdict.verdict != NOT_MEASURED_YET:
            per_seed = {s: _judge(claim, df[df["seed"] == s], train).verdict for s in verdict.seeds}
            counted = {s: x for s, x in per_seed.items() if x != NOT_MEASURED_YET}
            listed = "; ".join(f"seed {s}: {x}" for s, x in per_seed.items())
            verdict.seeds = sorted(counted)  # the seeds the verdict rests on
            if any(x != verdict.verdict for x in counted.values()):
                verdict.evidence.insert(0, f"inconclusive: the seeds disagree (pooled: {verdict.verdict}; {listed}); " + SEED_RULE)
                verdict.change = "seeds that agree: " + (verdict.change or "more seeds")
                verdict.verdict = INCONCLUSIVE
            else:
                verdict.evidence.insert(0, f"every seed agrees with the pooled verdict ({listed})")
        out.append((claim, verdict))
    return out
