"""What an inference engine does with a model's caches: save a state at a prefix and resume from
it, roll back rejected draft tokens, and store caches in a low-precision format.

Built on the caches' own API (ModelCache.snapshot / restore / nbytes); what it adds:

    saved_state(cache)        an independent copy of every layer's cache (an engine's saved
                              prefix: later tokens never write into it)
    rollback(model, cache, snap, drafts, accepted)
                              the cache as if only the accepted draft tokens had been seen:
                              growing caches (S, M) truncate to snap + accepted; a lightning
                              state (L) or a ring (W) is overwritten in place, so it goes back
                              to the snapshot and the accepted tokens are fed again (recompute)
    cache_tensors(cache)      every layer's held tensors in position order (the equality tests)
    Storage(fmt).store(cache) stored values replaced by their round trip through fmt:

        bfloat16, float8_e4m3fn, float8_e5m2:  x -> x.to(fmt).to(fp32), values clamped to the
                                               format's finite range first (a saturating cast)
        int8 (per-head absmax):                s = max |x| / 127 over one head's vector (a
                                               token's key or value) or one head's state matrix;
                                               x -> round(x / s).clamp(-127, 127) * s

      Compute stays fp32: only what the cache holds is rounded.
"""

from __future__ import annotations

import copy

import torch

from attnbench.names import SERVING_FORMATS

from attnbench.model.backbone import Model, ModelCache
from attnbench.model.common import Buffer, KVCache
from attnbench.model.lightning import LinearState
from attnbench.model.msa import MSACache
from attnbench.model.sliding_window import RingCache

FORMATS = SERVING_FORMATS  # attnbench/names.py: the report reads the names without importing torch
BYTES = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1}  # per stored element
SCALE_BYTES = 4  # int8: one fp32 scale a head's vector (a token's K or V in one head) or state matrix


def saved_state(cache: ModelCache) -> ModelCache:
    """An independent copy of the cache (the tokens held, not spare capacity semantics)."""
    return copy.deepcopy(cache)


def growing(layer_cache) -> bool:
    """Whether this layer's cache only ever appends (a truncation rolls it back)."""
    return isinstance(layer_cache, KVCache)


@torch.no_grad()
def rollback(model: Model, cache: ModelCache, snap: list, drafts: torch.Tensor, accepted: int) -> int:
    """After model(drafts, cache) from snapshot ``snap``: keep only drafts[:, :accepted].

    drafts (B, k). Returns the tokens recomputed (0 where every layer's cache grows).
    """
    if all(growing(c) for c in cache.layers):
        for c, s in zip(cache.layers, snap):
            c.restore(s + accepted)  # a KVCache snapshot is its length
        return 0
    cache.restore(snap)
    if accepted:
        model(drafts[:, :accepted], cache, logits_at=[-1])
    return accepted


def cache_tensors(cache: ModelCache) -> list[torch.Tensor]:
    """The tensors each layer holds, in position order (valid tokens only)."""
    out: list[torch.Tensor] = []
    for c in cache.layers:
        if isinstance(c, MSACache):
            out += [c.k.view(), c.v.view(), c.ik.view()]
        elif isinstance(c, KVCache):
            out += [c.k.view(), c.v.view()]
        elif isinstance(c, RingCache):
            out += list(c.recent())
        elif isinstance(c, LinearState):
            out += [t for t in (c.state, c.conv_tail) if t is not None]
        else:
            raise TypeError(f"cache of type {type(c).__name__}")
    return out


def round_trip(x: torch.Tensor, fmt: str, head_dims: int) -> torch.Tensor:
    """x in fp32 -> its value after storage in fmt. head_dims: the trailing dims one int8 scale covers."""
    if fmt == "float32":
        return x
    if fmt == "int8":
        dims = tuple(range(x.dim() - head_dims, x.dim()))
        s = x.abs().amax(dim=dims, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127
        return (x / s).round().clamp(-127, 127) * s
    dt = getattr(torch, fmt)
    big = torch.finfo(dt).max
    return x.clamp(-big, big).to(dt).to(x.dtype)


class Storage:
    """Stores a cache in ``fmt`` as it fills: store(cache) rounds what was added since the last call
    (K/V tokens once each; the lightning state and the ring, small and rewritten, every call)."""

    def __init__(self, fmt: str):
        if fmt not in FORMATS:
            raise ValueError(f"storage format {fmt!r}: one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self.stored: dict[int, int] = {}  # id of a Buffer -> tokens already rounded

    def _buffer(self, buf: Buffer, head_dims: int) -> None:
        if buf.data is None:
            return
        start = min(self.stored.get(id(buf), 0), buf.length)
        new = buf.data.narrow(buf.dim, start, buf.length - start)
        new.copy_(round_trip(new, self.fmt, head_dims))
        self.stored[id(buf)] = buf.length

    @torch.no_grad()
    def store(self, cache: ModelCache) -> None:
        if self.fmt == "float32":
            return
        for c in cache.layers:
            if isinstance(c, KVCache):  # (B, G, n, D) per token and head; msa's index keys (B, n, Di) per token
                self._buffer(c.k, 1)
                self._buffer(c.v, 1)
                if isinstance(c, MSACache):
                    self._buffer(c.ik, 1)
            elif isinstance(c, RingCache):
                if c.k is not None and c.v is not None:
                    c.k.copy_(round_trip(c.k, self.fmt, 1))
                    c.v.copy_(round_trip(c.v, self.fmt, 1))
            elif isinstance(c, LinearState):  # S (B, H, D, D): one scale a head's matrix
                if c.state is not None:  # a new tensor: snapshots keep referring to the old one
                    c.state = round_trip(c.state, self.fmt, 2)
                if c.conv_tail is not None:
                    c.conv_tail = round_trip(c.conv_tail, self.fmt, 1)
