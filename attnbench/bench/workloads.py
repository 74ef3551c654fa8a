"""What gets timed: one attention op, or one whole layer (attention + MoE), prefill or decode.

    op     prefill: the public op (attnbench.kernels) on random q, k, v of n tokens
           decode:  the op for one query against n cached tokens (what a decode step calls)
    layer  prefill: Block.forward of n tokens into a fresh cache (eval, no grad)
           decode:  Block.forward of one token against a cache holding n tokens (filled
                    through the cache's own append/write path, rewound after every call)

Every builder returns a zero-argument callable that does the whole piece of work.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from attnbench.kernels import lightning_attn, msa_attn, msa_select, sliding_window_attn, softmax_attn
from attnbench.model.backbone import Block
from attnbench.model.common import Buffer
from attnbench.model.lightning import decay_rates

from .presets import Arch


def _randn(*shape, dtype, device, g, scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def op_call(
    letter: str, phase: str, n: int, a: Arch, *, batch: int, dtype: torch.dtype, device: torch.device, backend: str = "auto", seed: int = 0
) -> Callable[[], object]:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return _randn(*shape, dtype=dtype, device=device, g=g, scale=scale)

    B, H, G, D = batch, a.n_heads, a.n_kv_heads, a.head_dim
    T = n if phase == "prefill" else 1
    if letter == "S":
        q, k, v = r(B, H, T, D), r(B, G, n, D), r(B, G, n, D)
        return lambda: softmax_attn(q, k, v, backend=backend)
    if letter == "W":
        held = n if phase == "prefill" else min(n, a.window)  # decode: the ring buffer's keys
        q, k, v = r(B, H, T, D), r(B, G, held, D), r(B, G, held, D)
        return lambda: sliding_window_attn(q, k, v, a.window, backend=backend)
    if letter == "L":
        q, k, v = r(B, H, T, D, scale=0.1), r(B, H, T, D, scale=0.1), r(B, H, T, D)
        decay = decay_rates(H, 0, 2).to(device)
        state = None if phase == "prefill" else r(B, H, D, D).float()
        return lambda: lightning_attn(q, k, v, decay, initial_state=state, backend=backend)
    if letter == "M":
        q, k, v = r(B, H, T, D), r(B, G, n, D), r(B, G, n, D)
        iq, ik = r(B, G, T, a.index_dim), r(B, n, a.index_dim)

        def call():
            idx = msa_select(iq, ik, a.block_size, a.top_k, backend=backend)
            return msa_attn(q, k, v, idx, a.block_size, backend=backend)

        return call
    raise ValueError(f"no op for layer letter {letter!r}")


def filled_cache(block: Block, n: int, *, batch: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """A cache for `block` holding n tokens of random keys / values / index keys / state."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return _randn(*shape, dtype=dtype, device=device, g=g)

    attn: Any = block.attn  # which attention, and so which cache, the letter below says
    cache: Any = attn.new_cache()
    letter = block.letter
    if letter in "SM":
        k = r(batch, attn.Hkv if letter == "S" else attn.G, n, attn.D)
        v = torch.randn_like(k)
        cache.reserve(n + 1)  # room for the decode step's token, allocated once
        cache.append(k, v)
        if letter == "M":
            cache.ik.append(r(batch, n, attn.Di))
    elif letter == "W":
        k = r(batch, attn.Hkv, min(n, attn.window), attn.D)
        cache.write(k, torch.randn_like(k))
        cache.length = n
    elif letter == "L":
        cache.state, cache.length = r(batch, attn.H, attn.D, attn.D).float(), n
    return cache


def rewind(cache, n: int) -> None:
    """Forget the tokens a timed decode step appended (the cache holds n tokens again)."""
    if isinstance(getattr(cache, "k", None), Buffer):  # KVCache, MSACache: growing buffers
        for buf in (cache.k, cache.v, getattr(cache, "ik", None)):
            if buf is not None:
                buf.length = n
    else:  # RingCache, LinearState: the count of tokens seen
        cache.length = n


def layer_call(
    block: Block, phase: str, n: int, *, batch: int, dtype: torch.dtype, device: torch.device, seed: int = 0
) -> Callable[[], object]:
    g = torch.Generator().manual_seed(seed)
    C = block.attn_norm.normalized_shape[0]
    if phase == "prefill":
        x = _randn(batch, n, C, dtype=dtype, device=device, g=g)

        def prefill():
            with torch.no_grad():
                return block(x, block.attn.new_cache())

        return prefill
    x = _randn(batch, 1, C, dtype=dtype, device=device, g=g)
    cache = filled_cache(block, n, batch=batch, dtype=dtype, device=device, seed=seed)

    def decode():
        with torch.no_grad():
            out = block(x, cache)
        rewind(cache, n)
        return out

    return decode


def make_block(model_cfg, design_cfg, letter: str, *, dtype: torch.dtype, device: torch.device) -> Block:
    """One layer of the scaled model (layer index 0; the index only changes lightning's decay values)."""
    torch.manual_seed(0)
    return Block(model_cfg, design_cfg, 0, letter).to(device=device, dtype=dtype).eval()
