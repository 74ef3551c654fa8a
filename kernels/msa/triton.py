"""MiniMax Sparse Attention in Triton: block selection, and block-sparse attention fwd + bwd.

Selection (``_select``, grid (T / BLOCK_T, B * G)): a program holds BLOCK_T index queries of
one group and walks the key blocks before their local blocks; per block one product
(BLOCK_T x bs) is max-pooled (or mean-pooled) to a block score and folded into a running
top-(k-1) kept in registers (replace the row's current minimum when beaten; ties keep the
lower block id, as the reference's stable order does). Neither the T x T token scores nor the
T x (T / bs) block scores ever reach memory. The (k-1) survivors are sorted by torch (score
descending, lower id first among equals) and the local block goes first, as in the reference.

Attention (``_fwd``, grid (T, B * G)): a program is one query token and all H / G heads of
its KV group (they share the selection; the heads are the rows of the products, padded to
16), walking its top_k selected blocks with an online softmax; causality inside the local
block, -1 pads masked. Backward: ``_bwd_dq`` repeats that walk; ``_bwd_dkdv`` (grid
(S / bs, B * G)) is block-major: for each key block the (query) list of everyone who chose it
(a CSR index built with torch.argsort) is walked in tiles of BLOCK_P queries, for each head
of the group, so dk and dv are summed in registers (no atomics, deterministic).

Queries are the last T of S keys (S >= T). block_idx rows must hold distinct blocks.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..triton_common import check_device, pow2, store_dtype, upcast

LOG2E = 1.4426950408889634
BLOCK_T = 64  # queries per selection program
BLOCK_P = 32  # queries per tile in the dk/dv walk


@triton.jit
def _select(
    IQ,
    IK,
    VALS,
    IDX,
    T,
    S,
    OFFSET,
    G: tl.constexpr,
    DI: tl.constexpr,
    BLOCK_DI: tl.constexpr,
    BS: tl.constexpr,
    BS_PAD: tl.constexpr,
    KSEL: tl.constexpr,
    KPAD: tl.constexpr,
    BLOCK_T: tl.constexpr,
    MEAN: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    bg = tl.program_id(1).to(tl.int64)  # b * G + g; 64-bit offsets
    b = bg // G
    t = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    local = (t + OFFSET) // BS  # each query's own block
    d = tl.arange(0, BLOCK_DI)
    iq = tl.load(IQ + (bg * T + t[:, None]) * DI + d[None, :], mask=(t[:, None] < T) & (d[None, :] < DI), other=0.0)
    if UPCAST:
        iq = iq.to(tl.float32)
    slot = tl.arange(0, KPAD)
    # slots past KSEL hold +inf so they are never the minimum, i.e. never replaced
    best = tl.where(slot[None, :] < KSEL, float("-inf"), float("inf")) + tl.zeros([BLOCK_T, KPAD], tl.float32)
    bidx = tl.full([BLOCK_T, KPAD], -1, tl.int32)
    lane = tl.arange(0, BS_PAD)
    n_cand = (tl.minimum(pid * BLOCK_T + BLOCK_T, T) - 1 + OFFSET) // BS  # blocks before the last query's
    for c in range(0, n_cand):
        j = c * BS + lane
        ik = tl.load(IK + (b * S + j[:, None]) * DI + d[None, :], mask=(lane[:, None] < BS) & (d[None, :] < DI), other=0.0)
        if UPCAST:
            ik = ik.to(tl.float32)
        sc = tl.dot(iq, tl.trans(ik), input_precision="ieee")  # (BLOCK_T, BS_PAD)
        if MEAN:
            score = tl.sum(tl.where(lane[None, :] < BS, sc, 0.0), 1) / BS
        else:
            score = tl.max(tl.where(lane[None, :] < BS, sc, float("-inf")), 1)
        worst = tl.min(best, 1)
        # evict the worst slot; among equal worst scores the highest block id (ties keep the
        # lowest ids, as a stable sort does); a block only replaces a strictly lower score
        at = tl.argmax(tl.where(best == worst[:, None], bidx, -2), 1)
        take = (c < local) & (score > worst)
        hit = (slot[None, :] == at[:, None]) & take[:, None]
        best = tl.where(hit, score[:, None], best)
        bidx = tl.where(hit, c, bidx)
    out = (bg * T + t[:, None]) * KSEL + slot[None, :]
    keep = (t[:, None] < T) & (slot[None, :] < KSEL)
    tl.store(VALS + out, best, mask=keep)
    tl.store(IDX + out, bidx, mask=keep)


@triton.jit
def _fwd(
    Q,
    K,
    V,
    BIDX,
    O,
    LSE,
    qk_scale,
    T,
    S,
    OFFSET,
    H: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BS: tl.constexpr,
    BS_PAD: tl.constexpr,
    TOPK: tl.constexpr,
    UPCAST: tl.constexpr,
):
    t = tl.program_id(0)
    bg = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    b = bg // G
    HG: tl.constexpr = H // G
    r = tl.arange(0, BLOCK_H)
    rows = (b * H + (bg % G) * HG + r) * T + t  # (BLOCK_H,) row of each head of the group
    d = tl.arange(0, BLOCK_D)
    q_mask = (r[:, None] < HG) & (d[None, :] < D)
    q = tl.load(Q + rows[:, None] * D + d[None, :], mask=q_mask, other=0.0)  # (BLOCK_H, BLOCK_D)
    if UPCAST:
        q = q.to(tl.float32)
    p = t + OFFSET
    lane = tl.arange(0, BS_PAD)
    m_i = tl.full([BLOCK_H], -1e30, tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for i in range(TOPK):
        blk = tl.load(BIDX + (bg * T + t) * TOPK + i)  # -1: padding
        j = blk * BS + lane
        seen = (lane < BS) & (j >= 0) & (j <= p)  # a -1 pad gives j < 0; j <= p < S
        kv_mask = seen[:, None] & (d[None, :] < D)
        k = tl.load(K + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)  # (BS_PAD, BLOCK_D)
        v = tl.load(V + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # (BLOCK_H, BS_PAD), base 2
        s = tl.where(seen[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        pr = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(pr, 1)
        acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    l_i = tl.where(r < HG, l_i, 1.0)
    tl.store(O + rows[:, None] * D + d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty), mask=q_mask)
    tl.store(LSE + rows, m_i + tl.log2(l_i), mask=r < HG)


@triton.jit
def _bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    BIDX,
    DQ,
    qk_scale,
    scale,
    T,
    S,
    OFFSET,
    H: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BS: tl.constexpr,
    BS_PAD: tl.constexpr,
    TOPK: tl.constexpr,
    UPCAST: tl.constexpr,
):
    t = tl.program_id(0)
    bg = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    b = bg // G
    HG: tl.constexpr = H // G
    r = tl.arange(0, BLOCK_H)
    rows = (b * H + (bg % G) * HG + r) * T + t
    d = tl.arange(0, BLOCK_D)
    q_mask = (r[:, None] < HG) & (d[None, :] < D)
    q = tl.load(Q + rows[:, None] * D + d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + rows[:, None] * D + d[None, :], mask=q_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse = tl.load(LSE + rows, mask=r < HG, other=0.0)
    delta = tl.load(DELTA + rows, mask=r < HG, other=0.0)
    p = t + OFFSET
    lane = tl.arange(0, BS_PAD)
    dq = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for i in range(TOPK):
        blk = tl.load(BIDX + (bg * T + t) * TOPK + i)
        j = blk * BS + lane
        seen = (lane < BS) & (j >= 0) & (j <= p)
        kv_mask = seen[:, None] & (d[None, :] < D)
        k = tl.load(K + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        pr = tl.where(seen[None, :] & (r[:, None] < HG), tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = pr * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(DQ + rows[:, None] * D + d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


@triton.jit
def _bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    PAIR_T,
    PTR,
    DK,
    DV,
    qk_scale,
    scale,
    T,
    S,
    OFFSET,
    NB,
    H: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BS: tl.constexpr,
    BS_PAD: tl.constexpr,
    BLOCK_P: tl.constexpr,
    UPCAST: tl.constexpr,
):
    n = tl.program_id(0)
    bg = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    b = bg // G
    HG: tl.constexpr = H // G
    lane = tl.arange(0, BS_PAD)
    j = n * BS + lane
    d = tl.arange(0, BLOCK_D)
    kv_mask = ((lane < BS) & (j < S))[:, None] & (d[None, :] < D)
    k = tl.load(K + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)  # (BS_PAD, BLOCK_D)
    v = tl.load(V + (bg * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BS_PAD, BLOCK_D], tl.float32)
    dv = tl.zeros([BS_PAD, BLOCK_D], tl.float32)
    start = tl.load(PTR + bg * NB + n)
    end = tl.load(PTR + bg * NB + n + 1)
    for c0 in range(start, end, BLOCK_P):
        e = c0 + tl.arange(0, BLOCK_P)
        live = e < end
        t = tl.load(PAIR_T + e, mask=live, other=0)  # queries that chose this block
        seen = live[:, None] & (lane[None, :] < BS) & (j[None, :] <= t[:, None] + OFFSET)
        for hh in range(HG):
            rows = (b * H + (bg % G) * HG + hh) * T + t
            q_mask = live[:, None] & (d[None, :] < D)
            q = tl.load(Q + rows[:, None] * D + d[None, :], mask=q_mask, other=0.0)  # (BLOCK_P, BLOCK_D)
            do = tl.load(DO + rows[:, None] * D + d[None, :], mask=q_mask, other=0.0)
            if UPCAST:
                q = q.to(tl.float32)
                do = do.to(tl.float32)
            lse = tl.load(LSE + rows, mask=live, other=0.0)
            delta = tl.load(DELTA + rows, mask=live, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # (BLOCK_P, BS_PAD)
            pr = tl.where(seen, tl.exp2(s - lse[:, None]), 0.0)
            dv += tl.dot(tl.trans(pr.to(do.dtype)), do, input_precision="ieee")
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            ds = pr * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    tl.store(DK + (bg * S + j[:, None]) * D + d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + (bg * S + j[:, None]) * D + d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


def msa_select(index_q, index_k, block_size: int, top_k: int, *, pool: str = "max"):
    """index_q (B, G, T, Di); index_k (B, S, Di), S >= T -> block_idx int64 (B, G, T, top_k)."""
    check_device(index_q, index_k)
    if pool not in ("max", "mean"):
        raise ValueError(f"pool must be 'max' or 'mean'; got {pool!r}")
    B, G, T, Di = index_q.shape
    S = index_k.shape[1]
    pos = torch.arange(S - T, S, device=index_q.device)
    out = torch.full((B, G, T, top_k), -1, dtype=torch.int64, device=index_q.device)
    out[..., 0] = pos // block_size
    if top_k == 1:
        return out
    iq = index_q.detach().contiguous()
    ik = index_k.detach().to(iq.dtype).contiguous()
    ksel = top_k - 1
    vals = torch.empty(B, G, T, ksel, dtype=torch.float32, device=iq.device)
    idx = torch.empty(B, G, T, ksel, dtype=torch.int32, device=iq.device)
    _select[(triton.cdiv(T, BLOCK_T), B * G)](
        iq,
        ik,
        vals,
        idx,
        T,
        S,
        S - T,
        G=G,
        DI=Di,
        BLOCK_DI=pow2(Di),
        BS=block_size,
        BS_PAD=pow2(block_size),
        KSEL=ksel,
        KPAD=pow2(ksel, least=2),
        BLOCK_T=BLOCK_T,
        MEAN=pool == "mean",
        UPCAST=upcast(iq.dtype),
    )
    idx, order = idx.long().sort(dim=-1)  # block id order, then a stable sort by score: ties to the lowest id
    vals, order = vals.gather(-1, order).sort(dim=-1, descending=True, stable=True)
    idx = idx.gather(-1, order)
    out[..., 1:] = idx.masked_fill(vals == float("-inf"), -1)
    return out


def _meta(q, k, block_size):
    """The launch constants the attention kernels share (shapes, tiles, the dtype rule)."""
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    return dict(T=T, S=S, OFFSET=S - T, H=H, G=G, D=D, BLOCK_D=pow2(D), BS=block_size, BS_PAD=pow2(block_size), UPCAST=upcast(q.dtype))


def _forward(q, k, v, block_idx, block_size, scale):
    B, H, T, D = q.shape
    G = k.shape[1]
    o = torch.empty(q.shape, dtype=store_dtype(q.dtype), device=q.device)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
    _fwd[(T, B * G)](q, k, v, block_idx, o, lse, scale * LOG2E, **_meta(q, k, block_size), BLOCK_H=pow2(H // G), TOPK=block_idx.shape[-1])
    return o.to(q.dtype), lse


def _pairs(block_idx, n_blocks: int):
    """CSR of the (query, block) pairs by block: query indices (P,), offsets (B * G * NB + 1,)."""
    B, G, T, K = block_idx.shape
    flat = block_idx.reshape(B * G, T * K)
    key = torch.where(flat >= 0, flat + torch.arange(B * G, device=flat.device)[:, None] * n_blocks, B * G * n_blocks)
    key, order = key.reshape(-1).sort(stable=True)
    pair_t = (order % (T * K)) // K  # query index of each pair
    ptr = torch.searchsorted(key, torch.arange(B * G * n_blocks + 1, device=flat.device))
    return pair_t.contiguous(), ptr.contiguous()


def _backward(q, k, v, block_idx, block_size, scale, o, lse, do):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    meta = _meta(q, k, block_size)
    delta = (o.float() * do.float()).sum(-1)  # (B, H, T)
    sd = store_dtype(q.dtype)
    dq = torch.empty(q.shape, dtype=sd, device=q.device)
    dk = torch.empty(k.shape, dtype=sd, device=q.device)
    dv = torch.empty(v.shape, dtype=sd, device=q.device)
    _bwd_dq[(T, B * G)](
        q, k, v, do, lse, delta, block_idx, dq, scale * LOG2E, scale, **meta, BLOCK_H=pow2(H // G), TOPK=block_idx.shape[-1]
    )
    nb = triton.cdiv(S, block_size)
    pair_t, ptr = _pairs(block_idx, nb)
    _bwd_dkdv[(nb, B * G)](q, k, v, do, lse, delta, pair_t, ptr, dk, dv, scale * LOG2E, scale, NB=nb, **meta, BLOCK_P=BLOCK_P)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _MSAAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, block_idx, block_size, scale):
        o, lse = _forward(q, k, v, block_idx, block_size, scale)
        ctx.save_for_backward(q, k, v, block_idx, o, lse)
        ctx.block_size, ctx.scale = block_size, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, block_idx, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, block_idx, ctx.block_size, ctx.scale, o, lse, do.contiguous())
        return dq, dk, dv, None, None, None


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    check_device(q, k, v, block_idx)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _MSAAttn.apply(q.contiguous(), k.contiguous(), v.contiguous(), block_idx.contiguous(), int(block_size), scale)
