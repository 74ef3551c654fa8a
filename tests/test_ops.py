"""Each op's reference (the fast plain-torch path) against its naive formula (the truth,
kernels/<op>/naive.py, written differently): outputs and gradients, odd shapes (T = 63, 200;
D = 24), float64 truth."""

from __future__ import annotations

import pytest
import torch

import attnbench.kernels as K
from attnbench.kernels.lightning import naive as lightning_naive
from attnbench.kernels.lightning import reference as lightning_ref
from attnbench.kernels.msa import naive as msa_naive
from attnbench.kernels.msa import reference as msa_ref
from attnbench.kernels.sliding_window.naive import sliding_window_attn as sliding_naive
from attnbench.kernels.softmax.naive import softmax_attn as softmax_naive
from attnbench.model.lightning import decay_rates

SHAPES = [(1, 4, 2, 63, 24), (2, 6, 3, 200, 24), (1, 2, 2, 17, 32)]  # B, H, Hkv, T, D


def rand(*shape, requires_grad=True, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float32).requires_grad_(requires_grad)


def assert_close(got, want, rtol=1e-4, atol=1e-5, what=""):
    got, want = got.detach().double(), want.detach().double()
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    if not bool((err <= bound).all()):
        i = int((err - bound).argmax())
        raise AssertionError(
            f"{what}: worst element {i}: got {got.flatten()[i]:.6g}, want {want.flatten()[i]:.6g}, "
            f"|err| {err.flatten()[i]:.3g} > {bound.flatten()[i]:.3g}"
        )


def grads(fn, inputs, seed=1):
    out = fn(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    return torch.autograd.grad((out * w).sum(), inputs)


def double(*xs):
    return [x.detach().double().requires_grad_(True) for x in xs]


@pytest.mark.parametrize("B,H,Hkv,T,D", SHAPES)
def test_softmax_attn(B, H, Hkv, T, D):
    q, k, v = rand(B, H, T, D), rand(B, Hkv, T, D, seed=1), rand(B, Hkv, T, D, seed=2)
    assert_close(K.softmax_attn(q, k, v, backend="reference"), softmax_naive(*double(q, k, v)), what="o")
    for gg, gw, name in zip(
        grads(lambda *a: K.softmax_attn(*a, backend="reference"), [q, k, v]), grads(softmax_naive, double(q, k, v)), "qkv"
    ):
        assert_close(gg, gw, what=f"d{name}")


def test_softmax_attn_queries_aligned_to_last_keys():
    q, k, v = rand(2, 4, 5, 16), rand(2, 2, 40, 16, seed=1), rand(2, 2, 40, 16, seed=2)
    assert_close(K.softmax_attn(q, k, v, scale=0.3), softmax_naive(*double(q, k, v), scale=0.3), what="o")
    one = K.softmax_attn(q[:, :, -1:], k, v)
    assert_close(one, softmax_naive(*double(q[:, :, -1:], k, v)), what="decode")
    # decode stacks a KV group's query heads as its queries: heads 0, 1 read KV head 0, heads 2, 3 KV head 1
    one = K.softmax_attn(q[:, :, -1:], k, v, scale=0.3)
    assert_close(one, softmax_naive(*double(q[:, :, -1:], k, v), scale=0.3), what="decode (scale)")
    assert_close(one[:, 2:], softmax_naive(*double(q[:, 2:, -1:], k[:, 1:], v[:, 1:]), scale=0.3), what="decode (group 1)")
    with torch.no_grad():  # the CPU prefill path: cached keys and the last T keys merged by log-sum-exp
        assert_close(K.softmax_attn(q, k, v, scale=0.3), softmax_naive(*double(q, k, v), scale=0.3), what="o (no grad)")


@pytest.mark.parametrize("B,H,Hkv,T,D", SHAPES)
@pytest.mark.parametrize("with_state", [False, True])
def test_lightning_attn_against_quadratic_form(B, H, Hkv, T, D, with_state):
    Dv = D + 8  # Dk != Dv on purpose
    q, k, v = rand(B, H, T, D), rand(B, H, T, D, seed=1), rand(B, H, T, Dv, seed=2)
    q, k = q.detach().mul(0.3).requires_grad_(), k.detach().mul(0.3).requires_grad_()
    decay = decay_rates(H, 0, 2)
    S0 = rand(B, H, D, Dv, seed=3) if with_state else None
    inputs = [q, k, v] + ([S0] if with_state else [])

    def fn(q, k, v, *s):
        return K.lightning_attn(q, k, v, decay, initial_state=s[0] if s else None, backend="reference")

    def nv(q, k, v, *s):
        return lightning_naive.lightning_attn(q, k, v, decay.double(), initial_state=s[0] if s else None)

    o, final = fn(*inputs)
    o_want, final_want = nv(*double(*inputs))
    assert final.dtype == torch.float32
    assert_close(o, o_want, what="o")
    assert_close(final, final_want, what="final_state")
    for gg, gw, name in zip(grads(fn, inputs), grads(nv, double(*inputs)), ["q", "k", "v", "S0"]):
        assert_close(gg, gw, what=f"d{name}")


def test_lightning_chunking_and_segments_agree_with_recurrence(monkeypatch):
    B, H, T, D = 1, 3, 77, 8
    q, k, v = (rand(B, H, T, D, requires_grad=False, seed=i) * 0.5 for i in range(3))
    decay = torch.tensor([0.9, 0.05, 1e-4])
    want_o, want_s = lightning_naive.lightning_recurrent(*(x.double() for x in (q, k, v)), decay.double())
    for chunk, segment, group in [
        (1, 16384, 32),  # 77 chunks: groups of 32, the last holds 13
        (5, 16384, 32),
        (64, 30, 32),
        (128, 16384, 32),
        (5, 16384, 1),  # one chunk a group: the float64 level does every step
        (16, 40, 2),
        (5, 16384, 2),  # 15 chunks in groups of 2: the last group holds one
        (3, 16384, 5),  # 25 chunks in 5 full groups
        (None, None, 32),  # the defaults: chunk_for(D), segment_for
    ]:
        monkeypatch.setattr(lightning_ref, "SCAN_GROUP", group)
        o, s = lightning_ref.lightning_attn(q, k, v, decay, chunk=chunk, segment=segment)
        assert_close(o, want_o, what=f"o chunk={chunk} segment={segment} group={group}")
        assert_close(s, want_s, what=f"state chunk={chunk} segment={segment} group={group}")


def test_lightning_one_fresh_chunk_skips_the_scan_bit_for_bit():
    """A row no longer than a chunk with no initial state (the first curriculum stage) skips the
    state scan: its output, final state and gradients equal the scan path's (an explicit zero
    state) exactly, not only within tolerance."""
    B, H, T, D = 3, 4, 24, 8  # T <= chunk_for(8) = 32: one chunk
    q, k, v = (rand(B, H, T, D, seed=i) * 0.5 for i in range(3))
    decay = decay_rates(H, 1, 8)
    zero = torch.zeros(B, H, D, D)
    o, s = lightning_ref.lightning_attn(q, k, v, decay)
    o_scan, s_scan = lightning_ref.lightning_attn(q, k, v, decay, initial_state=zero)
    assert torch.equal(o, o_scan) and torch.equal(s, s_scan)
    g_fresh = torch.autograd.grad(o.square().sum(), (q, k, v))
    g_scan = torch.autograd.grad(o_scan.square().sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(g_fresh, g_scan))
    o_want, s_want = lightning_naive.lightning_attn(*(x.double() for x in (q, k, v)), decay.double())
    assert_close(o, o_want, what="o")
    assert_close(s, s_want, what="state")


def test_lightning_split_sequence_equals_whole():
    """Running two halves with the state carried equals one pass (the prefill contract)."""
    q, k, v = (rand(2, 2, 90, 16, requires_grad=False, seed=i) * 0.5 for i in range(3))
    decay = torch.tensor([0.3, 0.01])
    o, s = K.lightning_attn(q, k, v, decay)
    o1, s1 = K.lightning_attn(q[:, :, :37], k[:, :, :37], v[:, :, :37], decay)
    o2, s2 = K.lightning_attn(q[:, :, 37:], k[:, :, 37:], v[:, :, 37:], decay, initial_state=s1)
    assert_close(torch.cat([o1, o2], 2), o, what="o")
    assert_close(s2, s, what="state")


@pytest.mark.parametrize("B,H,Hkv,T,D", SHAPES)
@pytest.mark.parametrize("window", [1, 7, 64, 500])
def test_sliding_window_attn(B, H, Hkv, T, D, window):
    q, k, v = rand(B, H, T, D), rand(B, Hkv, T, D, seed=1), rand(B, Hkv, T, D, seed=2)

    def fn(*a):
        return K.sliding_window_attn(*a, window, backend="reference")

    def nv(*a):
        return sliding_naive(*a, window)

    assert_close(fn(q, k, v), nv(*double(q, k, v)), what="o")
    for gg, gw, name in zip(grads(fn, [q, k, v]), grads(nv, double(q, k, v)), "qkv"):
        assert_close(gg, gw, what=f"d{name}")


def test_sliding_window_with_cache_prefix():
    q, k, v = rand(1, 4, 30, 16), rand(1, 2, 100, 16, seed=1), rand(1, 2, 100, 16, seed=2)
    assert_close(K.sliding_window_attn(q, k, v, 45), sliding_naive(*double(q, k, v), 45), what="o")


def test_sliding_window_covering_everything_is_softmax():
    q, k, v = rand(2, 4, 200, 24), rand(2, 2, 200, 24, seed=1), rand(2, 2, 200, 24, seed=2)
    assert_close(K.sliding_window_attn(q, k, v, 200), K.softmax_attn(q, k, v), what="w = T")
    assert_close(K.sliding_window_attn(q, k, v, 10_000), K.softmax_attn(q, k, v), what="w > T")


@pytest.mark.parametrize("B,G,T,S,Di,bs,top_k", [(1, 2, 63, 63, 24, 8, 3), (2, 1, 200, 200, 16, 16, 4), (1, 3, 20, 130, 8, 7, 5)])
@pytest.mark.parametrize("pool", ["max", "mean"])
def test_msa_select(monkeypatch, B, G, T, S, Di, bs, top_k, pool):
    monkeypatch.setattr(msa_ref, "SELECT_ROWS", 7)  # force many query and key tiles
    monkeypatch.setattr(msa_ref, "SELECT_KEYS", 20)
    iq, ik = rand(B, G, T, Di, requires_grad=False), rand(B, S, Di, requires_grad=False, seed=1)
    got = K.msa_select(iq, ik, bs, top_k, pool=pool)
    want = msa_naive.msa_select(iq, ik, bs, top_k, pool=pool)
    assert got.dtype == torch.int64 and got.shape == (B, G, T, top_k)
    assert torch.equal(got, want)


def tied_index(B, G, T, S, Di, levels=2, seed=0):
    """Index queries and keys with entries in {0, .., levels - 1}: integer scores, many exact ties."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(levels, (B, G, T, Di), generator=g).float(), torch.randint(levels, (B, S, Di), generator=g).float())


@pytest.mark.parametrize("select", [K.msa_select, msa_naive.msa_select], ids=["reference", "naive"])
@pytest.mark.parametrize("pool", ["max", "mean"])
def test_msa_select_ties_go_to_the_lowest_block_ids(select, pool):
    """Equal block scores rank by block id, lowest first (MiniMax's reference: a stable sort)."""
    bs, top_k, T = 4, 4, 40
    iq, ik = torch.ones(1, 1, T, 8), torch.ones(1, T, 8)  # every block scores the same
    got = select(iq, ik, bs, top_k, pool=pool)
    for t in range(T):
        local = t // bs
        want = [local] + list(range(min(local, top_k - 1))) + [-1] * (top_k - 1 - min(local, top_k - 1))
        assert got[0, 0, t].tolist() == want, (t, got[0, 0, t].tolist(), want)
    ik[:, 8:12] = 2.0  # block 2 now scores highest; blocks 0, 1, 3, .. still tie behind it
    assert select(iq, ik, bs, top_k, pool=pool)[0, 0, -1].tolist() == [9, 2, 0, 1]


def test_msa_select_partial_ties_reference_equals_naive(monkeypatch):
    monkeypatch.setattr(msa_ref, "SELECT_ROWS", 7)
    monkeypatch.setattr(msa_ref, "SELECT_KEYS", 20)
    for seed, pool in [(0, "max"), (1, "max"), (2, "mean")]:  # partial ties, inside and at the edge of the top k
        iq, ik = tied_index(2, 2, 90, 90, 3, seed=seed)  # block size 4: block means stay exact in fp32
        assert torch.equal(K.msa_select(iq, ik, 4, 6, pool=pool), msa_naive.msa_select(iq, ik, 4, 6, pool=pool)), (seed, pool)


def small_case(op):
    """(reference, naive, inputs) of op at a small odd shape, float64 inputs."""
    B, H, G, T, S, D, bs = 1, 4, 2, 37, 45, 8, 4
    q, k, v = rand(B, H, T, D, seed=5), rand(B, G, S, D, seed=6), rand(B, G, S, D, seed=7)
    if op == "softmax":
        return (lambda *a: K.softmax_attn(*a, backend="reference")), softmax_naive, (q, k, v)
    if op == "sliding_window":
        return (lambda *a: K.sliding_window_attn(*a, 9, backend="reference")), (lambda *a: sliding_naive(*a, 9)), (q, k, v)
    if op == "lightning":
        q, k, v = (rand(B, H, T, D, seed=i) * 0.5 for i in range(3))
        S0 = rand(B, H, D, D, seed=3)

        def ref(q, k, v, S0):
            return K.lightning_attn(q, k, v, decay_rates(H, 0, 2), initial_state=S0, backend="reference")[0]

        def nv(q, k, v, S0):
            return lightning_naive.lightning_attn(q, k, v, decay_rates(H, 0, 2), initial_state=S0)[0]

        return ref, nv, (q, k, v, S0)
    block_idx = K.msa_select(rand(B, G, T, 8, requires_grad=False, seed=8), rand(B, S, 8, requires_grad=False, seed=9), bs, 3)
    return ((lambda *a: K.msa_attn(*a, block_idx, bs, backend="reference")), (lambda *a: msa_naive.msa_attn(*a, block_idx, bs)), (q, k, v))


@pytest.mark.parametrize("op", ["softmax", "sliding_window", "lightning", "msa"])
def test_naive_equals_reference_in_float64(op):
    """Both in float64, the reference and the naive formula agree to float64 rounding: the same
    formula (lightning: its reference forms the decay factors and the chunk states in fp32
    whatever the dtype, so it agrees to fp32 rounding only)."""
    ref, nv, xs = small_case(op)
    tol = 1e-5 if op == "lightning" else 1e-11
    xs = double(*xs)
    assert ref(*xs).dtype == torch.float64
    assert_close(ref(*xs), nv(*xs), rtol=tol, atol=tol, what="o")
    for gg, gw, name in zip(grads(ref, xs), grads(nv, xs), ["q", "k", "v", "S0"]):
        assert_close(gg, gw, rtol=tol, atol=tol, what=f"d{name}")


def test_lightning_naive_closed_form_equals_recurrence():
    q, k, v = (rand(2, 3, 29, 8, requires_grad=False, seed=i).double() for i in range(3))
    S0 = rand(2, 3, 8, 8, requires_grad=False, seed=3).double()
    decay = torch.tensor([0.9, 0.05, 1e-4], dtype=torch.float64)
    for got, want in zip(
        lightning_naive.lightning_attn(q, k, v, decay, initial_state=S0),
        lightning_naive.lightning_recurrent(q, k, v, decay, initial_state=S0),
    ):
        assert_close(got, want, rtol=1e-12, atol=1e-12)


def msa_path(monkeypatch, path):
    """Route msa_attn to one of its paths: dense (masked SDPA), sparse (block-major, no gradient)
    or gathered (rows, the training path); the latter two with small tiles and chunks."""
    if path != "dense":
        monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 0)
        monkeypatch.setattr(msa_ref, "QUERY_CHUNK", 50)
        monkeypatch.setattr(msa_ref, "GATHER_ROWS", 37)  # several tiles, a padded last one
    if path == "sparse":
        return lambda *a, **kw: msa_ref.msa_attn(*(x.detach() for x in a[:3]), *a[3:], **kw)
    return msa_ref.msa_attn


@pytest.mark.parametrize("B,H,G,T,D,bs,top_k", [(1, 4, 2, 63, 24, 8, 3), (2, 6, 3, 200, 24, 16, 4), (1, 2, 1, 45, 16, 5, 2)])
@pytest.mark.parametrize("path", ["dense", "sparse", "gathered"])
def test_msa_attn(monkeypatch, B, H, G, T, D, bs, top_k, path):
    attn = msa_path(monkeypatch, path)
    q, k, v = rand(B, H, T, D), rand(B, G, T, D, seed=1), rand(B, G, T, D, seed=2)
    block_idx = K.msa_select(rand(B, G, T, 8, requires_grad=False, seed=3), rand(B, T, 8, requires_grad=False, seed=4), bs, top_k)

    def fn(*a):
        return attn(*a, block_idx, bs)

    def nv(*a):
        return msa_naive.msa_attn(*a, block_idx, bs)

    assert_close(fn(q, k, v), nv(*double(q, k, v)), what="o")
    if path != "sparse":
        for gg, gw, name in zip(grads(fn, [q, k, v]), grads(nv, double(q, k, v)), "qkv"):
            assert_close(gg, gw, what=f"d{name}")


def test_msa_block_major_rescales_when_remote_scores_dwarf_the_local_block(monkeypatch):
    """Keys of one early block get a large norm: their scores sit ~100 over the local maxima, past
    RESCALE_ABOVE and past exp's fp32 range, so _remote must move the reference up first."""
    monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 0)
    B, H, G, T, D, bs = 1, 4, 2, 64, 16, 8
    q, k, v = (
        rand(B, H, T, D, requires_grad=False),
        rand(B, G, T, D, requires_grad=False, seed=1),
        rand(B, G, T, D, requires_grad=False, seed=2),
    )
    k[:, :, bs : 2 * bs] = q[:, ::2, -1:] * 40.0  # block 1 aligned with the last queries
    block_idx = K.msa_select(rand(B, G, T, 8, requires_grad=False, seed=3), rand(B, T, 8, requires_grad=False, seed=4), bs, 3)
    later = (torch.arange(T) >= 2 * bs)[:, None]
    block_idx[..., 1:] = torch.where(later & (block_idx[..., 1:] == 1), -1, block_idx[..., 1:])  # no block twice
    block_idx[..., 1] = torch.where(later[:, 0], 1, block_idx[..., 1])  # every later query takes block 1
    with torch.no_grad():
        got = K.msa_attn(q, k, v, block_idx, bs)
    assert torch.isfinite(got).all()
    assert_close(got, msa_naive.msa_attn(*double(q, k, v), block_idx, bs), what="o")


def test_msa_attn_takes_the_gathered_path_for_gradients(monkeypatch):
    monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 0)
    q, k, v = rand(1, 2, 40, 16), rand(1, 1, 40, 16, seed=1), rand(1, 1, 40, 16, seed=2)
    block_idx = K.msa_select(rand(1, 1, 40, 8, requires_grad=False, seed=3), rand(1, 40, 8, requires_grad=False, seed=4), 8, 2)
    assert K.msa_attn(q, k, v, block_idx, 8).grad_fn.name().startswith("_Gathered")
    with torch.no_grad():
        assert K.msa_attn(q, k, v, block_idx, 8).grad_fn is None


@pytest.mark.slow
def test_msa_compiled_tiles_equal_eager(monkeypatch):
    """The gathered tiles under torch.compile (the default outside the tests) against eager."""
    B, H, G, T, D, Di, bs, top_k = 2, 4, 2, 300, 16, 8, 16, 4
    q, k, v = rand(B, H, T, D), rand(B, G, T, D, seed=1), rand(B, G, T, D, seed=2)
    iq, ik = rand(B, G, T, Di, seed=3), rand(B, T, Di, seed=4)
    block_idx = K.msa_select(iq, ik, bs, top_k)
    monkeypatch.setattr(msa_ref, "GATHER_ROWS", 256)

    def run():
        o = msa_ref._Gathered.apply(q, k, v, block_idx, bs, 0.25)
        kl = msa_ref.index_kl(q, k, iq, ik, block_idx, bs, 0.25)
        return [o, kl, *torch.autograd.grad((o * o).sum() + kl, [q, k, v, iq, ik])]

    monkeypatch.setattr(msa_ref, "COMPILE", False)
    eager = run()
    monkeypatch.setattr(msa_ref, "COMPILE", True)
    compiled = run()
    assert all(f is not None for f in msa_ref._compiled.values()), "torch.compile fell back to eager"
    for got, want, name in zip(compiled, eager, ["o", "kl", "dq", "dk", "dv", "diq", "dik"]):
        assert_close(got, want, what=name)


@pytest.mark.parametrize("B,H,G,T,D,Di,bs,top_k", [(1, 4, 2, 63, 24, 8, 8, 3), (2, 6, 3, 200, 24, 16, 16, 4), (1, 2, 1, 45, 16, 8, 5, 2)])
def test_msa_index_kl_by_rows_equals_dense_formula(monkeypatch, B, H, G, T, D, Di, bs, top_k):
    from attnbench.model.msa import index_kl_dense

    monkeypatch.setattr(msa_ref, "GATHER_ROWS", 37)
    q, k = rand(B, H, T, D, requires_grad=False), rand(B, G, T, D, requires_grad=False, seed=1)
    iq, ik = rand(B, G, T, Di, seed=2), rand(B, T, Di, seed=3)
    block_idx = K.msa_select(iq, ik, bs, top_k)
    q, k, iq, ik = double(q, k, iq, ik)
    got = msa_ref.index_kl(q, k, iq, ik, block_idx, bs, 0.3)
    want = index_kl_dense(q, k, iq, ik, block_idx, bs, 0.3)
    assert_close(got, want, rtol=1e-10, atol=1e-12, what="kl")
    for gg, gw, name in zip(torch.autograd.grad(got * 3, [iq, ik]), torch.autograd.grad(want * 3, [iq, ik]), ["iq", "ik"]):
        assert_close(gg, gw, rtol=1e-10, atol=1e-12, what=f"d{name}")


@pytest.mark.parametrize("path", ["dense", "sparse", "gathered"])
def test_msa_covering_every_block_is_softmax(monkeypatch, path):
    attn = msa_path(monkeypatch, path)
    B, H, G, T, D, bs = 2, 4, 2, 200, 24, 16
    q, k, v = rand(B, H, T, D), rand(B, G, T, D, seed=1), rand(B, G, T, D, seed=2)
    iq, ik = rand(B, G, T, 8, requires_grad=False, seed=3), rand(B, T, 8, requires_grad=False, seed=4)
    block_idx = K.msa_select(iq, ik, bs, top_k=-(-T // bs))
    assert_close(attn(q, k, v, block_idx, bs), K.softmax_attn(q, k, v), what="msa(all blocks) vs softmax")


def test_msa_attn_queries_aligned_to_last_keys(monkeypatch):
    B, H, G, T, S, D, bs = 1, 4, 2, 9, 70, 16, 8
    q, k, v = rand(B, H, T, D), rand(B, G, S, D, seed=1), rand(B, G, S, D, seed=2)
    block_idx = K.msa_select(rand(B, G, T, 8, requires_grad=False, seed=3), rand(B, S, 8, requires_grad=False, seed=4), bs, 3)
    want = msa_naive.msa_attn(*double(q, k, v), block_idx, bs)
    assert_close(K.msa_attn(q, k, v, block_idx, bs), want, what="dense")
    monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 0)
    with torch.no_grad():
        assert_close(K.msa_attn(q, k, v, block_idx, bs), want, what="block-major")
    assert_close(K.msa_attn(q, k, v, block_idx, bs), want, what="gathered")


def test_bad_shapes_raise_clear_errors():
    q = torch.randn(1, 3, 8, 16)
    kv = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="divisible"):
        K.softmax_attn(q, kv, kv)
    with pytest.raises(ValueError, match="window"):
        K.sliding_window_attn(q, q, q, 0)
    with pytest.raises(ValueError, match="backend"):
        K.softmax_attn(q, q, q, backend="cuda-magic")


def test_ops_ignore_the_default_dtype():
    """fp32 inputs give the same fp32 outputs whatever torch's default dtype is: every tensor an
    op allocates takes its dtype from the inputs or names one (a float64 default once made the
    lightning reference allocate its output buffer in float64 and fail)."""
    B, H, G, T, D, bs = 1, 4, 2, 40, 8, 8
    q = rand(B, H, T, D, requires_grad=False)
    k, v = rand(B, G, T, D, requires_grad=False, seed=1), rand(B, G, T, D, requires_grad=False, seed=2)
    iq, ik = rand(B, G, T, 8, requires_grad=False, seed=3), rand(B, T, 8, requires_grad=False, seed=4)
    decay = torch.tensor([0.5, 0.1, 0.01, 1e-3])

    def run_all():
        block_idx = K.msa_select(iq, ik, bs, 3)
        return {
            "softmax": K.softmax_attn(q, k, v),
            "sliding_window": K.sliding_window_attn(q, k, v, 7),
            "lightning": K.lightning_attn(q, q, q, decay),
            "msa_select": block_idx,
            "msa": K.msa_attn(q, k, v, block_idx, bs),
        }

    want = run_all()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = run_all()
    finally:
        torch.set_default_dtype(before)
    for name, out in want.items():
        for w, g in zip(*(x if isinstance(x, tuple) else (x,) for x in (out, got[name]))):
            assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
            assert torch.equal(g, w), name
