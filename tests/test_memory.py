"""Analytic cache bytes (bench.memory) equal the bytes the model's caches hold, and the presets
reproduce the published per-token figures."""

from __future__ import annotations

import pytest
import torch

from attnbench.bench import memory
from attnbench.bench.presets import PRESETS, from_model
from attnbench.model import Model

from helpers import compose_cfg

DESIGNS = ["softmax", "lightning", "lightning_hybrid", "sliding_window", "swa_hybrid", "msa"]


@pytest.fixture(scope="module")
def cfg():
    return compose_cfg(["+exp=smoke"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", DESIGNS)
def test_analytic_bytes_equal_cache_objects_after_prefill(cfg, name, dtype):
    torch.manual_seed(0)
    model = Model(cfg.model, cfg.attention[name]).to(dtype).eval()
    arch = from_model(cfg.model, cfg.attention[name])
    B = 2
    window = cfg.attention[name].window
    for n in (5, window + 9):  # below and beyond the sliding window
        idx = torch.randint(cfg.model.vocab_size, (B, n))
        cache = model.new_cache()
        with torch.no_grad():
            model(idx, cache)
        name_dtype = str(dtype).replace("torch.", "")
        want = [B * memory.layer_bytes(arch, c, n, name_dtype) for c in arch.layout]
        assert cache.nbytes_by_layer() == want, (name, n)
        assert cache.nbytes() == B * memory.cache_bytes(arch, n, name_dtype)


def test_growth_and_fixed_parts_add_up(cfg):
    for name in DESIGNS:
        arch = from_model(cfg.model, cfg.attention[name])
        n = 10 * (arch.window + 1)
        for dtype in ("float32", "bfloat16"):
            assert memory.cache_bytes(arch, n, dtype) == n * memory.bytes_per_token(arch, dtype) + memory.fixed_bytes(arch, dtype)


def test_minimax_published_figures():
    text01, m1, m2 = PRESETS["minimax_text01"], PRESETS["minimax_m1"], PRESETS["minimax_m2"]
    assert memory.bytes_per_token(text01, "bfloat16") == 40_960  # seed 000: "about 40 KiB per token in BF16"
    assert memory.bytes_per_token(m1, "bfloat16") == 40_960
    assert memory.fixed_bytes(text01, "bfloat16") == 280 * 2**20  # 70 layers x 64 x 128 x 128 x 4 B
    assert memory.bytes_per_token(m2, "bfloat16") == 253_952  # 62 x 8 x 128 x 2 x 2 B
    # M3: 60 layers of K, V (4 x 128) plus 57 index keys of 128, in BF16
    assert memory.bytes_per_token(PRESETS["minimax_m3"], "bfloat16") == 60 * 4 * 128 * 2 * 2 + 57 * 128 * 2
    # DeepSeek-V3.2: 61 x (512 + 64 latent + 128 indexer) in BF16
    assert memory.bytes_per_token(PRESETS["deepseek_v32"], "bfloat16") == 61 * (512 + 64 + 128) * 2
    gemma = PRESETS["gemma3_27b"]
    assert gemma.layout.count("S") == 10 and gemma.layout.count("W") == 52
    assert memory.fixed_bytes(gemma, "bfloat16") == 52 * 1024 * 2 * 16 * 128 * 2


def test_memory_crossover_is_exact():
    m2 = PRESETS["minimax_m2"]
    gemma = PRESETS["gemma3_27b"]
    text01 = PRESETS["minimax_text01"]
    n = memory.memory_crossover(text01, m2, "bfloat16")
    assert memory.cache_bytes(text01, n, "bfloat16") < memory.cache_bytes(m2, n, "bfloat16")
    assert memory.cache_bytes(text01, n - 1, "bfloat16") >= memory.cache_bytes(m2, n - 1, "bfloat16")
    assert memory.memory_crossover(PRESETS["minimax_m3"], PRESETS["minimax_m3"], "bfloat16") is None
    # a sliding-window layer only saves memory once the window is full
    all_global = type(gemma)(**{**gemma.__dict__, "layout": "S" * 62})
    assert memory.memory_crossover(gemma, all_global, "bfloat16") == gemma.window + 1
