"""MiniMax Sparse Attention ops: msa_select (block selection) and msa_attn (block-sparse attention)."""

from __future__ import annotations

import torch

from ..backend import implementation
from ..checks import check_attn_shapes


def msa_select(
    index_q: torch.Tensor, index_k: torch.Tensor, block_size: int, top_k: int, *, pool: str = "max", backend: str = "auto"
) -> torch.Tensor:
    """Blocks each query attends to.

    index_q (B, G, T, Di), one index query head per KV group; index_k (B, T, Di), one shared
    index key head (B, S, Di) with S > T is also accepted: the T queries are the last T of the
    S positions). Returns int64 (B, G, T, top_k): the local block t // block_size first, then
    the other blocks b < t // block_size ranked by max over j in b of (index_q_t . index_k_j)
    / sqrt(Di), descending (pool="mean": by the score against the block's mean key); -1 pads
    when fewer blocks exist. No gradient flows through the selection.
    """
    if index_q.dim() != 4 or index_k.dim() != 3 or index_q.shape[0] != index_k.shape[0] or index_q.shape[3] != index_k.shape[2]:
        raise ValueError(f"index_q (B, G, T, Di) and index_k (B, T, Di) disagree: {tuple(index_q.shape)}, {tuple(index_k.shape)}")
    if index_k.shape[1] < index_q.shape[2]:
        raise ValueError(f"index_k has {index_k.shape[1]} positions, fewer than the {index_q.shape[2]} queries")
    if block_size < 1 or top_k < 1:
        raise ValueError(f"block_size and top_k must be >= 1; got {block_size}, {top_k}")
    fn = implementation("msa", "msa_select", backend, index_q.device)
    return fn(index_q, index_k, int(block_size), int(top_k), pool=pool)


def msa_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_idx: torch.Tensor,
    block_size: int,
    *,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Exact softmax over the selected blocks.

    q (B, H, T, D); k, v (B, G, T, D) (or (B, G, S, D), S >= T, queries aligned to the last T);
    H % G == 0; block_idx (B, G, T, top_k) from msa_select: distinct blocks, -1 for padding,
    and each query's own block among them. Head h uses block_idx[:, h // (H // G)]; query t
    attends to keys j <= t inside its selected blocks. Returns o (B, H, T, D).
    """
    check_attn_shapes(q, k, v)
    B, H, T, _ = q.shape
    if block_idx.shape[:3] != (B, k.shape[1], T):
        raise ValueError(f"block_idx must be (B, G, T, top_k) = ({B}, {k.shape[1]}, {T}, k); got {tuple(block_idx.shape)}")
    fn = implementation("msa", "msa_attn", backend, q.device)
    return fn(q, k, v, block_idx, int(block_size), scale=scale)
