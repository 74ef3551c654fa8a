"""Lightning attention, the fused native CPU forward (native.cpp beside this file), built on first use.

The same contract as reference.lightning_attn. It runs where it can: a CPU tensor, no gradient
asked for (it has no backward: training keeps the reference), and the extension built (torch's
``cpp_extension`` with the machine's gcc, ``-O3 -march=native``: AVX2/FMA where the CPU has them,
a plain loop elsewhere; the build lands in torch's extension cache, ~1 minute once per machine).
Everywhere else it is the reference, and the reason is logged once (``why_not``). The products
run in fp32 whatever the inputs' dtype (the reference's compute_dtype default), the carry across
chunks in float64, as the reference's; chunk length as the reference's ``chunk_for``.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from pathlib import Path

import torch

from . import reference

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("native.cpp")
_said: set[str] = set()


@lru_cache(maxsize=1)
def extension():
    """The built module, or the reason it could not be built (a str). ATTNBENCH_NATIVE=0 turns it off."""
    if os.environ.get("ATTNBENCH_NATIVE", "1") == "0":
        return "ATTNBENCH_NATIVE=0"
    try:
        from torch.utils import cpp_extension

        return cpp_extension.load(
            name="attnbench_lightning_native",
            sources=[str(SOURCE)],
            extra_cflags=["-O3", "-march=native", "-ffp-contract=fast"],
            verbose=False,
        )
    except Exception as ex:  # noqa: BLE001 - a compiler, ninja or header problem: any of them means "use the reference"
        return f"build failed: {type(ex).__name__}: {str(ex).strip().splitlines()[-1] if str(ex).strip() else ''}"[:300]


def why_not(q: torch.Tensor, *tensors: torch.Tensor | None) -> str | None:
    """None when the native kernel runs for these inputs, else the reason the reference runs."""
    if q.device.type != "cpu":
        return f"device {q.device.type} (a CPU kernel)"
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, *tensors)):
        return "a gradient is asked for (forward only)"
    ext = extension()
    return ext if isinstance(ext, str) else None


def lightning_attn(q, k, v, decay, *, initial_state=None, chunk: int | None = None):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv) in q's dtype, final_state (B, H, Dk, Dv) fp32).

    chunk: tokens per chunk (default: the reference's chunk_for(Dk)); the tests vary it."""
    reason = why_not(q, k, v, initial_state)
    if reason is not None:
        if reason not in _said:
            _said.add(reason)
            log.warning("lightning native kernel not used (%s): the reference runs", reason)
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
