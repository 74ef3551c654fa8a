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

from attnbench.designs import spec_of
from attnbench.model.backbone import Block
from attnbench.model.common import Buffer
from attnbench.specs import OpShape

from attnbench.bench.presets import Arch


def _randn(*shape, dtype, device, g, scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def op_call(
    letter: str, phase: str, n: int, a: Arch, *, batch: int, dtype: torch.dtype, device: torch.device, backend: str = "auto", seed: int = 0
) -> Callable[[], object]:
    """The op of one layer of this letter on its spec's random inputs: a prefill of n tokens, or
    one query against the n tokens its cache holds (a ring holds at most its window)."""
    spec = spec_of(letter)
    if spec.op is None:
        raise ValueError(f"no op for layer letter {letter!r}")
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return _randn(*shape, dtype=dtype, device=device, g=g, scale=scale)

    T, S = (n, n) if phase == "prefill" else (1, spec.held(a, n))
    sh = OpShape(
        B=batch,
        H=a.n_heads,
        Hkv=a.n_kv_heads,
        T=T,
        D=a.head_dim,
        window=a.window,
        block_size=a.block_size,
        top_k=a.top_k,
        index_dim=a.index_dim,
        S=S,
    )
    x = spec.inputs(sh, rnd)
    return lambda: spec.call(x, sh, backend)


def filled_cache(block: Block, n: int, *, batch: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """A cache for `block` holding n tokens of random keys / values / index keys / state (its spec fills it)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return _randn(*shape, dtype=dtype, device=device, g=g, scale=scale)

    attn: Any = block.attn  # which attention, and so which cache, the block's letter says
    cache: Any = attn.new_cache()
    spec_of(block.letter).fill_cache(attn, cache, n, batch, rnd)
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
