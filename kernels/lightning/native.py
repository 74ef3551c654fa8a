"""Lightning attention, the fused native CPU forward (native.cpp beside this file), built on first use.

The same contract as reference.lightning_attn. It runs where it can: a CPU tensor, no gradient
asked for (it has no backward: training keeps the reference), and the extension built
(kernels/native_build.py). Everywhere else it is the reference, the reason logged once. The products
run in fp32 whatever the inputs' dtype (the reference's compute_dtype default), the carry across
chunks in float64, as the reference's; chunk length as the reference's ``chunk_for``.
"""

from __future__ import annotations

import torch

from .. import native_build as build
from . import reference


def extension():
    """The built module, or the reason it is not built (a str)."""
    return build.load("lightning")


def lightning_attn(q, k, v, decay, *, initial_state=None, chunk: int | None = None):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv) in q's dtype, final_state (B, H, Dk, Dv) fp32).

    chunk: tokens per chunk (default: the reference's chunk_for(Dk)); the tests vary it."""
    if build.why_not("lightning", extension(), q, k, v, initial_state) is not None:
        return reference.lightning_attn(q, k, v, decay, initial_state=initial_state, chunk=chunk)
    B, H, T, Dk = q.shape
    Dv, P = v.shape[-1], B * H
    qf, kf, vf = (x.float().reshape(P, T, -1).contiguous() for x in (q, k, v))  # (P, T, D): copies only if strided or 16-bit
    s = decay.to(torch.float64).repeat(B).contiguous()  # (P,): pair p = b H + h
    if initial_state is None:
        state = torch.zeros(P, Dk, Dv, dtype=torch.float64)
    else:
        state = initial_state.to(torch.float64).reshape(P, Dk, Dv).clone()
    o = extension().forward(qf, kf, vf, s, state, chunk or reference.chunk_for(Dk))  # state updated in place
    return o.view(B, H, T, Dv).to(q.dtype), state.view(B, H, Dk, Dv).float()
