"""Gated delta rule, plain torch: the chunked WY form (the GDN paper, arXiv 2412.06464, sec. 3.3).

Recurrence (naive.py), per state head, S (Dk, Dv), o_t = scale q_t S_t:
    S_t = a_t (I - b_t k_t^T k_t) S_{t-1} + b_t k_t^T v_t,   a_t = exp(g_t)

Inside a chunk of C tokens entered by the state S, with c_i = g_1 + .. + g_i (the chunk's own
cumulative log-gate: every exp below is of a non-positive number, nothing overflows), the
delta rule's corrected values u_i = b_i (v_i - a_i k_i S_{i-1}) solve one unit lower-triangular
system (the WY representation: the C sequential rank-one updates become one solve):
    (I + A) U = b V - b exp(c) K S,      A_ij = b_i exp(c_i - c_j) k_i . k_j   (j < i)
so U = U0 - W S with U0 = (I + A)^{-1} b V and W = (I + A)^{-1} b exp(c) K, which depend on
the chunk alone: every chunk's U0, W (and its masked scores) are computed at once. Then
    o_i = scale (exp(c_i) q_i S + sum_{j <= i} exp(c_i - c_j) (q_i . k_j) u_j)
    S_out = exp(c_C) S + sum_j exp(c_C - c_j) k_j^T u_j
leaves only a short loop over chunks for the states (two small products a chunk); the outputs
follow from every chunk's entering state in one batched product. Everything runs in fp32
(float64 for float64 inputs), so 16-bit inputs are computed in fp32; autograd gives the
backward (the training path: it keeps O(T C) per pair). Memory beyond the inputs is bounded
by tiles of SEGMENT_BYTES of (C x C) scores when no gradient is needed (a long prefill).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .naive import expand_heads, gated_delta_step

# Chunk length C = 2 Dk within [32, 64] (64: the GDN paper's and fla's): the (C x C) solve per
# token grows with C, the per-chunk state products with Dk^2 / C; for Dk = 8, C = 32 is faster
# than 16 and 64 on the 2-core CPU (training step and 64K prefill, measured beside lightning's).
CHUNK_MIN, CHUNK_MAX = 32, 64
SEGMENT_BYTES = 16 << 20  # (pairs, tokens, C) fp32 scores of one tile (kernels/lightning/reference.py's reason)


def chunk_for(head_dim: int) -> int:
    """The reference's chunk length for a key head dim (see CHUNK_MIN)."""
    return max(CHUNK_MIN, min(CHUNK_MAX, 2 * head_dim))


def _chunk_terms(q, k, v, g, beta, scale: float):
    """Everything that depends on a chunk alone. q, k (P, N, C, Dk), v (P, N, C, Dv), g, beta
    (P, N, C). Returns U0 (P, N, C, Dv), W (P, N, C, Dk), scores (P, N, C, C) (scale and decay
    folded in, j <= i), q_in (P, N, C, Dk) (queries weighed for the entering state), k_out
    (P, N, C, Dk) (keys weighed to the chunk's end) and the chunk's whole decay (P, N, 1, 1)."""
    C = q.shape[2]
    c = g.cumsum(-1)  # (P, N, C)
    gap = c[..., :, None] - c[..., None, :]  # (P, N, C, C): c_i - c_j
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # j <= i
    decay = torch.exp(gap.masked_fill(~lower, float("-inf")))  # masked before exp: exp(+big) never forms
    kk = k @ k.transpose(-1, -2)  # (P, N, C, C)
    A = (beta[..., None] * kk * decay).tril(-1)  # strictly lower: j < i
    rhs = torch.cat([beta[..., None] * v, (beta * torch.exp(c))[..., None] * k], dim=-1)  # (P, N, C, Dv + Dk)
    sol = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)  # (I + A)^{-1} rhs; A's diagonal unread
    Dv = v.shape[-1]
    U0, W = sol[..., :Dv], sol[..., Dv:]
    scores = (q @ k.transpose(-1, -2)) * decay * scale
    q_in = q * (torch.exp(c) * scale)[..., None]
    k_out = k * torch.exp(c[..., -1:] - c)[..., None]
    return U0, W, scores, q_in, k_out, torch.exp(c[..., -1])[..., None, None]


def _chunks(q, k, v, g, beta, state, scale: float):
    """Whole chunks: q, k (P, N, C, Dk), v (P, N, C, Dv), g, beta (P, N, C), state (P, Dk, Dv).
    Returns o (P, N, C, Dv) and the state after the last chunk."""
    U0, W, scores, q_in, k_out, a_chunk = _chunk_terms(q, k, v, g, beta, scale)
    entering, corrected = [], []
    for n in range(q.shape[1]):  # the states: U_n = U0_n - W_n S, S <- a S + k_out_n^T U_n
        entering.append(state)
        U = U0[:, n] - W[:, n] @ state  # (P, C, Dv)
        corrected.append(U)
        state = a_chunk[:, n] * state + k_out[:, n].transpose(-1, -2) @ U
    S_in, U = torch.stack(entering, 1), torch.stack(corrected, 1)  # (P, N, Dk, Dv), (P, N, C, Dv)
    return q_in @ S_in + scores @ U, state


def gated_delta(q, k, v, g, beta, *, scale: float | None = None, initial_state=None, chunk: int | None = None, segment: int | None = None):
    """q, k (B, Hk, T, Dk); v (B, H, T, Dv); g, beta (B, H, T) -> (o (B, H, T, Dv) in v's dtype,
    final_state (B, H, Dk, Dv) fp32, or float64 for float64 inputs).

    chunk: tokens per chunk (default chunk_for(Dk)); segment: tokens per tile (default: SEGMENT_BYTES of scores; one tile,
    all T, when a gradient is needed)."""
    B, H, T, Dv = v.shape
    Dk, P = q.shape[-1], B * H
    scale = 1 / math.sqrt(Dk) if scale is None else scale
    chunk = chunk or chunk_for(Dk)
    dt = torch.float64 if v.dtype == torch.float64 else torch.float32
    qf, kf = (expand_heads(x, H).to(dt).reshape(P, T, Dk) for x in (q, k))  # (P, T, Dk)
    vf = v.to(dt).reshape(P, T, Dv)
    gf, bf = g.to(dt).reshape(P, T), beta.to(dt).reshape(P, T)
    state = q.new_zeros(P, Dk, Dv, dtype=dt) if initial_state is None else initial_state.to(dt).reshape(P, Dk, Dv)
    if T == 1:  # a decode step: the recurrence itself
        o, state = gated_delta_step(qf[:, 0], kf[:, 0], vf[:, 0], gf[:, 0], bf[:, 0], state, scale=scale)
        return o.view(B, H, 1, Dv).to(v.dtype), state.view(B, H, Dk, Dv)
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, g, beta, initial_state))
    if segment is None:
        segment = T if grad else max(chunk, SEGMENT_BYTES // (P * chunk * 4) // chunk * chunk)
    outs = []
    for t0 in range(0, T, segment):
        t1 = min(T, t0 + segment)
        L = t1 - t0
        pad = -L % chunk  # zero tokens (k = v = 0, b = 0, g = 0) change neither the state nor the outputs before them
        xs = [F.pad(x[:, t0:t1], (0, 0, 0, pad)) for x in (qf, kf, vf)] + [F.pad(x[:, t0:t1], (0, pad)) for x in (gf, bf)]
        N = (L + pad) // chunk
        qc, kc, vc, gc, bc = (x.reshape(P, N, chunk, *x.shape[2:]) for x in xs)
        o, state = _chunks(qc, kc, vc, gc, bc, state, scale)
        outs.append(o.reshape(P, N * chunk, Dv)[:, :L])
    o = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
    return o.reshape(B, H, T, Dv).to(v.dtype), state.view(B, H, Dk, Dv)
