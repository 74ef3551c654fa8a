"""SYNTHETIC TEST FIXTURES: made-up records in the shape of results.METRICS, for report and W&B tests.

Nothing here is a result. The numbers are invented to exercise every figure, table and claim
rule (measured, projected, skipped and failed records); every record says so in its note.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

FIXTURE_NOTE = "synthetic test fixture"
DESIGNS = {"softmax": "S", "lightning": "L", "lightning_hybrid": "LLLLLLLS", "swa_hybrid": "WWWWWWWS", "msa": "M"}
XSS = "<script>alert('attnbench')</script>"


def header(exp: str, device: str, description: str = "", seed: int = 0) -> dict:
    hardware = {"machine": "x86_64", "cpu": "Fixture CPU", "cpu_count": 2, "cuda": device == "cuda"}
    if device == "cuda":
        hardware["gpu"] = "Fixture GPU"
    attention = {n: {"name": n, "layout": l, "description": description or f"{n} (fixture)"} for n, l in DESIGNS.items()}
    config = {
        "exp": {"name": exp, "description": f"fixture for {exp}"},
        "model": {"d_model": 64, "n_layers": 8, "n_heads": 2, "head_dim": 32, "n_experts": 4, "top_k_experts": 2},
        "attention": attention,
        "seed": seed,
        "device": device,
    }
    return {
        "type": "header",
        "exp": exp,
        "config_hash": f"fixture{device}{seed}",
        "started": "2026-01-01T00:00:00+00:00",
        "git": {"commit": "0" * 40, "dirty": False},
        "versions": {"python": "3.11", "torch": "2.13.0"},
        "hardware": hardware,
        "config": config,
    }


def records(exp: str, device: str = "cpu", seed: int = 0) -> list[dict]:
    out = []

    def rec(design, metric, value, unit, status="measured", **kw):
        out.append(
            {
                "type": "record",
                "exp": exp,
                "design": design,
                "layout": DESIGNS.get(design, ""),
                "metric": metric,
                "value": value,
                "unit": unit,
                "status": status,
                "seed": seed,
                "device": device,
                "config_hash": f"fixture{device}{seed}",
                "time": "2026-01-01T00:10:00+00:00",
                "note": FIXTURE_NOTE,
                **kw,
            }
        )

    rule = {"name": "fixture rule", "token_budget": 5_000_000, "patience": 3000, "floor": 0.95, "advance_at": 0.9}
    # Training: every design passed the whole curriculum (trained to 512) but lightning, which passed none.
    learned_k = {"softmax": 199, "msa": 198, "lightning_hybrid": 190, "swa_hybrid": 185, "lightning": 30}
    for name in DESIGNS:
        done = name != "lightning"
        rec(
            name,
            "train/steps_to_floor",
            900 if done else None,
            "steps",
            steps=900 if done else 3000,
            tokens=4_000_000,
            rule=rule,
            train_len=512 if done else 0,
            stop_reason="fixture",
            train_status="done" if done else "stalled",
            final_stage=6 if done else 1,
            n_stages=6,
            source="fixture/record.json",
        )
        k = learned_k[name]
        rec(
            name,
            "train/acc",
            k / 200,
            "fraction",
            task="niah_multikey",
            context_len=512 if done else 24,
            n=200,
            ci_low=max(0, k / 200 - 0.05),
            ci_high=min(1, k / 200 + 0.05),
            train_len=512 if done else 0,
        )
        for hops in (1, 2, 3, 4):
            rec(
                name,
                "train/acc",
                (k - 10 * hops) / 200,
                "fraction",
                task="multihop",
                hop_task="chain",
                hops=hops,
                scoring="final value",
                context_len=512 if done else 24,
                n=200,
                train_len=512 if done else 0,
            )
        rec(name, "params/total", 160_000 + 1000 * len(DESIGNS[name]), "count")
        rec(name, "params/active", 100_000, "count")
        rec(name, "params/attention", 25_000, "count")
        for step in range(0, 301, 50):
            rec(name, "train/loss", 4.0 * math.exp(-step / 150) + 0.1, "nats", step=step)
    # NIAH: softmax and msa retrieve, lightning does not, the hybrid in between; trained at 512.
    base = {"softmax": 1.0, "msa": 0.97, "lightning_hybrid": 0.9, "swa_hybrid": 0.6, "lightning": 0.2}
    for name, acc in base.items():
        for length in (256, 512, 1024, 2048):
            for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
                kw = dict(task="niah_multikey", context_len=length, depth=depth, n=100, train_len=512)
                if name == "msa" and length == 2048:
                    rec(name, "niah/acc", None, "fraction", "skipped", **{**kw, "note": "fixture: over the time budget"})
                elif name == "swa_hybrid" and length == 2048 and depth == 0.5:
                    rec(name, "niah/acc", None, "fraction", "failed", **{**kw, "note": "fixture: NaN loss"})
                else:
                    a = max(0.0, acc - (0.1 * (length > 512)) * (name != "softmax"))
                    rec(name, "niah/acc", a, "fraction", ci_low=max(0, a - 0.05), ci_high=min(1, a + 0.05), **kw)
    rec(
        "lightning_hybrid",
        "niah/acc",
        None,
        "fraction",
        "skipped",
        task="niah_multikey",
        context_len=4096,
        train_len=512,
        note="fixture: over the memory budget",
    )  # a whole length skipped: no depth
    for name, acc in (("softmax", 0.9), ("lightning_hybrid", 0.6), ("swa_hybrid", 0.5), ("msa", 0.85)):
        for length in (512, 1024):
            for hops in (1, 2, 3, 4):
                a = acc / hops**0.3
                rec(
                    name,
                    "multihop/acc",
                    a,
                    "fraction",
                    task="multihop",
                    hop_task="chain",
                    scoring="final value",
                    hops=hops,
                    context_len=length,
                    n=200,
                    ci_low=a - 0.04,
                    ci_high=a + 0.04,
                    train_len=512,
                )
    # Latency: measured up to 64K, projected past it; softmax quadratic, lightning linear.
    for name, per, per_dec in (("softmax", 2e-7, 1e-5), ("lightning", 4e-3, None), ("msa", 2e-3, 2e-6)):
        for length in (1024, 4096, 16384, 65536, 131072, 1048576):
            ms = per * length**2 if name == "softmax" else per * length + (1e-9 * length**2 if name == "msa" else 0)
            dec = 0.05 + per_dec * length if per_dec else 0.2
            status = "measured" if length <= 65536 else "projected"
            kw = dict(context_len=length, scope="layer", op=name, backend="reference", dtype="bfloat16")
            flops = 1e9 * (length / 1024) ** (2 if name == "softmax" else 1)  # the two-term roofline's fields (kernels_cpu)
            roof = dict(min_flops=flops, intensity={"softmax": 200.0, "lightning": 30.0, "msa": 8.0}[name]) if status == "measured" else {}
            rec(name, "latency/prefill_ms", ms, "ms", status, p25_ms=ms * 0.95, p75_ms=ms * 1.05, **kw, **roof)
            rec(name, "latency/decode_ms", dec, "ms", status, **kw)
    rec("softmax", "latency/prefill_ms", None, "ms", "skipped", context_len=4194304, scope="layer", note="fixture: over the memory budget")
    # Streaming prefill against the roofline; one timing taken under load (noisy).
    for name, per in (("softmax", 1e-9), ("lightning_hybrid", 0.0)):
        for length in (1024, 16384, 262144):
            s = 2e-5 * length + per * length**2
            rec(
                name,
                "eval/prefill_s",
                s,
                "s",
                context_len=length,
                roofline_s=s / 4,
                peak_fraction=0.25,
                gflop_per_s=30.0,
                noisy=name == "softmax" and length == 16384,
                load=3.1 if length == 16384 else 0.4,
            )
    rec("lightning", "crossover/prefill_len", 4096, "tokens", "projected", vs="softmax", method="analytic", bracket=[2048, 8192])
    rec("lightning", "crossover/prefill_len", 32768, "tokens", "measured", vs="softmax", method="measured", bracket=[16384, 65536])
    rec("lightning", "crossover/decode_len", 16384, "tokens", "measured", vs="softmax", method="measured", bracket=[8192, 32768])
    # Memory: designs measured on this model, presets projected from their configs.
    for name, per_tok in (("softmax", 2048), ("lightning", 0), ("lightning_hybrid", 256), ("swa_hybrid", 256), ("msa", 2304)):
        rec(name, "memory/cache_bytes_per_token", per_tok, "bytes", dtype="bfloat16")
    rec("lightning", "memory/fixed_state_bytes", 65536, "bytes", dtype="float32")
    for preset, per_tok in (("minimax_text_01", 40960), ("minimax_m2", 253952), ("minimax_m3", 116736)):
        rec("preset", "memory/cache_bytes_per_token", per_tok, "bytes", "projected", preset=preset, dtype="bf16")
        for length in (131072, 1048576, 4194304):
            rec("preset", "memory/total_bytes", per_tok * length, "bytes", "projected", preset=preset, dtype="bf16", context_len=length)
    for phase, k in (("prefill", 8.0), ("decode", 13.0)):
        for length in (65536, 262144, 1048576):
            rec(
                "msa",
                f"msa_speedup/{phase}",
                k * length / 1048576 + 1,
                "x",
                "projected",
                context_len=length,
                method="analytic",
                hardware="H100 (fixture)",
            )
            if length <= 262144:
                rec(
                    "msa",
                    f"msa_speedup/{phase}",
                    0.8 * (k * length / 1048576 + 1),
                    "x",
                    context_len=length,
                    method="measured",
                    hardware=device,
                )
    rec("msa", "smoke/custom_metric", 0.5, "ratio")
    return out


def write_run(
    run_dir: Path, exp: str = "fixture", device: str = "cpu", seed: int = 0, description: str = "", footer: str | None = "completed"
) -> Path:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [header(exp, device, description, seed), *records(exp, device, seed)]
    if footer:
        lines.append({"type": "footer", "exp": exp, "ended": "2026-01-01T00:20:00+00:00", "status": footer, "wall_s": 1.0})
    (run_dir / "results.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    return run_dir


NEEDLE_DESIGNS = {"lightning_hybrid_h8": "LLLLLLLS", "softmax": "S", "softmax_logn": "S", "msa": "M", "lightning_hybrid31": "LLLS"}
NEEDLE_LENS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


def needle_run(run_dir: Path, seed: int = 0) -> Path:
    """A needle_4m-shaped run: five designs, seven lengths to 4M, 30 probes a cell to 16K and
    10 beyond, long cells skipped for the budget, one cell partial (msa at 16K: 2 of its 6
    haystacks ran, the other 4 skipped late) and one design that did not learn (invented numbers)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    head = header("needle_4m", "cpu", seed=seed)
    head["config"]["attention"] = {n: {"name": n, "layout": l, "description": f"{n} (fixture)"} for n, l in NEEDLE_DESIGNS.items()}
    out: list[dict] = [head]

    def rec(design, metric, value, unit, status="measured", **kw):
        out.append(
            {
                "type": "record",
                "exp": "needle_4m",
                "design": design,
                "layout": NEEDLE_DESIGNS[design],
                "metric": metric,
                "value": value,
                "unit": unit,
                "status": status,
                "seed": seed,
                "device": "cpu",
                "config_hash": head["config_hash"],
                "time": "2026-01-01T00:10:00+00:00",
                "note": FIXTURE_NOTE,
                **kw,
            }
        )

    rule = {"name": "fixture rule", "token_budget": 40_000_000, "patience": 5000, "floor": 0.95, "advance_at": 0.9}
    reach = {"lightning_hybrid_h8": 4194304, "softmax": 65536, "softmax_logn": 65536, "msa": 16384, "lightning_hybrid31": 262144}
    start = {"lightning_hybrid_h8": 0.9, "softmax": 0.97, "softmax_logn": 1.0, "msa": 0.97, "lightning_hybrid31": 0.03}
    for name in NEEDLE_DESIGNS:
        learned = name != "lightning_hybrid31"
        train_len = 1024 if learned else 0
        rec(name, "train/steps_to_floor", 2000 if learned else None, "steps", steps=2000 if learned else 5000, tokens=10_000_000,
            rule=rule, train_len=train_len, stop_reason="fixture", train_status="done" if learned else "stalled",
            final_stage=6 if learned else 1, n_stages=6, source="fixture/record.json")  # fmt: skip
        rec(name, "train/acc", 1.0 if learned else 0.5, "fraction", task="niah_single", context_len=train_len or 24, n=200,
            ci_low=0.98 if learned else 0.43, ci_high=1.0 if learned else 0.57, train_len=train_len)  # fmt: skip
        rec(name, "params/total", 690_000, "count")
        for length in NEEDLE_LENS:
            planned = 6 if length <= 16384 else 2
            ran = 2 if (name, length) == ("msa", 16384) else planned
            kw = dict(task="niah_multikey", context_len=length, train_len=train_len)
            if length > reach[name]:
                rec(name, "niah/acc", None, "fraction", "skipped", **kw, estimated_s=60.0 * length / 65536,
                    **{"note": "fixture: would take ~9 min for 2 haystacks, more than its fair share"})  # fmt: skip
                continue
            acc = max(0.0, start[name] - (0.0 if name == "lightning_hybrid_h8" else 0.25) * NEEDLE_LENS.index(length))
            n = 5 * ran
            hits = round(acc * n)
            rec(name, "niah/acc", hits / n, "fraction", **kw, n=n, ci_low=max(0, hits / n - 0.2), ci_high=min(1, hits / n + 0.2),
                haystacks=ran, haystacks_planned=planned)  # fmt: skip
            for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
                a = hits / n
                rec(name, "niah/acc", a, "fraction", **kw, depth=depth, n=ran, haystacks=ran, haystacks_planned=planned)
            for i in range(ran, planned):
                rec(name, "niah/acc", None, "fraction", "skipped", **kw, sample=i, estimated_s=90.0,
                    **{"note": "fixture: budget ran out: ~90 s a haystack needed, 20 s left"})  # fmt: skip
            for i in range(ran):
                rec(name, "eval/prefill_s", 0.02 * length / 1024, "s", task="niah_multikey", context_len=length, sample=i,
                    haystacks=1, roofline_s=0.005 * length / 1024, peak_fraction=0.22, gflop_per_s=39.0, noisy=False, load=1.7)  # fmt: skip
    out.append({"type": "footer", "exp": "needle_4m", "ended": "2026-01-01T00:20:00+00:00", "status": "completed", "wall_s": 1.0})
    (run_dir / "results.jsonl").write_text("".join(json.dumps(l) + "\n" for l in out))
    return run_dir
