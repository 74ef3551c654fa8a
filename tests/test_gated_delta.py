"""The gated delta rule's reference (the chunked WY form) against its naive recurrence (the
truth, kernels/gated_delta/naive.py): outputs, final states and gradients at the shape classes
of tests/test_ops.py (grouped heads, odd lengths, chunk boundaries, T = 1), 16-bit inputs, the
state carried across calls (prefill in pieces, decode steps), and a peer check against fla's
pure-torch naive gated delta rule where fla imports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import attnbench.kernels as K
from attnbench.kernels.gated_delta import naive as gd_naive
from attnbench.kernels.gated_delta import reference as gd_ref
from attnbench.kernels.tolerance import assert_within

from test_ops import assert_close, double

SHAPES = [(1, 4, 2, 63, 24), (2, 6, 3, 200, 24), (1, 2, 2, 17, 32), (2, 4, 1, 65, 16)]  # B, H, Hk, T, Dk


def inputs(B, H, Hk, T, Dk, Dv=None, seed=0, requires_grad=True, state=False):
    """q, k (B, Hk, T, Dk) L2-normalised; v (B, H, T, Dv); g (B, H, T) log-gates in (-inf, 0)
    spread from ~0 (a ~ 1) to ~-3; beta (B, H, T) in (0, 1); and S0 (B, H, Dk, Dv) when asked."""
    gen = torch.Generator().manual_seed(seed + B * H * T)
    Dv = Dv or Dk + 8  # Dk != Dv on purpose
    q, k = (F.normalize(torch.randn(B, Hk, T, Dk, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(B, H, T, Dv, generator=gen)
    g = F.logsigmoid(2 * torch.randn(B, H, T, generator=gen) + 2)
    beta = torch.sigmoid(torch.randn(B, H, T, generator=gen))
    xs = [q, k, v, g, beta] + ([torch.randn(B, H, Dk, Dv, generator=gen)] if state else [])
    return [x.requires_grad_(requires_grad) for x in xs]


def ref(q, k, v, g, beta, S0=None, **kw):
    return gd_ref.gated_delta(q, k, v, g, beta, initial_state=S0, **kw)


def nv(q, k, v, g, beta, S0=None, **kw):
    return gd_naive.gated_delta(q, k, v, g, beta, initial_state=S0, **kw)


def grads_of(fn, xs, seed=1):
    """Gradients of a random projection of (o, final state) with respect to xs."""
    o, s = fn(*xs)
    gen = torch.Generator().manual_seed(seed)
    wo, ws = torch.randn(o.shape, generator=gen).to(o.dtype), torch.randn(s.shape, generator=gen).to(s.dtype)
    return torch.autograd.grad((o * wo).sum() + (s * ws).sum(), xs)


@pytest.mark.parametrize("B,H,Hk,T,Dk", SHAPES)
@pytest.mark.parametrize("with_state", [False, True])
def test_reference_equals_recurrence(B, H, Hk, T, Dk, with_state):
    xs = inputs(B, H, Hk, T, Dk, state=with_state)
    o, s = ref(*xs)
    o_want, s_want = nv(*double(*xs))
    assert o.dtype == torch.float32 and s.dtype == torch.float32 and o.shape == (B, H, T, Dk + 8)
    assert_close(o, o_want, what="o")
    assert_close(s, s_want, what="final_state")
    for gg, gw, name in zip(grads_of(ref, xs), grads_of(nv, double(*xs)), ["q", "k", "v", "g", "beta", "S0"]):
        assert_close(gg, gw, rtol=1e-4, atol=1e-4, what=f"d{name}")


@pytest.mark.parametrize("T", [1, 2, 31, 32, 33, 64, 65, 127, 128, 129])
@pytest.mark.parametrize("chunk", [None, 16, 64])
def test_chunk_boundaries_and_tiles(T, chunk):
    """Lengths at and beside chunk boundaries, in one tile and in tiles of two chunks, in float64:
    the chunked form is the recurrence to float64 rounding."""
    xs = double(*inputs(1, 3, 3, T, 8, state=True, requires_grad=False))
    o_want, s_want = nv(*xs)
    c = chunk or gd_ref.chunk_for(8)
    for segment in (None, 2 * c):
        o, s = ref(*xs, chunk=chunk, segment=segment)
        assert o.dtype == torch.float64
        assert_close(o, o_want, rtol=1e-11, atol=1e-11, what=f"o T={T} chunk={chunk} segment={segment}")
        assert_close(s, s_want, rtol=1e-11, atol=1e-11, what=f"state T={T} chunk={chunk} segment={segment}")


def test_float64_gradients_agree_to_float64_rounding():
    xs = double(*inputs(2, 4, 2, 70, 8, state=True))
    for gg, gw, name in zip(grads_of(lambda *a: ref(*a, chunk=16), xs), grads_of(nv, xs), ["q", "k", "v", "g", "beta", "S0"]):
        assert_close(gg, gw, rtol=1e-10, atol=1e-10, what=f"d{name}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_inputs_are_computed_in_fp32(dtype):
    """16-bit inputs: the output is the fp32 computation on the same (rounded) inputs, rounded
    once to the dtype, and meets the tolerance rule against the float64 truth."""
    xs = [x.to(dtype) for x in inputs(2, 4, 2, 150, 16, state=True, requires_grad=False)]
    o, s = ref(*xs)
    assert o.dtype == dtype and s.dtype == torch.float32
    o32, s32 = ref(*(x.float() for x in xs))
    assert torch.equal(o, o32.to(dtype)) and torch.equal(s, s32)
    truth = nv(*(x.double() for x in xs))[0]
    plain = nv(*xs)[0]  # the recurrence in the dtype itself
    assert_within(o, truth, plain, "gated_delta o")


def test_prefill_in_pieces_and_decode_steps_equal_one_pass():
    """The cache contract: a prefill split anywhere, then single-token steps from the state
    (the public op at T = 1), equal one pass and the recurrence."""
    q, k, v, g, beta = inputs(2, 4, 2, 100, 16, requires_grad=False)
    o, s = K.gated_delta(q, k, v, g, beta, backend="reference")
    pieces, state = [], None
    for a, b in [(0, 37), (37, 90)]:
        sl = slice(a, b)
        o_p, state = K.gated_delta(q[:, :, sl], k[:, :, sl], v[:, :, sl], g[:, :, sl], beta[:, :, sl], initial_state=state)
        pieces.append(o_p)
    for t in range(90, 100):
        sl = slice(t, t + 1)
        o_t, state = K.gated_delta(q[:, :, sl], k[:, :, sl], v[:, :, sl], g[:, :, sl], beta[:, :, sl], initial_state=state)
        pieces.append(o_t)
    assert_close(torch.cat(pieces, 2), o, what="o in pieces")
    assert_close(state, s, what="state in pieces")
    o_want, s_want = nv(*double(q, k, v, g, beta))
    assert_close(o, o_want, what="o")
    assert_close(s, s_want, what="state")


def test_decode_step_equals_recurrence_with_gradients():
    xs = inputs(3, 4, 4, 1, 16, state=True)
    o, s = ref(*xs)
    o_want, s_want = nv(*double(*xs))
    assert_close(o, o_want, what="o")
    assert_close(s, s_want, what="state")
    for gg, gw, name in zip(grads_of(ref, xs), grads_of(nv, double(*xs)), ["q", "k", "v", "g", "beta", "S0"]):
        assert_close(gg, gw, what=f"d{name}")


def test_a_gate_of_one_and_beta_of_zero_keep_the_state():
    """b = 0 writes nothing and a = 1 forgets nothing: the state passes through unchanged."""
    q, k, v, g, beta, S0 = inputs(1, 2, 2, 40, 8, state=True, requires_grad=False)
    o, s = ref(q, k, v, torch.zeros_like(g), torch.zeros_like(beta), S0)
    assert_close(s, S0, rtol=1e-6, atol=1e-6, what="state")
    assert_close(o, (q @ S0) / 8**0.5, what="o = scale q S0")


def test_bad_shapes_raise_clear_errors():
    q, k, v, g, beta = inputs(1, 4, 2, 10, 8, requires_grad=False)
    with pytest.raises(ValueError, match="disagree"):
        K.gated_delta(q, k[:, :1], v, g, beta)
    with pytest.raises(ValueError, match="g and beta"):
        K.gated_delta(q, k, v, g[:, :2], beta)
    with pytest.raises(ValueError, match="initial_state"):
        K.gated_delta(q, k, v, g, beta, initial_state=torch.zeros(1, 4, 8, 8))


def fla_naive():
    """fla's pure-torch naive gated delta rule (fla-core on PyPI), loaded by file path so that
    nothing of fla's Triton side is imported; None where fla (or its einops) is not installed."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations or importlib.util.find_spec("einops") is None:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "ops" / "gated_delta_rule" / "naive.py"
    if not path.exists():
        return None
    module_spec = importlib.util.spec_from_file_location("fla_gated_delta_naive", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("with_state", [False, True])
def test_peer_fla_naive_gated_delta_rule(with_state):
    """fla's naive_recurrent_gated_delta_rule and naive_chunk_gated_delta_rule (fp32, layout
    (B, T, H, D), state (B, H, Dk, Dv), no grouped heads) on the same inputs agree with the
    float64 truth here within the tolerance rule, as does the reference."""
    fla = fla_naive()
    if fla is None:
        pytest.skip("fla-core (module fla, with einops) is not installed: pip install fla-core --no-deps einops")
    B, H, Hk, T, Dk = 2, 4, 2, 150, 16
    q, k, v, g, beta, *S0 = inputs(B, H, Hk, T, Dk, state=with_state, requires_grad=False)
    S0 = S0[0] if S0 else None
    truth, truth_s = nv(*double(q, k, v, g, beta), S0=None if S0 is None else S0.double())
    plain, plain_s = nv(q, k, v, g, beta, S0)  # the recurrence in fp32: the yardstick
    ours, ours_s = ref(q, k, v, g, beta, S0)
    bthd = [x.repeat_interleave(H // Hk, 1).transpose(1, 2) for x in (q, k)] + [v.transpose(1, 2)]  # (B, T, H, D)
    g_, b_ = g.transpose(1, 2), beta.transpose(1, 2)  # (B, T, H)
    o_r, s_r = fla.naive_recurrent_gated_delta_rule(*bthd, b_, g_, initial_state=S0, output_final_state=True)
    o_c, s_c = fla.naive_chunk_gated_delta_rule(*bthd, g_, b_, initial_state=S0, output_final_state=True)
    for name, (o, s) in {"fla recurrent": (o_r, s_r), "fla chunk": (o_c, s_c), "reference": (ours, ours_s)}.items():
        o = o.transpose(1, 2) if name.startswith("fla") else o
        assert_within(o, truth, plain, f"{name} o")
        assert_within(s, truth_s, plain_s, f"{name} final state")


def test_layer_prefill_in_pieces_and_decode_equal_one_pass():
    """The Gated DeltaNet layer (attnbench/model/gated_delta.py) at lightning_hybrid_h8's width and
    heads: a prefill in pieces, then single-token steps from its cache (state and convolution
    tail), equal one pass over the whole sequence, and no output sees a later token."""
    from types import SimpleNamespace

    from attnbench.model.gated_delta import GatedDeltaAttention

    torch.manual_seed(0)
    cfg = SimpleNamespace(d_model=64, n_heads=2, head_dim=32)
    layer = GatedDeltaAttention(cfg, SimpleNamespace(lightning_heads=8, qkv_conv=0), layer=3)
    assert (layer.H, layer.D, layer.K) == (8, 8, 4)
    x = torch.randn(2, 40, 64)
    with torch.no_grad():
        y, aux = layer(x)
        cache = layer.new_cache()
        pieces = [layer(x[:, :17], cache)[0], layer(x[:, 17:33], cache)[0]]
        pieces += [layer(x[:, t : t + 1], cache)[0] for t in range(33, 40)]
        assert cache.length == 40 and cache.state.shape == (2, 8, 8, 8) and cache.state.dtype == torch.float32
        assert_close(torch.cat(pieces, 1), y, rtol=1e-4, atol=1e-5, what="y in pieces")
        x2 = x.clone()
        x2[:, 25:] = torch.randn(2, 15, 64)
        assert_close(layer(x2)[0][:, :25], y[:, :25], rtol=1e-6, atol=1e-7, what="an output saw a later token")
    assert float(aux) == 0.0
    out, _ = layer(x)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
