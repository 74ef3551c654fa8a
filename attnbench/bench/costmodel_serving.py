"""Serving costs (claim C7): prefix caching and speculative decoding, on the cost model.

A growing cache (S, M, D) serves any prefix of itself, and rolls back by truncation. A
lightning state (L) and a sliding-window ring (W) are overwritten as tokens arrive: a prefix
is reusable only where a copy was saved (every b tokens), and rolling back draft tokens needs
the states kept at each draft (or one kept state and a recompute of the accepted drafts).
Here: the bytes kept and the tokens run again for both, and ``verify_cost`` (k drafts verified
in one forward), from costmodel.py's layer and op costs and memory.py's cache bytes.
"""

from __future__ import annotations

from dataclasses import replace

from attnbench.designs import of, spec_of

from .cost_terms import Cost
from .costmodel import layer_cost, op_cost
from .memory import STATE_DTYPE, layer_bytes
from attnbench.bench.presets import Arch

ROLLBACK_STRATEGIES = ("states", "recompute")


def _all_grow(arch: Arch) -> bool:
    """Every layer's cache grows with every token (any prefix of it is itself: truncation rolls back)."""
    return all(spec_of(c).grows for c in set(arch.layout))


def prefix_cache_bytes(arch: Arch, P: int, b: int, dtype: str = "bfloat16", state_dtype: str = STATE_DTYPE) -> int:
    """Bytes kept to serve a hit at any saved position of a shared prefix of P tokens, states every b tokens.

    S, M, D   cache_bytes of P tokens (every prefix of a growing cache is itself)
    L         (P // b) saved states, H D D each in state_dtype (+ the conv variant's tail)
    W         a saved ring at each boundary j b (j = 1 .. P // b): min(j b, w) tokens each
    """
    saves = P // b
    total = 0
    for c in arch.layout:
        spec = spec_of(c)
        if spec.grows:
            total += layer_bytes(arch, c, P, dtype, state_dtype)
        elif spec.ring:  # what the ring held at each save
            total += sum(layer_bytes(arch, c, j * b, dtype) for j in range(1, saves + 1))
        else:  # a fixed state: one per save
            total += saves * layer_bytes(arch, c, max(P, 1), dtype, state_dtype)
    return total


def prefix_recompute_tokens(arch: Arch, hit: int, b: int) -> int:
    """Tokens the whole model runs again on a prefix hit of ``hit`` shared tokens.

    Growing caches only: 0 (truncate to the hit). Else the L and W layers resume from the last
    saved state at b floor(hit / b), and every layer must run the hit mod b tokens again (an L or
    W layer's input is the output of the layers below): at most b - 1, on average (b - 1) / 2.
    """
    return 0 if _all_grow(arch) else hit % b


def rollback_bytes(arch: Arch, k: int, dtype: str = "bfloat16", state_dtype: str = STATE_DTYPE, strategy: str = "states") -> int:
    """Bytes kept beside the cache to roll back any of k verified draft tokens.

    S, M, D   0 (truncation: the drafts' entries are simply forgotten)
    L         states: the state after each draft, k x H D D; recompute: the one state before them
    W         the min(k, w) ring slots the drafts overwrite, 2 G D elements each
    """
    if strategy not in ROLLBACK_STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: one of {', '.join(ROLLBACK_STRATEGIES)}")
    keep = k if strategy == "states" else 1
    total = 0
    for c in arch.layout:
        spec = spec_of(c)
        if spec.grows:
            continue
        if spec.ring:  # the ring slots the drafts overwrite
            total += layer_bytes(arch, c, min(k, arch.window), dtype)
        else:  # a fixed state
            total += keep * layer_bytes(arch, c, 1, dtype, state_dtype)
    return total


def rollback_recompute_tokens(arch: Arch, accepted: int, strategy: str = "states") -> int:
    """Tokens run again after a rollback that keeps ``accepted`` drafts: recompute with any L or W layer: accepted; else 0."""
    if strategy not in ROLLBACK_STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: one of {', '.join(ROLLBACK_STRATEGIES)}")
    return accepted if strategy == "recompute" and not _all_grow(arch) else 0


def verify_cost(arch: Arch, n: int, k: int, *, dtype: str = "bfloat16", impl: str = "fused", moe=None) -> Cost:
    """k draft tokens verified in one forward against a cache of n tokens.

    Per layer: the projections and MoE of k tokens at once (layer_cost's decode term at batch k:
    2 P k FLOPs, the weights and experts touched read once), and the attention op's decode cost
    with k times its FLOPs but one read of the cache (the k queries share it). k single steps
    cost k x model_cost(decode, n).
    """
    total = Cost()
    for letter in sorted(set(arch.layout)):
        lin = layer_cost(letter, "decode", n, arch, batch=k, dtype=dtype, impl=impl, moe=moe)
        linear = [t for t in lin.terms if t.what == "projections + MoE"]
        attn = op_cost(of(letter).cost, "decode", n, arch, dtype=dtype, impl=impl)
        terms = linear + [replace(t, flops=t.flops * k) for t in attn.terms]
        total = total + Cost([replace(t, what=f"{letter}: {t.what}") for t in Cost(terms).scaled(arch.count(letter)).terms])
    return total
