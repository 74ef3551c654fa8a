"""measure.py's op cases: softmax decode, lightning's op and scan, MSA's ops and selection tiles, the MoE forward."""

from __future__ import annotations


import torch

from experiments.cpu_speedups.harness import BASE, alternate, close, old_module


def softmax_decode(calls: int, H: int = 8, G: int = 2, D: int = 64, S: int = 65536):
    """One softmax decode step against S cached keys (GQA, a cache reserved longer than S, as the
    model's): SDPA with enable_gqa (the reference before) against each KV group's query heads
    given as that group's queries (softmax_attn now)."""
    import torch.nn.functional as F

    from attnbench.kernels.softmax.reference import softmax_attn

    g = torch.Generator().manual_seed(0)
    kb, vb = (torch.randn(1, G, S + 1024, D, generator=g) for _ in range(2))
    k, v, q = kb[:, :, :S], vb[:, :, :S], torch.randn(1, H, 1, D, generator=g)

    def old():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def new():
        return softmax_attn(q, k, v)

    with torch.no_grad():
        close(new(), old(), "o")
        return [
            dict(
                design="softmax",
                metric="speedup/softmax_decode",
                unit="x",
                context_len=S,
                heads=H,
                kv_heads=G,
                head_dim=D,
                what="softmax_attn, one query against the cache, B 1",
                old="SDPA with enable_gqa",
                new="a KV group's query heads as its queries (no enable_gqa)",
                **alternate(old, new, calls),
            )
        ]


def lightning_op(calls: int, H: int = 8, D: int = 8, T: int = 65536):
    """lightning_attn forward on one prefill chunk (the hybrid's shapes by default)."""
    from attnbench.kernels.lightning import reference as new
    from attnbench.model.lightning import decay_rates

    old = old_module("kernels/lightning/reference.py", "old_lightning_reference")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.silu(torch.randn(1, H, T, D, generator=g)) for _ in range(3))
    decay = decay_rates(H, 0, 8)
    with torch.no_grad():
        (oo, os_), (no, ns) = old.lightning_attn(q, k, v, decay), new.lightning_attn(q, k, v, decay)
    close(no, oo, "o"), close(ns, os_, "state")

    def run(f):
        return lambda: f(q, k, v, decay)

    with torch.no_grad():
        return [
            dict(
                design="lightning",
                metric="speedup/lightning_op",
                unit="x",
                context_len=T,
                heads=H,
                head_dim=D,
                what="lightning_attn forward, B 1, contiguous inputs",
                old=f"{BASE}: chunk 64, segments of 16384 tokens, a loop of cumulative sums per scan group",
                new=f"chunk_for(D), segment_for ({new.SEGMENT_BYTES >> 20} MiB of scores), one cumulative sum for all scan groups",
                **alternate(run(old.lightning_attn), run(new.lightning_attn), calls),
            )
        ]


SESSION_4 = "688e523"  # main before the lightning scan / tile and msa remote / selection changes


def lightning_scan(calls: int, H: int = 8, D: int = 64, T: int = 65536, layer: int = 0, layers: int = 2):
    """lightning_attn forward against SESSION_4's: kernels_cpu's shape by default (decay of
    layer 0 of 2, as bench/workloads.py), the hybrid's 16K prefill chunk as lightning_scan_16k."""
    from attnbench.kernels.lightning import reference as new
    from attnbench.model.lightning import decay_rates

    old = old_module("kernels/lightning/reference.py", "old_lightning_reference_s4", rev=SESSION_4)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g) * s for s in (0.1, 0.1, 1.0))
    decay = decay_rates(H, layer, layers)
    with torch.no_grad():
        (oo, os_), (no, ns) = old.lightning_attn(q, k, v, decay), new.lightning_attn(q, k, v, decay)
        close(no, oo, "o"), close(ns, os_, "state")

        def run(f):
            return lambda: f(q, k, v, decay)

        return [
            dict(
                design="lightning",
                metric="speedup/lightning_op",
                unit="x",
                context_len=T,
                heads=H,
                head_dim=D,
                what="lightning_attn forward, B 1, contiguous inputs",
                old=f"{SESSION_4}: float64 cumulative-sum scan, segments across all heads (copied), o assembled by cat",
                new=f"decay-matrix scan (groups of {new.SCAN_GROUP} chunks), tiles that are contiguous slices, o written in place",
                **alternate(run(old.lightning_attn), run(new.lightning_attn), calls),
            )
        ]


SESSION_10 = "6fbed1e"  # main before msa's remote pass took -m into its score GEMM (2026-12-04)
MSA_CHANGES = {  # (msa's part: select or attn, old commit) -> what the old code did, what the new one does
    ("select", SESSION_4): (
        "token scores as (queries, keys) tiles, max over each row's blocks",
        "(keys, queries) tiles, max across rows (vectorised along the queries)",
    ),
    ("attn", SESSION_4): (
        "remote blocks folded in by an online softmax (running max, rescale per block)",
        "remote blocks added onto the local block's sums (index_add, rescale only past RESCALE_ABOVE)",
    ),
    ("attn", SESSION_10): (
        "scores minus the gathered reference max in a pass of their own, ones padded per block",
        "[q, -m] @ [k, 1]^T: the reference max inside the score GEMM; ones padded once per group",
    ),
}


def msa_op(calls: int, part: str = "attn", T: int = 65536, rev: str = SESSION_4):
    """msa_select or msa_attn (no grad) against rev's, at kernels_cpu's shape (B 1, H 8,
    Hkv 2, D 64, index dim 64, block 64, top 8)."""
    from attnbench.kernels.msa import reference as new

    old = old_module("kernels/msa/reference.py", f"old_msa_reference_{rev}", {"from ..": "from attnbench.kernels."}, rev=rev)
    B, H, G, D, Di, bs, k = 1, 8, 2, 64, 64, 64, 8
    g = torch.Generator().manual_seed(0)
    q, kk, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, G, T, D, generator=g), torch.randn(B, G, T, D, generator=g)
    iq, ik = torch.randn(B, G, T, Di, generator=g), torch.randn(B, T, Di, generator=g)
    how = MSA_CHANGES[part, rev]
    return _select_attn(
        calls,
        "msa",
        part,
        T,
        (old, new),
        lambda m: m.msa_select(iq, ik, bs, k),
        lambda m, idx: m.msa_attn(q, kk, v, idx, bs),
        "block 64, top 8",
        (f"{rev}: {how[0]}", how[1]),
    )


def _select_attn(calls, design, part, T, modules, select, attn, what, how):
    """One old/new case of a sparse design's part: ``select(m)`` and ``attn(m, idx)`` call reference
    module m (the selection checked equal, the attention close, before timing; no grad)."""
    old, new = modules
    with torch.no_grad():
        idx = select(new)
        if part == "select":
            assert torch.equal(idx, select(old)), "old and new selections differ"

            def run(m):
                return lambda: select(m)
        else:
            close(attn(new, idx), attn(old, idx), "o")

            def run(m):
                return lambda: attn(m, idx)

        return [
            dict(
                design=design,
                metric=f"speedup/{design}_{part}",
                unit="x",
                context_len=T,
                heads=8,
                head_dim=64,
                what=f"{design}_{part} forward (no grad), B 1, H 8, Hkv 2, {what}",
                old=how[0],
                new=how[1],
                **alternate(run(old), run(new), calls),
            )
        ]


DSA_BASE = "88eacfb"  # dsa's reference before its top-k keys and per-group gathers (issue 45, Q-tokens' cost)
DSA_CHANGES = {
    "select": ("topk, tie repair, then two sorts (id order, stable by score)", "one topk over int64 keys (score order, then lowest id)"),
    "attn": (
        "keys and values gathered as (query, token, group) rows from a copy of K per tile, einsum; dense only to 128K pairs",
        "one index_select per tile from (B G S, D) views, per-group GEMMs; dense masked SDPA to 1M pairs",
    ),
}


def dsa_op(calls: int, part: str, T: int):
    """dsa_select or dsa_attn (no grad) against DSA_BASE's, at kernels_cpu's shape (B 1, H 8, Hkv 2,
    D 64, 2 index heads of dim 64, msa's budget of 512 tokens a query)."""
    from attnbench.kernels.dsa import reference as new

    old = old_module("kernels/dsa/reference.py", "old_dsa_reference", {"from ..": "from attnbench.kernels."}, rev=DSA_BASE)
    old_msa = old_module("kernels/msa/reference.py", "old_msa_reference_dsa", {"from ..": "from attnbench.kernels."}, rev=DSA_BASE)
    setattr(old, "top_blocks", old_msa.top_blocks)  # the old top-k too (the old dsa module imports msa's current one)
    B, H, G, D, Di, k = 1, 8, 2, 64, 64, 512
    g = torch.Generator().manual_seed(0)
    q, kk, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, G, T, D, generator=g), torch.randn(B, G, T, D, generator=g)
    iq, iw, ik = torch.randn(B, G, T, Di, generator=g), torch.randn(B, T, G, generator=g), torch.randn(B, T, Di, generator=g)
    return _select_attn(
        calls,
        "dsa",
        part,
        T,
        (old, new),
        lambda m: m.dsa_select(iq, iw, ik, k),
        lambda m, idx: m.dsa_attn(q, kk, v, idx),
        "512 tokens a query",
        (f"{DSA_BASE}: {DSA_CHANGES[part][0]}", DSA_CHANGES[part][1]),
    )


def msa_select_tiles(calls: int, rows: int, keys: int, T: int = 32768):
    """msa_select with other score tiles (SELECT_ROWS x SELECT_KEYS) against the committed
    512 x 512, both the code at HEAD, at kernels_cpu's shape (index dim 64, block 64, top 8)."""
    B, G, Di, bs, k = 1, 2, 64, 64, 8
    old = old_module("kernels/msa/reference.py", "msa_reference_head", {"from ..": "from attnbench.kernels."}, rev="HEAD")
    new = old_module("kernels/msa/reference.py", f"msa_reference_{rows}_{keys}", {"from ..": "from attnbench.kernels."}, rev="HEAD")
    vars(new).update(SELECT_ROWS=rows, SELECT_KEYS=keys)  # the tiles msa_select reads from its module at each call
    g = torch.Generator().manual_seed(0)
    iq, ik = torch.randn(B, G, T, Di, generator=g), torch.randn(B, T, Di, generator=g)
    with torch.no_grad():
        assert torch.equal(new.msa_select(iq, ik, bs, k), old.msa_select(iq, ik, bs, k)), "selections differ"
        return [
            dict(
                design="msa",
                metric=f"speedup/msa_select_tiles_{rows}x{keys}",
                unit="x",
                context_len=T,
                heads=G,
                head_dim=Di,
                what="msa_select (no grad), B 1, 2 index heads, index dim 64, block 64, top 8",
                old=f"HEAD: score tiles of {old.SELECT_ROWS} rows x {old.SELECT_KEYS} keys",
                new=f"score tiles of {rows} rows x {keys} keys",
                **alternate(lambda: old.msa_select(iq, ik, bs, k), lambda: new.msa_select(iq, ik, bs, k), calls),
            )
        ]


def moe_forward(calls: int, T: int = 16384):
    """The MoE layer of the tiny backbone on one prefill chunk (no gradient)."""
    import types as _types

    from attnbench.model.moe import MoE
    from helpers import compose_cfg

    old = old_module("attnbench/model/moe.py", "old_moe")
    cfg = compose_cfg([])
    torch.manual_seed(0)
    moe = MoE(cfg.model)
    x = torch.randn(1, T, cfg.model.d_model)
    old_forward = _types.MethodType(old.MoE.forward, moe)
    with torch.no_grad():
        close(moe(x)[0], old_forward(x)[0], "y", rtol=0, atol=0)
        return [
            dict(
                design="-",
                metric="speedup/moe_forward",
                unit="x",
                context_len=T,
                what="MoE layer forward (E 4, top 2)",
                old=f"{BASE}: one argsort dispatch for all experts, cat, one index_add",
                new="per expert: nonzero, gather, in-place index_add",
                **alternate(lambda: old_forward(x), lambda: moe(x), calls),
            )
        ]


def _two_triangles(q, k, v, window: int, scale=None):
    """Sliding-window attention as two causal flash calls a block of ``window`` queries, merged by
    their log-sum-exps (a probe, issue 42 item 2; not shipped): the block's own keys (causal) and
    the window's keys before it (reversed in order, so that its band is causal too). Together
    they compute exactly the band; blocks without a full window before them use the reference."""
    from attnbench.kernels.sliding_window.reference import sliding_window_attn

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    T, S, W, rep = q.shape[2], k.shape[2], window, q.shape[1] // k.shape[1]
    off = S - T
    ta = min(T, max(0, W - 1 - off))
    n = (T - ta) // W
    parts = [sliding_window_attn(q[:, :, :ta], k[:, :, : off + ta], v[:, :, : off + ta], W, scale=scale)] if ta else []
    for b in range(n):
        t0 = ta + b * W
        p0 = off + t0
        qb = q[:, :, t0 : t0 + W]
        o_d, l_d = flash(
            qb, k[:, :, p0 : p0 + W].repeat_interleave(rep, 1), v[:, :, p0 : p0 + W].repeat_interleave(rep, 1), 0.0, True, scale=scale
        )
        kl, vl = (x[:, :, p0 - W + 1 : p0].flip(2).repeat_interleave(rep, 1) for x in (k, v))
        o_l, l_l = flash(qb[:, :, : W - 1].flip(2), kl, vl, 0.0, True, scale=scale)
        o_l, l_l, l_0 = o_l.flip(2), l_l.flip(2), l_d[:, :, : W - 1]
        lse = torch.logaddexp(l_0, l_l)
        o = o_d.clone()
        o[:, :, : W - 1] = o_d[:, :, : W - 1] * torch.exp(l_0 - lse)[..., None] + o_l * torch.exp(l_l - lse)[..., None]
        parts.append(o)
    if ta + n * W < T:
        parts.append(sliding_window_attn(q[:, :, ta + n * W :], k, v, W, scale=scale))
    return torch.cat(parts, 2)


def sliding_window_op(calls: int, variant: str = "two_triangles", T: int = 65536, window: int = 1024):
    """sliding_window_attn at kernels_cpu's 64K shape (B 1, H 8, Hkv 2, D 64) against a variant:
    two_triangles (_two_triangles) or block64 (query blocks of 64 instead of window / 8 = 128)."""
    from attnbench.kernels.sliding_window import reference as ref

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, T, 64, generator=g)
    k, v = (torch.randn(1, 2, T, 64, generator=g) for _ in range(2))

    def block64(q, k, v, w):
        saved, ref.query_block = ref.query_block, lambda _w: 64
        try:
            return ref.sliding_window_attn(q, k, v, w)
        finally:
            ref.query_block = saved

    new_f = {"two_triangles": _two_triangles, "block64": block64}[variant]
    with torch.no_grad():
        close(new_f(q, k, v, window), ref.sliding_window_attn(q, k, v, window), "o")
        return [
            dict(
                design="sliding_window",
                metric="speedup/sliding_window_op",
                unit="x",
                context_len=T,
                heads=8,
                kv_heads=2,
                head_dim=64,
                window=window,
                what="sliding_window_attn forward, B 1, fp32, one thread",
                old="the reference: SDPA with a band mask a block of window / 8 = 128 queries",
                new={
                    "two_triangles": "two causal flash calls a block of window queries, merged by log-sum-exp",
                    "block64": "the reference with blocks of 64 queries",
                }[variant],
                **alternate(lambda: ref.sliding_window_attn(q, k, v, window), lambda: new_f(q, k, v, window), calls),
            )
        ]


def lightning_chunk(calls: int, chunk: int = 64, H: int = 8, D: int = 64, T: int = 65536):
    """lightning_attn at kernels_cpu's 64K shape with its own chunk (chunk_for(D) = 128 at D 64) against ``chunk``."""
    from attnbench.kernels.lightning import reference as ref
    from attnbench.model.lightning import decay_rates

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.silu(torch.randn(1, H, T, D, generator=g)) for _ in range(3))  # as lightning_op's
    decay = decay_rates(H, 0, 8)
    with torch.no_grad():
        (a, sa), (b, sb) = ref.lightning_attn(q, k, v, decay), ref.lightning_attn(q, k, v, decay, chunk=chunk)
        close(b, a, "o"), close(sb, sa, "state")
        return [
            dict(
                design="lightning",
                metric="speedup/lightning_op",
                unit="x",
                context_len=T,
                heads=H,
                head_dim=D,
                what="lightning_attn forward, B 1, fp32, one thread",
                old=f"chunk_for({D}) = {ref.chunk_for(D)}",
                new=f"chunk {chunk} (the cost model's fused chunk: its least FLOPs)",
                **alternate(lambda: ref.lightning_attn(q, k, v, decay), lambda: ref.lightning_attn(q, k, v, decay, chunk=chunk), calls),
            )
        ]
