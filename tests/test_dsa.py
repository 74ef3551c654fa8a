"""DeepSeek sparse attention's reference (query tiles, gathered tokens) against its naive dense
formulas (kernels/dsa/naive.py): the indexer's selection (random scores, exact ties, fewer
tokens than top_k), the attention over the selection (grouped heads, odd lengths, the dense and
the gathered path, gradients, 16-bit inputs), and the indexer's KL loss and its gradients."""

from __future__ import annotations

import pytest
import torch

import attnbench.kernels as K
from attnbench.kernels.dsa import naive as dsa_naive
from attnbench.kernels.dsa import reference as dsa_ref
from attnbench.kernels.tolerance import assert_within

from test_ops import assert_close, double, grads, rand

SHAPES = [(1, 4, 2, 63, 24), (2, 6, 3, 200, 24), (1, 2, 1, 45, 16)]  # B, H, G, T, D


def index_inputs(B, T, S=None, HI=4, Di=8, seed=0):
    """index_q (B, HI, T, Di), index_w (B, T, HI) (some weights negative, as a learned projection's), index_k (B, S, Di)."""
    S = S or T
    return (
        rand(B, HI, T, Di, requires_grad=False, seed=seed),
        rand(B, T, HI, requires_grad=False, seed=seed + 1),
        rand(B, S, Di, requires_grad=False, seed=seed + 2),
    )


@pytest.fixture
def small_tiles(monkeypatch):
    """Many query tiles in the selection and in the gathered attention, and no dense path."""
    monkeypatch.setattr(dsa_ref, "SCORE_BYTES", 4 * 16 * 64)
    monkeypatch.setattr(dsa_ref, "GATHER_BYTES", 1)
    monkeypatch.setattr(dsa_ref, "DENSE_LIMIT", 0)


@pytest.mark.parametrize("B,T,S,top_k", [(1, 63, 63, 5), (2, 200, 200, 16), (1, 20, 130, 7), (2, 37, 37, 64)])
def test_select_chooses_the_top_scores(small_tiles, B, T, S, top_k):
    """The reference's fp32 selection against the float64 truth: the same token ids, or, where fp32
    rounding reorders near-equal scores, selections whose true scores agree to fp32 rounding."""
    iq, iw, ik = index_inputs(B, T, S)
    got = K.dsa_select(iq, iw, ik, top_k)
    want = dsa_naive.dsa_select(iq, iw, ik, top_k)
    assert got.dtype == torch.int64 and got.shape == (B, T, top_k)
    t = torch.arange(S - T, S)[None, :, None]
    assert bool(((got <= t) & (got >= -1)).all()), "a token after its query, or a bad id"
    assert torch.equal(got < 0, want < 0), "padding differs"
    scores = dsa_naive.index_scores(*double(iq, iw, ik))
    assert_close(
        dsa_naive.chosen_scores(got, scores).nan_to_num(neginf=0),
        dsa_naive.chosen_scores(want, scores).nan_to_num(neginf=0),
        rtol=1e-5,
        atol=1e-5,
        what="chosen scores",
    )
    mismatch = (got != want).any(-1).float().mean()
    assert mismatch < 0.02, f"{mismatch:.1%} of queries choose other tokens"


def test_select_takes_every_token_when_fewer_exist():
    """top_k >= T: query t takes all its t + 1 tokens, -1 pads the rest (both implementations)."""
    T, top_k = 30, 40
    iq, iw, ik = index_inputs(1, T)
    for select in (K.dsa_select, dsa_naive.dsa_select):
        got = select(iq, iw, ik, top_k)
        for t in range(T):
            assert sorted(got[0, t, : t + 1].tolist()) == list(range(t + 1)), t
            assert (got[0, t, t + 1 :] == -1).all(), t


@pytest.mark.parametrize("select", [K.dsa_select, dsa_naive.dsa_select], ids=["reference", "naive"])
def test_ties_go_to_the_lowest_token_ids(select):
    """Equal index scores rank by token id, lowest first (a stable sort), exactly in both."""
    T, top_k = 40, 6
    iq, iw, ik = torch.ones(1, 2, T, 8), torch.ones(1, T, 2), torch.ones(1, T, 8)  # every token scores the same
    got = select(iq, iw, ik, top_k)
    for t in range(T):
        n = min(t + 1, top_k)
        assert got[0, t].tolist() == list(range(n)) + [-1] * (top_k - n), t
    ik[:, 20] = 2.0  # token 20 now scores highest for the queries that see it; the rest still tie behind it
    assert select(iq, iw, ik, top_k)[0, -1].tolist() == [20, 0, 1, 2, 3, 4]


def test_partial_ties_reference_equals_naive(small_tiles):
    """Integer index entries: many exact ties, inside and at the edge of the top k (exact in fp32)."""
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        iq = torch.randint(2, (2, 3, 90, 3), generator=g).float()
        ik = torch.randint(2, (2, 90, 3), generator=g).float()
        iw = torch.randint(-1, 3, (2, 90, 3), generator=g).float()
        assert torch.equal(K.dsa_select(iq, iw, ik, 9), dsa_naive.dsa_select(iq, iw, ik, 9)), seed


def attn_path(monkeypatch, path):
    if path == "gathered":
        monkeypatch.setattr(dsa_ref, "DENSE_LIMIT", 0)
        monkeypatch.setattr(dsa_ref, "GATHER_BYTES", 1)  # tiles of 16 queries
    return lambda *a, **kw: K.dsa_attn(*a, **kw, backend="reference")


@pytest.mark.parametrize("B,H,G,T,D", SHAPES)
@pytest.mark.parametrize("top_k", [1, 7, 500])
@pytest.mark.parametrize("path", ["dense", "gathered"])
def test_attn_against_naive(monkeypatch, B, H, G, T, D, top_k, path):
    attn = attn_path(monkeypatch, path)
    q, k, v = rand(B, H, T, D), rand(B, G, T, D, seed=1), rand(B, G, T, D, seed=2)
    idx = K.dsa_select(*index_inputs(B, T, seed=3), top_k)

    def fn(*a):
        return attn(*a, idx)

    def nv(*a):
        return dsa_naive.dsa_attn(*a, idx)

    assert_close(fn(q, k, v), nv(*double(q, k, v)), what="o")
    for gg, gw, name in zip(grads(fn, [q, k, v]), grads(nv, double(q, k, v)), "qkv"):
        assert_close(gg, gw, what=f"d{name}")


@pytest.mark.parametrize("path", ["dense", "gathered"])
def test_every_token_selected_is_softmax(monkeypatch, path):
    attn = attn_path(monkeypatch, path)
    q, k, v = rand(2, 4, 100, 16), rand(2, 2, 100, 16, seed=1), rand(2, 2, 100, 16, seed=2)
    idx = K.dsa_select(*index_inputs(2, 100), 100)
    assert_close(attn(q, k, v, idx, scale=0.3), K.softmax_attn(q, k, v, scale=0.3), what="dsa(all tokens) vs softmax")


@pytest.mark.parametrize("path", ["dense", "gathered"])
def test_queries_aligned_to_last_keys(monkeypatch, path):
    attn = attn_path(monkeypatch, path)
    B, H, G, T, S, D = 1, 4, 2, 9, 70, 16
    q, k, v = rand(B, H, T, D), rand(B, G, S, D, seed=1), rand(B, G, S, D, seed=2)
    idx = K.dsa_select(*index_inputs(B, T, S), 12)
    assert_close(attn(q, k, v, idx), dsa_naive.dsa_attn(*double(q, k, v), idx), what="o")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("path", ["dense", "gathered"])
def test_16_bit_inputs(monkeypatch, dtype, path):
    attn = attn_path(monkeypatch, path)
    q, k, v = (
        x.to(dtype)
        for x in (
            rand(2, 4, 120, 16, requires_grad=False),
            rand(2, 2, 120, 16, requires_grad=False, seed=1),
            rand(2, 2, 120, 16, requires_grad=False, seed=2),
        )
    )
    idx = K.dsa_select(*(x.to(dtype) for x in index_inputs(2, 120)), 10)
    got = attn(q, k, v, idx)
    assert got.dtype == dtype
    assert_within(got, dsa_naive.dsa_attn(*(x.double() for x in (q, k, v)), idx), dsa_naive.dsa_attn(q, k, v, idx), "dsa_attn o")


@pytest.mark.parametrize("B,H,G,T,D,top_k", [(1, 4, 2, 63, 24, 8), (2, 6, 3, 200, 24, 16), (1, 2, 1, 45, 16, 64)])
@pytest.mark.parametrize("tiles", [False, True])
def test_index_kl_against_dense_formula(monkeypatch, B, H, G, T, D, top_k, tiles):
    if tiles:
        monkeypatch.setattr(dsa_ref, "GATHER_BYTES", 1)
    q, k = rand(B, H, T, D, requires_grad=False), rand(B, G, T, D, requires_grad=False, seed=1)
    iq, iw, ik = index_inputs(B, T, seed=2)
    idx = K.dsa_select(iq, iw, ik, top_k)
    q, k, iq, iw, ik = double(q, k, iq, iw, ik)
    got = K.dsa_index_kl(q, k, iq, iw, ik, idx, scale=0.3)
    want = dsa_naive.dsa_index_kl(q, k, iq, iw, ik, idx, scale=0.3)
    assert float(want.detach()) > 0
    assert_close(got, want, rtol=1e-10, atol=1e-12, what="kl")
    g_got = torch.autograd.grad(got * 3, [q, k, iq, iw, ik], allow_unused=True)
    g_want = torch.autograd.grad(want * 3, [q, k, iq, iw, ik], allow_unused=True)
    assert g_got[0] is None and g_got[1] is None and g_want[0] is None and g_want[1] is None, "the main branch must get no gradient"
    for gg, gw, name in zip(g_got[2:], g_want[2:], ["iq", "iw", "ik"]):
        assert_close(gg, gw, rtol=1e-10, atol=1e-12, what=f"d{name}")


def test_index_kl_is_zero_when_the_indexer_matches_the_main_attention():
    """One main head whose scores are the index scores (one index head, unit weight, scores kept
    positive so ReLU passes them): p_index = p_main and the loss vanishes."""
    T, D = 30, 8
    q, k = rand(1, 1, T, D, requires_grad=False).abs().double(), rand(1, 1, T, D, requires_grad=False, seed=1).abs().double()
    idx = K.dsa_select(q, torch.ones(1, T, 1, dtype=torch.float64), k[:, 0], 6)
    kl = K.dsa_index_kl(q, k, q, torch.ones(1, T, 1, dtype=torch.float64), k[:, 0], idx, scale=1.0)
    assert abs(float(kl)) < 1e-12


def test_bad_shapes_raise_clear_errors():
    iq, iw, ik = index_inputs(1, 10)
    with pytest.raises(ValueError, match="index_w"):
        K.dsa_select(iq, iw[:, :, :2], ik, 4)
    with pytest.raises(ValueError, match="top_k"):
        K.dsa_select(iq, iw, ik, 0)
    q = torch.randn(1, 4, 10, 8)
    with pytest.raises(ValueError, match="idx"):
        K.dsa_attn(q, q[:, :2], q[:, :2], torch.zeros(1, 9, 3, dtype=torch.int64))
    with pytest.raises(NotImplementedError, match="Triton"):
        K.dsa_attn(q, q, q, torch.zeros(1, 10, 3, dtype=torch.int64), backend="triton")


def test_layer_prefill_in_pieces_and_decode_equal_one_pass():
    """The DSA layer (attnbench/model/dsa.py) at msa's budget (top_k blocks x block_size tokens):
    a prefill in pieces, then single-token steps from its cache, equal one pass; in training its
    indexer loss is positive and reaches the indexer's weights only."""
    from attnbench.config.schema import DesignConfig, ModelConfig
    from attnbench.model.dsa import DSAAttention

    torch.manual_seed(0)
    design = DesignConfig(name="dsa", layout="D", block_size=4, top_k=3)  # 12 tokens a query
    layer = DSAAttention(ModelConfig(), design, layer=0)
    assert layer.tokens == 12
    x = torch.randn(2, 40, 64)
    layer.eval()
    with torch.no_grad():
        y, aux = layer(x)
        cache = layer.new_cache()
        pieces = [layer(x[:, :17], cache)[0], layer(x[:, 17:33], cache)[0]]
        pieces += [layer(x[:, t : t + 1], cache)[0] for t in range(33, 40)]
    assert float(aux) == 0.0
    assert_close(torch.cat(pieces, 1), y, rtol=1e-4, atol=1e-5, what="y in pieces")
    layer.train()
    y, aux = layer(x)
    assert float(aux.detach()) > 0
    aux.backward()
    touched = {n for n, p in layer.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert touched == {"index_q.weight", "index_w.weight", "index_k.weight"}, touched
