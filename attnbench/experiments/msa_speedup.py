"""exp=msa_speedup: is MiniMax-M3 (MSA) ~9x faster in prefill and ~15x in decode than M2 at 1M?

Claims (seed 000: "MiniMax reports 9 times faster prefill and 15 times faster decoding than M2 at
a million tokens"; MSA paper, arXiv 2606.13392: "reducing per-token attention compute by 28.4x at
1M context ... 14.2x prefill and 7.6x decoding wall-clock speedups on H800", a 109B model, MSA
against dense GQA).

1. Predicted (cost model, fused kernels, bf16, roofline at data-sheet peaks): M3 against M2, and
   M3 against the same model with dense GQA in every layer, at bench.memory_lens, on each
   profile in cfg.exp-level `profiles` (H200 for the vendor claim, H800 for the paper's), for
   the attention alone and for the whole model (projections and experts from the published
   active parameters; decode at batch 1). Every term (FLOPs, bytes, seconds) is recorded.
2. Measured: softmax against msa ops of the scaled shape on this machine (the gate first), the
   same sweep as exp=crossover, and the cost model's prediction for the same calls.
3. A verdict per claim: consistent when the published figure is within 1.5x of the prediction.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd

from attnbench.bench import costmodel, sweep
from attnbench.bench.calibrate import hardware_for_run, load_profile
from attnbench.bench.presets import M2, M3

M3_DENSE = replace(M3, name="minimax_m3_dense", layout="S" * M3.n_layers)  # the paper's GQA baseline, M3's shape
TOLERANCE = 1.5  # a published figure within this factor of the prediction is "consistent"
CLAIMS = [  # (claim, phase, baseline, hardware, published, source)
    ("vendor prefill", "prefill", "m2", "h200", 9.0, "seed 000: '9 times faster prefill ... than M2 at a million tokens'"),
    ("vendor decode", "decode", "m2", "h200", 15.0, "seed 000: '15 times faster decoding than M2 at a million tokens'"),
    ("paper prefill", "prefill", "m3_dense", "h800", 14.2, "arXiv 2606.13392: 14.2x prefill on H800 (109B, vs GQA)"),
    ("paper decode", "decode", "m3_dense", "h800", 7.6, "arXiv 2606.13392: 7.6x decoding on H800 (109B, vs GQA)"),
]
CLAIM_LEN = 1 << 20  # "at a million tokens"
PAPER_COMPUTE = 28.4  # arXiv 2606.13392: per-token attention compute at 1M context


def run(ctx) -> None:
    start = time.perf_counter()
    budget = sweep.Budget(start + ctx.budget.seconds, reserve_s=30.0, text=ctx.budget.text)
    predicted = predict(ctx)
    verdicts = judge(ctx, predicted)
    hw = hardware_for_run(ctx)
    passed = sweep.gate(ctx, "SM")
    df = sweep.run(ctx, hw, "SM", passed, budget, scopes=["op"])
    measured = measured_speedups(ctx, df)
    summarize(ctx, predicted, verdicts, measured)


def predict(ctx) -> pd.DataFrame:
    b = ctx.cfg.bench
    rows = []
    baselines = {"m2": M2, "m3_dense": M3_DENSE}
    for hw_name in sorted(set(b.profiles) | {"h200", "h800"}):
        hw = load_profile(hw_name)
        for n in b.memory_lens:
            for phase in ("prefill", "decode"):
                for scope in ("attention", "model"):
                    rows += _speedups(ctx, hw_name, hw, n, phase, scope, baselines)
    return pd.DataFrame(rows + _compute_per_token(ctx))


def _speedups(ctx, hw_name: str, hw, n: int, phase: str, scope: str, baselines: dict) -> list[dict]:
    """M3's predicted speedup over each baseline at one (hardware, length, phase, scope), recorded; its table rows."""
    rows = []

    def cost(arch):
        return costmodel.model_cost(arch, phase, n, batch=1, dtype="bfloat16", impl="fused", attention_only=scope == "attention")

    mine = cost(M3)
    t3 = mine.seconds(hw, "bfloat16")
    for base_name, base in baselines.items():
        theirs = cost(base)
        t0 = theirs.seconds(hw, "bfloat16")
        speedup = t0 / t3
        terms = {
            "baseline_s": t0,
            "m3_s": t3,
            "baseline_flops": theirs.flops,
            "m3_flops": mine.flops,
            "baseline_bytes": theirs.bytes,
            "m3_bytes": mine.bytes,
            "baseline_terms_s": _top(theirs.term_seconds(hw, "bfloat16")),
            "m3_terms_s": _top(mine.term_seconds(hw, "bfloat16")),
        }
        ctx.record(
            "minimax_m3",
            f"msa_speedup/{phase}",
            speedup,
            "x",
            "projected",
            key=("context_len", "hardware", "scope", "vs"),
            layout=M3.layout,
            context_len=n,
            hardware=hw_name,
            method="analytic",
            scope=scope,
            vs=base_name,
            dtype="bfloat16",
            batch=1,
            **terms,
        )
        rows.append(
            dict(hardware=hw_name, n=n, phase=phase, scope=scope, vs=base_name, speedup=speedup, baseline_ms=1e3 * t0, m3_ms=1e3 * t3)
        )

    return rows


def _compute_per_token(ctx) -> list[dict]:
    """Attention FLOPs of one decoded token at CLAIM_LEN, baseline over M3, recorded; its table rows."""
    rows = []

    # attention FLOPs of one decoded token at 1M (hardware-independent): whole models, and one MSA layer
    # against one GQA layer of M3's shape (the paper's "per-token attention compute")
    def one_layer(arch):
        return replace(arch, layout=arch.layout[-1])

    pairs = [("m2", M2, M3), ("m3_dense", M3_DENSE, M3), ("gqa_layer", one_layer(M3_DENSE), one_layer(M3))]
    for base_name, base, mine in pairs:
        f0 = costmodel.model_cost(base, "decode", CLAIM_LEN, attention_only=True, dtype="bfloat16").flops
        f3 = costmodel.model_cost(mine, "decode", CLAIM_LEN, attention_only=True, dtype="bfloat16").flops
        ctx.record(
            "minimax_m3",
            "msa_speedup/compute_per_token",
            f0 / f3,
            "x",
            "projected",
            key=("context_len", "vs"),
            layout=mine.layout,
            context_len=CLAIM_LEN,
            vs=base_name,
            method="analytic",
            baseline_flops=f0,
            m3_flops=f3,
            published=PAPER_COMPUTE if base_name != "m2" else None,
        )
        rows.append(
            dict(
                hardware="any",
                n=CLAIM_LEN,
                phase="compute/token",
                scope="attention",
                vs=base_name,
                speedup=f0 / f3,
                baseline_ms=None,
                m3_ms=None,
            )
        )
    return rows


def _top(seconds: dict[str, float], k: int = 6) -> dict[str, float]:
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1])[:k])


def judge(ctx, predicted: pd.DataFrame) -> list[dict]:
    out = []
    claims = CLAIMS + [
        (
            "paper compute per token",
            "compute/token",
            "gqa_layer",
            "any",
            PAPER_COMPUTE,
            "arXiv 2606.13392: 28.4x less per-token attention compute at 1M (one MSA layer vs one GQA layer)",
        )
    ]
    for claim, phase, vs, hw, published, source in claims:
        hit = predicted[
            (predicted.phase == phase)
            & (predicted.vs == vs)
            & (predicted.hardware == hw)
            & (predicted.n == CLAIM_LEN)
            & (predicted.scope == "attention")
        ]
        if hit.empty:
            ctx.record(
                "minimax_m3",
                "msa_speedup/verdict",
                None,
                "text",
                "skipped",
                key=("claim",),
                layout=M3.layout,
                claim=claim,
                reason=f"no prediction for {hw} at {CLAIM_LEN}",
            )
            continue
        pred = float(hit.speedup.iloc[0])
        whole = predicted[
            (predicted.phase == phase)
            & (predicted.vs == vs)
            & (predicted.hardware == hw)
            & (predicted.n == CLAIM_LEN)
            & (predicted.scope == "model")
        ]
        ratio = published / pred
        verdict = (
            "consistent"
            if 1 / TOLERANCE <= ratio <= TOLERANCE
            else "published is higher than the model predicts"
            if ratio > TOLERANCE
            else "published is lower than the model predicts"
        )
        rec = dict(
            claim=claim,
            phase=phase,
            vs=vs,
            hardware=hw,
            context_len=CLAIM_LEN,
            published=published,
            predicted_attention=pred,
            predicted_model=float(whole.speedup.iloc[0]) if len(whole) else None,
            ratio=ratio,
            source=source,
        )
        ctx.record("minimax_m3", "msa_speedup/verdict", verdict, "text", "projected", key=("claim", "hardware"), layout=M3.layout, **rec)
        out.append({**rec, "verdict": verdict})
    return out


def measured_speedups(ctx, df: pd.DataFrame) -> pd.DataFrame:
    """t(softmax) / t(msa) at the lengths where both ops were measured (and the same ratio predicted)."""
    m = df[df.status == "measured"].pivot_table(index=["phase", "n"], columns="letter", values=["median_ms", "predicted_ms"])
    rows = []
    for (phase, n), r in m.iterrows():
        if pd.isna(r.get(("median_ms", "S"))) or pd.isna(r.get(("median_ms", "M"))):
            continue
        speedup = r[("median_ms", "S")] / r[("median_ms", "M")]
        pred = r[("predicted_ms", "S")] / r[("predicted_ms", "M")]
        ctx.record(
            "msa",
            f"msa_speedup/{phase}",
            float(speedup),
            "x",
            "measured",
            key=("context_len", "method", "dtype"),
            context_len=int(n),
            method="measured",
            hardware=f"this {ctx.device.type}",
            scope="op",
            vs="softmax",
            predicted=float(pred),
            softmax_ms=float(r[("median_ms", "S")]),
            msa_ms=float(r[("median_ms", "M")]),
            dtype=ctx.cfg.bench.dtype,
        )
        rows.append(
            dict(
                phase=phase,
                n=int(n),
                softmax_ms=r[("median_ms", "S")],
                msa_ms=r[("median_ms", "M")],
                measured_speedup=speedup,
                predicted_speedup=pred,
            )
        )
    return pd.DataFrame(rows)


def summarize(ctx, predicted: pd.DataFrame, verdicts: list[dict], measured: pd.DataFrame) -> None:
    pd.set_option("display.width", 200)
    p = predicted[predicted.phase != "compute/token"].pivot_table(index=["hardware", "vs", "scope", "phase"], columns="n", values="speedup")
    parts = [
        ("Predicted speedup of M3 (roofline, fused kernels, bf16, batch 1)", p.round(2).to_string()),
        (
            "Attention FLOPs per decoded token at 1M, baseline / M3",
            predicted[predicted.phase == "compute/token"][["vs", "speedup"]].round(2).to_string(index=False),
        ),
    ]
    if verdicts:
        v = pd.DataFrame(verdicts)[["claim", "hardware", "published", "predicted_attention", "predicted_model", "verdict"]]
        parts.append(("Verdicts at 1M tokens (attention; whole model beside it)", v.round(2).to_string(index=False)))
    if len(measured):
        parts.append(("Measured on this machine: softmax / msa ops of the scaled shape", measured.round(3).to_string(index=False)))
    text = "\n\n".join(f"## {t}\n\n```\n{body}\n```" for t, body in parts)
    (ctx.run_dir / "summary.md").write_text(f"# exp=msa_speedup\n\n{text}\n")
    for t, body in parts:
        ctx.console.print(f"\n{t}\n{body}")
