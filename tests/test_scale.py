"""exp=scale, the width ladder: its model rule, its budget rule, that width 64 finds the shipped
models, and a run at a tiny size through the records, the fit, the figures and C3's at-scale
part (the real trainings are the lead's to run; experiments/scale/README.md). No accuracy is
asserted."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from attnbench.cli import main as cli, preflight
from attnbench.training.checkpoints import SHIPPED
from attnbench.experiments import scale as S
from attnbench.verdicts import rules as R
from attnbench.verdicts.claims import judge as C
from attnbench.verdicts.claims import c3_scale as CS
from attnbench.verdicts import scale_fit as F
from attnbench.report.frame import load
from attnbench.report.figures import cost_figures  # noqa: F401  registers every figure, in report order
from attnbench.report.style import FIGURES, render
from attnbench.runner import config_dict
from attnbench.training.start import checkpoint_key

from helpers import TINY_BACKBONE, compose_cfg

MODEL_FILES = resources.files("attnbench.conf").joinpath("model")


def test_every_rung_file_follows_the_one_rule_and_width_64_is_tiny():
    cfg = compose_cfg(["+exp=scale"])
    assert S.ladder_model(cfg.model, 64) == config_dict(cfg.model) and cfg.model.name == "tiny"
    for w in (16, 32, 128, 256):
        written = OmegaConf.to_container(OmegaConf.load(str(MODEL_FILES.joinpath(f"w{w}.yaml"))))
        ruled = S.ladder_model(cfg.model, w)
        assert written == {k: ruled[k] for k in written}, w
        assert ruled["n_heads"] == 2 and ruled["n_experts"] == 4 and ruled["head_dim"] == w // 2 and ruled["d_expert"] == 2 * w
    # exp=train model=w32 trains the same needle model as the ladder's width 32
    train = compose_cfg(["+exp=train", "model=w32", "seed=1"])
    needle, _ = S.phase_cfgs(cfg, 32, 1, S.budget_rule(cfg, 32))
    assert checkpoint_key(train, "softmax") == checkpoint_key(needle, "softmax")


def test_width_64_keeps_the_shipped_models_and_their_budgets():
    cfg = compose_cfg(["+exp=scale"])
    budgets = S.budget_rule(cfg, 64)
    assert budgets["budget_ratio"] == 1.0
    assert (budgets["needle_token_budget"], budgets["token_budget"], budgets["chain_token_budget"]) == (40_000_000, 200_000_000, 30_000_000)
    for seed in (0, 1):
        needle_4m = compose_cfg(["+exp=needle_4m", f"seed={seed}"])
        multihop = compose_cfg(["+exp=multihop", f"seed={seed}"])
        needle, chain = S.phase_cfgs(cfg, 64, seed, budgets)
        for name in cfg.exp.designs:
            assert checkpoint_key(needle, name) == checkpoint_key(needle_4m, name), (name, seed)
            assert checkpoint_key(chain, name) == checkpoint_key(multihop, name), (name, seed)
    needle, chain = S.phase_cfgs(cfg, 64, 0, budgets)  # softmax's shipped needle and chain models, seed 0
    shipped = {p.name for p in SHIPPED.iterdir()}
    assert f"softmax-{checkpoint_key(needle, 'softmax')}" in shipped and f"softmax-{checkpoint_key(chain, 'softmax')}" in shipped


def test_budgets_are_fair_v1s_at_every_width_by_default():
    cfg = compose_cfg(["+exp=scale"])
    assert cfg.scale.budget_scaling == "fixed"
    for w in (16, 32, 128):
        b = S.budget_rule(cfg, w)
        assert (b["needle_token_budget"], b["token_budget"], b["chain_token_budget"]) == (40_000_000, 200_000_000, 30_000_000)
        assert b["budget_ratio"] == 1.0 and (b["active_ratio"] < 1.0 if w < 64 else b["active_ratio"] > 1.0)
        assert "the same tokens for every model" in b["budget_rule"]
    bad = compose_cfg(["+exp=scale", "scale.budget_scaling=chinchilla"])
    with pytest.raises(ValueError, match="fixed or active_params"):
        S.budget_rule(bad, 32)


def test_budgets_scale_with_the_reference_active_parameters():
    cfg = compose_cfg(["+exp=scale", "scale.budget_scaling=active_params"])
    base = S.active_params(cfg, "softmax")
    per_param = []
    for w in (32, 128):
        b = S.budget_rule(cfg, w)
        here = S.active_params(S.rung_cfg(cfg, w, 0), "softmax")
        assert b["reference_active"] == here and b["budget_ratio"] == here / base
        assert b["needle_token_budget"] == round(40_000_000 * here / base) and b["chain_token_budget"] == round(30_000_000 * here / base)
        per_param.append(b["needle_tokens_per_active_param"])
    assert per_param[0] == pytest.approx(per_param[1], rel=1e-6) == pytest.approx(40_000_000 / base, rel=1e-6)
    assert S.active_params(S.rung_cfg(cfg, 32, 0), "softmax") < base < S.active_params(S.rung_cfg(cfg, 128, 0), "softmax")


def test_the_main_command_uses_no_ladder_model():
    scale = compose_cfg(["+exp=scale"])
    ladder = {
        checkpoint_key(c, name) for w in (32, 128) for c in S.phase_cfgs(scale, w, 0, S.budget_rule(scale, w)) for name in scale.exp.designs
    }
    main = compose_cfg(["+exp=needle_4m"])
    assert main.model.name == "tiny" and not ladder & {checkpoint_key(main, name) for name in main.exp.designs}
    for path in resources.files("attnbench.conf").joinpath("exp").iterdir():  # only exp=scale sets the ladder
        if path.name.endswith(".yaml") and path.name != "scale.yaml":
            text = path.read_text()
            assert "scale:" not in text and "model: w" not in text and "model=w" not in text, path.name


# ---------------------------------------------------------------- a run at a tiny size

STAGES = (
    "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2},"
    " {n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2, hops: 2}]"
)
TINY = [
    *TINY_BACKBONE,  # the base: width 32, 2 heads of 16, 8 layers (the 7:1 period whole)
    "exp.designs=[softmax,lightning_hybrid_h8]",
    "scale.widths=[16,32]",
    "scale.seeds=[0,1]",
    "scale.needle_probes=3",
    "scale.multikey_haystacks=2",
    "scale.chain_haystacks=2",
    "scale.factors=[1,4]",
    "task.n_keys=16",
    "task.n_values=16",
    "task.n_filler=8",
    "train.batch=8",
    "train.max_steps=3",
    "train.warmup=1",
    "train.window=2",
    "train.log_every=1",
    STAGES,
    "eval.depths=[0.0,1.0]",
    "eval.hops=[1,2]",
    "eval.chains=2",
]


def test_scale_runs_at_a_tiny_size_records_fit_figures_and_c3(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    # each training's start calibrates the CPU's matmul peak (seconds on a busy machine); it sets
    # no number this test reads, so eight tiny trainings skip it
    monkeypatch.setattr("attnbench.training.trainer.calibrate_peak", lambda device=None: 1e9)
    run = tmp_path / "run"
    cfg = compose_cfg(["+exp=scale", *TINY, "threads=1", "wandb.mode=disabled", "report.enabled=false"])
    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed", lines[-1]
    models = [r for r in lines if r.get("metric") == S.MODEL]
    assert {(r["design"], r["width"], r["seed"], r["phase"]) for r in models} == {
        (d, w, s, p) for d in ("softmax", "lightning_hybrid_h8") for w in (16, 32) for s in (0, 1) for p in ("needle", "chain")
    }
    for r in models:
        assert r["value"] == r["params"]["active"] and r["params"]["total"] >= r["value"] and r["budget_rule"]
        assert r["needle_token_budget"] > 0 and r["model"] == ("tiny" if r["width"] == 32 else "w16")
    chain = {(r["design"], r["width"], r["seed"]): r for r in models if r["phase"] == "chain"}
    needle = {(r["design"], r["width"], r["seed"]): r for r in models if r["phase"] == "needle"}
    assert all(chain[k]["continued_from"] == needle[k]["key"] for k in chain)  # chains continue the needle model
    acc = [r for r in lines if r.get("metric") == S.ACC]
    cells = {(r["design"], r["width"], r["seed"], r["task"], r["factor"], r.get("hops")) for r in acc}
    want = {
        (d, w, s, t, f, None)
        for d in ("softmax", "lightning_hybrid_h8")
        for w in (16, 32)
        for s in (0, 1)
        for t in ("niah_single", "niah_multikey")
        for f in (1, 4)
    }
    want |= {(d, w, s, "chain", 1, h) for d in ("softmax", "lightning_hybrid_h8") for w in (16, 32) for s in (0, 1) for h in (1, 2)}
    assert cells == want
    for r in acc:
        assert r["status"] == "measured" and r["n"] == sum(r["sizes"]) and r["k"] == sum(r["hits"]) and r["haystacks"] == len(r["hits"])
        assert 0 <= r["ci_low"] <= r["value"] <= r["ci_high"] <= 1 and r["layout"] in ("S" * 8, "LLLLLLLS")
    assert {r["n"] for r in acc if r["task"] == "niah_single"} == {3} and {r["n"] for r in acc if r["task"] == "chain"} == {4}
    # the same contexts for both designs and both widths at a seed; 4x is four times 1x
    by = {(r["design"], r["width"], r["seed"], r["task"], r["factor"], r.get("hops")): r for r in acc}
    assert all(
        by[(d, w, s, t, 4, None)]["context_len"] == 4 * by[(d, w, s, t, 1, None)]["context_len"] for d, w, s, t, f, _ in want if f == 4
    )

    data = load([run])
    # the README tables: a model row per (design, width, seed, phase), an accuracy row per (design, width)
    from attnbench.report.readme import width_ladder as RT

    assert len(RT.models(data)) == len(models) and len(RT.accuracy(data)) == 4
    gaps = RT.gap(data)
    assert set(gaps["design"]) == {"lightning_hybrid_h8"} and "d=16" in gaps["gap by width"].iloc[0]
    fit = F.fit_gap(data.records, "lightning_hybrid_h8", "chain", 1, (2,))
    assert fit is not None and fit.widths == [16, 32] and fit.seeds == {16: [0, 1], 32: [0, 1]}
    assert np.isfinite(fit.slope) and fit.slope_lo <= fit.slope_hi and fit.params[0] < fit.params[1]
    assert fit == F.fit_gap(data.records, "lightning_hybrid_h8", "chain", 1, (2,))  # seeded: the same interval every time
    drawn = {spec.id: render(spec, data.records) for spec in FIGURES if spec.id.startswith("scale_")}
    assert set(drawn) == {"scale_niah_single", "scale_niah_multikey", "scale_chain", "scale_gap"} and all(drawn.values())
    c3 = next(c for c in C.CLAIMS if c.id == "C3")
    v = c3(data.records, data.train)
    assert v.verdict == R.NOT_MEASURED_YET  # no multihop records: C3's own verdict is untouched
    part = next(k for k in v.parts if k.startswith("at scale, lightning_hybrid_h8"))
    assert v.parts[part] == CS.NOT_YET and "widths 16-32" in part, v.parts
    assert any("2 width(s) with 2 seeds" in e and "the trend needs 3" in e for e in v.evidence), v.evidence
    assert "At scale (exp=scale" in c3.rule


# ---------------------------------------------------------------- the sub-verdict's three answers


def _ladder(gaps: dict[int, float], seeds=(0, 1), n: int = 60) -> pd.DataFrame:
    """scale/acc records at widths 32, 64, 128: softmax right on every probe, the hybrid on
    1 - gap of them, 2-hop chains, probes 3 a haystack."""
    rows = []
    for w, gap in gaps.items():
        for s in seeds:
            for name, p in (("softmax", 1.0), ("lightning_hybrid_h8", 1.0 - gap)):
                hits = np.zeros(n // 3)
                hits[: int(round(p * n / 3))] = 3
                rows.append(
                    dict(metric=F.ACC, status="measured", design=name, layout="S" * 8 if name == "softmax" else "LLLLLLLS", width=w,
                         seed=s, task="chain", factor=1, hops=2, hits=list(hits), sizes=[3] * (n // 3), rung_params=100 * w * w,
                         active_params=100 * w * w, train_len=128, context_len=128, key=f"{name}{w}{s}")
                )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "gaps, expect",
    [({32: 0.0, 64: 0.3, 128: 0.6}, CS.GROWS), ({32: 0.6, 64: 0.3, 128: 0.0}, CS.SHRINKS), ({32: 0.3, 64: 0.3, 128: 0.3}, CS.NO_TREND)],
)
def test_the_at_scale_part_reads_the_slope_and_its_interval(gaps, expect):
    parts, evidence = CS.judge_at_scale(_ladder(gaps), ("lightning_hybrid_h8",))
    assert list(parts.values()) == [expect], (parts, evidence)
    label = next(iter(parts))
    assert "widths 32-128" in label and "active parameters" in label
    assert any("is not 456B" in e and "slope" in e for e in evidence)


def test_the_at_scale_part_waits_for_three_widths_of_two_seeds():
    assert CS.judge_at_scale(pd.DataFrame(), ("lightning_hybrid_h8",)) == ({}, [])  # no ladder records: nothing added
    parts, _ = CS.judge_at_scale(_ladder({32: 0.0, 64: 0.3, 128: 0.6}, seeds=(0,)), ("lightning_hybrid_h8",))
    assert list(parts.values()) == [CS.NOT_YET]
    parts, _ = CS.judge_at_scale(_ladder({32: 0.0, 64: 0.6}), ("lightning_hybrid_h8",))
    assert list(parts.values()) == [CS.NOT_YET]


def test_models_trained_under_scaled_budgets_are_left_out_of_the_fit():
    """experiments/scale_per_param/: models whose budgets were scaled by their active parameters
    do not mix with the fair-v1 ladder (the same rung, a different rule)."""
    df = _ladder({32: 0.0, 64: 0.3, 128: 0.6})
    assert CS.judge_at_scale(df, ("lightning_hybrid_h8",))[0]
    key = "lightning_hybrid_h8128" + "0"  # the hybrid's width-128 model at seed 0
    scaled = pd.DataFrame(
        [dict(metric=F.MODEL, status="measured", design="lightning_hybrid_h8", width=128, seed=0, key=key, budget_ratio=2.5)]
    )
    d = F.records(pd.concat([df, scaled], ignore_index=True))
    assert key not in set(d["key"]) and len(d) == len(F.records(df)) - len(df[df["key"] == key])
    fit = F.fit_gap(pd.concat([df, scaled], ignore_index=True), "lightning_hybrid_h8", "chain", 1, (2,))
    assert fit.seeds[128] == [1]  # only the seed trained under the rule is left at width 128


def test_a_fair_run_that_resumed_a_scaled_model_keeps_its_records():
    """The key leaves out the token budget, so experiments/scale's width-16 models (fair-v1 budgets, resumed from
    scale_per_param's stopped ones) share their keys with the scaled models: the run's config tells them apart."""
    df = _ladder({32: 0.0, 64: 0.3, 128: 0.6}).assign(config_hash="fair")
    key = "lightning_hybrid_h8128" + "0"
    scaled = pd.DataFrame(
        [
            dict(
                metric=F.MODEL,
                status="measured",
                design="lightning_hybrid_h8",
                width=128,
                seed=0,
                key=key,
                budget_ratio=2.5,
                config_hash="scaled",
            )
        ]
    )
    scaled_acc = df[df["key"] == key].assign(config_hash="scaled")  # the scaled run's own accuracy records
    merged = pd.concat([df, scaled, scaled_acc], ignore_index=True)
    d = F.records(merged)
    assert len(d) == len(F.records(df)) and set(d["config_hash"]) == {"fair"}
    assert F.fit_gap(merged, "lightning_hybrid_h8", "chain", 1, (2,)).seeds[128] == [0, 1]
