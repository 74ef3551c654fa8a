"""Naive formulas, written differently from the references (explicit masks, O(T^2), loops).

Everything here runs in float64 so it can serve as the truth for fp32 references.
"""

from __future__ import annotations

import math

import torch


def expand_kv(x: torch.Tensor, H: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, H, S, D) by repeating each KV head for its query heads."""
    return x.repeat_interleave(H // x.shape[1], dim=1)


def masked_softmax_attn(q, k, v, allowed, scale=None):
    """allowed: bool broadcastable to (B, H, T, S)."""
    H, D = q.shape[1], q.shape[-1]
    k, v = expand_kv(k, H), expand_kv(v, H)
    scale = 1 / math.sqrt(D) if scale is None else scale
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhts,bhsd->bhtd", torch.softmax(scores, dim=-1), v)


def causal_allowed(T, S):
    t = torch.arange(T)[:, None] + (S - T)
    return torch.arange(S)[None, :] <= t


def softmax_naive(q, k, v, scale=None):
    return masked_softmax_attn(q, k, v, causal_allowed(q.shape[2], k.shape[2]), scale)


def sliding_naive(q, k, v, window, scale=None):
    T, S = q.shape[2], k.shape[2]
    t = torch.arange(T)[:, None] + (S - T)
    j = torch.arange(S)[None, :]
    return masked_softmax_attn(q, k, v, (j <= t) & (j > t - window), scale)


def lightning_quadratic(q, k, v, decay, initial_state=None):
    """O(T^2) masked form: o_t = sum_{j<=t} e^{-s(t-j)} (q_t.k_j) v_j + e^{-s(t+1)} q_t S0."""
    B, H, T, Dk = q.shape
    s = decay.view(1, H, 1, 1).to(q.dtype)
    t = torch.arange(T, dtype=q.dtype)
    gap = t[:, None] - t[None, :]
    weight = torch.where(gap >= 0, torch.exp(-s * gap.clamp(min=0)), torch.zeros((), dtype=q.dtype))
    o = torch.einsum("bhts,bhsd->bhtd", torch.einsum("bhtd,bhsd->bhts", q, k) * weight, v)
    final = torch.einsum("bhs,bhsd,bhse->bhde", torch.exp(-s[..., 0] * (T - 1 - t)), k, v)
    if initial_state is not None:
        o = o + torch.exp(-s * (t + 1)[:, None]) * (q @ initial_state)
        final = final + torch.exp(-s * T) * initial_state
    return o, final


def lightning_recurrent(q, k, v, decay, initial_state=None):
    """Token by token: S_t = e^{-s} S_{t-1} + k_t^T v_t; o_t = q_t S_t."""
    B, H, T, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state.clone()
    a = torch.exp(-decay.to(q.dtype)).view(1, H, 1, 1)
    outs = []
    for i in range(T):
        S = a * S + k[:, :, i, :, None] * v[:, :, i, None, :]
        outs.append((q[:, :, i, None, :] @ S).squeeze(2))
    return torch.stack(outs, dim=2), S


def msa_select_naive(index_q, index_k, block_size, top_k, pool="max"):
    """Loops over queries; full score matrix; Python sort."""
    B, G, T, Di = index_q.shape
    S = index_k.shape[1]
    scores = torch.einsum("bgtd,bsd->bgts", index_q.double(), index_k.double()) / math.sqrt(Di)
    out = torch.full((B, G, T, top_k), -1, dtype=torch.int64)
    for b in range(B):
        for g in range(G):
            for t in range(T):
                pos = S - T + t
                local = pos // block_size
                ranked = []
                for blk in range(local):
                    keys = slice(blk * block_size, (blk + 1) * block_size)
                    if pool == "max":
                        val = scores[b, g, t, keys].max().item()
                    else:
                        kmean = index_k[b, keys].double().mean(0)
                        val = (index_q[b, g, t].double() @ kmean).item() / math.sqrt(Di)
                    ranked.append((val, blk))
                ranked.sort(key=lambda x: -x[0])
                chosen = [local] + [blk for _, blk in ranked[: top_k - 1]]
                out[b, g, t, : len(chosen)] = torch.tensor(chosen)
    return out


def msa_attn_naive(q, k, v, block_idx, block_size, scale=None):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    allowed = torch.zeros(B, H, T, S, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            g = h // (H // G)
            for t in range(T):
                pos = S - T + t
                for blk in block_idx[b, g, t].tolist():
                    if blk < 0:
                        continue
                    for j in range(blk * block_size, min(S, (blk + 1) * block_size)):
                        if j <= pos:
                            allowed[b, h, t, j] = True
    return masked_softmax_attn(q, k, v, allowed, scale)


def moe_naive(moe, x):
    """The MoE layer token by token: softmax router, top-k, renormalised weights, GELU experts."""
    x_NC = x.reshape(-1, x.shape[-1])
    y = torch.zeros_like(x_NC)
    for n in range(x_NC.shape[0]):
        probs = torch.softmax(moe.router.weight @ x_NC[n], dim=-1)
        w, e = probs.topk(moe.K)
        w = w / w.sum()
        for wk, ek in zip(w, e.tolist()):
            h = torch.nn.functional.gelu(moe.w_up_EFC[ek] @ x_NC[n])
            y[n] += wk * (moe.w_down_ECF[ek] @ h)
    return y.view_as(x)
