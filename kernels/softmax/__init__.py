"""softmax_attn: causal GQA softmax attention."""

from __future__ import annotations

import torch

from ..backend import implementation
from ..checks import check_attn_shapes


def softmax_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None, backend: str = "auto") -> torch.Tensor:
    """Causal softmax attention with grouped KV heads.

    q (B, H, T, D); k, v (B, Hkv, S, D) with H % Hkv == 0 and S >= T. The T queries are the
    last T positions of the S keys: query t sees keys j <= t + (S - T). Head h reads KV head
    h // (H // Hkv). scale defaults to 1/sqrt(D). Returns o (B, H, T, D).
    """
    check_attn_shapes(q, k, v)
    return implementation("softmax", "softmax_attn", backend, q.device)(q, k, v, scale=scale)
