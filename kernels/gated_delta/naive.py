"""Gated delta rule, naive: the one truth of gated_delta, the recurrence token by token.

Per state head h (B, H, T), with the state S (Dk, Dv) read as o_t = q_t S_t (rows, as lightning's):
    a_t = exp(g_t)                                     g_t <= 0 the log-gate, so a_t in (0, 1]
    S_t = a_t (I - b_t k_t^T k_t) S_{t-1} + b_t k_t^T v_t
    o_t = scale q_t S_t                                (the current token included)
The GDN paper (arXiv 2412.06464) writes the transpose, S (Dv, Dk) with o_t = S_t q_t; fla keeps
S as (Dk, Dv), as here. Grouped heads as Qwen3-Next's: q, k have Hk heads, v, g, b have H (H % Hk
== 0); state head h reads q, k head h // (H // Hk). The q, k normalisation (L2, so that
I - b k^T k is a contraction) is the layer's, not the op's.

Computes in the inputs' dtype (float64 for the truth) and returns the final state in it.
reference.py is the fast plain-torch path (the chunked WY form).
"""

from __future__ import annotations

import math

import torch


def expand_heads(x: torch.Tensor, H: int) -> torch.Tensor:
    """(B, Hk, ...) -> (B, H, ...): state head h reads head h // (H // Hk)."""
    return x if x.shape[1] == H else x.repeat_interleave(H // x.shape[1], dim=1)


def gated_delta(q, k, v, g, beta, *, scale: float | None = None, initial_state=None):
    """q, k (B, Hk, T, Dk); v (B, H, T, Dv); g, beta (B, H, T); initial_state (B, H, Dk, Dv) or None
    -> (o (B, H, T, Dv), final state (B, H, Dk, Dv)), both in v's dtype."""
    B, H, T, Dv = v.shape
    Dk = q.shape[-1]
    scale = 1 / math.sqrt(Dk) if scale is None else scale
    q, k = expand_heads(q, H), expand_heads(k, H)  # (B, H, T, Dk)
    S = v.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state.to(v.dtype).clone()
    outs = []
    for t in range(T):
        o, S = gated_delta_step(q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t], S, scale=scale)
        outs.append(o)
    return torch.stack(outs, dim=2), S


def gated_delta_step(q, k, v, g, beta, state, *, scale: float):
    """One token: q, k (B, H, Dk); v (B, H, Dv); g, beta (B, H); state (B, H, Dk, Dv) -> (o (B, H, Dv), new state)."""
    a = torch.exp(g)[..., None, None]  # (B, H, 1, 1)
    decayed = a * state
    # (I - b k^T k) S = S - b k^T (k S): the row k S (B, H, Dv) is what the state predicts for v
    S = decayed + beta[..., None, None] * k[..., :, None] * (v - (k[..., None, :] @ decayed).squeeze(-2))[..., None, :]
    return scale * (q[..., None, :] @ S).squeeze(-2), S
