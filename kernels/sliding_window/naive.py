"""Causal sliding-window GQA attention, naive: the one truth of sliding_window_attn.

The causal softmax of softmax/naive.py with one more condition in its (T, S) mask: query t
sees keys t - window < j <= t. Dense, O(T S), in the inputs' dtype (float64 for the truth).
reference.py is the fast plain-torch path (query blocks, O(T window)).
"""

from __future__ import annotations

from ..softmax.naive import masked_attn, positions


def sliding_window_attn(q, k, v, window: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T, queries the last T -> o (B, H, T, D)."""
    t, j = positions(q.shape[2], k.shape[2], q.device)
    return masked_attn(q, k, v, (j <= t) & (j > t - window), scale)
