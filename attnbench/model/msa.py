"""msa: MiniMax Sparse Attention (M3), causal GQA attention over a few selected key blocks.

    main branch:   q (H heads), k, v (G = Hkv heads), partial RoPE, all cached in full
    index branch:  qI_t (one head per KV group, dim Di), kI_j (one shared head)
                   s(t, j) = qI_t . kI_j / sqrt(Di);  block score = max over the block
    selection:     local block t // bs, plus the top (k - 1) earlier blocks   (kernels.msa_select)
    attention:     exact softmax over the keys j <= t in the selected blocks  (kernels.msa_attn)

Top-k passes no gradient, so the index branch (fed a detached x) learns only from an
auxiliary loss: KL(p_main || p_index) over the selected tokens, where p_main is the
group-mean attention distribution of the main branch (detached), as in the public MSA
reference. The cache holds K, V and the index keys of every past token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import torch
from torch import nn

from attnbench.kernels import msa_attn, msa_select
from attnbench.kernels.msa import reference as msa_reference
from attnbench.kernels.msa.reference import selection_mask

from .common import Buffer, KVCache, Position, Rotary, rotary_frac

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig

INDEX_LOSS_MAX_TOKENS = 4096  # the auxiliary loss is dense (T x T): training lengths only


class MSACache(KVCache):
    """K, V (B, G, n, D) and the index keys (B, n, Di) of every past token."""

    def __init__(self):
        super().__init__()
        self.ik = Buffer(dim=1)

    def reserve(self, n: int) -> None:
        super().reserve(n)
        self.ik.hint = n

    def restore(self, length) -> None:
        super().restore(length)
        self.ik.truncate(length)

    def nbytes(self) -> int:
        return super().nbytes() + self.ik.nbytes()


def index_kl(q, k, iq, ik, block_idx, block_size: int, scale: float) -> torch.Tensor:
    """Mean over (B, G, T) of KL(p_main || p_index) on each query's selected tokens.

    The dense formula below for short sequences (and on GPUs); on CPU from DENSE_LIMIT on, the
    same quantity by rows over the selected blocks only (kernels/msa/reference.py index_kl).
    """
    T = q.shape[2]
    if q.device.type == "cpu" and T * T > msa_reference.DENSE_LIMIT:
        return msa_reference.index_kl(q, k, iq, ik, block_idx, block_size, scale)
    return index_kl_dense(q, k, iq, ik, block_idx, block_size, scale)


def index_kl_dense(q, k, iq, ik, block_idx, block_size: int, scale: float) -> torch.Tensor:
    """Mean over (B, G, T) of KL(p_main || p_index) on each query's selected tokens.

    q (B, H, T, D), k (B, G, T, D): main branch (detached here); iq (B, G, T, Di), ik (B, T, Di).
    """
    B, H, T, D = q.shape
    G = k.shape[1]
    mask = selection_mask(block_idx, block_size, T)  # (B, G, T, T)
    with torch.no_grad():
        main = (q.view(B, G, H // G, T, D) @ k.unsqueeze(2).transpose(-1, -2)) * scale  # (B, G, Hg, T, T)
        p_main = torch.softmax(main.masked_fill(~mask.unsqueeze(2), float("-inf")), dim=-1).mean(2)
    index = (iq @ ik.unsqueeze(1).transpose(-1, -2)) / math.sqrt(iq.shape[-1])  # (B, G, T, T)
    log_p_index = torch.log_softmax(index.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(~mask, 0.0)
    cross = -(p_main * log_p_index).sum(-1)  # cross-entropy; minus the entropy below gives KL
    entropy = -torch.special.xlogy(p_main, p_main).sum(-1)
    return (cross - entropy).mean()


class MSAAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int):
        super().__init__()
        self.H, self.G, self.D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.Di = design.index_dim
        self.block_size, self.top_k, self.pool = design.block_size, design.top_k, design.index_pool
        self.q = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * self.G * self.D, bias=False)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)
        self.index_q = nn.Linear(cfg.d_model, self.G * self.Di, bias=False)
        self.index_k = nn.Linear(cfg.d_model, self.Di, bias=False)
        self.pos = Position(cfg, design, self.D, self.H, cap=design.top_k * design.block_size)
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
        """x (B, T, C) -> (y (B, T, C), index KL loss (0 outside training))."""
        B, T, _ = x.shape
        pos0 = cache.length if cache is not None else 0
        q = self.pos.query(self.q(x).view(B, T, self.H, self.D).transpose(1, 2), pos0)  # (B, H, T, D)
        k, v = self.kv(x).view(B, T, 2, self.G, self.D).permute(2, 0, 3, 1, 4)  # (B, G, T, D)
        k = self.pos.key(k, pos0)
        xi = x.detach()  # the index branch learns only from its own loss
        iq = self.index_rope(self.index_q(xi).view(B, T, self.G, self.Di).transpose(1, 2), pos0)  # (B, G, T, Di)
        ik = self.index_rope(self.index_k(xi).unsqueeze(1), pos0).squeeze(1)  # (B, T, Di)
        if cache is not None:
            k_all, v_all = cache.append(k, v)
            ik_all = cache.ik.append(ik)
        else:
            k_all, v_all, ik_all = k, v, ik
        block_idx = msa_select(iq, ik_all, self.block_size, self.top_k, pool=self.pool)  # (B, G, T, top_k)
        y = msa_attn(q, k_all, v_all, block_idx, self.block_size)  # (B, H, T, D)
        aux = x.new_zeros(())
        if self.training and cache is None and T <= INDEX_LOSS_MAX_TOKENS:
            aux = index_kl(q.detach(), k.detach(), iq, ik, block_idx, self.block_size, 1.0 / math.sqrt(self.D))
        return self.o(y.transpose(1, 2).reshape(B, T, self.H * self.D)), aux
