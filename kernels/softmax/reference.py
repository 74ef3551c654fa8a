"""Causal GQA softmax attention, plain torch (SDPA): the reference and the CPU fast path."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_mask(T: int, S: int, device: torch.device) -> torch.Tensor:
    """(T, S) bool, True where query t (aligned to the last T of S keys) may see key j."""
    t = torch.arange(T, device=device)[:, None] + (S - T)
    j = torch.arange(S, device=device)[None, :]
    return j <= t


def softmax_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D)."""
    T, S = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if T == S:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    if T == 1:  # one query at the end sees every key
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    mask = causal_mask(T, S, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
