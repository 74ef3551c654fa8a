"""gated_delta: the gated delta rule (Gated DeltaNet, arXiv 2412.06464; Qwen3-Next's linear layer)."""

from __future__ import annotations

import torch

from ..backend import implementation


def gated_delta(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule, per state head:

        S_t = exp(g_t) (I - b_t k_t^T k_t) S_{t-1} + b_t k_t^T v_t,   o_t = scale q_t S_t

    q, k (B, Hk, T, Dk); v (B, H, T, Dv) with H % Hk == 0 (state head h reads q, k head
    h // (H // Hk), Qwen3-Next's grouped value heads); g (B, H, T) log-gates <= 0; beta (B, H, T)
    in (0, 1); scale defaults to 1/sqrt(Dk); S_{-1} = initial_state (B, H, Dk, Dv) or zero.
    q and k are expected L2-normalised (the layer's job, as fla's use_qk_l2norm_in_kernel=False:
    with |k| = 1 and b < 1, I - b k^T k is a contraction). Returns (o (B, H, T, Dv) in v's
    dtype, final_state (B, H, Dk, Dv) fp32, float64 for float64 inputs). A decode step is T = 1 with the cache's state.
    """
    B, Hk, T, Dk = q.shape
    H = v.shape[1]
    if v.dim() != 4 or k.shape != q.shape or v.shape[0] != B or v.shape[2] != T or H % Hk:
        raise ValueError(
            f"q, k (B, Hk, T, Dk) and v (B, H, T, Dv), H % Hk == 0, disagree: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if g.shape != (B, H, T) or beta.shape != (B, H, T):
        raise ValueError(f"g and beta must be (B, H, T) = ({B}, {H}, {T}); got {tuple(g.shape)}, {tuple(beta.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, Dk, v.shape[3]):
        raise ValueError(f"initial_state must be (B, H, Dk, Dv); got {tuple(initial_state.shape)}")
    fn = implementation("gated_delta", "gated_delta", backend, q.device)
    return fn(q, k, v, g, beta, scale=scale, initial_state=initial_state)
