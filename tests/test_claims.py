"""Every verdict of every claim, reached from small SYNTHETIC record sets (never results).

Each test builds the records of one situation, including the ones in the shipped records: two
designs both at zero, an untrained lightning model (it passed no curriculum stage), a thin
timing margin, speedups that exist only as projections.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from attnbench.report import claims as C
from attnbench.report.data import LEN_1M, load
from attnbench.stats import wilson

from report_fixtures import header

LAYOUTS = {"softmax": "S", "lightning": "L", "lightning_hybrid": "LLLLLLLS", "swa_hybrid": "WWWWWWWS", "msa": "M"}


def rec(design, metric, value, unit="fraction", status="measured", **kw):
    return {
        "type": "record",
        "exp": "fixture",
        "design": design,
        "layout": LAYOUTS.get(design, ""),
        "metric": metric,
        "value": value,
        "unit": unit,
        "status": status,
        "seed": 0,
        "device": "cpu",
        "config_hash": "fixturecpu0",
        "time": "2026-01-01T00:10:00+00:00",
        "note": "synthetic test fixture",
        **kw,
    }


def acc(design, k, n, length, metric="niah/acc", task="niah_multikey", **kw):
    lo, hi = wilson(k, n)
    return rec(design, metric, k / n, n=n, ci_low=lo, ci_high=hi, context_len=length, task=task, **kw)


def trained(design, train_len=512, k=195, n=200, task="niah_multikey", **kw):
    """A model's training record (the fair rule's fields) and its check at its training length."""
    rule = {"name": "fixture rule", "token_budget": 10_000_000, "patience": 3000, "floor": 0.95, "advance_at": 0.9}
    out = [
        rec(
            design,
            "train/steps_to_floor",
            1000 if train_len else None,
            "steps",
            steps=1000,
            tokens=5_000_000,
            rule=rule,
            train_len=train_len,
            stop_reason="fixture",
            train_status="done" if train_len else "stalled",
            final_stage=6 if train_len else 1,
            n_stages=6,
            source="fixture/record.json",
        )
    ]
    out.append(acc(design, k, n, train_len or 24, metric="train/acc", task=task, **kw))
    return out


def frame(tmp_path, records):
    run = tmp_path / "run"
    run.mkdir(parents=True, exist_ok=True)
    lines = [header("fixture", "cpu"), *records]
    (run / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return load([run])


def verdict(claim_id, tmp_path, records, **thresholds):
    data = frame(tmp_path, records)
    claim = next(c for c in C.CLAIMS if c.id == claim_id)
    if thresholds:
        claim = replace(claim, thresholds={**claim.thresholds, **thresholds})
    return claim(data.records, data.train)


# ---------------------------------------------------------------- rules are generated from the thresholds


def test_rule_text_is_generated_from_the_thresholds():
    for claim in C.CLAIMS:
        assert "{" not in claim.rule and "}" not in claim.rule, claim.id
    c2 = next(c for c in C.CLAIMS if c.id == "C2")
    assert "0.9" in c2.rule and "4x" in c2.rule and "0.8" in c2.rule
    changed = replace(c2, thresholds={**c2.thresholds, "retrieval": 0.75, "factor": 8})
    assert "0.75" in changed.rule and "8x" in changed.rule and "0.9" not in changed.rule


def test_a_threshold_changes_the_verdict_not_only_the_text(tmp_path):
    records = trained("lightning_hybrid") + [acc("lightning_hybrid", 180, 200, 2048)]  # [0.85, 0.93]
    assert verdict("C2", tmp_path, records).verdict == C.INCONCLUSIVE  # straddles 0.9
    assert verdict("C2", tmp_path, records, retrieval=0.8).verdict == C.SUPPORTED


# ---------------------------------------------------------------- C1


def test_c1_verdicts(tmp_path):
    def preset(v):
        return rec(
            "preset", "memory/cache_bytes_per_token", v, "bytes", "projected", preset="minimax_text_01", dtype="bf16", method="analytic"
        )

    v = verdict("C1", tmp_path, [preset(40960)])
    assert v.verdict == C.SUPPORTED and v.projected_only
    assert verdict("C1", tmp_path, [preset(81920)]).verdict == C.NOT_SUPPORTED
    assert verdict("C1", tmp_path, [rec("softmax", "params/total", 1, "count")]).verdict == C.NOT_MEASURED_YET


# ---------------------------------------------------------------- C2


@pytest.mark.parametrize(
    "case, expect",
    [
        ("retrieves at 4x", C.SUPPORTED),
        ("fails at 4x", C.NOT_SUPPORTED),
        ("untrained hybrid (shipped)", C.INCONCLUSIVE),
        ("ten probes, 0.99 point estimate", C.INCONCLUSIVE),
        ("only 2x", C.INCONCLUSIVE),
    ],
)
def test_c2_verdicts(tmp_path, case, expect):
    h = "lightning_hybrid"
    records = {
        "retrieves at 4x": trained(h) + [acc(h, 200, 200, 2048)],
        "fails at 4x": trained(h) + [acc(h, 100, 200, 2048)],
        # the shipped hybrid: passed no stage, 28/200 single needles, chance-level needles out to 4M
        "untrained hybrid (shipped)": trained(h, train_len=0, k=28, task="niah_single") + [acc(h, 1, 10, 4194304), acc(h, 10, 10, 1024)],
        # 10/10 reads as 1.00 but its lower bound is 0.72: the claim's 0.9 is neither shown nor excluded
        "ten probes, 0.99 point estimate": trained(h) + [acc(h, 10, 10, 2048)],
        "only 2x": trained(h) + [acc(h, 200, 200, 1024)],
    }[case]
    v = verdict("C2", tmp_path, records)
    assert v.verdict == expect, v.evidence
    if "untrained" in case:
        assert any("lightning_hybrid did not learn" in e for e in v.evidence)
    assert verdict("C2", tmp_path, trained("softmax")).verdict == C.NOT_MEASURED_YET


# ---------------------------------------------------------------- C3


def mh(design, k, n, hops=2, length=1024, scoring="final value"):
    return acc(
        design,
        k,
        n,
        length,
        metric="multihop/acc",
        task="multihop",
        hops=hops,
        hop_task="chain",
        **({"scoring": scoring} if scoring else {}),
    )


def mh_trained(design, train_len=512, k=190, hops=2):
    return trained(design, train_len, k, task="multihop", hops=hops, hop_task="chain", scoring="final value")


@pytest.mark.parametrize(
    "case, expect",
    [
        ("hybrid and swa below softmax", C.SUPPORTED),
        ("only the hybrid below", C.PARTLY),
        ("no deficit", C.NOT_SUPPORTED),
        ("both at zero (shipped)", C.INCONCLUSIVE),
        ("untrained hybrid", C.INCONCLUSIVE),
        ("too few probes", C.INCONCLUSIVE),
        ("per-hop scoring (shipped)", C.INCONCLUSIVE),
    ],
)
def test_c3_verdicts(tmp_path, case, expect):
    base = mh_trained("softmax") + mh_trained("lightning_hybrid") + mh_trained("swa_hybrid")
    records = {
        "hybrid and swa below softmax": base + [mh("softmax", 190, 200), mh("lightning_hybrid", 20, 200), mh("swa_hybrid", 30, 200)],
        "only the hybrid below": base + [mh("softmax", 190, 200), mh("lightning_hybrid", 20, 200), mh("swa_hybrid", 189, 200)],
        "no deficit": base + [mh("softmax", 190, 200), mh("lightning_hybrid", 188, 200)],
        "both at zero (shipped)": base + [mh("softmax", 0, 6), mh("lightning_hybrid", 0, 6)],
        "untrained hybrid": mh_trained("softmax")
        + mh_trained("lightning_hybrid", train_len=0, k=0)
        + [mh("softmax", 190, 200), mh("lightning_hybrid", 20, 200)],
        "too few probes": base + [mh("softmax", 8, 10), mh("lightning_hybrid", 4, 10)],
        "per-hop scoring (shipped)": base + [mh("softmax", 190, 200, scoring=None), mh("lightning_hybrid", 0, 200, scoring=None)],
    }[case]
    v = verdict("C3", tmp_path, records)
    assert v.verdict == expect, v.evidence
    if case == "both at zero (shipped)":
        assert any("both designs fail" in e for e in v.evidence)


# ---------------------------------------------------------------- C4


def xo(phase, value, status, bracket, **kw):
    return rec("lightning", f"crossover/{phase}_len", value, "tokens", status, vs="softmax", bracket=bracket, scope="op", **kw)


def theory(prefill, decode):
    return [
        xo(p, v, "projected", [v - 1, v], method="analytic", impl="fused", shape="text01", hardware=hw)
        for p, v in (("prefill", prefill), ("decode", decode))
        for hw in ("h100", "h200")
    ]


def practice(prefill, decode, analytic=(1000, 1000), spread=0.05, rel="="):
    out = []
    for (phase, (v, lo, hi)), analytic in zip((("prefill", prefill), ("decode", decode)), analytic):
        out.append(xo(phase, v, "measured", [lo, hi], method="measured", hardware="this cpu", relation=rel))
        out.append(
            xo(phase, analytic, "projected", [analytic - 1, analytic], method="analytic", impl="as run", shape="scaled", hardware="cpu")
        )
        for design in ("lightning", "softmax"):
            for n in {x for x in (lo, hi) if x}:
                out.append(
                    rec(
                        design,
                        f"latency/{phase}_ms",
                        10.0,
                        "ms",
                        context_len=n,
                        scope="op",
                        p25_ms=10 * (1 - spread / 2),
                        p75_ms=10 * (1 + spread / 2),
                    )
                )
    return out


@pytest.mark.parametrize(
    "case, expect",
    [
        ("a few thousand in theory, much later measured", C.SUPPORTED),
        ("measured earlier than analytic (shipped: < 256 vs 334)", C.NOT_SUPPORTED),
        ("thin margin within the timing spread", C.INCONCLUSIVE),
        ("theory half only (projected)", C.INCONCLUSIVE),
        ("theory mixed, practice later", C.PARTLY),
    ],
)
def test_c4_verdicts(tmp_path, case, expect):
    records = {
        "a few thousand in theory, much later measured": theory(2000, 3000) + practice((8000, 4096, 8192), (9000, 8192, 16384)),
        "measured earlier than analytic (shipped: < 256 vs 334)": theory(494, 2018)
        + practice((None, None, 256), (1559, 1024, 2048), analytic=(334, 1862), rel="<"),
        # measured 2.05x and 2.1x the analytic 1,000 on a grid of 2,000..2,100, but the op times spread by 20%
        "thin margin within the timing spread": theory(2000, 3000) + practice((2050, 2000, 2100), (2100, 2000, 2200), spread=0.2),
        "theory half only (projected)": theory(2000, 3000),
        "theory mixed, practice later": theory(494, 3000) + practice((8000, 4096, 8192), (9000, 8192, 16384)),
    }[case]
    v = verdict("C4", tmp_path, records)
    assert v.verdict == expect, v.evidence
    assert v.projected_only == (case == "theory half only (projected)")


# ---------------------------------------------------------------- C5


def speed(phase, value, status="projected", scope="attention", hardware="h200", vs="m2", length=LEN_1M):
    return rec(
        "minimax_m3",
        f"msa_speedup/{phase}",
        value,
        "x",
        status,
        vs=vs,
        scope=scope,
        hardware=hardware,
        context_len=length,
        method="analytic" if status == "projected" else "measured",
    )


def lookup(msa_k, soft_k, n=100, length=4096):
    return trained("softmax") + trained("msa") + [acc("softmax", soft_k, n, length), acc("msa", msa_k, n, length)]


@pytest.mark.parametrize(
    "case, expect",
    [
        ("fast and exact", C.SUPPORTED),
        ("decode short of the claim", C.PARTLY),
        ("decode far short", C.NOT_SUPPORTED),
        ("lookup lost", C.NOT_SUPPORTED),
        ("both at zero (shipped)", C.INCONCLUSIVE),
        ("no lookup records (msa_speedup alone)", C.INCONCLUSIVE),
    ],
)
def test_c5_verdicts(tmp_path, case, expect):
    fast = [speed("prefill", 9.5), speed("decode", 14.0), speed("decode", 3.5, scope="model")]
    records = {
        "fast and exact": fast + lookup(99, 100),
        "decode short of the claim": [speed("prefill", 9.5), speed("decode", 10.3)] + lookup(99, 100),
        "decode far short": [speed("prefill", 9.5), speed("decode", 3.5)] + lookup(99, 100),
        "lookup lost": fast + lookup(40, 100),
        "both at zero (shipped)": fast + lookup(0, 1, n=10),
        "no lookup records (msa_speedup alone)": fast,
    }[case]
    v = verdict("C5", tmp_path, records)
    assert v.verdict == expect, v.evidence
    assert v.projected_only  # no measured record carries M3 vs M2
    assert any("M3 vs M2, attention only, H200" in e for e in v.evidence)
    assert any("the same for the whole model" in e for e in v.evidence) == any(r is fast[2] for r in records)


def test_c5_is_not_projected_only_with_a_measured_comparison(tmp_path):
    records = [speed("prefill", 9.5, status="measured"), speed("decode", 14.0, status="measured")] + lookup(99, 100)
    v = verdict("C5", tmp_path, records)
    assert v.verdict == C.SUPPORTED and not v.projected_only
    # a comparison of another kind (vs M3-dense, another profile, another length) is not used
    other = [speed("prefill", 9.5, vs="m3_dense"), speed("decode", 14.0, hardware="a100"), speed("decode", 14.0, length=131072)] + lookup(
        99, 100
    )
    assert "prefill" not in " ".join(verdict("C5", tmp_path, other).evidence).split("lookup")[0]


# ---------------------------------------------------------------- C6


@pytest.mark.parametrize(
    "case, expect",
    [
        ("lightning cannot look up far back", C.SUPPORTED),
        ("lightning keeps up", C.NOT_SUPPORTED),
        ("untrained lightning (shipped)", C.INCONCLUSIVE),
        ("both at zero (shipped)", C.INCONCLUSIVE),
        ("ten probes each", C.INCONCLUSIVE),
    ],
)
def test_c6_verdicts(tmp_path, case, expect):
    base = trained("softmax") + trained("lightning")
    records = {
        "lightning cannot look up far back": base + [acc("softmax", 50, 50, 4096), acc("lightning", 0, 50, 4096)],
        "lightning keeps up": base + [acc("softmax", 50, 50, 4096), acc("lightning", 49, 50, 4096)],
        "untrained lightning (shipped)": trained("softmax")
        + trained("lightning", train_len=0, k=26, task="niah_single")
        + [acc("softmax", 7, 10, 1024), acc("lightning", 1, 10, 1024)],
        "both at zero (shipped)": base + [acc("softmax", 0, 10, 65536), acc("lightning", 0, 10, 65536)],
        "ten probes each": base + [acc("softmax", 8, 10, 4096), acc("lightning", 5, 10, 4096)],
    }[case]
    v = verdict("C6", tmp_path, records)
    assert v.verdict == expect, v.evidence
    if "untrained" in case:
        assert any("lightning did not learn" in e for e in v.evidence)


# ---------------------------------------------------------------- the recorded experiments


def test_no_verdict_in_the_recorded_experiments_rests_on_a_model_that_did_not_learn():
    """On the records in experiments/ (whatever they are when this runs): a claim whose models
    did not all learn their task reads inconclusive; older per-hop multi-hop records cannot
    decide C3."""
    from pathlib import Path

    from attnbench.report.quality import experiment_task, learned

    root = Path(__file__).resolve().parents[1] / "experiments"
    dirs = [root / e for e in ("needle_4m", "multihop") if (root / e).is_dir()]
    if not dirs:
        pytest.skip("no recorded needle_4m or multihop run")
    data = load(dirs)
    df, train = data.records, data.train
    verdicts = {c.id: v for c, v in C.judge_all(df, train)}
    needs = {
        "C2": ([C.hybrid_of(df[df["metric"] == "niah/acc"])], experiment_task(df, "niah/acc"), None),
        "C6": (["softmax", "lightning"], experiment_task(df, "niah/acc"), None),
    }
    for claim, (names, task, hops) in needs.items():
        flags = [learned(df, n, task, train=train).flag for n in names]
        if not all(flags):
            assert verdicts[claim].verdict in (C.INCONCLUSIVE, C.NOT_MEASURED_YET), (claim, verdicts[claim].evidence)
    mh = df[df["metric"] == "multihop/acc"]
    if not mh.empty and not (mh["scoring"] == "final value").any():
        assert verdicts["C3"].verdict == C.INCONCLUSIVE
