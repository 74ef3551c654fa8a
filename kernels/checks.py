"""Shape checks shared by the public ops (clear errors instead of deep broadcasting failures)."""

from __future__ import annotations

import torch


def check_attn_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (B, H, T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T, D = q.shape
    Bk, Hkv, S, Dk = k.shape
    if (Bk, Hkv, S) != tuple(v.shape[:3]) or Bk != B:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must share (B, Hkv, S) with q's B={B}")
    if Dk != D:
        raise ValueError(f"q and k head dims differ: {D} vs {Dk}")
    if H % Hkv:
        raise ValueError(f"query heads H={H} must be divisible by KV heads Hkv={Hkv}")
    if S < T:
        raise ValueError(f"need S >= T (queries are the last T of S keys); got T={T}, S={S}")
