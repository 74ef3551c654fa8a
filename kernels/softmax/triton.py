"""The like-for-like Triton flash-attention baseline for softmax_attn (causal GQA, S >= T).

The production baseline of softmax attention is SDPA / FlashAttention; this kernel exists so
that sliding-window and MSA kernels can also be compared with a softmax kernel written the
same way (same tiles, same dtype rules, same compiler). It is the sliding-window kernel of
kernels/sliding_window/triton.py with no window: forward and backward.
"""

from __future__ import annotations

from ..sliding_window.triton import flash_attn


def softmax_attn(q, k, v, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D), causal."""
    return flash_attn(q, k, v, window=None, scale=scale)
