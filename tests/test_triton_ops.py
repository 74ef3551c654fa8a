"""backend="triton" for every op, on CPU under Triton's interpreter (TRITON_INTERPRET=1, set in
conftest.py before any kernel module is imported): outputs, final states and gradients against
the float64 naive truth (kernels/<op>/naive.py), within twice the error of plain torch in the
same dtype (kernels/tolerance.py),
on odd shapes (T = 63, 130; D = 24) and with queries aligned to the last of S > T keys.

The interpreter costs ~1 ms per program and op, so shapes stay tiny; the same checks at real
shapes in bf16/fp16 run on a GPU with `python -m attnbench +exp=kernels_gpu`.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import attnbench.kernels as K  # noqa: E402
from attnbench.kernels import backend, tolerance  # noqa: E402
from attnbench.designs import kernel_ops  # noqa: E402
from attnbench.kernels.lightning import reference as lightning_ref  # noqa: E402
from attnbench.kernels.lightning import triton as lightning_tr  # noqa: E402
from attnbench.kernels.lightning.naive import lightning_attn as lightning_naive  # noqa: E402
from attnbench.kernels.msa import naive as msa_naive  # noqa: E402
from attnbench.kernels.msa import reference as msa_ref  # noqa: E402
from attnbench.kernels.sliding_window import triton as flash_tr  # noqa: E402
from attnbench.kernels.sliding_window.naive import sliding_window_attn as sliding_naive  # noqa: E402
from attnbench.kernels.softmax.naive import softmax_attn as softmax_naive  # noqa: E402
from attnbench.model.lightning import decay_rates  # noqa: E402

if not flash_tr._fwd.__class__.__name__.startswith("Interpreted"):
    pytest.skip("kernel modules were imported without TRITON_INTERPRET=1", allow_module_level=True)

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def randn(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def fwd_bwd(fn, xs, dos):
    """Outputs of fn(*xs) and the gradients of sum(out * do) with respect to xs."""
    xs = [x.detach().requires_grad_(True) for x in xs]
    outs = fn(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o.double() * do.double()).sum() for o, do in zip(outs, dos))
    return outs, torch.autograd.grad(loss, xs)


def check(kernel, plain, naive, xs, dos, dtype, names):
    """kernel and plain (torch in `dtype`) against naive in float64, on the same rounded inputs."""
    xs = [x.to(dtype) for x in xs]
    got = fwd_bwd(kernel, xs, dos)
    ref = fwd_bwd(plain, xs, dos)
    truth = fwd_bwd(naive, [x.double() for x in xs], dos)
    for kind, g, r, t in (("out", *(z[0] for z in (got, ref, truth))), ("grad", *(z[1] for z in (got, ref, truth)))):
        for i, (gi, ri, ti) in enumerate(zip(g, r, t)):
            tolerance.assert_within(gi, ti, ri, f"{kind} {names[kind][i]}", dtype)


def plain_attention(naive_fn, reference_fn):
    """Plain torch in the inputs' dtype: the fp32 reference, or the naive formula in 16-bit
    (the references upcast internally, which would make the bound a pure rounding bound)."""
    return lambda *xs: reference_fn(*xs) if xs[0].dtype == F32 else naive_fn(*xs)


# ---------------------------------------------------------------- softmax and sliding window

FLASH_SHAPES = [(1, 4, 2, 63, 63, 24), (1, 2, 1, 130, 130, 32), (2, 2, 2, 20, 70, 16)]  # B, H, Hkv, T, S, D


def _attn_inputs(B, H, Hkv, T, S, D, seed=0):
    xs = [randn(B, H, T, D, seed=seed), randn(B, Hkv, S, D, seed=seed + 1), randn(B, Hkv, S, D, seed=seed + 2)]
    return xs, [randn(B, H, T, D, seed=seed + 3)]


@pytest.mark.parametrize("shape", FLASH_SHAPES)
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_softmax_triton(shape, dtype):
    xs, dos = _attn_inputs(*shape)
    check(
        lambda *a: K.softmax_attn(*a, backend="triton"),
        plain_attention(softmax_naive, lambda *a: K.softmax_attn(*a, backend="reference")),
        softmax_naive,
        xs,
        [d.to(dtype) for d in dos],
        dtype,
        {"out": ["o"], "grad": ["dq", "dk", "dv"]},
    )


@pytest.mark.parametrize("shape,window", [(FLASH_SHAPES[0], 17), (FLASH_SHAPES[1], 50), (FLASH_SHAPES[2], 1), (FLASH_SHAPES[2], 45)])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_sliding_window_triton(shape, window, dtype):
    xs, dos = _attn_inputs(*shape, seed=10)
    check(
        lambda *a: K.sliding_window_attn(*a, window, backend="triton"),
        plain_attention(lambda *a: sliding_naive(*a, window), lambda *a: K.sliding_window_attn(*a, window, backend="reference")),
        lambda *a: sliding_naive(*a, window),
        xs,
        [d.to(dtype) for d in dos],
        dtype,
        {"out": ["o"], "grad": ["dq", "dk", "dv"]},
    )


@pytest.mark.parametrize("window", [5, 40, None])
def test_flash_small_tiles_skip_what_the_window_cannot_see(monkeypatch, window):
    """16 x 16 tiles: many tiles wholly outside the window (skipped), partial tiles at both edges."""
    monkeypatch.setattr(flash_tr, "_tiles", lambda D, backward: (16, 16, 4, 1))
    xs, dos = _attn_inputs(1, 2, 1, 75, 100, 16, seed=20)
    naive = (lambda *a: sliding_naive(*a, window)) if window else softmax_naive
    check(
        lambda *a: flash_tr.flash_attn(*a, window=window),
        lambda *a: naive(*(x.float() for x in a)),
        naive,
        xs,
        dos,
        F32,
        {"out": ["o"], "grad": ["dq", "dk", "dv"]},
    )


# ---------------------------------------------------------------- lightning


def _lightning_inputs(B, H, T, Dk, Dv, with_state, seed=0):
    xs = [randn(B, H, T, Dk, seed=seed, scale=0.3), randn(B, H, T, Dk, seed=seed + 1, scale=0.3), randn(B, H, T, Dv, seed=seed + 2)]
    if with_state:
        xs.append(randn(B, H, Dk, Dv, seed=seed + 3))
    return xs, [randn(B, H, T, Dv, seed=seed + 4), randn(B, H, Dk, Dv, seed=seed + 5)]


def _lightning(fn, decay):
    return lambda q, k, v, *s: fn(q, k, v, decay, initial_state=s[0] if s else None)


# (1, 1, 70, 24, 136): the backward walks Dv in three tiles of 64, the last one masked (a GPU
# run at head_dim 128 had run out of shared memory with the whole state in one tile)
@pytest.mark.parametrize("B,H,T,Dk,Dv", [(1, 2, 63, 24, 32), (2, 2, 130, 16, 16), (1, 1, 70, 24, 136)])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_lightning_triton(B, H, T, Dk, Dv, with_state, dtype):
    xs, dos = _lightning_inputs(B, H, T, Dk, Dv, with_state)
    decay = decay_rates(H, 0, 2)

    def run(backend_name):  # the state enters in fp32 whatever the dtype of q, k, v
        return lambda q, k, v, *s: K.lightning_attn(q, k, v, decay, initial_state=s[0].float() if s else None, backend=backend_name)

    def naive(q, k, v, *s):
        return lightning_naive(q, k, v, decay, initial_state=s[0] if s else None)

    check(
        run("triton"),
        run("reference") if dtype == F32 else naive,
        naive,
        xs,
        [dos[0].to(dtype), dos[1]],
        dtype,
        {"out": ["o", "final_state"], "grad": ["dq", "dk", "dv", "d_initial_state"]},
    )
    o, state = K.lightning_attn(*(x.to(dtype) for x in xs[:3]), decay, backend="triton")
    assert o.dtype == dtype and state.dtype == F32


def test_lightning_triton_many_chunks_and_split_sequence(monkeypatch):
    """Chunks of 16 (ragged tail), and two calls with the state carried equal one call."""
    monkeypatch.setattr(lightning_tr, "CHUNK", 16)
    xs, dos = _lightning_inputs(1, 3, 77, 16, 24, with_state=True, seed=30)
    decay = torch.tensor([0.9, 0.05, 1e-4])
    naive = _lightning(lightning_naive, decay.double())
    check(
        _lightning(lightning_tr.lightning_attn, decay),
        _lightning(lightning_ref.lightning_attn, decay),
        lambda q, k, v, s: naive(q, k, v, s),
        xs,
        dos,
        F32,
        {"out": ["o", "final_state"], "grad": ["dq", "dk", "dv", "d_initial_state"]},
    )
    q, k, v, s0 = xs
    with torch.no_grad():
        o, s = lightning_tr.lightning_attn(q, k, v, decay, initial_state=s0)
        o1, s1 = lightning_tr.lightning_attn(q[:, :, :37], k[:, :, :37], v[:, :, :37], decay, initial_state=s0)
        o2, s2 = lightning_tr.lightning_attn(q[:, :, 37:], k[:, :, 37:], v[:, :, 37:], decay, initial_state=s1)
    torch.testing.assert_close(torch.cat([o1, o2], 2), o, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s2, s, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_lightning_decode_step_kernel(dtype):
    B, H, Dk, Dv = 2, 3, 24, 40
    q, k, v = (randn(B, H, 1, D, seed=40 + i, scale=0.5).to(dtype) for i, D in enumerate((Dk, Dk, Dv)))
    state = randn(B, H, Dk, Dv, seed=43)
    decay = decay_rates(H, 0, 2)
    with torch.no_grad():
        o, s = K.lightning_attn(q, k, v, decay, initial_state=state, backend="triton")
        o_ref, s_ref = K.lightning_attn(q, k, v, decay, initial_state=state, backend="reference")
        o_naive, s_naive = lightning_naive(q.double(), k.double(), v.double(), decay, initial_state=state.double())
    tolerance.assert_within(o, o_naive, o_ref, "decode o", dtype)
    tolerance.assert_within(s, s_naive, s_ref, "decode state", F32)


# ---------------------------------------------------------------- msa


@pytest.mark.parametrize(
    "B,G,T,S,Di,bs,top_k", [(1, 2, 63, 63, 24, 8, 3), (2, 1, 130, 130, 16, 16, 4), (1, 3, 20, 130, 8, 7, 5), (1, 1, 100, 100, 16, 4, 9)]
)
@pytest.mark.parametrize("pool", ["max", "mean"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_msa_select_triton(B, G, T, S, Di, bs, top_k, pool, dtype):
    iq, ik = randn(B, G, T, Di, seed=50).to(dtype), randn(B, S, Di, seed=51).to(dtype)
    got = K.msa_select(iq, ik, bs, top_k, pool=pool, backend="triton")
    want = K.msa_select(iq, ik, bs, top_k, pool=pool, backend="reference")
    assert got.dtype == torch.int64 and got.shape == want.shape
    if torch.equal(got, want):
        return
    # Only near-ties may differ (fp32 sums in another order): compare the chosen blocks' scores.
    assert torch.equal(got[..., 0], want[..., 0]) and torch.equal(got < 0, want < 0), "local block or padding differ"
    scores = msa_naive.block_scores(iq, ik, bs, pool=pool)
    torch.testing.assert_close(
        msa_naive.chosen_scores(got, scores), msa_naive.chosen_scores(want, scores), rtol=tolerance.TIE_RTOL, atol=tolerance.TIE_RTOL
    )


@pytest.mark.parametrize("pool", ["max", "mean"])
def test_msa_select_triton_breaks_ties_to_the_lowest_block_id(pool):
    """Integer index entries: many exactly equal block scores; the kernel keeps the reference's rule."""
    g = torch.Generator().manual_seed(5)
    iq, ik = torch.randint(2, (1, 2, 70, 3), generator=g).float(), torch.randint(2, (1, 70, 3), generator=g).float()
    for top_k in (3, 6):
        assert torch.equal(
            K.msa_select(iq, ik, 4, top_k, pool=pool, backend="triton"), K.msa_select(iq, ik, 4, top_k, pool=pool, backend="reference")
        )


MSA_SHAPES = [(1, 4, 2, 63, 63, 24, 8, 3), (1, 2, 1, 130, 130, 16, 16, 4), (1, 4, 2, 20, 70, 16, 8, 3)]


@pytest.mark.parametrize("shape", MSA_SHAPES)
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_msa_attn_triton(shape, dtype):
    B, H, G, T, S, D, bs, top_k = shape
    if dtype != F32 and shape != MSA_SHAPES[0]:
        pytest.skip("16-bit on one shape keeps the interpreter time down")
    xs = [randn(B, H, T, D, seed=60), randn(B, G, S, D, seed=61), randn(B, G, S, D, seed=62)]
    block_idx = msa_ref.msa_select(randn(B, G, T, 8, seed=63), randn(B, S, 8, seed=64), bs, top_k)
    check(
        lambda *a: K.msa_attn(*a, block_idx, bs, backend="triton"),
        plain_attention(lambda *a: msa_naive.msa_attn(*a, block_idx, bs), lambda *a: K.msa_attn(*a, block_idx, bs, backend="reference")),
        lambda *a: msa_naive.msa_attn(*a, block_idx, bs),
        xs,
        [randn(B, H, T, D, seed=65).to(dtype)],
        dtype,
        {"out": ["o"], "grad": ["dq", "dk", "dv"]},
    )


# ---------------------------------------------------------------- the backend switch


NO_TRITON = ("gated_delta", "dsa")  # ops whose plain-torch reference is their only backend (no kernels/<op>/triton.py yet)


def test_every_op_has_a_triton_kernel_and_auto_stays_on_cpu():
    for op in kernel_ops():
        assert backend.has_triton_kernel(op) == (op not in NO_TRITON), op
        if op in NO_TRITON:
            with pytest.raises(NotImplementedError, match="no Triton kernel"):
                backend.choose(op, "triton", torch.device("cpu"))
        else:
            assert backend.choose(op, "triton", torch.device("cpu")) == "triton"
        assert backend.choose(op, "auto", torch.device("cpu")) == "reference"
    cuda = torch.device("cuda")  # choose() only reads the device type: no GPU needed
    assert {op: backend.choose(op, "auto", cuda) for op in kernel_ops()} == {
        "softmax": "reference",
        "lightning": "triton",
        "sliding_window": "triton",
        "msa": "triton",
        "gated_delta": "reference",
        "dsa": "reference",
    }


def test_triton_without_cuda_or_interpreter_says_so(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(RuntimeError, match="CUDA device"):
        K.softmax_attn(q, q, q, backend="triton")


def test_triton_names_the_dtypes_it_takes():
    q = torch.randn(1, 2, 8, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="fp32, fp16 and bf16 .*int64 and int32"):
        K.softmax_attn(q, q, q, backend="triton")
