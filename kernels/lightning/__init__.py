"""lightning_attn: linear attention with per-head exponential decay (MiniMax lightning)."""

from __future__ import annotations

import torch

from ..backend import implementation


def lightning_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decayed linear attention, no scale and no normalisation.

    q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) positive rates s:
        S_t = exp(-s) S_{t-1} + k_t^T v_t,   o_t = q_t S_t,
    with S_{-1} = initial_state (B, H, Dk, Dv) or zero. Returns (o (B, H, T, Dv) in q's dtype,
    final_state = S_{T-1} (B, H, Dk, Dv) in fp32). Finite and exact for T up to 2^22.
    """
    if q.dim() != 4 or q.shape != k.shape or q.shape[:3] != v.shape[:3]:
        raise ValueError(f"q, k (B, H, T, Dk) and v (B, H, T, Dv) must agree; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if decay.shape != (q.shape[1],):
        raise ValueError(f"decay must be (H,)=({q.shape[1]},); got {tuple(decay.shape)}")
    if initial_state is not None and initial_state.shape != (q.shape[0], q.shape[1], q.shape[3], v.shape[3]):
        raise ValueError(f"initial_state must be (B, H, Dk, Dv); got {tuple(initial_state.shape)}")
    fn = implementation("lightning", "lightning_attn", backend, q.device)
    return fn(q, k, v, decay, initial_state=initial_state)
