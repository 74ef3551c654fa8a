"""Causal GQA softmax attention, naive: the one truth of softmax_attn (and the masked softmax
that sliding_window/naive.py and msa/naive.py build on).

Dense and O(T S): every score, an explicit (T, S) mask, a softmax over the keys. It computes in
the inputs' dtype: pass float64 for the truth, fp32 / fp16 / bf16 for "plain torch in that
dtype" (the yardstick of kernels/tolerance.py). Written from the definition, not from
reference.py (the fast plain-torch path), so the two check each other.
"""

from __future__ import annotations

import math

import torch


def positions(T: int, S: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute query positions t (T, 1) (the queries are the last T of S) and key positions j (1, S)."""
    return torch.arange(S - T, S, device=device)[:, None], torch.arange(S, device=device)[None, :]


def masked_attn(q, k, v, allowed, scale: float | None = None):
    """softmax(q k^T * scale, keys where allowed) v with GQA.

    q (B, H, T, D); k, v (B, Hkv, S, D), head h reads KV head h // (H / Hkv); allowed bool,
    broadcastable to (B, H, T, S), True in at least one key of every row. Returns (B, H, T, D).
    """
    H, D = q.shape[1], q.shape[-1]
    k, v = (x.repeat_interleave(H // x.shape[1], dim=1) for x in (k, v))  # (B, H, S, D)
    scale = 1 / math.sqrt(D) if scale is None else scale
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) * scale  # (B, H, T, S)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.einsum("bhts,bhsd->bhtd", p, v)


def softmax_attn(q, k, v, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D): query t sees keys j <= t."""
    t, j = positions(q.shape[2], k.shape[2], q.device)
    return masked_attn(q, k, v, j <= t, scale)
