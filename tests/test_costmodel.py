"""The cost model: its counts follow the formulas and its reference op counts follow the code.

Only checks that machine load cannot break live here. How close its predicted times come to
measured ones on this CPU is a recorded benchmark, not a test: exp=crossover records
costmodel/rel_error (predicted / measured, with the load average) for every op and layer it
times (experiments/crossover/)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnbench.bench import costmodel, memory, op_costs
from attnbench.bench.calibrate import dispatches, load_profile
from attnbench.bench.presets import M3, PRESETS, Arch
from attnbench.bench.workloads import op_call
from attnbench.designs import op_of

SCALED = Arch(
    name="scaled",
    layout="S",
    d_model=512,
    n_heads=8,
    n_kv_heads=2,
    head_dim=64,
    window=1024,
    block_size=128,
    top_k=16,
    index_heads=2,
    index_dim=32,
)
CPU = torch.device("cpu")


def test_fused_counts_follow_the_formulas():
    B, H, D, T = 2, 8, 64, 4096
    c = costmodel.op_cost("softmax", "prefill", T, SCALED, batch=B, dtype="bfloat16")
    assert c.flops == 4 * B * H * D * (T * (T + 1) / 2 + T * op_costs.FUSED_TILE / 2)
    # decode reads exactly the KV cache memory.py says a softmax layer holds, plus q and o
    dec = costmodel.op_cost("softmax", "decode", T, SCALED, batch=B, dtype="bfloat16")
    assert dec.bytes == B * memory.layer_bytes(SCALED, "S", T, "bfloat16") + B * 2 * H * D * 2
    # lightning, the sliding window and msa's sparse attention are linear in T; softmax (and msa's
    # index scores) quadratic
    for op in ("lightning", "sliding_window", "msa_attn"):
        ratio = costmodel.op_cost(op, "prefill", 8 * T, SCALED).flops / costmodel.op_cost(op, "prefill", 4 * T, SCALED).flops
        assert 1.9 < ratio < 2.2, (op, ratio)
    assert 3.9 < costmodel.op_cost("softmax", "prefill", 2 * T, SCALED, batch=B, dtype="bfloat16").flops / c.flops < 4.1
    assert 2.2 < costmodel.op_cost("msa", "prefill", 8 * T, SCALED).flops / costmodel.op_cost("msa", "prefill", 4 * T, SCALED).flops < 4
    # decode of fixed-size designs does not grow with the cache
    for op in ("lightning", "sliding_window"):
        assert costmodel.op_cost(op, "decode", 1 << 20, SCALED).bytes == costmodel.op_cost(op, "decode", 1 << 14, SCALED).bytes


def test_model_decode_reads_the_kv_cache_of_text01():
    text01 = PRESETS["minimax_text01"]
    n = 1 << 20
    attn = costmodel.model_cost(text01, "decode", n, attention_only=True, dtype="bfloat16")
    kv = sum(t.bytes for t in attn.terms if t.what.startswith("S:"))
    q_o = text01.count("S") * 2 * text01.n_heads * text01.head_dim * 2
    assert kv == memory.bytes_per_token(text01, "bfloat16") * n + q_o


def test_msa_selects_k_blocks_of_bs_tokens():
    # past the first k blocks every query attends to exactly k * bs keys per KV group
    T = 1 << 16
    pairs = op_costs.selected_pairs(1, T, M3.block_size, M3.top_k)
    assert pairs == M3.top_k
    flops = costmodel.op_cost("msa_attn", "decode", T, M3, dtype="bfloat16").flops
    assert flops == 4 * M3.n_heads * M3.head_dim * M3.top_k * M3.block_size


def test_profiles_roofline_orders_hardware():
    c = costmodel.op_cost("softmax", "prefill", 1 << 17, PRESETS["minimax_m2"], dtype="bfloat16")
    t = {p: c.seconds(load_profile(p), "bfloat16") for p in ("h200", "h100", "a100")}
    assert t["h200"] <= t["h100"] < t["a100"]


@pytest.mark.parametrize(
    "letter, phase, n",
    [
        ("S", "decode", 4096),
        ("W", "prefill", 4096),
        ("W", "decode", 4096),
        ("L", "prefill", 4096),
        ("L", "decode", 4096),
        ("M", "prefill", 1024),
        ("M", "decode", 16384),
    ],
)
def test_reference_op_counts_follow_the_code(letter, phase, n):
    """The model's torch-op counts (launches) of the references agree with the dispatcher's count."""
    fn = op_call(letter, phase, n, SCALED, batch=1, dtype=torch.float32, device=CPU, backend="reference")
    counted = dispatches(fn)
    modelled = costmodel.op_cost(op_of(letter), phase, n, SCALED, impl="reference").launches
    assert abs(modelled - counted) <= max(0.6 * counted, 3), (counted, modelled)


def test_gpu_projection_scales_with_the_profile():
    m3 = costmodel.model_cost(M3, "decode", 1 << 20, dtype="bfloat16", attention_only=True)
    dense = costmodel.model_cost(replace(M3, layout="S" * 60), "decode", 1 << 20, dtype="bfloat16", attention_only=True)
    h200 = load_profile("h200")
    assert dense.seconds(h200, "bfloat16") / m3.seconds(h200, "bfloat16") > 3  # sparse decode reads far less


def test_planner_estimates_grow_with_the_work():
    from attnbench.bench import planner
    from helpers import compose_cfg

    cfg = compose_cfg(["+exp=crossover"])
    hw = load_profile("h200")
    m, sm, msa = cfg.model, cfg.attention["softmax"], cfg.attention["msa"]
    short = planner.step_seconds(m, sm, hw, batch=8, seq_len=1024, impl="fused")
    assert planner.step_seconds(m, sm, hw, batch=8, seq_len=4096, impl="fused") > 3 * short
    assert planner.step_seconds(m, sm, hw, batch=8, seq_len=1024, train=False, impl="fused") == pytest.approx(short / 3)
    assert planner.decode_seconds(m, msa, hw, n=1 << 16, impl="fused") < planner.decode_seconds(m, sm, hw, n=1 << 16, impl="fused") * 1.5
    assert planner.cache_bytes(m, sm, n=1000, batch=2) == 2 * 1000 * 8 * 2 * 2 * 64 * 4
