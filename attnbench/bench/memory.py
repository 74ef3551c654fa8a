"""Cache memory of one sequence, analytically, per layer letter (must equal what caches hold).

Each design's numbers are its spec's (attnbench/specs: token_elements, layer_bytes).

After n tokens, one layer's cache holds (elements x bytes of the cache dtype, one sequence):

    S softmax         n * 2 * G * D                         (K and V)
    M msa             n * (2 * G * D + Di)                  (K, V, one shared index key)
    W sliding window  min(n, w) * 2 * G * D                 (a ring buffer of w tokens)
    L lightning       H * D * D  in the state dtype (fp32)  (fixed: S is D x D per head; H, D of the
                      lightning heads; + (K - 1) * 3 * H * D for the qkv_conv variant)
    D DSA over MLA    n * (latent + rope + Di)              (compressed KV, indexer key)

The model's caches (attnbench.model) report the same numbers through ``nbytes()``; the test
tests/test_memory.py holds the two equal for every design and for bf16 and fp32.
"""

from __future__ import annotations

from attnbench.designs import spec_of

from attnbench.bench.presets import Arch

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1}
N_MAX = 1 << 40  # lengths searched for a memory crossover
STATE_DTYPE = "float32"  # lightning state: kept in fp32 (model/lightning.py, MiniMax)


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[str(dtype).replace("torch.", "")]
    except KeyError:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPE_BYTES)}") from None


def token_elements(arch: Arch, letter: str) -> int:
    """Cache elements one token adds to one layer of this letter (0 for fixed-size layers)."""
    return spec_of(letter).token_elements(arch)


def layer_bytes(arch: Arch, letter: str, n: int, dtype: str = "bfloat16", state_dtype: str = STATE_DTYPE) -> int:
    """Bytes one sequence's cache of one layer holds after n tokens."""
    return spec_of(letter).layer_bytes(arch, n, dtype_bytes(dtype), dtype_bytes(state_dtype))


def cache_bytes(arch: Arch, n: int, dtype: str = "bfloat16", state_dtype: str = STATE_DTYPE) -> int:
    """Bytes of the whole model's cache for one sequence after n tokens."""
    return sum(layer_bytes(arch, c, n, dtype, state_dtype) for c in arch.layout)


def bytes_per_token(arch: Arch, dtype: str = "bfloat16") -> int:
    """Cache bytes each further token adds once every window is full (the slope)."""
    return sum(token_elements(arch, c) for c in arch.layout if spec_of(c).grows) * dtype_bytes(dtype)


def fixed_bytes(arch: Arch, dtype: str = "bfloat16", state_dtype: str = STATE_DTYPE) -> int:
    """Bytes that do not grow with the context once every window is full (states, ring buffers)."""
    return sum(layer_bytes(arch, c, arch.window or 1, dtype, state_dtype) for c in arch.layout if not spec_of(c).grows)


def memory_crossover(arch: Arch, baseline: Arch, dtype: str, n_max: int = N_MAX) -> int | None:
    """Smallest n >= 1 with cache_bytes(arch, n) < cache_bytes(baseline, n), or None up to n_max.

    Both sides are piecewise linear in n (a window caps W layers), so the answer is found by
    bisection on the last interval where the sign changes (exact integer).
    """

    def cheaper(n: int) -> bool:
        return cache_bytes(arch, n, dtype) < cache_bytes(baseline, n, dtype)

    if not cheaper(n_max):
        return None
    lo, hi = 0, n_max  # invariant: cheaper(hi); cheaper(lo) false or lo == 0
    if cheaper(1):
        return 1
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cheaper(mid):
            hi = mid
        else:
            lo = mid
    return hi
