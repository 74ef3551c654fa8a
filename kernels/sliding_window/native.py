"""Causal sliding-window attention, the fused native CPU forward (native.cpp beside this file).

The same contract as reference.sliding_window_attn. It runs on a CPU tensor with no gradient
asked for and the extension built (kernels/native_build.py); everywhere else the reference runs, the
reason logged once. Computes in fp32 whatever the inputs' dtype; the output in q's dtype.
"""

from __future__ import annotations

import math

from .. import native_build as build
from . import reference


def extension():
    """The built module, or the reason it is not built (a str)."""
    return build.load("sliding_window")


def sliding_window_attn(q, k, v, window: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T, queries aligned to the last T keys -> o (B, H, T, D)."""
    if build.why_not("sliding_window", extension(), q, k, v) is not None:
        return reference.sliding_window_attn(q, k, v, window, scale=scale)
    qf, kf, vf = (x.float().contiguous() for x in (q, k, v))  # copies only if strided or 16-bit
    o = extension().forward(qf, kf, vf, int(window), float(scale if scale is not None else 1 / math.sqrt(q.shape[-1])))
    return o.to(q.dtype)
