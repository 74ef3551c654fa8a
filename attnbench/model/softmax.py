"""softmax: causal GQA attention with partial RoPE (MiniMax M2 / Text-01's softmax layers).

Positions follow ``attention.<design>.position`` (common.Position): partial RoPE by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from attnbench.kernels import softmax_attn

from .common import KVCache, Position

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig


class SoftmaxAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__()
        self.H, self.Hkv, self.D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * self.Hkv * self.D, bias=False)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)
        self.pos = Position(cfg, design, self.D, self.H, cap=self.keys_seen(design))

    def keys_seen(self, design: DesignConfig) -> int:
        """The most keys one query can attend to (0: unbounded); caps the log-n scale."""
        return 0

    def new_cache(self) -> KVCache:
        return KVCache()

    def project(self, x: torch.Tensor, pos0: int):
        """x (B, T, C) -> q (B, H, T, D), k, v (B, Hkv, T, D), RoPE applied at pos0.."""
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.H, self.D).transpose(1, 2)
        return (self.pos.query(q, pos0), *self.keys_values(x, pos0))

    def keys_values(self, x: torch.Tensor, pos0: int):
        """x (B, T, C) -> k, v (B, Hkv, T, D), RoPE on k at pos0.. (no queries)."""
        B, T, _ = x.shape
        k, v = self.kv(x).view(B, T, 2, self.Hkv, self.D).permute(2, 0, 3, 1, 4)
        return self.pos.key(k, pos0), v

    def fill_cache(self, x: torch.Tensor, cache: KVCache) -> None:
        """Append x's keys and values without attending (nothing reads this layer's output)."""
        cache.append(*self.keys_values(x, cache.length))

    def forward(self, x: torch.Tensor, cache: KVCache | None = None):
        """x (B, T, C) -> (y (B, T, C), aux loss 0). With a cache: appends, attends to all of it."""
        B, T, _ = x.shape
        q, k, v = self.project(x, cache.length if cache is not None else 0)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, Hkv, n, D)
        y = softmax_attn(q, k, v)  # (B, H, T, D)
        return self.o(y.transpose(1, 2).reshape(B, T, self.H * self.D)), x.new_zeros(())
