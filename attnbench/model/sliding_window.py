"""sliding_window: causal GQA softmax attention over the last `window` tokens, partial RoPE.

Decode keeps a ring buffer of `window` keys and values, so the cache stops growing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from attnbench.kernels import sliding_window_attn

from .softmax import SoftmaxAttention

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig


class RingCache:
    """The last `window` keys and values, (B, Hkv, window, D) each, slot = position % window."""

    def __init__(self, window: int):
        self.window = window
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0  # tokens seen so far

    def recent(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The held keys and values in position order: (B, Hkv, min(length, window), D)."""
        assert self.k is not None and self.v is not None, "recent() before the first write"
        n = min(self.length, self.window)
        order = (torch.arange(self.length - n, self.length, device=self.k.device)) % self.window
        return self.k[:, :, order], self.v[:, :, order]

    def write(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the newest tokens (only the last `window` of them can matter)."""
        if self.k is None:
            B, Hkv, _, D = k.shape
            self.k = k.new_zeros(B, Hkv, self.window, D)
            self.v = v.new_zeros(B, Hkv, self.window, D)
        assert self.v is not None
        T = k.shape[2]
        keep = min(T, self.window)
        slots = torch.arange(self.length + T - keep, self.length + T, device=k.device) % self.window
        self.k[:, :, slots] = k[:, :, T - keep :]
        self.v[:, :, slots] = v[:, :, T - keep :]
        self.length += T

    def reserve(self, n: int) -> None:
        pass  # always `window` tokens

    def snapshot(self):
        """The ring is overwritten in place, so a snapshot copies it (window tokens, small)."""
        if self.k is None or self.v is None:
            return None, self.length
        return (self.k.clone(), self.v.clone()), self.length

    def restore(self, snap) -> None:
        kv, self.length = snap
        if kv is not None:
            assert self.k is not None and self.v is not None  # a snapshot with tensors was taken after a write
            self.k.copy_(kv[0])
            self.v.copy_(kv[1])

    def nbytes(self) -> int:
        if self.k is None or self.v is None:
            return 0
        held = min(self.length, self.window)
        per_token = (self.k[:, :, 0].numel() + self.v[:, :, 0].numel()) * self.k.element_size()
        return held * per_token


class SlidingWindowAttention(SoftmaxAttention):
    """Same projections as softmax; only the attention span differs."""

    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__(cfg, design, layer)
        self.window = design.window

    def keys_seen(self, design: DesignConfig) -> int:
        return design.window

    # The ring replaces softmax's growing KVCache; each layer is only ever given the cache its own
    # new_cache() made (Model.new_cache), so the narrower argument types below are safe.
    def new_cache(self) -> RingCache:  # type: ignore[override]
        return RingCache(self.window)

    def fill_cache(self, x: torch.Tensor, cache: RingCache) -> None:  # type: ignore[override]
        """Only the last `window` tokens can ever be read again: project just those."""
        T = x.shape[1]
        keep = min(T, self.window)
        k, v = self.keys_values(x[:, T - keep :], cache.length + T - keep)
        cache.length += T - keep
        cache.write(k, v)

    def forward(self, x: torch.Tensor, cache: RingCache | None = None):  # type: ignore[override]
        """x (B, T, C) -> (y (B, T, C), aux loss 0)."""
        B, T, _ = x.shape
        q, k, v = self.project(x, cache.length if cache is not None else 0)
        if cache is not None and cache.length > 0:
            past_k, past_v = cache.recent()
            keys, values = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        else:
            keys, values = k, v
        if cache is not None:
            cache.write(k, v)
        y = sliding_window_attn(q, keys, values, self.window)  # (B, H, T, D)
        return self.o(y.transpose(1, 2).reshape(B, T, self.H * self.D)), x.new_zeros(())
