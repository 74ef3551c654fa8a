"""lightning: MiniMax-Text-01's linear attention layer.

    [q | k | v] = SiLU(W_qkv x)                 (SiLU on v too; no 1/sqrt(D), no denominator)
    S_t = exp(-s_h) S_{t-1} + k_t^T v_t,  o_t = q_t S_t      (S is D x D per head, fp32)
    s_h = 2^(-8 (h + 1) / H) * (1 - l / (L - 1) + 1e-5)      (l the layer index, L the layer count)
    y = W_o( sigmoid(W_g x) * RMSNorm(concat_h o) )

The cache is the fixed-size state S: its bytes do not grow with the context.

``attention.<design>.qkv_conv = K > 0`` is a labelled variant, not Text-01's layer: a short
causal depthwise convolution (kernel K, as Zoology's and fla's linear-attention baselines use)
on W_qkv x before the SiLU, [q | k | v] = SiLU(conv_K(W_qkv x)), which gives the layer a
sharp local path (e.g. "the previous token"). Its cache adds the last K - 1 projected tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from attnbench.kernels import lightning_attn

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig


def decay_rates(n_heads: int, layer: int, n_layers: int) -> torch.Tensor:
    """(H,) per-head decay rates s_h with MiniMax's per-layer scaling."""
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)])
    depth = layer / (n_layers - 1) if n_layers > 1 else 0.0
    return slopes * (1.0 - depth + 1e-5)


class LinearState:
    """The lightning cache: S (B, H, D, D) in fp32, the count of tokens it has absorbed, and
    (qkv_conv variant only) the convolution's last K - 1 inputs (B, K - 1, 3 H D)."""

    def __init__(self) -> None:
        self.state: torch.Tensor | None = None
        self.conv_tail: torch.Tensor | None = None
        self.length = 0

    def reserve(self, n: int) -> None:
        pass  # a fixed-size state

    def snapshot(self):
        return self.state, self.length, self.conv_tail  # forward() replaces these tensors, never writes into them

    def restore(self, snap) -> None:
        self.state, self.length, self.conv_tail = snap

    def nbytes(self) -> int:
        return sum(0 if t is None else t.numel() * t.element_size() for t in (self.state, self.conv_tail))

    # Outside a compiled prefill's graph (Model.compile_prefill): torch.compile would otherwise
    # specialize the graph to every value the token count takes, and recompile at each chunk.
    @torch.compiler.disable
    def advance(self, state: torch.Tensor, n: int) -> None:
        """The state after n more tokens."""
        self.state, self.length = state, self.length + n


class LightningAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__()
        # Heads may differ from the softmax layers' (design.lightning_heads), at the same total
        # width: the decay spectrum 2^(-8(h+1)/H) depends on H.
        self.H = getattr(design, "lightning_heads", 0) or cfg.n_heads
        self.D = cfg.n_heads * cfg.head_dim // self.H
        self.qkv = nn.Linear(cfg.d_model, 3 * self.H * self.D, bias=False)
        self.gate = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.norm = nn.RMSNorm(self.H * self.D, eps=1e-6)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)
        self.register_buffer("decay", decay_rates(self.H, layer, cfg.n_layers), persistent=False)
        self.K = design.qkv_conv
        width = 3 * self.H * self.D
        self.conv = nn.Conv1d(width, width, self.K, groups=width, bias=False) if self.K else None

    def mix(self, u: torch.Tensor, cache: LinearState | None) -> torch.Tensor:
        """u (B, T, 3HD) -> the causal depthwise convolution of u (identity without qkv_conv)."""
        if self.conv is None:
            return u
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
        q, k, v = qkv.permute(2, 0, 3, 1, 4).contiguous()  # (B, H, T, D) each; one copy for the three
        o, state = lightning_attn(q, k, v, self.decay, initial_state=cache.state if cache is not None else None)
        if cache is not None:
            cache.advance(state, T)
        o = self.norm(o.transpose(1, 2).reshape(B, T, self.H * self.D))
        return self.o(torch.sigmoid(self.gate(x)) * o), x.new_zeros(())
