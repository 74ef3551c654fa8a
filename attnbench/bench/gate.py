"""Correctness gate: an op is timed only after it matches a dense float64 formula here.

Run at the start of every timing experiment, on the device and backend that will be timed,
at small odd shapes (T = 200, D = 24, GQA), prefill (S = T) and decode-like (T = 1 of S)
calls. The dense formulas are written from the definitions (an explicit (T, S) mask and a
softmax; lightning's O(T^2) decayed form), not from the references.
"""

from __future__ import annotations

import math

import torch

from attnbench.kernels import lightning_attn, msa_attn, msa_select, sliding_window_attn, softmax_attn

RTOL = 1e-3  # relative to the largest output (fp32 kernels against fp64 formulas; bf16 is not gated)


def _dense(q, k, v, allowed):
    """Masked softmax attention in float64. q (B, H, T, D); k, v (B, G, S, D); allowed (.., T, S)."""
    H, G = q.shape[1], k.shape[1]
    k, v = (x.double().repeat_interleave(H // G, dim=1) for x in (k, v))
    s = torch.einsum("bhtd,bhsd->bhts", q.double(), k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhts,bhsd->bhtd", torch.softmax(s.masked_fill(~allowed, -math.inf), -1), v)


def _positions(T, S):
    t = torch.arange(S - T, S)[:, None]  # absolute query positions (queries are the last T)
    return t, torch.arange(S)[None, :]


def _lightning_dense(q, k, v, s, state):
    """o_t = sum_{j <= t} e^{-s (t - j)} (q_t . k_j) v_j + e^{-s (t + 1)} q_t S0, in float64."""
    T = q.shape[2]
    t = torch.arange(T, dtype=torch.float64)
    gap = t[:, None] - t[None, :]
    s = s.double().view(1, -1, 1, 1)
    w = torch.exp(-s * gap.clamp(min=0)) * (gap >= 0)
    o = torch.einsum("bhts,bhsd->bhtd", torch.einsum("bhtd,bhsd->bhts", q.double(), k.double()) * w, v.double())
    if state is not None:
        o = o + torch.exp(-s * (t + 1)[:, None]) * (q.double() @ state.double())
    return o


def _block_choice_ok(iq, ik, idx, bs):
    """Each selected earlier block's score >= every unselected earlier block's score (ties allowed)."""
    B, G, T, Di = iq.shape
    S = ik.shape[1]
    tok = torch.einsum("bgtd,bsd->bgts", iq.double(), ik.double()) / math.sqrt(Di)
    nb = S // bs
    blocks = tok[..., : nb * bs].unflatten(-1, (nb, bs)).amax(-1)  # (B, G, T, nb) complete blocks
    for b in range(B):
        for g in range(G):
            for i in range(T):
                local = (S - T + i) // bs
                earlier = blocks[b, g, i, :local]
                chosen = [int(j) for j in idx[b, g, i, 1:] if j >= 0]
                if int(idx[b, g, i, 0]) != local or len(chosen) != min(idx.shape[-1] - 1, local):
                    return False
                rest = [j for j in range(local) if j not in chosen]
                if chosen and rest and float(earlier[chosen].min()) < float(earlier[rest].max()) - 1e-9:
                    return False
    return True


def check(letter: str, *, device: torch.device, backend: str = "auto", window: int = 40, block_size: int = 16,
          top_k: int = 4) -> tuple[bool, float]:
    """(passed, worst relative error) of the op(s) of one layer letter against the dense formulas."""
    g = torch.Generator().manual_seed(0)
    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)
    B, H, G, S, D = 2, 4, 2, 200, 24
    worst = 0.0
    for T in (S, 1):
        t, j = _positions(T, S)
        q, k, v = r(B, H, T, D), r(B, G, S, D), r(B, G, S, D)
        if letter == "S":
            got, want = softmax_attn(q, k, v, backend=backend), _dense(q, k, v, j <= t)
        elif letter == "W":
            got, want = sliding_window_attn(q, k, v, window, backend=backend), _dense(q, k, v, (j <= t) & (j > t - window))
        elif letter == "M":
            iq, ik = r(B, G, T, 8), r(B, S, 8)
            idx = msa_select(iq, ik, block_size, top_k, backend=backend)
            if not _block_choice_ok(iq.cpu(), ik.cpu(), idx.cpu(), block_size):
                return False, math.inf
            chosen = torch.zeros(B, G, T, S // block_size + 2, dtype=torch.bool)
            chosen.scatter_(-1, idx.cpu().masked_fill(idx.cpu() < 0, S // block_size + 1), True)
            allowed = chosen[..., (torch.arange(S) // block_size)] & (j <= t)  # (B, G, T, S)
            got = msa_attn(q, k, v, idx, block_size, backend=backend)
            want = _dense(q, k, v, allowed.repeat_interleave(H // G, dim=1).to(device))
        elif letter == "L":
            s = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)]).to(device)
            ql, kl, vl = r(B, H, T, D, scale=0.3), r(B, H, T, D, scale=0.3), r(B, H, T, D)
            state = r(B, H, D, D) if T == 1 else None
            got, _ = lightning_attn(ql, kl, vl, s, initial_state=state, backend=backend)
            want = _lightning_dense(ql, kl, vl, s, state)
        else:
            raise ValueError(f"layer letter {letter!r}")
        err = float((got.double().cpu() - want.cpu()).abs().max() / want.abs().max())
        worst = max(worst, err)
    return worst <= RTOL, worst
