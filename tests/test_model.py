"""The backbone and every design: three paths agree, caches report bytes, layouts resolve."""

from __future__ import annotations

import pytest
import torch

from attnbench.model import Model, resolve_layout
from attnbench.model.lightning import decay_rates

from helpers import compose_cfg

DESIGNS = ["softmax", "lightning", "lightning_hybrid", "sliding_window", "swa_hybrid", "msa"]


@pytest.fixture(scope="module")
def cfg():
    return compose_cfg(["+exp=smoke"])


def build(cfg, name, **model_overrides):
    m = cfg.model.copy()
    for k, v in model_overrides.items():
        m[k] = v
    torch.manual_seed(0)
    return Model(m, cfg.attention[name]).eval()


def logits_in_chunks(model, idx, chunk):
    cache = model.new_cache()
    out = [model(idx[:, i : i + chunk], cache).logits for i in range(0, idx.shape[1], chunk)]
    return torch.cat(out, 1), cache


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("name", DESIGNS)
def test_prefill_and_decode_equal_full_forward(cfg, name):
    model = build(cfg, name)
    idx = torch.randint(cfg.model.vocab_size, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx).logits
        for chunk in (1, 13, 32):
            got, cache = logits_in_chunks(model, idx, chunk)
            assert rel(got, full) <= 1e-5, f"{name}: chunk={chunk} rel err {rel(got, full):.2e}"
            assert cache.length == 70


@pytest.mark.parametrize("name", DESIGNS)
def test_every_design_trains(cfg, name):
    model = build(cfg, name).train()
    idx = torch.randint(cfg.model.vocab_size, (2, 40))
    out = model(idx)
    loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), idx.flatten()) + out.balance_loss + out.index_loss
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"{name}: no or non-finite gradient for {missing[:5]}"
    if "M" in model.layout:  # the index branch learns only from its KL loss
        assert float(out.index_loss.detach()) > 0


def test_cache_bytes_match_formulas(cfg):
    m = cfg.model
    B, n, H, Hkv, D = 2, 50, m.n_heads, m.n_kv_heads, m.head_dim
    idx = torch.randint(m.vocab_size, (B, n))
    per_kv_token = B * 2 * Hkv * D * 4  # K and V, fp32
    expect = {
        "softmax": 8 * n * per_kv_token,
        "lightning": 8 * B * H * D * D * 4,
        "lightning_hybrid": 7 * B * H * D * D * 4 + n * per_kv_token,
        "sliding_window": 8 * min(n, cfg.attention.sliding_window.window) * per_kv_token,
        "msa": 8 * n * (per_kv_token + B * cfg.attention.msa.index_dim * 4),
    }
    for name, want in expect.items():
        model = build(cfg, name)
        with torch.no_grad():
            _, cache = logits_in_chunks(model, idx, 16)
        assert cache.nbytes() == want, name


def test_layout_tiling_and_errors():
    assert resolve_layout("LLLLLLLS", 16) == "LLLLLLLS" * 2
    assert resolve_layout("S", 3) == "SSS"
    with pytest.raises(ValueError, match="letters"):
        resolve_layout("SX", 2)
    with pytest.raises(ValueError, match="tile"):
        resolve_layout("LLS", 4)


def test_lightning_decay_rates_follow_minimax():
    s = decay_rates(8, layer=0, n_layers=80)
    assert torch.allclose(s, torch.tensor([2 ** (-8 * (h + 1) / 8) * (1 + 1e-5) for h in range(8)]))
    last = decay_rates(8, layer=79, n_layers=80)
    assert torch.allclose(last, torch.tensor([2 ** (-8 * (h + 1) / 8) * 1e-5 for h in range(8)]))


def test_sliding_window_model_with_huge_window_equals_softmax_model(cfg):
    a = build(cfg, "softmax")
    sw = cfg.attention.sliding_window.copy()
    sw.window = 10_000
    torch.manual_seed(0)
    b = Model(cfg.model, sw).eval()
    idx = torch.randint(cfg.model.vocab_size, (1, 50))
    with torch.no_grad():
        assert rel(b(idx).logits, a(idx).logits) <= 1e-6


def test_param_counts(cfg):
    for name in DESIGNS:
        counts = build(cfg, name).param_counts()
        assert counts["active"] < counts["total"]
        assert counts["attention"] > 0


@pytest.mark.parametrize("name", DESIGNS)
def test_prefill_without_logits_then_probe_equals_full_forward(cfg, name):
    """Model.prefill (last layer cache-only) + probes from a snapshot == the full forward."""
    model = build(cfg, name)
    idx = torch.randint(cfg.model.vocab_size, (1, 60), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache()
        for i in range(0, 50, 16):
            model.prefill(idx[:, i : min(50, i + 16)], cache)
        snap = cache.snapshot()
        for _ in range(2):  # the same probe twice: the restore must undo the first
            probe = model(idx[:, 50:], cache).logits
            assert rel(probe, full[:, 50:]) <= 1e-5, name
            model(idx[:, 50:53].flip(1), cache)  # scribble on the cache
            cache.restore(snap)
            assert cache.length == 50


def variant(cfg, name, **design):
    """cfg with attention.<name> changed (position scheme, qkv_conv, ...)."""
    out = cfg.copy()
    for k, v in design.items():
        out.attention[name][k] = v
    return out


@pytest.mark.parametrize("name", ["softmax", "sliding_window", "msa", "lightning_hybrid"])
@pytest.mark.parametrize("position", ["rope", "nope", "logn", "nope_logn"])
def test_position_schemes_keep_prefill_equal_to_full_forward(cfg, name, position):
    c = variant(cfg, name, position=position)
    model = build(c, name)
    idx = torch.randint(c.model.vocab_size, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx).logits
        got, _ = logits_in_chunks(model, idx, 13)
    assert rel(got, full) <= 1e-5, f"{name}/{position}: rel err {rel(got, full):.2e}"
    has_logn = any(n.endswith("logn.s") for n, _ in model.named_parameters())
    assert has_logn == position.endswith("logn")


def test_position_schemes_differ_where_they_should(cfg):
    """nope ignores where a token is; rope and partial RoPE do not; logn and nope_logn scale with the count."""
    from attnbench.model.common import Position

    q = torch.randn(1, 2, 5, cfg.model.head_dim, dtype=torch.float64)
    by = {
        p: Position(cfg.model, variant(cfg, "softmax", position=p).attention.softmax, cfg.model.head_dim, 2)
        for p in ("rope", "partial", "nope", "logn", "nope_logn")
    }
    assert torch.equal(by["nope"].query(q, 7), q)
    rot = by["partial"].rope.rot
    assert rot == int(cfg.model.head_dim * cfg.model.rotary_frac) // 2 * 2
    assert torch.equal(by["partial"].query(q, 7)[..., rot:], q[..., rot:])  # the un-rotated half is untouched
    assert not torch.allclose(by["rope"].query(q, 7)[..., rot:], q[..., rot:])
    # logn: partial RoPE, then times s * log(t + 1) at absolute position t
    s = by["logn"].logn.s.detach().double()
    want = by["partial"].query(q, 7) * (s.view(-1, 1, 1) * torch.log(torch.arange(8, 13, dtype=torch.float64))[:, None])
    assert torch.allclose(by["logn"].query(q, 7), want.to(q.dtype))
    # nope_logn: no RoPE on q or k, the same scale
    s = by["nope_logn"].logn.s.detach().double()
    assert torch.equal(by["nope_logn"].key(q, 7), q)
    want = q * (s.view(-1, 1, 1) * torch.log(torch.arange(8, 13, dtype=torch.float64))[:, None])
    assert torch.allclose(by["nope_logn"].query(q, 7), want.to(q.dtype))


def test_qkv_conv_variant_streams_and_is_causal(cfg):
    """The labelled conv variant: chunked prefill == full forward, and no token sees the future."""
    c = variant(cfg, "lightning_hybrid", qkv_conv=4)
    model = build(c, "lightning_hybrid")
    assert any(n.endswith("conv.weight") for n, _ in model.named_parameters())
    idx = torch.randint(c.model.vocab_size, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx).logits
        for chunk in (1, 5, 32):
            got, cache = logits_in_chunks(model, idx, chunk)
            assert rel(got, full) <= 1e-5, f"chunk={chunk}: rel err {rel(got, full):.2e}"
        changed = idx.clone()
        changed[:, 40:] = (changed[:, 40:] + 1) % c.model.vocab_size
        assert torch.equal(model(changed).logits[:, :40], full[:, :40])
    faithful = build(cfg, "lightning_hybrid")
    assert not any("conv" in n for n, _ in faithful.named_parameters())  # the default stays Text-01's layer


def test_msa_training_step_by_rows_equals_dense(cfg, monkeypatch):
    """The msa training path (gathered rows: attention and index KL) gives the dense path's
    loss and every parameter's gradient (the index branch's included)."""
    from attnbench.kernels.msa import reference as msa_ref

    model = build(cfg, "msa").train()
    idx = torch.randint(cfg.model.vocab_size, (2, 90), generator=torch.Generator().manual_seed(3))

    def step():
        model.zero_grad()
        out = model(idx)
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), idx.flatten()) + out.balance_loss + out.index_loss
        loss.backward()
        return loss.detach(), out.index_loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 1 << 30)
    dense = step()
    monkeypatch.setattr(msa_ref, "DENSE_LIMIT", 0)
    monkeypatch.setattr(msa_ref, "GATHER_ROWS", 64)
    rows = step()
    assert rel(rows[0], dense[0]) <= 1e-5
    assert abs(float(rows[1] - dense[1])) <= 1e-6, (float(rows[1]), float(dense[1]))  # a small KL: fp32 cancellation
    for name, g in dense[2].items():
        assert rel(rows[2][name], g) <= 1e-4, f"{name}: rel err {rel(rows[2][name], g):.2e}"


def test_moe_dispatch_equals_token_by_token_formula(cfg):
    """MoE's one-gather dispatch against the per-token formula; gradients reach every expert."""
    from attnbench.model.moe import MoE

    from naive import moe_naive

    torch.manual_seed(0)
    moe = MoE(cfg.model).double()
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, 37, cfg.model.d_model, dtype=torch.float64, requires_grad=True)
    y, balance = moe(x)
    assert rel(y, moe_naive(moe, x)) <= 1e-12
    y.square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in moe.parameters())
    with torch.no_grad():  # the inference path writes each expert's rows into one buffer (out=)
        assert rel(moe(x)[0], moe_naive(moe, x)) <= 1e-12
        moe.router.weight[-1] = -100.0  # positive inputs never route to the last expert: it gets no rows
        x = x.detach().abs()
        y, _ = moe(x)
        assert rel(y, moe_naive(moe, x)) <= 1e-12


def test_compiled_prefill_equals_eager_prefill(cfg):
    """Model.compile_prefill: full chunks go through torch.compile'd lightning blocks, the last
    partial chunk runs eagerly; the caches and the logits that continue them match the eager model."""
    from torch._dynamo.utils import counters

    eager, compiled = build(cfg, "lightning_hybrid"), build(cfg, "lightning_hybrid")
    graphs = counters["stats"]["unique_graphs"]
    assert compiled.compile_prefill(32)
    assert counters["stats"]["unique_graphs"] > graphs  # it compiled something
    assert not build(cfg, "softmax").compile_prefill(32)  # nothing to compile without lightning blocks
    idx = torch.randint(cfg.model.vocab_size, (1, 100), generator=torch.Generator().manual_seed(2))
    probe = idx[:, :5]
    with torch.no_grad():
        caches = []
        for model in (eager, compiled):
            cache = model.new_cache()
            for s in range(0, 100, 32):  # 32, 32, 32, then 4 tokens (eager)
                model.prefill(idx[:, s : s + 32], cache)
            caches.append((cache, model(probe, cache).logits))
    (c_e, l_e), (c_c, l_c) = caches
    assert c_c.length == c_e.length == 105
    for a, b in zip(c_c.layers, c_e.layers):
        if getattr(b, "state", None) is not None:
            assert rel(a.state, b.state) <= 1e-5
    assert rel(l_c, l_e) <= 1e-5
    assert compiled.compiled_for(100) and not compiled.compiled_for(31) and not eager.compiled_for(100)


def test_a_failed_compile_leaves_the_model_eager(cfg, monkeypatch):
    """compile_prefill raises what torch.compile raised (run_grid then records the compile as
    failed and goes on) and leaves the prefill eager, not half compiled."""

    def broken(fn, **kwargs):
        def call(*args):
            raise RuntimeError("no C++ compiler")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    model = build(cfg, "lightning_hybrid")
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        model.compile_prefill(32)
    assert not model.compiled_for(64)
    cache = model.new_cache()
    with torch.no_grad():
        model.prefill(torch.zeros(1, 64, dtype=torch.long), cache)
    assert cache.length == 64


def test_run_grid_records_a_failed_compile_and_goes_on():
    """longctx.compile_prefills: a model whose compile raises gets a `failed` eval/compile_s
    record with the reason, and the next model is still compiled."""
    from types import SimpleNamespace

    from attnbench.experiments.longctx.evaluate import compile_prefills

    class Broken:
        layout = "LLS"

        def compile_prefill(self, chunk):
            raise RuntimeError("no C++ compiler")

    class Fine(Broken):
        def compile_prefill(self, chunk):
            self.chunk = chunk
            return False  # nothing to compile: no record

    records = []
    ctx = SimpleNamespace(
        cfg=SimpleNamespace(eval=SimpleNamespace(chunk=65536)),
        console=SimpleNamespace(print=lambda *a, **k: None),
        record=lambda *a, **k: records.append((a, k)),
    )
    fine = Fine()
    compile_prefills(ctx, {"broken": SimpleNamespace(model=Broken()), "fine": SimpleNamespace(model=fine)})
    assert [(a[:5], k["note"]) for a, k in records] == [
        (("broken", "eval/compile_s", None, "s", "failed"), "RuntimeError: no C++ compiler")
    ]
    assert fine.chunk == 16384  # a linear design's chunk (plan.LINEAR_CHUNK)
