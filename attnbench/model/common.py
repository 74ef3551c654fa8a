"""Pieces shared by the attention designs: rotary embedding and growing cache buffers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import torch
from torch import nn

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig


class Rotary(nn.Module):
    """RoPE on the first ``frac`` of each head ("rotate half" layout), the rest left position-free.

    Angles are computed in float64: at 4M positions an fp32 angle would be off by ~0.25 rad.
    The last (cos, sin) table is kept: training and decode ask for the same positions again.
    """

    inv_freq: torch.Tensor  # (rot / 2,) a buffer

    def __init__(self, head_dim: int, frac: float, base: float):
        super().__init__()
        self.rot = int(head_dim * frac) // 2 * 2
        inv_freq = base ** (-torch.arange(0, self.rot, 2, dtype=torch.float64) / max(self.rot, 1))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._table: tuple | None = None  # ((pos0, T, device, dtype), cos, sin)

    def table(self, pos0: int, T: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (T, rot / 2) for positions pos0 .. pos0 + T - 1."""
        key = (pos0, T, device, dtype)
        if torch.compiler.is_compiling():  # inside a compiled graph (train_step) the table is part of the graph: a
            return self._angles(pos0, T, device, dtype)  # cached one would be a guard, recompiling at every change of length
        if self._table is None or self._table[0] != key:
            self._table = (key, *self._angles(pos0, T, device, dtype))
        return self._table[1], self._table[2]

    def _angles(self, pos0: int, T: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(pos0, pos0 + T, device=device, dtype=torch.float64)
        angle = pos[:, None] * self.inv_freq.to(device)[None, :]  # (T, rot / 2)
        return angle.cos().to(dtype), angle.sin().to(dtype)

    def forward(self, x: torch.Tensor, pos0: int) -> torch.Tensor:
        """x (B, h, T, D), positions pos0 .. pos0 + T - 1 -> same shape."""
        if self.rot == 0:
            return x
        cos, sin = self.table(pos0, x.shape[2], x.device, x.dtype)
        half = self.rot // 2
        x1, x2, rest = x[..., :half], x[..., half : self.rot], x[..., self.rot :]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


def rotary_frac(cfg, design) -> float:
    """The RoPE fraction of a design's softmax-type layers (``attention.<design>.position``)."""
    return {"rope": 1.0, "partial": cfg.rotary_frac, "nope": 0.0, "logn": cfg.rotary_frac, "nope_logn": 0.0}[design.position]


LOGN_INIT = 1.0 / math.log(512)  # s x log(n) = 1 at n = 512 keys, mid-way through the training lengths


class LogNScale(nn.Module):
    """Scalable-Softmax: query logits times s_h * log(n), n the keys the query can see.

        n_t = min(t + 1, cap)         (t the absolute position; cap: the window, or the selected keys)
        q_t <- q_t * s_h * log(n_t)   (so softmax(q.k / sqrt(D)) sharpens as the context grows)

    s_h is learned per head. Scaling q is the same as scaling every logit of the query.
    """

    def __init__(self, n_heads: int, cap: int = 0):
        super().__init__()
        self.cap = cap
        self.s = nn.Parameter(torch.full((n_heads,), LOGN_INIT))

    def forward(self, q: torch.Tensor, pos0: int) -> torch.Tensor:
        """q (B, H, T, D), positions pos0 .. -> same shape."""
        n = torch.arange(pos0 + 1, pos0 + 1 + q.shape[2], device=q.device, dtype=torch.float64)
        if self.cap:
            n = n.clamp(max=self.cap)
        return q * (self.s.view(-1, 1, 1) * n.log().to(q.dtype)[:, None])


class Position(nn.Module):
    """What a softmax-type layer does with positions: RoPE on q and k, and (logn) a logit scale on q."""

    def __init__(self, cfg: ModelConfig, design: DesignConfig, head_dim: int, n_heads: int, cap: int = 0):
        super().__init__()
        self.rope = Rotary(head_dim, rotary_frac(cfg, design), cfg.rope_base)
        self.logn = LogNScale(n_heads, cap) if design.position in ("logn", "nope_logn") else None

    def query(self, q: torch.Tensor, pos0: int) -> torch.Tensor:
        q = self.rope(q, pos0)
        return q if self.logn is None else self.logn(q, pos0)

    def key(self, k: torch.Tensor, pos0: int) -> torch.Tensor:
        return self.rope(k, pos0)


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
        assert self.data is not None  # _grow allocated it
        self.data.narrow(self.dim, self.length, n).copy_(x)
        self.length += n
        return self.view()

    def view(self) -> torch.Tensor:
        assert self.data is not None, "view() of an empty buffer"
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
