"""Lightning attention (linear attention with per-head exponential decay), plain torch.

Recurrence, per head h with decay rate s_h > 0:
    S_t = exp(-s_h) S_{t-1} + k_t^T v_t        S is (Dk, Dv), S_{-1} = initial_state or 0
    o_t = q_t S_t                               (the current token included)

Computed block-wise (Lightning Attention-2): inside a chunk of C tokens, an intra-chunk
masked-decay product ((q k^T) * M) v with M[i, j] = exp(-s (i - j)) for j <= i; across
chunks, the state carried in float64 and returned as fp32 (over 2^22 / C chunk additions an
fp32 carry drifts ~1e-3 relative). Every exponent is of a non-positive number, so nothing
overflows however long the sequence (never exp(+s t)). Cost O(T C D + T D^2), memory
independent of T beyond the inputs (segments of at most SEGMENT tokens are in flight).
"""

from __future__ import annotations

import torch

CHUNK = 64  # intra-chunk size: balances the C*D intra and D*D inter FLOPs for D ~ 64
SEGMENT = 16384  # tokens materialised at once; bounds the (.., C, C) intra-chunk tensors
SCAN_EXPONENT = 500.0  # largest exponent of the chunk-state scan's growing factor (float64 max ~ e^709)


def _chunks(q, k, v, s, state):
    """q, k (B, H, N, C, Dk), v (B, H, N, C, Dv) in the compute dtype; s (H,) fp32; state (B, H, Dk, Dv) float64.

    Returns o (B, H, N, C, Dv) fp32 and the state after the last chunk. The products run in
    q's dtype (fp32 by default); chunk contributions are added to the float64 state.
    """
    _N, C, dt = q.shape[2], q.shape[3], q.dtype
    s5 = s.view(1, -1, 1, 1, 1)  # (1, H, 1, 1, 1)
    i = torch.arange(C, device=q.device, dtype=torch.float32)
    gap = i[:, None] - i[None, :]  # (C, C): i - j
    intra_decay = torch.exp(-s5 * gap.clamp(min=0)) * (gap >= 0)  # (1, H, 1, C, C)
    o = (((q @ k.transpose(-1, -2)) * intra_decay.to(dt)) @ v).float()  # (B, H, N, C, Dv)

    k_to_end = k * torch.exp(-s5 * (C - 1 - i)[:, None]).to(dt)  # decay from j to the chunk's end
    kv = (k_to_end.transpose(-1, -2) @ v).float()  # (B, H, N, Dk, Dv): each chunk's own contribution
    S_in, state = _scan(kv, s.double() * C, state)  # (B, H, N, Dk, Dv) fp32, state float64
    q_from_start = q * torch.exp(-s5 * (i + 1)[:, None]).to(dt)  # decay of the entering state at i
    o = o + (q_from_start @ S_in.to(dt)).float()
    return o, state


def _scan(kv, rate, state):
    """States entering each chunk, S_n = a S_{n-1} + kv_{n-1} with a = exp(-rate) per head, in float64.

    kv (B, H, N, Dk, Dv); rate (H,) float64 (decay per chunk, s * C); state (B, H, Dk, Dv) float64.
    Returns (S_in (B, H, N, Dk, Dv) fp32, the state after the last chunk, float64).

    Written as a few tensor ops per group of g chunks rather than a Python loop over chunks:
    inside a group, S_in[j] = a^j (E + sum_{m<j} a^-(m+1) kv_m) (E the state entering the group),
    one cumulative sum. The growing factor a^-(m+1) <= exp(SCAN_EXPONENT) bounds g, so nothing
    overflows and float64 keeps ~1e-13 relative error; the naive loop is kernels/lightning/naive.py's
    lightning_recurrent.
    """
    B, H, N = kv.shape[:3]
    rate = rate.view(1, H, 1, 1, 1)
    g = max(1, min(N, int(SCAN_EXPONENT / max(float(rate.max()), 1e-30))))
    m = torch.arange(g, dtype=torch.float64, device=kv.device).view(1, 1, g, 1, 1)
    grow, shrink = torch.exp(rate * (m + 1)), torch.exp(-rate * m)  # a^-(m+1), a^m
    outs = []
    for n0 in range(0, N, g):
        part = kv[:, :, n0 : n0 + g].double()
        G = part.shape[2]
        acc = torch.cumsum(part * grow[:, :, :G], dim=2)  # inclusive: sum_{m<=j} a^-(m+1) kv_m
        before = torch.cat([state[:, :, None], acc[:, :, :-1] + state[:, :, None]], dim=2)  # exclusive (no
        outs.append(before * shrink[:, :, :G])  # subtraction: the newest term dominates), times a^j
        state = (acc[:, :, -1] + state) * torch.exp(-rate[:, :, 0] * G)
    return (torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]).float(), state


def lightning_attn(q, k, v, decay, *, initial_state=None, chunk: int = CHUNK, compute_dtype: torch.dtype = torch.float32):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv), final_state (B, H, Dk, Dv) fp32).

    compute_dtype: the dtype of the products (the state always accumulates in float64). fp32 is
    the fast path's default and the truth of the GPU checks at long T; bf16 / fp16 is "plain
    torch in that dtype", the yardstick of the kernels' error (kernels/tolerance.py).
    """
    B, H, T, Dk = q.shape
    Dv = v.shape[-1]
    dtype = q.dtype
    s = decay.to(device=q.device, dtype=torch.float32)
    if initial_state is None:
        state = q.new_zeros(B, H, Dk, Dv, dtype=torch.float64)
    else:
        state = initial_state.to(torch.float64)
    outs = []
    for start in range(0, T, SEGMENT):
        seg = slice(start, min(T, start + SEGMENT))
        qs, ks, vs = (x[:, :, seg].to(compute_dtype) for x in (q, k, v))
        L = qs.shape[2]
        C = min(chunk, L)
        N, full = L // C, (L // C) * C
        qc, kc, vc = (x[:, :, :full].reshape(B, H, N, C, -1) for x in (qs, ks, vs))
        o, state = _chunks(qc, kc, vc, s, state)
        outs.append(o.reshape(B, H, full, Dv))
        if full < L:  # ragged tail: one shorter chunk
            qc, kc, vc = (x[:, :, full:].unsqueeze(2) for x in (qs, ks, vs))
            o, state = _chunks(qc, kc, vc, s, state)
            outs.append(o.squeeze(2))
    o = torch.cat(outs, dim=2) if len(outs) != 1 else outs[0]
    return o.to(dtype), state.float()
