"""Lightning attention, naive: the one truth of lightning_attn, in two obviously equal forms.

``lightning_attn``, the closed form, dense O(T^2): unrolling S_t = e^{-s} S_{t-1} + k_t^T v_t,
    o_t = sum_{j <= t} e^{-s (t - j)} (q_t . k_j) v_j + e^{-s (t + 1)} q_t S_{-1}
    S_{T-1} = sum_j e^{-s (T - 1 - j)} k_j^T v_j + e^{-s T} S_{-1}
``lightning_recurrent``, the definition, token by token (a Python loop over T).

Both compute in the inputs' dtype (float64 for the truth) and return the final state in it.
reference.py is the fast plain-torch path (chunks, a float64 state carry); the decay rates of
the model's layers come from attnbench/model/lightning.py ``decay_rates``.
"""

from __future__ import annotations

import torch


def lightning_attn(q, k, v, decay, *, initial_state=None):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) rates s > 0; initial_state (B, H, Dk, Dv)
    or None -> (o (B, H, T, Dv), final state (B, H, Dk, Dv)), both in q's dtype."""
    T = q.shape[2]
    s = decay.to(device=q.device, dtype=q.dtype).view(1, -1, 1, 1)  # (1, H, 1, 1)
    t = torch.arange(T, device=q.device, dtype=q.dtype)
    gap = t[:, None] - t[None, :]  # (T, T): t - j
    weight = torch.where(gap >= 0, torch.exp(-s * gap.clamp(min=0)), torch.zeros((), dtype=q.dtype, device=q.device))
    o = torch.einsum("bhts,bhsd->bhtd", torch.einsum("bhtd,bhsd->bhts", q, k) * weight, v)  # (B, H, T, Dv)
    final = torch.einsum("bhs,bhsd,bhse->bhde", torch.exp(-s[..., 0] * (T - 1 - t)), k, v)  # (B, H, Dk, Dv)
    if initial_state is not None:
        S0 = initial_state.to(q.dtype)
        o = o + torch.exp(-s * (t + 1)[:, None]) * (q @ S0)
        final = final + torch.exp(-s * T) * S0
    return o, final


def lightning_recurrent(q, k, v, decay, *, initial_state=None):
    """The recurrence itself, S_t = e^{-s} S_{t-1} + k_t^T v_t, o_t = q_t S_t; same contract as lightning_attn."""
    B, H, T, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state.to(q.dtype).clone()
    a = torch.exp(-decay.to(device=q.device, dtype=q.dtype)).view(1, H, 1, 1)
    outs = []
    for i in range(T):
        S = a * S + k[:, :, i, :, None] * v[:, :, i, None, :]  # (B, H, Dk, Dv)
        outs.append((q[:, :, i, None, :] @ S).squeeze(2))
    return torch.stack(outs, dim=2), S
