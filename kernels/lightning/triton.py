"""Lightning attention (decayed linear attention) in Triton: chunked forward, backward, decode.

Per head h with decay rate s > 0 and chunks of C tokens (the last may be shorter, L <= C):
    S_t = exp(-s) S_{t-1} + k_t^T v_t,   o_t = q_t S_t          (S is Dk x Dv, fp32)
    inside chunk n, token i:  o_i = sum_{j<=i} e^{-s(i-j)} (q_i.k_j) v_j + e^{-s(i+1)} q_i S_n
    across chunks:            S_{n+1} = e^{-sL} S_n + sum_j e^{-s(L-1-j)} k_j^T v_j
Every exponent is of a non-positive number (no overflow at any length).

  forward   ``_states``  grid (Dk/BK, Dv/BV, B*H): walks the chunks in order, writes the state
                         entering each chunk (fp32) and the final state;
            ``_outputs`` grid (N, Dv/BV, B*H): every chunk in parallel, intra-chunk masked-decay
                         product plus the inter-chunk term q S_n.
  backward  ``_dstates`` grid (Dk/BK, Dv/BV, B*H): walks the chunks backwards carrying
                         G_n = dL/dS at the end of chunk n (from later tokens and the final
                         state's gradient); G before chunk 0 is the initial state's gradient;
            ``_grads``   grid (N, B*H): with A = q k^T, dA = do v^T, M the decay mask,
                         e_q = e^{-s(i+1)}, e_k = e^{-s(L-1-j)}:
                           dq = (dA*M) k + e_q (do S_n^T)
                           dk = (dA*M)^T q + e_k (v G_n^T)
                           dv = (A*M)^T do + e_k (k G_n)
            The states entering each chunk are recomputed (memory O(N Dk Dv) only inside a call).
  decode    ``_decode``  grid (Dv/BV, B*H): one token, S' = e^{-s} S + k^T v, o = q S'.

Products with the fp32 state run in fp32 (TF32 tensor cores for 16-bit inputs on a GPU,
full fp32 for fp32 inputs); the intra-chunk products run in the input dtype with fp32
accumulation. The decay rates get no gradient (they are fixed buffers in the model).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..triton_common import check_device, interpreting, pow2, store_dtype, upcast

CHUNK = 64  # tokens per chunk (the intra-chunk product is CHUNK x CHUNK)


def _state_tile(D: int) -> int:
    """Dk and Dv tile of the state walks: small tiles give more programs to run in parallel."""
    return 32 if D <= 64 else 64


def _prec(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 or interpreting() else "tf32"


@triton.jit
def _states(
    K,
    V,
    DECAY,
    H0,
    H_IN,
    HT,
    T,
    N,
    H: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
    PREC: tl.constexpr,
):
    ik = tl.program_id(0)
    iv = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)  # 64-bit offsets
    s = tl.load(DECAY + bh % H)
    offs_dk = ik * BK + tl.arange(0, BK)
    offs_dv = iv * BV + tl.arange(0, BV)
    i = tl.arange(0, C)
    st_mask = (offs_dk[:, None] < DK) & (offs_dv[None, :] < DV)
    st_off = offs_dk[:, None] * DV + offs_dv[None, :]
    state = tl.zeros([BK, BV], tl.float32)
    if HAS_H0:
        state = tl.load(H0 + bh * DK * DV + st_off, mask=st_mask, other=0.0)
    for n in range(N):
        tl.store(H_IN + (bh * N + n) * DK * DV + st_off, state, mask=st_mask)
        t = n * C + i
        L = tl.minimum(C, T - n * C)
        k = tl.load(K + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=(t[:, None] < T) & (offs_dk[None, :] < DK), other=0.0)
        v = tl.load(V + (bh * T + t[:, None]) * DV + offs_dv[None, :], mask=(t[:, None] < T) & (offs_dv[None, :] < DV), other=0.0)
        e_k = tl.where(i < L, tl.exp(-s * (L - 1 - i).to(tl.float32)), 0.0)  # decay from token i to the chunk's end
        kd = k.to(tl.float32) * e_k[:, None]
        state = state * tl.exp(-s * L.to(tl.float32)) + tl.dot(tl.trans(kd), v.to(tl.float32), input_precision=PREC)
    tl.store(HT + bh * DK * DV + st_off, state, mask=st_mask)


@triton.jit
def _outputs(
    Q,
    K,
    V,
    DECAY,
    H_IN,
    O,
    T,
    N,
    H: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    C: tl.constexpr,
    BDK: tl.constexpr,
    BV: tl.constexpr,
    UPCAST: tl.constexpr,
    PREC: tl.constexpr,
):
    n = tl.program_id(0)
    iv = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)  # 64-bit offsets
    s = tl.load(DECAY + bh % H)
    i = tl.arange(0, C)
    t = n * C + i
    offs_dk = tl.arange(0, BDK)
    offs_dv = iv * BV + tl.arange(0, BV)
    qk_mask = (t[:, None] < T) & (offs_dk[None, :] < DK)
    v_mask = (t[:, None] < T) & (offs_dv[None, :] < DV)
    q = tl.load(Q + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=qk_mask, other=0.0)  # (C, BDK)
    k = tl.load(K + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=qk_mask, other=0.0)
    v = tl.load(V + (bh * T + t[:, None]) * DV + offs_dv[None, :], mask=v_mask, other=0.0)  # (C, BV)
    if UPCAST:
        q = q.to(tl.float32)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    gap = (i[:, None] - i[None, :]).to(tl.float32)  # query i - key j
    decay = tl.where(gap >= 0, tl.exp(-s * tl.maximum(gap, 0.0)), 0.0)  # (C, C)
    a = tl.dot(q, tl.trans(k), input_precision="ieee") * decay
    o = tl.dot(a.to(v.dtype), v, input_precision="ieee")  # (C, BV)
    s_in = tl.load(
        H_IN + (bh * N + n) * DK * DV + offs_dk[:, None] * DV + offs_dv[None, :],
        mask=(offs_dk[:, None] < DK) & (offs_dv[None, :] < DV),
        other=0.0,
    )  # (BDK, BV) fp32
    e_q = tl.exp(-s * (i + 1).to(tl.float32))  # decay of the entering state at token i
    o += tl.dot(q.to(tl.float32) * e_q[:, None], s_in, input_precision=PREC)
    tl.store(O + (bh * T + t[:, None]) * DV + offs_dv[None, :], o.to(O.dtype.element_ty), mask=v_mask)


@triton.jit
def _dstates(
    Q,
    DO,
    DECAY,
    DHT,
    DH,
    DH0,
    T,
    N,
    H: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_DHT: tl.constexpr,
    PREC: tl.constexpr,
):
    ik = tl.program_id(0)
    iv = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)  # 64-bit offsets
    s = tl.load(DECAY + bh % H)
    offs_dk = ik * BK + tl.arange(0, BK)
    offs_dv = iv * BV + tl.arange(0, BV)
    i = tl.arange(0, C)
    st_mask = (offs_dk[:, None] < DK) & (offs_dv[None, :] < DV)
    st_off = offs_dk[:, None] * DV + offs_dv[None, :]
    g = tl.zeros([BK, BV], tl.float32)  # dL/dS at the end of the current chunk
    if HAS_DHT:
        g = tl.load(DHT + bh * DK * DV + st_off, mask=st_mask, other=0.0)
    for r in range(N):
        n = N - 1 - r
        tl.store(DH + (bh * N + n) * DK * DV + st_off, g, mask=st_mask)
        t = n * C + i
        L = tl.minimum(C, T - n * C)
        q = tl.load(Q + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=(t[:, None] < T) & (offs_dk[None, :] < DK), other=0.0)
        do = tl.load(DO + (bh * T + t[:, None]) * DV + offs_dv[None, :], mask=(t[:, None] < T) & (offs_dv[None, :] < DV), other=0.0)
        e_q = tl.where(i < L, tl.exp(-s * (i + 1).to(tl.float32)), 0.0)
        qd = q.to(tl.float32) * e_q[:, None]
        g = g * tl.exp(-s * L.to(tl.float32)) + tl.dot(tl.trans(qd), do.to(tl.float32), input_precision=PREC)
    tl.store(DH0 + bh * DK * DV + st_off, g, mask=st_mask)


@triton.jit
def _grads(
    Q,
    K,
    V,
    DO,
    DECAY,
    H_IN,
    DH,
    DQ,
    DK_,
    DV_,
    T,
    N,
    H: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    C: tl.constexpr,
    BDK: tl.constexpr,
    BV: tl.constexpr,
    UPCAST: tl.constexpr,
    PREC: tl.constexpr,
):
    # Dv is walked in tiles of BV: the fp32 state tiles (BDK, BV) stay small enough for shared
    # memory at head_dim 128 (two whole 128 x 128 fp32 states needed 256 KiB, over the H200's 227).
    n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    s = tl.load(DECAY + bh % H)
    i = tl.arange(0, C)
    t = n * C + i
    L = tl.minimum(C, T - n * C)
    offs_dk = tl.arange(0, BDK)
    k_mask = (t[:, None] < T) & (offs_dk[None, :] < DK)
    q = tl.load(Q + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=k_mask, other=0.0)  # (C, BDK)
    k = tl.load(K + (bh * T + t[:, None]) * DK + offs_dk[None, :], mask=k_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        k = k.to(tl.float32)
    gap = (i[:, None] - i[None, :]).to(tl.float32)
    decay = tl.where(gap >= 0, tl.exp(-s * tl.maximum(gap, 0.0)), 0.0)  # (C, C), [query i, key j]
    a = tl.dot(q, tl.trans(k), input_precision="ieee") * decay
    e_q = tl.exp(-s * (i + 1).to(tl.float32))
    e_k = tl.where(i < L, tl.exp(-s * (L - 1 - i).to(tl.float32)), 0.0)
    da = tl.zeros([C, C], tl.float32)  # do v^T, summed over the Dv tiles
    dq_state = tl.zeros([C, BDK], tl.float32)  # do S_n^T
    dk_state = tl.zeros([C, BDK], tl.float32)  # v G_n^T
    for v0 in range(0, DV, BV):
        offs_dv = v0 + tl.arange(0, BV)
        v_mask = (t[:, None] < T) & (offs_dv[None, :] < DV)
        v = tl.load(V + (bh * T + t[:, None]) * DV + offs_dv[None, :], mask=v_mask, other=0.0)  # (C, BV)
        do = tl.load(DO + (bh * T + t[:, None]) * DV + offs_dv[None, :], mask=v_mask, other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
            do = do.to(tl.float32)
        st_off = (bh * N + n) * DK * DV + offs_dk[:, None] * DV + offs_dv[None, :]
        st_mask = (offs_dk[:, None] < DK) & (offs_dv[None, :] < DV)
        s_in = tl.load(H_IN + st_off, mask=st_mask, other=0.0)  # (BDK, BV) state entering the chunk
        g = tl.load(DH + st_off, mask=st_mask, other=0.0)  # dL/dS at the chunk's end
        da += tl.dot(do, tl.trans(v), input_precision="ieee")
        dq_state += tl.dot(do.to(tl.float32), tl.trans(s_in), input_precision=PREC)
        dk_state += tl.dot(v.to(tl.float32), tl.trans(g), input_precision=PREC)
        dv = tl.dot(tl.trans(a.to(do.dtype)), do, input_precision="ieee")
        dv += e_k[:, None] * tl.dot(k.to(tl.float32), g, input_precision=PREC)
        tl.store(DV_ + (bh * T + t[:, None]) * DV + offs_dv[None, :], dv.to(DV_.dtype.element_ty), mask=v_mask)
    da = da * decay
    dq = tl.dot(da.to(k.dtype), k, input_precision="ieee") + e_q[:, None] * dq_state
    dk = tl.dot(tl.trans(da.to(q.dtype)), q, input_precision="ieee") + e_k[:, None] * dk_state
    tl.store(DQ + (bh * T + t[:, None]) * DK + offs_dk[None, :], dq.to(DQ.dtype.element_ty), mask=k_mask)
    tl.store(DK_ + (bh * T + t[:, None]) * DK + offs_dk[None, :], dk.to(DK_.dtype.element_ty), mask=k_mask)


@triton.jit
def _decode(
    Q,
    K,
    V,
    DECAY,
    H0,
    O,
    HT,
    H: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BDK: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
):
    iv = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # 64-bit offsets
    s = tl.load(DECAY + bh % H)
    offs_dk = tl.arange(0, BDK)
    offs_dv = iv * BV + tl.arange(0, BV)
    st_mask = (offs_dk[:, None] < DK) & (offs_dv[None, :] < DV)
    st_off = bh * DK * DV + offs_dk[:, None] * DV + offs_dv[None, :]
    state = tl.zeros([BDK, BV], tl.float32)
    if HAS_H0:
        state = tl.load(H0 + st_off, mask=st_mask, other=0.0)
    q = tl.load(Q + bh * DK + offs_dk, mask=offs_dk < DK, other=0.0).to(tl.float32)
    k = tl.load(K + bh * DK + offs_dk, mask=offs_dk < DK, other=0.0).to(tl.float32)
    v = tl.load(V + bh * DV + offs_dv, mask=offs_dv < DV, other=0.0).to(tl.float32)
    state = state * tl.exp(-s) + k[:, None] * v[None, :]
    o = tl.sum(q[:, None] * state, 0)  # (BV,)
    tl.store(HT + st_off, state, mask=st_mask)
    tl.store(O + bh * DV + offs_dv, o.to(O.dtype.element_ty), mask=offs_dv < DV)


def _forward(q, k, v, s, h0):
    """Contiguous q, k (B, H, T, Dk), v (B, H, T, Dv); s (H,) fp32; h0 fp32 or None."""
    B, H, T, DK = q.shape
    DV = v.shape[-1]
    N = triton.cdiv(T, CHUNK)
    BS = _state_tile(max(DK, DV))
    h_in = torch.empty(B, H, N, DK, DV, dtype=torch.float32, device=q.device)
    ht = torch.empty(B, H, DK, DV, dtype=torch.float32, device=q.device)
    common = dict(H=H, DK=DK, DV=DV, C=CHUNK, PREC=_prec(q.dtype))
    _states[(triton.cdiv(DK, BS), triton.cdiv(DV, BS), B * H)](  # upcasts every load itself (the state is fp32)
        k, v, s, h0, h_in, ht, T, N, BK=BS, BV=BS, HAS_H0=h0 is not None, **common
    )
    o = torch.empty(B, H, T, DV, dtype=store_dtype(q.dtype), device=q.device)
    BV = min(64, pow2(DV))
    _outputs[(N, triton.cdiv(DV, BV), B * H)](
        q, k, v, s, h_in, o, T, N, BDK=pow2(DK), BV=BV, UPCAST=upcast(q.dtype), **common, num_warps=4 if DK <= 64 else 8
    )
    return o.to(q.dtype), ht, h_in


def _backward(q, k, v, s, h0, do, dht):
    B, H, T, DK = q.shape
    DV = v.shape[-1]
    N = triton.cdiv(T, CHUNK)
    BS = _state_tile(max(DK, DV))
    _, _, h_in = _forward(q, k, v, s, h0)  # recompute the entering states
    dh = torch.empty(B, H, N, DK, DV, dtype=torch.float32, device=q.device)
    dh0 = torch.empty(B, H, DK, DV, dtype=torch.float32, device=q.device)
    prec = _prec(q.dtype)
    _dstates[(triton.cdiv(DK, BS), triton.cdiv(DV, BS), B * H)](
        q, do, s, dht, dh, dh0, T, N, H=H, DK=DK, DV=DV, C=CHUNK, BK=BS, BV=BS, HAS_DHT=dht is not None, PREC=prec
    )
    sd = store_dtype(q.dtype)
    dq, dk = torch.empty(q.shape, dtype=sd, device=q.device), torch.empty(k.shape, dtype=sd, device=q.device)
    dv = torch.empty(v.shape, dtype=sd, device=q.device)
    _grads[(N, B * H)](
        q,
        k,
        v,
        do,
        s,
        h_in,
        dh,
        dq,
        dk,
        dv,
        T,
        N,
        H=H,
        DK=DK,
        DV=DV,
        C=CHUNK,
        BDK=pow2(DK),
        BV=min(64, pow2(DV)),
        UPCAST=upcast(q.dtype),
        PREC=prec,
        num_warps=4 if max(DK, DV) <= 64 else 8,
        # no software pipelining of the Dv walk: at head_dim 128 its buffered (BDK, BV) fp32 state
        # tiles needed 232-237 KiB of shared memory, over the H200's 227 KiB
        num_stages=1,
    )
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dh0


class _Lightning(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, s, h0):
        o, ht, _ = _forward(q, k, v, s, h0)
        ctx.save_for_backward(q, k, v, s, h0)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, s, h0 = ctx.saved_tensors
        do = torch.zeros(v.shape, dtype=q.dtype, device=q.device) if do is None else do.contiguous()
        dq, dk, dv, dh0 = _backward(q, k, v, s, h0, do, None if dht is None else dht.float().contiguous())
        return dq, dk, dv, None, (dh0 if h0 is not None else None)


def decode_step(q, k, v, decay, state):
    """One token: q, k (B, H, 1, Dk), v (B, H, 1, Dv), state (B, H, Dk, Dv) fp32 or None.

    Returns (o (B, H, 1, Dv), new state fp32). Inference only (no autograd graph).
    """
    B, H, _, DK = q.shape
    DV = v.shape[-1]
    h0 = None if state is None else state.float().contiguous()
    o = torch.empty(B, H, 1, DV, dtype=store_dtype(q.dtype), device=q.device)
    ht = torch.empty(B, H, DK, DV, dtype=torch.float32, device=q.device)
    BV = min(64, pow2(DV))
    _decode[(triton.cdiv(DV, BV), B * H)](
        q.contiguous(),
        k.contiguous(),
        v.contiguous(),
        decay.float().contiguous(),
        h0,
        o,
        ht,
        H=H,
        DK=DK,
        DV=DV,
        BDK=pow2(DK),
        BV=BV,
        HAS_H0=h0 is not None,
    )
    return o.to(q.dtype), ht


def lightning_attn(q, k, v, decay, *, initial_state=None):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv), final_state (B, H, Dk, Dv) fp32).

    T = 1 without autograd uses the decode-step kernel; everything else the chunked kernels.
    """
    check_device(q, k, v, decay, initial_state)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, initial_state))
    if q.shape[2] == 1 and not grad:
        return decode_step(q, k, v, decay, initial_state)
    s = decay.detach().to(device=q.device, dtype=torch.float32).contiguous()
    h0 = None if initial_state is None else initial_state.float().contiguous()
    return _Lightning.apply(q.contiguous(), k.contiguous(), v.contiguous(), s, h0)
