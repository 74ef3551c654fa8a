"""Pieces shared by the attention designs: rotary embedding and growing cache buffers."""

from __future__ import annotations

import torch
from torch import nn


class Rotary(nn.Module):
    """RoPE on the first ``frac`` of each head ("rotate half" layout), the rest left position-free.

    Angles are computed in float64: at 4M positions an fp32 angle would be off by ~0.25 rad.
    """

    def __init__(self, head_dim: int, frac: float, base: float):
        super().__init__()
        self.rot = int(head_dim * frac) // 2 * 2
        inv_freq = base ** (-torch.arange(0, self.rot, 2, dtype=torch.float64) / max(self.rot, 1))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, pos0: int) -> torch.Tensor:
        """x (B, h, T, D), positions pos0 .. pos0 + T - 1 -> same shape."""
        if self.rot == 0:
            return x
        T = x.shape[2]
        pos = torch.arange(pos0, pos0 + T, device=x.device, dtype=torch.float64)
        angle = pos[:, None] * self.inv_freq.to(x.device)[None, :]  # (T, rot / 2)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        half = self.rot // 2
        x1, x2, rest = x[..., :half], x[..., half : self.rot], x[..., self.rot :]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


class Buffer:
    """A tensor that grows along ``dim`` (capacity doubles; ``hint`` pre-sizes the first allocation)."""

    def __init__(self, dim: int):
        self.dim = dim
        self.data: torch.Tensor | None = None
        self.length = 0
        self.hint = 0  # capacity to allocate at the first append (evaluation knows its length)

    def _grow(self, like: torch.Tensor, capacity: int) -> None:
        if self.data is not None and self.data.shape[self.dim] >= capacity:
            return
        shape = list(like.shape)
        shape[self.dim] = capacity
        grown = like.new_empty(shape)
        if self.data is not None:
            grown.narrow(self.dim, 0, self.length).copy_(self.view())
        self.data = grown

    def append(self, x: torch.Tensor) -> torch.Tensor:
        """Append x along dim; return the whole valid prefix (a view)."""
        n = x.shape[self.dim]
        if self.data is None:
            self._grow(x, max(n, self.hint))
        elif self.length + n > self.data.shape[self.dim]:
            self._grow(x, max(self.length + n, 2 * self.data.shape[self.dim]))
        self.data.narrow(self.dim, self.length, n).copy_(x)
        self.length += n
        return self.view()

    def view(self) -> torch.Tensor:
        return self.data.narrow(self.dim, 0, self.length)

    def truncate(self, length: int) -> None:
        """Forget everything after ``length`` (later appends overwrite it)."""
        self.length = length

    def nbytes(self) -> int:
        """Bytes of the tokens held (not of the spare capacity)."""
        if self.data is None:
            return 0
        return self.view().numel() * self.data.element_size()

    def reserved_bytes(self) -> int:
        return 0 if self.data is None else self.data.numel() * self.data.element_size()


class KVCache:
    """Keys and values of every past token: (B, Hkv, n, D) each. Used by softmax layers."""

    def __init__(self):
        self.k, self.v = Buffer(dim=2), Buffer(dim=2)

    @property
    def length(self) -> int:
        return self.k.length

    def reserve(self, n: int) -> None:
        """Allocate room for n tokens at the first append (no doubling, no spare bytes)."""
        self.k.hint = self.v.hint = n

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k.append(k), self.v.append(v)

    def snapshot(self):
        """What restore() needs to come back here: only the length (appends never rewrite the past)."""
        return self.length

    def restore(self, length) -> None:
        self.k.truncate(length)
        self.v.truncate(length)

    def nbytes(self) -> int:
        return self.k.nbytes() + self.v.nbytes()
