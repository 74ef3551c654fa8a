"""The fused native CPU kernels (kernels/<op>/native.py and .cpp) against their naive truth, and
their fallback to the reference: where the extension cannot build, a gradient is asked for, or
the device is not the CPU, the reference runs and the reason is logged."""

from __future__ import annotations

import logging

import pytest
import torch

import attnbench.kernels as K
from attnbench.kernels import backend, tolerance
from attnbench.kernels import native_build as build
from attnbench.kernels.lightning import naive, native, reference
from attnbench.kernels.msa import naive as msa_naive
from attnbench.kernels.msa import native as msa_native
from attnbench.kernels.msa import reference as msa_reference
from attnbench.kernels.sliding_window import naive as sw_naive
from attnbench.kernels.sliding_window import native as sw_native
from attnbench.kernels.sliding_window import reference as sw_reference
from attnbench.model.lightning import decay_rates

built = native.extension()
needs_build = pytest.mark.skipif(isinstance(built, str), reason=f"the native extension did not build here: {built}")
sw_built = sw_native.extension()
needs_sw_build = pytest.mark.skipif(isinstance(sw_built, str), reason=f"the native extension did not build here: {sw_built}")
msa_built = msa_native.extension()
needs_msa_build = pytest.mark.skipif(isinstance(msa_built, str), reason=f"the native extension did not build here: {msa_built}")


def inputs(B, H, T, Dk, Dv, seed=0, state=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k = (0.3 * torch.randn(B, H, T, Dk, generator=g) for _ in range(2))
    v = torch.randn(B, H, T, Dv, generator=g)
    S0 = torch.randn(B, H, Dk, Dv, generator=g) if state else None
    return [x.to(dtype) for x in (q, k, v)], (None if S0 is None else S0.to(dtype))


# B, H, T, Dk, Dv, chunk (None: the reference's chunk_for): chunk boundaries (T a multiple of the
# chunk, one more, one less), a ragged tail shorter than 16 columns, head dims off the 16-wide
# register block (8, 24), Dk != Dv, one token, batches of pairs.
SHAPES = [
    (1, 2, 64, 64, 64, None),
    (1, 2, 65, 64, 64, None),
    (2, 3, 127, 64, 64, None),
    (1, 4, 200, 8, 8, None),
    (2, 2, 63, 24, 32, None),
    (1, 1, 1, 16, 16, None),
    (1, 2, 77, 16, 40, 5),
    (1, 2, 100, 32, 32, 7),
]


@needs_build
@pytest.mark.parametrize("B,H,T,Dk,Dv,chunk", SHAPES)
@pytest.mark.parametrize("state", [False, True])
def test_lightning_native_equals_naive(B, H, T, Dk, Dv, chunk, state):
    (q, k, v), S0 = inputs(B, H, T, Dk, Dv, seed=T + Dk, state=state)
    decay = decay_rates(H, 0, 2)
    with torch.no_grad():
        o, final = native.lightning_attn(q, k, v, decay, initial_state=S0, chunk=chunk)
    o64, f64 = naive.lightning_attn(*(x.double() for x in (q, k, v)), decay.double(), initial_state=None if S0 is None else S0.double())
    o32, f32 = naive.lightning_attn(q, k, v, decay, initial_state=S0)  # plain torch in fp32: the yardstick
    for got, truth, plain, what in ((o, o64, o32, "o"), (final, f64, f32, "final state")):
        ok, err, torch_err, bound = tolerance.check(got, truth, plain, torch.float32)
        assert ok, f"{what}: error {err:.3g} > bound {bound:.3g} (plain fp32 torch {torch_err:.3g})"
    assert o.dtype == torch.float32 and final.dtype == torch.float32


@needs_build
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lightning_native_16_bit_inputs(dtype):
    """16-bit inputs: products in fp32 (as the reference's default), the output in the inputs' dtype."""
    (q, k, v), S0 = inputs(1, 2, 130, 32, 32, seed=3, state=True, dtype=dtype)
    decay = decay_rates(2, 0, 2)
    with torch.no_grad():
        o, final = native.lightning_attn(q, k, v, decay, initial_state=S0)
        want, want_final = reference.lightning_attn(q, k, v, decay, initial_state=S0)
    o64, _ = naive.lightning_attn(*(x.double() for x in (q, k, v)), decay.double(), initial_state=S0.double())
    plain, _ = naive.lightning_attn(q, k, v, decay, initial_state=S0)
    ok, err, torch_err, bound = tolerance.check(o, o64, plain, dtype)
    assert o.dtype == dtype and ok, f"error {err:.3g} > bound {bound:.3g}"
    assert torch.allclose(final, want_final, rtol=1e-5, atol=1e-5)


@needs_build
def test_lightning_native_through_the_backend_switch():
    (q, k, v), _ = inputs(1, 2, 90, 16, 16, seed=5)
    decay = decay_rates(2, 0, 2)
    assert backend.choose("lightning", "native", torch.device("cpu")) == "native"
    assert backend.choose("softmax", "native", torch.device("cpu")) == "reference"  # no native kernel: its reference
    with torch.no_grad():
        got = K.lightning_attn(q, k, v, decay, backend="native")
        want = native.lightning_attn(q, k, v, decay)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_lightning_native_falls_back_to_the_reference_with_its_reason(monkeypatch, caplog):
    """A failed build (here: forced) and a gradient both run the reference, bit for bit, and log why once."""
    (q, k, v), S0 = inputs(1, 2, 70, 16, 16, seed=7, state=True)
    decay = decay_rates(2, 0, 2)
    want = reference.lightning_attn(q, k, v, decay, initial_state=S0)
    monkeypatch.setattr(native, "extension", lambda: "build failed: CalledProcessError: no compiler (test)")
    monkeypatch.setattr(build, "_said", set())
    with caplog.at_level(logging.WARNING, logger=build.__name__):
        for _ in range(2):
            got = native.lightning_attn(q, k, v, decay, initial_state=S0)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    said = [r.getMessage() for r in caplog.records if "no compiler (test)" in r.getMessage()]
    assert len(said) == 1 and "the reference runs" in said[0]
    qg = q.clone().requires_grad_()
    assert build.why_not("lightning", built, qg, k, v, None) == "a gradient is asked for (forward only)"
    o, _ = native.lightning_attn(qg, k, v, decay, initial_state=S0)
    assert o.requires_grad and torch.equal(o.detach(), want[0])


def test_native_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNBENCH_NATIVE", "0")
    build.load.cache_clear()
    try:
        assert native.extension() == "ATTNBENCH_NATIVE=0" and sw_native.extension() == "ATTNBENCH_NATIVE=0"
    finally:
        build.load.cache_clear()


# B, H, Hkv, T, S, D, window: GQA and not, odd lengths, a window of one, one narrower than the
# 64-query block, one wider than T, queries the last T of S keys (a chunked prefill), head dims
# off the 16-wide register block.
SW_SHAPES = [
    (1, 4, 2, 63, 63, 24, 7),
    (2, 6, 3, 200, 200, 24, 64),
    (1, 2, 2, 17, 17, 32, 1),
    (1, 4, 2, 300, 300, 64, 500),
    (1, 2, 1, 50, 130, 16, 40),
    (1, 8, 2, 257, 257, 64, 100),
]


@needs_sw_build
@pytest.mark.parametrize("B,H,G,T,S,D,window", SW_SHAPES)
def test_sliding_window_native_equals_naive(B, H, G, T, S, D, window):
    g = torch.Generator().manual_seed(T + D)
    q, k, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, G, S, D, generator=g), torch.randn(B, G, S, D, generator=g)
    with torch.no_grad():
        o = sw_native.sliding_window_attn(q, k, v, window)
        o_scaled = sw_native.sliding_window_attn(q, k, v, window, scale=0.3)
    truth = sw_naive.sliding_window_attn(q.double(), k.double(), v.double(), window)
    tolerance.assert_within(o, truth, sw_naive.sliding_window_attn(q, k, v, window), "o")
    truth = sw_naive.sliding_window_attn(q.double(), k.double(), v.double(), window, scale=0.3)
    tolerance.assert_within(o_scaled, truth, sw_naive.sliding_window_attn(q, k, v, window, scale=0.3), "o (scale 0.3)")


@needs_sw_build
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sliding_window_native_16_bit_inputs(dtype):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 150, 32, generator=g).to(dtype) for _ in range(3))
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    with torch.no_grad():
        o = sw_native.sliding_window_attn(q, k, v, 50)
    truth = sw_naive.sliding_window_attn(q.double(), k.double(), v.double(), 50)
    assert o.dtype == dtype
    tolerance.assert_within(o, truth, sw_naive.sliding_window_attn(q, k, v, 50), "o", dtype)


def test_sliding_window_native_falls_back_for_gradients():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 40, 16, generator=g).requires_grad_()
    k, v = torch.randn(1, 1, 40, 16, generator=g), torch.randn(1, 1, 40, 16, generator=g)
    o = sw_native.sliding_window_attn(q, k, v, 9)
    assert o.requires_grad and torch.equal(o, sw_reference.sliding_window_attn(q, k, v, 9))


# B, H, G, T, S, D, block size, top_k: GQA, blocks narrower than the 16-wide register block, a
# ragged last block, queries the last T of S keys, more blocks asked for than exist (-1 pads).
MSA_SHAPES = [
    (1, 4, 2, 63, 63, 24, 8, 3),
    (2, 6, 3, 200, 200, 24, 16, 4),
    (1, 2, 1, 45, 45, 16, 5, 2),
    (1, 4, 2, 9, 70, 16, 8, 3),
    (1, 8, 2, 300, 300, 64, 64, 8),
]


@needs_msa_build
@pytest.mark.parametrize("B,H,G,T,S,D,bs,top_k", MSA_SHAPES)
def test_msa_attn_native_equals_naive(B, H, G, T, S, D, bs, top_k):
    g = torch.Generator().manual_seed(T + D)
    q, k, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, G, S, D, generator=g), torch.randn(B, G, S, D, generator=g)
    block_idx = K.msa_select(torch.randn(B, G, T, 8, generator=g), torch.randn(B, S, 8, generator=g), bs, top_k)
    with torch.no_grad():
        o = msa_native.msa_attn(q, k, v, block_idx, bs)
        o_scaled = msa_native.msa_attn(q, k, v, block_idx, bs, scale=0.3)
    for got, scale in ((o, None), (o_scaled, 0.3)):
        truth = msa_naive.msa_attn(q.double(), k.double(), v.double(), block_idx, bs, scale=scale)
        tolerance.assert_within(got, truth, msa_naive.msa_attn(q, k, v, block_idx, bs, scale=scale), f"o (scale {scale})")


@needs_msa_build
def test_msa_attn_native_when_remote_scores_dwarf_the_local_block():
    """An early block's keys score ~100 over the local maxima (past exp's fp32 range): the running max must move."""
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(1, 2, 96, 16, generator=g), torch.randn(1, 1, 96, 16, generator=g), torch.randn(1, 1, 96, 16, generator=g)
    k[:, :, :8] *= 40
    own = torch.arange(96) // 8
    block_idx = torch.stack([own, torch.where(own > 0, 0, -1)], dim=-1).view(1, 1, 96, 2)  # the own block, then block 0 (every later query)
    with torch.no_grad():
        o = msa_native.msa_attn(q, k, v, block_idx, 8)
    truth = msa_naive.msa_attn(q.double(), k.double(), v.double(), block_idx, 8)
    tolerance.assert_within(o, truth, msa_naive.msa_attn(q, k, v, block_idx, 8), "o")


def test_msa_native_selection_is_the_reference_and_gradients_fall_back():
    assert msa_native.msa_select is msa_reference.msa_select
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 40, 16, generator=g).requires_grad_()
    k, v = torch.randn(1, 1, 40, 16, generator=g), torch.randn(1, 1, 40, 16, generator=g)
    block_idx = K.msa_select(torch.randn(1, 1, 40, 8, generator=g), torch.randn(1, 40, 8, generator=g), 8, 2)
    o = msa_native.msa_attn(q, k, v, block_idx, 8)
    assert o.requires_grad and torch.equal(o, msa_reference.msa_attn(q, k, v, block_idx, 8))
