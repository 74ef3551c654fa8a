"""The questions beside the claims (verdicts/claims/questions.py): Q-delta and Q-tokens answer
"differ" only where a difference's interval excludes 0 the same way at every seed, list models
that did not learn without comparing them, and say what is missing where they cannot answer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnbench.verdicts.claims import questions as Q
from attnbench.verdicts.rules import NOT_MEASURED_YET
from test_claims import _seed, acc, cap, cap_trained, frame, pair, trained


def _q(qid: str, tmp_path, records, **thresholds):
    data = frame(tmp_path, records)
    q = next(x for x in Q.QUESTIONS if x.id == qid)
    if thresholds:
        q = replace(q, thresholds={**q.thresholds, **thresholds})
    return q(data.records, data.train)


# ---------------------------------------------------------------- Q-delta, multi-hop half


def _hybrids(seed: int, h8: int, gdn: int) -> list:
    """One seed's softmax, lightning_hybrid_h8 and gdn_hybrid chain models (softmax 190/200 at every cell)."""
    out = pair(seed, 190, h8, design="lightning_hybrid_h8")
    return out + [r for r in pair(seed, 190, gdn, design="gdn_hybrid") if r["design"] == "gdn_hybrid"]


@pytest.mark.parametrize(
    "case, expect",
    [
        ("gdn's deficit smaller at every seed", Q.DIFFER),
        ("the same deficit", Q.NO_DIFFERENCE),
        ("smaller at one seed only", Q.NO_DIFFERENCE),
        ("no gdn chain models", NOT_MEASURED_YET),
    ],
)
def test_q_delta_compares_the_two_deficits_seed_by_seed(tmp_path, case, expect):
    records = {
        "gdn's deficit smaller at every seed": _hybrids(0, 20, 185) + _hybrids(1, 30, 180),
        "the same deficit": _hybrids(0, 20, 22) + _hybrids(1, 30, 31),
        "smaller at one seed only": _hybrids(0, 20, 185) + _hybrids(1, 30, 31),
        "no gdn chain models": [r for r in _hybrids(0, 20, 185) if r["design"] != "gdn_hybrid"],
    }[case]
    v = _q("Q-delta", tmp_path, records)
    part = "multi-hop deficit: gdn_hybrid vs lightning_hybrid_h8"
    assert v.parts[part] == expect, v.evidence
    assert v.verdict == expect  # the capacity half has no records here: not yet measured, it does not vote
    assert v.parts["capacity fall point"] == NOT_MEASURED_YET
    if expect == Q.DIFFER:
        assert any("gdn_hybrid's deficit is smaller at every seed (0, 1)" in e for e in v.evidence), v.evidence
        assert v.seeds == [0, 1] and "gdn_hybrid" in v.models
    if expect == NOT_MEASURED_YET:
        assert any("no chain records of gdn_hybrid" in e for e in v.evidence)


# ---------------------------------------------------------------- Q-delta, capacity half

PAIRS = (4, 16, 64)


def _cap(design: str, layout: str, state: float, falls_from: int | None) -> list:
    out = cap_trained(design)
    for p in PAIRS:
        r = cap(design, p, 20 if falls_from is not None and p >= falls_from else 200, 200, state)
        out.append({**r, "layout": layout})
    return [{**r, "layout": layout} for r in out]


@pytest.mark.parametrize(
    "case, expect",
    [("gdn falls later at every seed", Q.DIFFER), ("both fall at 16 pairs", Q.NO_DIFFERENCE), ("gdn did not learn", NOT_MEASURED_YET)],
)
def test_q_delta_compares_fall_points_at_one_state_size(tmp_path, case, expect):
    soft = cap_trained("softmax") + [cap("softmax", p, 200) for p in PAIRS]
    gdn_from = {"gdn falls later at every seed": 64, "both fall at 16 pairs": 16, "gdn did not learn": 16}[case]
    gdn = _cap("gdn_h2", "GGGG", 2048.0, gdn_from)
    if case == "gdn did not learn":
        gdn = [{**r, "value": 0.1, "ci_low": 0.06, "ci_high": 0.15} if r["metric"] == "train/acc" else r for r in gdn]
    one = soft + _cap("lightning_h2", "LLLL", 2048.0, 16) + gdn
    v = _q("Q-delta", tmp_path, _seed(one, 0) + _seed(one, 1))
    label = "capacity fall point at state 2,048: gdn_h2 vs lightning_h2"
    assert v.parts[label] == expect, v.evidence
    if case == "gdn did not learn":
        assert any("gdn_h2 did not learn the task: listed, not compared" in e for e in v.evidence)


# ---------------------------------------------------------------- Q-tokens


def _needles(seed: int, dsa: int, msa: int, n: int = 200, lengths=Q.QTOKENS_LENGTHS) -> list:
    out = trained("dsa") + trained("msa")
    for length in lengths:
        out += [acc("dsa", dsa, n, length), acc("msa", msa, n, length)]
    return _seed(out, seed)


@pytest.mark.parametrize(
    "case, expect",
    [
        ("dsa better at every seed", Q.DIFFER),
        ("alike", Q.NO_DIFFERENCE),
        ("apart, but too few probes", Q.NO_DIFFERENCE),
        ("no dsa models", NOT_MEASURED_YET),
    ],
)
def test_q_tokens_compares_retrieval_at_each_length_and_shows_the_selection_cost(tmp_path, case, expect):
    records = {
        "dsa better at every seed": _needles(0, 190, 100) + _needles(1, 185, 90),
        "alike": _needles(0, 150, 152) + _needles(1, 150, 149),
        "apart, but too few probes": _needles(0, 95, 50, n=100) + _needles(1, 95, 45, n=100),
        "no dsa models": [r for r in _needles(0, 190, 100) if r["design"] != "dsa"],
    }[case]
    v = _q("Q-tokens", tmp_path, records, exp="fixture")
    assert v.verdict == expect, v.evidence
    if expect != NOT_MEASURED_YET:
        assert set(v.parts) == {f"retrieval at {x}" for x in ("1K", "4K", "16K", "64K")}
        assert v.seeds == [0, 1] and v.headline.startswith("provisional (seed 0, 1 of 0-2): ")
    assert any("selection cost measured: not yet measured" in e for e in v.evidence)  # no timed dsa op here


def test_q_tokens_shows_measured_selection_cost_where_one_run_timed_both(tmp_path):
    """A length where one kernels_cpu run timed dsa's and msa's parts gives one measured line (dsa's
    median over msa's); a length where only dsa was timed gives none."""
    from test_claims import rec

    def t(op, ms, n):
        design = "dsa" if op.startswith("dsa") else "msa"
        return rec(design, "latency/prefill_ms", ms, op=op, backend="reference", context_len=n, method=method)

    method = "alternating"

    timed = [t("dsa_select", 30.0, 4096), t("msa_select", 10.0, 4096), t("dsa_attn", 8.0, 4096), t("msa_attn", 4.0, 4096)]
    method = "torch.utils.benchmark"  # crossover's one-by-one op timings: not read
    timed += [t("dsa", 50.0, 8192), t("msa", 10.0, 8192)]
    v = _q("Q-tokens", tmp_path, _needles(0, 190, 100) + timed + [t("dsa", 99.0, 16384)], exp="fixture")
    lines = [e for e in v.evidence if e.startswith("cost measured")]
    assert len(lines) == 1 and "at 4K" in lines[0], v.evidence
    assert "dsa_select 30.0 ms vs msa_select 10.0 ms (3x)" in lines[0] and "dsa_attn 8.0 ms vs msa_attn 4.0 ms (2x)" in lines[0]
    assert not any("selection cost measured: not yet measured" in e for e in v.evidence)
    assert "cost" not in v.headline  # no run timed both whole ops
    gone = _q("Q-tokens", tmp_path / "no64k", _needles(0, 190, 100, lengths=Q.QTOKENS_LENGTHS[:3]), exp="fixture")
    assert gone.parts["retrieval at 64K"] == NOT_MEASURED_YET and gone.verdict == Q.DIFFER, gone.parts  # said, not dropped
    assert gone.change.startswith("dsa's and msa's needle cells at 64K")
    method = "alternating"
    v = _q("Q-tokens", tmp_path / "whole", _needles(0, 190, 100) + timed[:4] + [t("dsa", 60.0, 4096), t("msa", 20.0, 4096)], exp="fixture")
    assert v.headline.endswith("; cost: dsa's forward takes 3x msa's time at 4K (CPU references, measured)"), v.headline
    # msa's fused native kernel timed in the same run is another implementation: not compared with dsa's reference
    native = [{**t("msa", 1.0, 4096), "backend": "native"}, {**t("msa_attn", 0.5, 4096), "backend": "native"}]
    v = _q(
        "Q-tokens",
        tmp_path / "native",
        _needles(0, 190, 100) + timed[:4] + [t("dsa", 60.0, 4096), t("msa", 20.0, 4096)] + native,
        exp="fixture",
    )
    assert v.headline.endswith("takes 3x msa's time at 4K (CPU references, measured)"), v.headline


def test_q_tokens_shows_the_cost_models_selection_cost_labelled_projected(tmp_path):
    """The report hands the cost model in (a verdict reads records only): one projected line a length,
    its numbers the cost model's; msa's block scores at decode are 2 G Di n FLOPs (G index heads)."""
    from attnbench.bench import costmodel
    from attnbench.config.schema import KernelShapes

    s = KernelShapes()
    assert costmodel.selection_cost("msa", 4096)[0] == 2 * s.kv_heads * s.index_dim * 4096
    data = frame(tmp_path, _needles(0, 190, 100))
    answers = {q.id: v for q, v in Q.judge_questions(data.records, data.train, selection_cost=costmodel.selection_cost)}
    lines = [e for e in answers["Q-tokens"].evidence if "(projected, the cost model" in e]
    assert len(lines) == len(Q.QTOKENS_LENGTHS)
    fd, bd = costmodel.selection_cost("dsa", 65536)
    assert f"dsa's indexer {fd:,.0f} FLOPs, {bd:,.0f} B" in lines[-1] and "at 64K" in lines[-1]
    assert not any("(projected" in e for e in answers["Q-delta"].evidence)


def test_a_question_never_reads_an_unshipped_model(tmp_path):
    """judge_questions sets aside what judge_all sets aside: dsa's records name a model that is not in
    attnbench/trained/, so retrieval is not yet measured."""
    good = _needles(0, 190, 100) + _needles(1, 185, 90)
    unshipped = [{**r, "key": "0123456789abcdef"} if r["design"] == "dsa" else r for r in good]
    for records, expect in ((good, Q.DIFFER), (unshipped, NOT_MEASURED_YET)):
        data = frame(tmp_path / expect.replace(" ", "_"), [{**r, "exp": "needle_4m"} for r in records])
        answers = {q.id: v for q, v in Q.judge_questions(data.records, data.train)}
        assert answers["Q-tokens"].verdict == expect, answers["Q-tokens"].evidence
