"""Correctness gate: an op is timed only after it matches its naive truth.

Run at the start of every timing experiment, on the device and backend that will be timed,
at small odd shapes (T = 200, D = 24, GQA), prefill (S = T) and decode-like (T = 1 of S)
calls, fp32 (16-bit is not gated). The truth is the op's naive formula (kernels/<op>/naive.py)
in float64, the yardstick the same formula in fp32 (plain torch in the gated dtype), and the
rule kernels/tolerance.py's. msa's selection must equal the naive selection, except between
blocks whose scores tie to rounding (tolerance.TIE_RTOL); its attention is then judged on the
op's own selection.
"""

from __future__ import annotations

import torch

from attnbench.designs import spec_of
from attnbench.kernels import tolerance
from attnbench.specs import OpShape, cast


def check(
    letter: str, *, device: torch.device, backend: str = "auto", window: int = 40, block_size: int = 16, top_k: int = 4
) -> tuple[bool, float]:
    """(passed, worst relative error max |got - truth| / max |truth|) of the op(s) of one layer letter.

    The inputs, the call and the truth are the design's spec's (attnbench/specs): every output
    the op returns is judged (lightning: its output and its final state).
    """
    spec = spec_of(letter)
    if spec.op is None:
        raise ValueError(f"layer letter {letter!r}: no op to gate")
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    passed, worst = True, 0.0
    for T in (200, 1):  # prefill, then one query of 200 keys
        sh = OpShape(B=2, H=4, Hkv=2, T=T, D=24, window=window, block_size=block_size, top_k=top_k, index_dim=8, S=200)
        x = spec.prepare(spec.inputs(sh, rnd), sh, backend)
        if x is None:
            return False, float("inf")
        got = spec.call(x, sh, backend)
        truth, plain = spec.naive(cast(x, torch.float64), sh), spec.naive(cast(x, torch.float32), sh)
        for got_t, truth_t, plain_t in zip(got, truth, plain):
            ok, err, _, _ = tolerance.check(got_t, truth_t, plain_t, torch.float32)
            passed &= ok
            worst = max(worst, err / float(truth_t.abs().max()))
    return passed, worst
