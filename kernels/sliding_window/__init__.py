"""sliding_window_attn: causal softmax attention over the last `window` keys."""

from __future__ import annotations

import torch

from ..backend import implementation
from ..checks import check_attn_shapes


def sliding_window_attn(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, scale: float | None = None, backend: str = "auto"
) -> torch.Tensor:
    """Causal sliding-window attention with grouped KV heads.

    q (B, H, T, D); k, v (B, Hkv, S, D), H % Hkv == 0. The contract is S = T; S > T is also
    accepted (chunked prefill: the T queries are the last T of the S keys). Query t sees keys j
    with t - window < j <= t. scale defaults to 1/sqrt(D). Returns o (B, H, T, D).
    """
    check_attn_shapes(q, k, v)
    if int(window) < 1:
        raise ValueError(f"window must be >= 1; got {window}")
    return implementation("sliding_window", "sliding_window_attn", backend, q.device)(q, k, v, int(window), scale=scale)
