"""Long-context numerics: lightning decay over 2^22 steps, softmax over a million keys."""

from __future__ import annotations

import math

import pytest
import torch

import attnbench.kernels as K


@pytest.mark.slow
def test_lightning_stays_finite_and_exact_over_4m_steps():
    """k = v = 1 (Dk = Dv = 1): S_t is a geometric sum with a closed form, 1 - a^(t+1) over 1 - a."""
    T = 1 << 22
    decay = torch.tensor([1e-6, 1e-3, 0.5])  # from almost no decay to fast decay
    ones = torch.ones(1, 3, T, 1)
    o, state = K.lightning_attn(ones, ones, ones, decay)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    for h, s in enumerate(decay.tolist()):
        want = -math.expm1(-s * T) / -math.expm1(-s)  # (1 - a^T) / (1 - a), computed stably
        assert state[0, h, 0, 0].item() == pytest.approx(want, rel=1e-4)
        t = T // 2 - 1
        assert o[0, h, t, 0].item() == pytest.approx(-math.expm1(-s * (t + 1)) / -math.expm1(-s), rel=1e-4)


def test_lightning_carried_state_never_overflows():
    """A huge initial state decays towards 0 without inf/NaN (decays are never exp(+s t))."""
    q = k = v = torch.zeros(1, 1, 4096, 4)
    S0 = torch.full((1, 1, 4, 4), 1e30)
    _, state = K.lightning_attn(q, k, v, torch.tensor([5.0]), initial_state=S0)
    assert torch.isfinite(state).all() and float(state.abs().max()) == 0.0


@pytest.mark.slow
def test_softmax_over_a_million_keys():
    S, D = 1 << 20, 16
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 1, S, D, generator=g)
    v = torch.randn(1, 1, S, D, generator=g)
    q = k[:, :, 12345:12346].clone() * 8  # a query that should find key 12345 among a million
    o = K.softmax_attn(q, k, v, scale=1.0)
    assert torch.isfinite(o).all()
    scores = k[0, 0].double() @ q[0, 0, 0].double()  # float64 truth
    p = torch.softmax(scores, dim=0)
    want = p @ v[0, 0].double()
    assert torch.allclose(o[0, 0, 0].double(), want, rtol=1e-4, atol=1e-5)
