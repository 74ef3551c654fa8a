"""Causal (optionally sliding-window) GQA flash attention in Triton: forward and backward.

One kernel family serves two ops: ``sliding_window_attn`` (query t sees keys t - w < j <= t)
and, with no window, the like-for-like Triton flash baseline of ``softmax_attn``
(kernels/softmax/triton.py). Tiles wholly outside the window are never visited, so time is
O(T * window * D) and memory O(T * D).

  forward   grid (T / BM, B * H): online softmax over the key tiles that meet the query tile's
            window; writes o and the row log-sum-exp (base 2) for the backward.
  backward  delta = rowsum(o * do) (torch); ``_bwd_dkdv`` grid (S / BN, B * Hkv) walks, for
            each key tile, the query tiles of every head of its KV group that can see it
            (GQA sums stay in registers: no atomics, deterministic); ``_bwd_dq`` grid
            (T / BM, B * H) walks the key tiles again.

Queries are the last T of S keys (S >= T, chunked prefill): absolute position p = t + S - T.
Head dims that are not a power of two are padded (masked) to one.

Why not torch.nn.attention.flex_attention with a sliding-window block mask? On CPU (torch
2.13, experiments/kernels/README.md): compiled FlexAttention runs the forward only (no CPU
backward), slower than the plain-torch reference at every T measured and out of memory at
64K; eager FlexAttention materialises the full T x S scores. On CUDA it has a backward and is
a fair alternative: exp kernels_gpu times it beside this kernel, forward and backward, and
this op should route to it if it is as fast.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..triton_common import check_device, pow2, store_dtype, upcast

LOG2E = 1.4426950408889634


def _tiles(D: int, backward: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for head dim D."""
    if backward:
        return 64, 64, (8 if D > 64 else 4), 2
    return 128, 64, (8 if D > 64 else 4), 3


@triton.jit
def _fwd(
    Q,
    K,
    V,
    O,
    LSE,
    qk_scale,
    T,
    S,
    OFFSET,
    WINDOW,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # b * H + h; 64-bit offsets
    b = bh // H
    hk = (bh % H) // (H // HKV)
    t = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    q_mask = (t[:, None] < T) & (d[None, :] < D)
    q = tl.load(Q + (bh * T + t[:, None]) * D + d[None, :], mask=q_mask, other=0.0)  # (BM, BD)
    if UPCAST:
        q = q.to(tl.float32)
    p = t + OFFSET  # absolute positions of the queries
    p_first = pid_m * BLOCK_M + OFFSET
    p_last = tl.minimum(p_first + BLOCK_M, T + OFFSET) - 1
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(p_first - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
    hi = p_last + 1
    kv = (b * HKV + hk) * S
    m_i = tl.full([BLOCK_M], -1e30, tl.float32)  # finite: a fully masked tile gives exp2(-inf) = 0, not NaN
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        j = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (j[:, None] < S) & (d[None, :] < D)
        k = tl.load(K + (kv + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)  # (BN, BD)
        v = tl.load(V + (kv + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # (BM, BN), base-2 logits
        seen = j[None, :] <= p[:, None]
        if HAS_WINDOW:
            seen = seen & (j[None, :] > p[:, None] - WINDOW)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        pr = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(pr, 1)
        acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    l_i = tl.where(t < T, l_i, 1.0)  # padding rows past T may see no key at all
    acc = acc / l_i[:, None]
    tl.store(O + (bh * T + t[:, None]) * D + d[None, :], acc.to(O.dtype.element_ty), mask=q_mask)
    tl.store(LSE + bh * T + t, m_i + tl.log2(l_i), mask=t < T)


@triton.jit
def _bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    qk_scale,
    scale,
    T,
    S,
    OFFSET,
    WINDOW,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1).to(tl.int64)  # b * HKV + hk; 64-bit offsets
    b = bhk // HKV
    hk = bhk % HKV
    HG: tl.constexpr = H // HKV
    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    kv_mask = (j[:, None] < S) & (d[None, :] < D)
    k = tl.load(K + (bhk * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)  # (BN, BD)
    v = tl.load(V + (bhk * S + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    j_first = pid_n * BLOCK_N
    j_last = tl.minimum(j_first + BLOCK_N, S) - 1
    lo = tl.maximum(j_first - OFFSET, 0) // BLOCK_M * BLOCK_M  # first query that can see j_first
    hi = T
    if HAS_WINDOW:
        hi = tl.minimum(T, j_last + WINDOW - OFFSET)  # queries p <= j_last + w - 1
    for hh in range(HG):
        bh = b * H + hk * HG + hh
        for m0 in range(lo, hi, BLOCK_M):
            t = m0 + tl.arange(0, BLOCK_M)
            p = t + OFFSET
            q_mask = (t[:, None] < T) & (d[None, :] < D)
            q = tl.load(Q + (bh * T + t[:, None]) * D + d[None, :], mask=q_mask, other=0.0)  # (BM, BD)
            do = tl.load(DO + (bh * T + t[:, None]) * D + d[None, :], mask=q_mask, other=0.0)
            if UPCAST:
                q = q.to(tl.float32)
                do = do.to(tl.float32)
            lse = tl.load(LSE + bh * T + t, mask=t < T, other=0.0)
            delta = tl.load(DELTA + bh * T + t, mask=t < T, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # (BM, BN)
            seen = (j[None, :] <= p[:, None]) & (t[:, None] < T)
            if HAS_WINDOW:
                seen = seen & (j[None, :] > p[:, None] - WINDOW)
            pr = tl.where(seen, tl.exp2(s - lse[:, None]), 0.0)  # probabilities
            dv += tl.dot(tl.trans(pr.to(do.dtype)), do, input_precision="ieee")
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")  # (BM, BN)
            ds = pr * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    tl.store(DK + (bhk * S + j[:, None]) * D + d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + (bhk * S + j[:, None]) * D + d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    qk_scale,
    scale,
    T,
    S,
    OFFSET,
    WINDOW,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    b = bh // H
    hk = (bh % H) // (H // HKV)
    t = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    q_mask = (t[:, None] < T) & (d[None, :] < D)
    q = tl.load(Q + (bh * T + t[:, None]) * D + d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + (bh * T + t[:, None]) * D + d[None, :], mask=q_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse = tl.load(LSE + bh * T + t, mask=t < T, other=0.0)
    delta = tl.load(DELTA + bh * T + t, mask=t < T, other=0.0)
    p = t + OFFSET
    p_first = pid_m * BLOCK_M + OFFSET
    p_last = tl.minimum(p_first + BLOCK_M, T + OFFSET) - 1
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(p_first - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
    kv = (b * HKV + hk) * S
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for n0 in range(lo, p_last + 1, BLOCK_N):
        j = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (j[:, None] < S) & (d[None, :] < D)
        k = tl.load(K + (kv + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + (kv + j[:, None]) * D + d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        seen = (j[None, :] <= p[:, None]) & (t[:, None] < T)
        if HAS_WINDOW:
            seen = seen & (j[None, :] > p[:, None] - WINDOW)
        pr = tl.where(seen, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = pr * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    tl.store(DQ + (bh * T + t[:, None]) * D + d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


def _meta(q, k, window):
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    has_window = window is not None and window < S
    return dict(
        T=T,
        S=S,
        OFFSET=S - T,
        WINDOW=int(window) if has_window else S + 1,
        H=H,
        HKV=Hkv,
        D=D,
        BLOCK_D=pow2(D),
        HAS_WINDOW=has_window,
        UPCAST=upcast(q.dtype),
    )


def _forward(q, k, v, scale, window):
    """q (B, H, T, D), k, v (B, Hkv, S, D) contiguous -> o (B, H, T, D), lse (B, H, T) fp32 base 2."""
    B, H, T, D = q.shape
    meta = _meta(q, k, window)
    BM, BN, warps, stages = _tiles(D, backward=False)
    o = torch.empty(q.shape, dtype=store_dtype(q.dtype), device=q.device)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
    _fwd[(triton.cdiv(T, BM), B * H)](q, k, v, o, lse, scale * LOG2E, **meta, BLOCK_M=BM, BLOCK_N=BN, num_warps=warps, num_stages=stages)
    return o.to(q.dtype), lse


def _backward(q, k, v, o, lse, do, scale, window):
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    meta = _meta(q, k, window)
    BM, BN, warps, stages = _tiles(D, backward=True)
    delta = (o.float() * do.float()).sum(-1)  # (B, H, T)
    sd = store_dtype(q.dtype)
    dq = torch.empty(q.shape, dtype=sd, device=q.device)
    dk = torch.empty(k.shape, dtype=sd, device=q.device)
    dv = torch.empty(v.shape, dtype=sd, device=q.device)
    args = (scale * LOG2E, scale)
    _bwd_dkdv[(triton.cdiv(S, BN), B * Hkv)](
        q, k, v, do, lse, delta, dk, dv, *args, **meta, BLOCK_M=BM, BLOCK_N=BN, num_warps=warps, num_stages=stages
    )
    _bwd_dq[(triton.cdiv(T, BM), B * H)](
        q, k, v, do, lse, delta, dq, *args, **meta, BLOCK_M=BM, BLOCK_N=BN, num_warps=warps, num_stages=stages
    )
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _FlashAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, window):
        o, lse = _forward(q, k, v, scale, window)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.window = scale, window
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, o, lse, do.contiguous(), ctx.scale, ctx.window)
        return dq, dk, dv, None, None


def flash_attn(q, k, v, *, window: int | None = None, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D): causal, within ``window``."""
    check_device(q, k, v)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _FlashAttn.apply(q.contiguous(), k.contiguous(), v.contiguous(), scale, window)


def sliding_window_attn(q, k, v, window: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D); query t sees t - window < j <= t."""
    return flash_attn(q, k, v, window=int(window), scale=scale)
