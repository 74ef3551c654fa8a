"""dsa: DeepSeek sparse attention (DeepSeek V3.2), causal GQA attention over a few selected tokens.

    main branch:   q (H heads), k, v (G = Hkv heads), partial RoPE, all cached in full (as msa's)
    indexer:       qI_{t,j} (HI = INDEX_HEADS heads, dim Di), w_{t,j} (per query and head), one
                   shared key kI_s;  I(t, s) = sum_j w_{t,j} ReLU(qI_{t,j} . kI_s)
                   (w scaled by 1/sqrt(HI Di), DeepSeek's weights_proj scaling)
    selection:     the top_tokens() tokens s <= t by I(t, s)          (kernels.dsa_select)
    attention:     exact softmax over the selected tokens, every head (kernels.dsa_attn)

The token budget is msa's: top_k * block_size (msa's top_k blocks of block_size tokens), so msa
vs dsa isolates blocks against tokens at the same number of attended tokens. Top-k passes no
gradient, so the indexer (fed a detached x) learns only from its loss: KL(p_main || p_index) over
the selected tokens, p_main the main attention summed over heads and L1-normalised, detached
(DeepSeek V3.2's sparse stage; kernels.dsa_index_kl). The cache holds K, V and the index keys of
every past token (msa's MSACache).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from attnbench.kernels import dsa_attn, dsa_index_kl, dsa_select

from .common import Position, Rotary, rotary_frac
from .msa import INDEX_LOSS_MAX_TOKENS, MSACache

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig

INDEX_HEADS = 4  # the indexer's heads HI ("few heads"; DeepSeek V3.2: 64 of dim 128 beside 128 main heads)


def top_tokens(design: DesignConfig) -> int:
    """Tokens each query attends to: msa's budget, top_k blocks of block_size tokens."""
    return design.top_k * design.block_size


class DSAAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__()
        self.H, self.G, self.D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.HI, self.Di = INDEX_HEADS, design.index_dim
        self.tokens = top_tokens(design)
        self.q = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * self.G * self.D, bias=False)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)
        self.index_q = nn.Linear(cfg.d_model, self.HI * self.Di, bias=False)
        self.index_w = nn.Linear(cfg.d_model, self.HI, bias=False)
        self.index_k = nn.Linear(cfg.d_model, self.Di, bias=False)
        self.pos = Position(cfg, design, self.D, self.H, cap=self.tokens)
        self.index_rope = Rotary(self.Di, rotary_frac(cfg, design) if design.index_rope else 0.0, cfg.rope_base)

    def new_cache(self) -> MSACache:
        return MSACache()

    def fill_cache(self, x: torch.Tensor, cache: MSACache) -> None:
        """Append K, V and index keys without selecting or attending."""
        B, T, _ = x.shape
        pos0 = cache.length
        k, v = self.kv(x).view(B, T, 2, self.G, self.D).permute(2, 0, 3, 1, 4)
        cache.append(self.pos.key(k, pos0), v)
        cache.ik.append(self.index_rope(self.index_k(x).unsqueeze(1), pos0).squeeze(1))

    def forward(self, x: torch.Tensor, cache: MSACache | None = None):
        """x (B, T, C) -> (y (B, T, C), indexer KL loss (0 outside training))."""
        B, T, _ = x.shape
        pos0 = cache.length if cache is not None else 0
        q = self.pos.query(self.q(x).view(B, T, self.H, self.D).transpose(1, 2), pos0)  # (B, H, T, D)
        k, v = self.kv(x).view(B, T, 2, self.G, self.D).permute(2, 0, 3, 1, 4)  # (B, G, T, D)
        k = self.pos.key(k, pos0)
        xi = x.detach()  # the indexer learns only from its own loss
        iq = self.index_rope(self.index_q(xi).view(B, T, self.HI, self.Di).transpose(1, 2), pos0)  # (B, HI, T, Di)
        iw = self.index_w(xi) / math.sqrt(self.HI * self.Di)  # (B, T, HI)
        ik = self.index_rope(self.index_k(xi).unsqueeze(1), pos0).squeeze(1)  # (B, T, Di)
        if cache is not None:
            k_all, v_all = cache.append(k, v)
            ik_all = cache.ik.append(ik)
        else:
            k_all, v_all, ik_all = k, v, ik
        idx = dsa_select(iq, iw, ik_all, self.tokens)  # (B, T, tokens)
        y = dsa_attn(q, k_all, v_all, idx)  # (B, H, T, D)
        aux = x.new_zeros(())
        if self.training and cache is None and T <= INDEX_LOSS_MAX_TOKENS:
            aux = dsa_index_kl(q.detach(), k.detach(), iq, iw, ik, idx)
        return self.o(y.transpose(1, 2).reshape(B, T, self.H * self.D)), aux
