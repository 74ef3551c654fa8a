"""The cost formula of each registry design's op (and its parts, such as msa_select), as
bench/costmodel.py describes them: ``fn(phase, n, arch, batch, element bytes, impl) -> Cost``.
Each spec names its own (``Spec.costs``); the cost model reads them from the specs, so this
module imports no spec and no registry: the imports run specs -> op_costs, costmodel -> specs."""

from __future__ import annotations

import math

import numpy as np

from .cost_terms import F32, Cost, attention, causal_pairs, kv_reads, sum_window
from attnbench.bench.presets import Arch

FUSED_TILE = 128  # query/key tile of a fused attention kernel (diagonal tiles computed whole)
FUSED_CHUNK = 64  # lightning chunk of a fused kernel (Lightning Attention-2)


def softmax_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    H, G, D = a.n_heads, a.n_kv_heads, a.head_dim
    c, ref = Cost(), impl == "reference"
    if phase == "prefill":
        return attention(
            c,
            "attention",
            B,
            H,
            D,
            causal_pairs(n, FUSED_TILE),
            e * B * n * D * (2 * H + 2 * G),
            2 if ref else 1,
            fresh=B * H * n * D * e if ref else 0,
        )
    # the reference's decode stacks a KV group's query heads as its queries: each KV head read once
    return attention(
        c, "attention", B, H, D, n, e * B * 2 * H * D, 2 if ref else 1, kv=kv_reads(B, H, G, n, D, e, False), kind="matvec" if ref else "mm"
    )


def sliding_window_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    H, G, D, w = a.n_heads, a.n_kv_heads, a.head_dim, a.window
    c, ref = Cost(), impl == "reference"
    if phase == "decode":
        held = min(n, w)
        return attention(
            c,
            "attention",
            B,
            H,
            D,
            held,
            e * B * 2 * H * D,
            17 if ref else 1,
            kv=kv_reads(B, H, G, held, D, e, ref),
            kind="matvec" if ref else "mm",
        )
    if not ref:
        return attention(c, "attention", B, H, D, sum_window(n, w) + n * FUSED_TILE / 2, e * B * n * D * (2 * H + 2 * G), 1)
    from attnbench.kernels.sliding_window.reference import query_block

    step = query_block(w)
    t0 = np.arange(0, n, step)
    t1 = np.minimum(n, t0 + step)
    keys = t1 - np.maximum(0, t0 - w + 1)  # keys each block of queries reads (band mask, no skipping)
    pairs = float(((t1 - t0) * keys).sum())
    out = B * H * n * D * e  # torch.cat of the block outputs
    attention(c, "attention", B, H, D, pairs, e * B * (2 * H * n * D + 2 * G * D * keys.sum()) + 2 * out, 15 * len(t0) + 2, fresh=out)
    return c


def lightning_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    """Chunked lightning (intra-chunk masked decay + inter-chunk fp32 state); decode = T of 1."""
    BH, Dk, Dv = B * a.n_heads, a.head_dim, a.head_dim
    T = n if phase == "prefill" else 1
    state = BH * Dk * Dv * F32
    c = Cost()
    if impl == "fused":
        C = min(FUSED_CHUNK, T)
        flops = 2 * BH * T * (C * (Dk + Dv) + 2 * Dk * Dv)
        io = BH * T * (2 * Dk + 2 * Dv) * e + (2 * state if phase == "decode" else state)
        return c.add("lightning", flops, io, 1)
    from attnbench.kernels.lightning.reference import chunk_for, tile_for

    chunk = chunk_for(Dk)
    pairs, tokens = tile_for(BH, T, chunk)  # the reference runs tiles of `pairs` (batch, head) pairs by `tokens`
    for P, p_times in ((pairs, BH // pairs), (BH % pairs, 1)):
        for L, t_times in ((tokens, T // tokens), (T % tokens, 1)):
            if P and p_times and L and t_times:
                c = c + _lightning_tile(L, P, Dk, Dv, e, chunk).scaled(p_times * t_times)
    return c.add("glue", 0, 0, 40, kind="vec")  # slicing, reshapes, masks: ~70 torch ops a call in all


def _lightning_tile(L, P, Dk, Dv, e, chunk) -> Cost:
    """One tile of the reference: P (batch, head) pairs by L tokens."""
    from attnbench.kernels.lightning.reference import SCAN_GROUP

    c = Cost()
    C = min(chunk, L)
    N = L // C
    pieces = [(N, C)] + ([(1, L - N * C)] if L > N * C else [])  # full chunks, then the ragged tail
    for N_, C_ in pieces:
        tok = N_ * C_
        scores = P * tok * C_ * F32  # (P, N, C, C): q k^T, then times the decay mask
        qd, vd, st = P * tok * Dk * F32, P * tok * Dv * F32, N_ * P * Dk * Dv * F32
        g = min(N_, SCAN_GROUP)
        groups = -(-N_ // g)
        c.add("q k^T", 2 * P * tok * C_ * Dk, 2 * qd + scores, 1, kind="small", alloc=scores, alloc_each=scores)
        c.add("decay mask", 0, 2 * scores, 33, kind="vec", alloc=scores, alloc_each=scores)  # with the decay factors' ops and views
        c.add("scores v", 2 * P * tok * C_ * Dv, scores + 2 * vd, 1, kind="small", alloc=vd, alloc_each=vd)
        c.add("k to chunk end", 0, 2 * qd, 4, kind="vec", alloc=qd, alloc_each=qd)
        c.add("chunk states k^T v", 2 * P * tok * Dk * Dv, qd + vd + st, 1, kind="small", alloc=st, alloc_each=st)
        # the state scan: one (g, g) decay product inside the groups, the float64 level across
        # them (a few passes over one state a group), and the entering states added to S_in
        c.add("state scan", 2 * N_ * g * P * Dk * Dv, 3 * st + 8 * groups * st / N_, 40, kind="small", alloc=2 * st, alloc_each=st)
        c.add("q from chunk start", 0, 2 * qd, 4, kind="vec", alloc=qd, alloc_each=qd)
        c.add("q S_in, added onto o", 2 * P * tok * Dk * Dv, qd + st + 2 * vd, 1, kind="small")
    if e != F32:  # .float() copies in, .to(dtype) out
        c.add("casts", 0, P * L * (2 * Dk + 2 * Dv) * (e + F32), 4, kind="vec")
    return c


def msa_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    return msa_select_cost(phase, n, a, B, e, impl) + msa_attn_cost(phase, n, a, B, e, impl)


def selected_pairs(T: int, S: int, bs: int, k: int) -> float:
    """(query, selected block) pairs: the query at position p has min(k, p // bs + 1) blocks."""

    def upto(P: int) -> float:  # sum over p < P of min(k, p // bs + 1)
        m, rem = divmod(P, bs)
        whole = m * (m + 1) / 2 if m <= k else k * (k + 1) / 2 + (m - k) * k
        return bs * whole + rem * min(k, m + 1)

    return upto(S) - upto(S - T)


def msa_select_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    G, Di, bs = a.index_heads or a.n_kv_heads, a.index_dim, a.block_size
    T, S = (n, n) if phase == "prefill" else (1, n)
    c = Cost()
    if impl == "fused":  # token scores on chip, max-pooled there; block scores written, top-k reads them
        keys = causal_pairs(T) if phase == "prefill" else S
        return c.add("index scores", 2 * B * G * Di * keys, e * B * (G * T * Di + S * Di) + 2 * F32 * B * G * keys / bs, 2)
    from attnbench.kernels.msa.reference import SELECT_KEYS, SELECT_ROWS

    q_step = max(16, SELECT_ROWS // (B * G))
    k_step = max(bs, SELECT_KEYS // bs * bs)
    t0 = np.arange(0, T, q_step)
    t1 = np.minimum(T, t0 + q_step)
    n_cand = (S - T + t1 - 1) // bs  # candidate (complete, earlier) blocks of each query tile
    keys, rows = n_cand * bs, t1 - t0
    tiles = float(np.where(n_cand > 0, np.ceil(keys / k_step), 0).sum())
    score_el = float((rows * keys).sum()) * B * G  # token scores, computed tile by tile in fp32
    block_el = float((rows * n_cand).sum()) * B * G  # block scores
    # torch ops (views included): 6 a key tile (slices, matmul, view, amax into a slice), ~35 a query tile
    c.add(
        "index scores",
        2 * Di * score_el,
        2 * F32 * score_el + e * B * Di * float(keys.sum()),
        6 * tiles,
        kind="matvec" if T == 1 else "small",
    )
    # the block scores transposed to (rows, blocks), topk, then the tie check (>= the k-th, sum)
    c.add("top-k", 0, 9 * F32 * block_el, 35 * len(t0) + 10, kind="vec")
    return c


def msa_attn_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    H, G, D, bs, k = a.n_heads, a.n_kv_heads, a.head_dim, a.block_size, a.top_k
    T, S = (n, n) if phase == "prefill" else (1, n)
    pairs = B * G * selected_pairs(T, S, bs, k)  # (query, group, block) triples
    c, Hg = Cost(), H // G
    if impl == "fused":
        if phase == "decode":  # query-outer: each group reads its selected blocks
            io = e * (2 * B * H * D + 2 * D * bs * pairs)
        else:  # KV-outer (the MSA paper's kernel): each KV block read once, the queries that chose it
            # gathered (read) and their partial outputs (fp32, + max and sum) written, then merged
            io = e * 2 * B * G * S * D + pairs * Hg * (e * D + 2 * (F32 * D + 8)) + e * 2 * B * H * T * D
        return attention(c, "sparse attention", 1, Hg, D, pairs * bs, io, 1 if phase == "decode" else 2)
    from attnbench.kernels.msa.reference import DENSE_LIMIT, QUERY_CHUNK

    if T * S <= DENSE_LIMIT:  # token mask + dense masked SDPA over all S keys (no causal skipping)
        nb = -(-S // bs)
        masks = B * G * T * (nb + 1) + 4 * B * G * T * S + B * H * T * S  # bools: scatter, expand, causal, per head
        c.add("selection mask", 0, 2 * masks, 23, kind="vec")
        return attention(
            c,
            "attention",
            B,
            H,
            D,
            T * S,
            e * B * 2 * H * T * D + B * H * T * S,
            2,
            kv=kv_reads(B, H, G, S, D, e, True),
            kind="matvec" if T == 1 else "mm",
        )
    # _sparse: _local (each query's own block, causal, all query blocks of a chunk in one GEMM
    # pair) starts an online softmax; _remote folds in the other selected blocks block-major, one
    # Python pass per (batch, group) and one GEMM pair per key block that some query selected.
    chunks = math.ceil(T / QUERY_CHUNK)
    rows = B * G * (T + chunks * bs)  # query rows of the local pass (padded to whole blocks)
    grid = rows * Hg * bs * F32  # its (rows, Hg, bs) fp32 scores / probabilities
    acc = B * H * T * (D + 2) * F32  # running o, m, l
    c.add(
        "local block",
        4 * Hg * D * bs * rows,
        6 * grid + 3 * acc + e * B * (H * T * D + 2 * G * S * D),
        25 * chunks,
        kind="small",
        alloc=3 * grid,
        alloc_each=grid / chunks,
    )
    remote = max(pairs - B * G * T, 0.0)  # (query, earlier block) pairs
    runs = B * G
    blocks = runs * min(max(S // bs - 1, 0), remote / runs)  # key blocks some query selected
    # per pair: its query rows and reference gathered, its scores (6 passes: minus the reference,
    # max, exp, sum), p v and the sums added onto o and l (index_add)
    c.add(
        "remote blocks",
        4 * Hg * D * bs * remote,
        remote * Hg * (6 * bs + 5 * D + 6) * F32 + e * 2 * B * G * S * D,
        17 * blocks + 25 * runs,
        kind="small",
    )
    c.add("softmax (exp)", rows * Hg * bs + remote * Hg * (bs + 1), 0, 0, kind="exp")
    c.add("pair sort", 0, 10 * 8 * (remote + B * G * T), 0, kind="vec")
    c.add("normalise", 0, 2 * acc + 2 * B * H * T * D * F32, 3, kind="vec")
    return c


def dsa_cost(phase, n, a: Arch, B, e, impl) -> Cost:
    """DeepSeek sparse attention over MLA (presets only, fused): an indexer over every past token
    (index_heads x index_dim), then MLA over the top index_topk tokens. Decode uses the absorbed
    form (scores against the 576-d latent+rope, values from the 512-d latent); prefill the
    uncompressed heads (qk_nope + rope, v)."""
    T, S = (n, n) if phase == "prefill" else (1, n)
    Hi, Di, topk, H = a.index_heads, a.index_dim, a.index_topk, a.n_heads
    keys_idx = causal_pairs(T) if phase == "prefill" else S
    c = Cost().add("indexer", 2 * B * Hi * Di * keys_idx, e * B * (T * Hi * Di + S * Di), 2)
    attended = sum_window(S, topk) - sum_window(S - T, topk)  # query at p attends to min(p + 1, topk) tokens
    if phase == "decode":
        per_pair = 2 * H * (a.mla_latent + a.mla_rope) + 2 * H * a.mla_latent
        kv = e * B * attended * (a.mla_latent + a.mla_rope)
    else:
        per_pair = 2 * H * (a.mla_qk_nope + a.mla_rope) + 2 * H * a.mla_v
        kv = e * B * S * (a.mla_latent + a.mla_rope)
    c.add("sparse MLA", B * per_pair * attended, kv + e * B * T * H * (a.mla_qk_nope + a.mla_rope + a.mla_v), 1)
    return c.add("sparse MLA (exp)", B * H * attended, 0, 0, kind="exp")
