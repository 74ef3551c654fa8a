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

from attnbench.kernels import lightning_attn, msa_attn, msa_select, sliding_window_attn, softmax_attn, tolerance
from attnbench.kernels.lightning import naive as lightning_naive
from attnbench.kernels.msa import naive as msa_naive
from attnbench.kernels.sliding_window import naive as sliding_naive
from attnbench.kernels.softmax import naive as softmax_naive
from attnbench.model.lightning import decay_rates


def _truth_and_plain(fn, *xs, **kw) -> tuple[tuple, tuple]:
    """fn's outputs (as a tuple) on float64 copies of xs (the truth) and on fp32 copies (plain torch)."""

    def cast(x, dtype):
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    outs = []
    for dtype in (torch.float64, torch.float32):
        out = fn(*(cast(x, dtype) for x in xs), **{n: cast(x, dtype) for n, x in kw.items()})
        outs.append(out if isinstance(out, tuple) else (out,))
    return outs[0], outs[1]


def selection_ok(block_idx, index_q, index_k, block_size: int) -> bool:
    """block_idx equals msa's naive selection, but for choices between blocks of tied scores."""
    want = msa_naive.msa_select(index_q, index_k, block_size, block_idx.shape[-1])
    if torch.equal(block_idx, want):
        return True
    if not (torch.equal(block_idx[..., 0], want[..., 0]) and torch.equal(block_idx < 0, want < 0)):
        return False  # another local block, or padding where a block exists (or the reverse)
    scores = msa_naive.block_scores(index_q, index_k, block_size)  # (B, G, T, NB)
    got_s, want_s = msa_naive.chosen_scores(block_idx, scores), msa_naive.chosen_scores(want, scores)
    return torch.allclose(got_s, want_s, rtol=tolerance.TIE_RTOL, atol=tolerance.TIE_RTOL)


def check(
    letter: str, *, device: torch.device, backend: str = "auto", window: int = 40, block_size: int = 16, top_k: int = 4
) -> tuple[bool, float]:
    """(passed, worst relative error max |got - truth| / max |truth|) of the op(s) of one layer letter."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    B, H, G, S, D = 2, 4, 2, 200, 24
    passed, worst = True, 0.0
    for T in (S, 1):
        q, k, v = r(B, H, T, D), r(B, G, S, D), r(B, G, S, D)
        if letter == "S":
            got = (softmax_attn(q, k, v, backend=backend),)
            truth, plain = _truth_and_plain(softmax_naive.softmax_attn, q, k, v)
        elif letter == "W":
            got = (sliding_window_attn(q, k, v, window, backend=backend),)
            truth, plain = _truth_and_plain(sliding_naive.sliding_window_attn, q, k, v, window)
        elif letter == "M":
            iq, ik = r(B, G, T, 8), r(B, S, 8)
            idx = msa_select(iq, ik, block_size, top_k, backend=backend)
            if not selection_ok(idx, iq, ik, block_size):
                return False, float("inf")
            got = (msa_attn(q, k, v, idx, block_size, backend=backend),)
            truth, plain = _truth_and_plain(msa_naive.msa_attn, q, k, v, idx, block_size)
        elif letter == "L":
            s = decay_rates(H, 0, 2).to(device)  # (H,) the first layer's rates
            ql, kl, vl = r(B, H, T, D, scale=0.3), r(B, H, T, D, scale=0.3), r(B, H, T, D)
            state = r(B, H, D, D) if T == 1 else None
            got = lightning_attn(ql, kl, vl, s, initial_state=state, backend=backend)  # (o, final state)
            truth, plain = _truth_and_plain(lightning_naive.lightning_attn, ql, kl, vl, s, initial_state=state)
        else:
            raise ValueError(f"layer letter {letter!r}")
        for got_t, truth_t, plain_t in zip(got, truth, plain):
            ok, err, _, _ = tolerance.check(got_t, truth_t, plain_t, torch.float32)
            passed &= ok
            worst = max(worst, err / float(truth_t.abs().max()))
    return passed, worst
