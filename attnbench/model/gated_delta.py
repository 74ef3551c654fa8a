"""gated_delta: the Gated DeltaNet layer (arXiv 2412.06464) as Qwen3-Next ships it.

    [q | k | v] = SiLU(conv_K(W_qkv x))                 short causal depthwise conv, kernel K (4)
    q, k = q / |q|, k / |k|                             L2 per head (I - b k^T k is then a contraction)
    b_t = sigmoid(W_b x)                                per head: the write strength
    g_t = -exp(A_log) softplus(W_a x + dt_bias)         per head: log a_t <= 0, Mamba2's decay
    S_t = a_t (I - b_t k_t^T k_t) S_{t-1} + b_t k_t^T v_t,   o_t = q_t S_t / sqrt(Dk)
    y = W_o( RMSNorm_head(o) * SiLU(W_z x) )            the output gate (fla's FusedRMSNormGated)

Heads: ``design.lightning_heads`` (0: model.n_heads) at the model's total width, as the
lightning layer's, so a gdn model matches lightning_hybrid_h8's width, heads and state size
(H x Dk x Dv fp32 a layer). The cache is lightning's LinearState: the state S, the token count
and the convolution's last K - 1 inputs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.kernels import gated_delta

from .lightning import LinearState

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig

CONV = 4  # the GDN paper's and Qwen3-Next's kernel (design.qkv_conv overrides it)


class GatedDeltaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__()
        self.H = getattr(design, "lightning_heads", 0) or cfg.n_heads
        self.D = cfg.n_heads * cfg.head_dim // self.H  # Dk = Dv, the total width kept
        width = 3 * self.H * self.D
        self.K = getattr(design, "qkv_conv", 0) or CONV
        self.qkv = nn.Linear(cfg.d_model, width, bias=False)
        self.conv = nn.Conv1d(width, width, self.K, groups=width, bias=False)
        self.ab = nn.Linear(cfg.d_model, 2 * self.H, bias=False)  # [W_a | W_b]
        self.gate = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.norm = nn.RMSNorm(self.D, eps=1e-6)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)
        # fla's / Mamba2's initialisation: A in (0, 16), dt in (1e-3, 1e-1) log-uniform, dt_bias = softplus^-1(dt)
        # (drawn from torch's generator, as every other weight: a training's seed changes them too)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1e-4, 16)))
        dt = torch.exp(torch.rand(self.H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))

    def mix(self, u: torch.Tensor, cache: LinearState | None) -> torch.Tensor:
        """u (B, T, 3HD) -> its causal depthwise convolution, the cache's last K - 1 inputs before it."""
        B, _, W = u.shape
        tail = cache.conv_tail if cache is not None and cache.conv_tail is not None else u.new_zeros(B, self.K - 1, W)
        full = torch.cat([tail, u], dim=1)  # (B, K - 1 + T, 3HD)
        if cache is not None:
            cache.conv_tail = full[:, full.shape[1] - (self.K - 1) :]
        return F.conv1d(full.transpose(1, 2), self.conv.weight, groups=W).transpose(1, 2)

    def new_cache(self) -> LinearState:
        return LinearState()

    def fill_cache(self, x: torch.Tensor, cache: LinearState) -> None:
        self.forward(x, cache)  # the state update is the whole cost; the output is cheap beside it

    def forward(self, x: torch.Tensor, cache: LinearState | None = None):
        """x (B, T, C) -> (y (B, T, C), aux loss 0). With a cache: starts from and updates its state."""
        B, T, _ = x.shape
        qkv = F.silu(self.mix(self.qkv(x), cache)).view(B, T, 3, self.H, self.D)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (B, H, T, D) each
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        a, b = self.ab(x).float().transpose(1, 2).chunk(2, dim=1)  # (B, H, T) each
        g = -torch.exp(self.A_log.float())[:, None] * F.softplus(a + self.dt_bias.float()[:, None])
        o, state = gated_delta(q, k, v, g, torch.sigmoid(b), initial_state=cache.state if cache is not None else None)
        if cache is not None:
            cache.advance(state, T)
        o = self.norm(o.transpose(1, 2)) * F.silu(self.gate(x).view(B, T, self.H, self.D))  # (B, T, H, D)
        return self.o(o.reshape(B, T, self.H * self.D)), x.new_zeros(())
