"""DeepSeek sparse attention ops (DSA, DeepSeek V3.2): dsa_select (the lightning indexer's top-k
tokens), dsa_attn (softmax over them) and dsa_index_kl (the indexer's KL-to-dense-attention loss)."""

from __future__ import annotations

import torch

from ..backend import implementation
from ..checks import check_attn_shapes


def dsa_select(index_q: torch.Tensor, index_w: torch.Tensor, index_k: torch.Tensor, top_k: int, *, backend: str = "auto") -> torch.Tensor:
    """Tokens each query attends to.

    index_q (B, HI, T, Di) the indexer's HI query heads; index_w (B, T, HI) their per-query
    weights; index_k (B, S, Di) one shared index key head, S >= T (the T queries are the last T
    of the S positions). Index score I(t, s) = sum_j index_w[t, j] ReLU(index_q[j, t] . index_k[s]).
    Returns int64 (B, T, top_k): the tokens s <= t with the highest scores, descending, equal
    scores by lowest id; -1 pads when fewer than top_k tokens exist. No gradient flows through it.
    """
    if index_q.dim() != 4 or index_k.dim() != 3 or index_q.shape[0] != index_k.shape[0] or index_q.shape[3] != index_k.shape[2]:
        raise ValueError(f"index_q (B, HI, T, Di) and index_k (B, S, Di) disagree: {tuple(index_q.shape)}, {tuple(index_k.shape)}")
    B, HI, T, _ = index_q.shape
    if index_w.shape != (B, T, HI):
        raise ValueError(f"index_w must be (B, T, HI) = ({B}, {T}, {HI}); got {tuple(index_w.shape)}")
    if index_k.shape[1] < T:
        raise ValueError(f"index_k has {index_k.shape[1]} positions, fewer than the {T} queries")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    return implementation("dsa", "dsa_select", backend, index_q.device)(index_q, index_w, index_k, int(top_k))


def dsa_attn(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, idx: torch.Tensor, *, scale: float | None = None, backend: str = "auto"
) -> torch.Tensor:
    """Exact softmax over the selected tokens.

    q (B, H, T, D); k, v (B, G, S, D), S >= T, queries aligned to the last T; H % G == 0; idx
    (B, T, top_k) from dsa_select (distinct tokens s <= t, -1 pads), shared by every head.
    scale defaults to 1/sqrt(D). Returns o (B, H, T, D).
    """
    check_attn_shapes(q, k, v)
    if idx.shape[:2] != (q.shape[0], q.shape[2]):
        raise ValueError(f"idx must be (B, T, top_k) = ({q.shape[0]}, {q.shape[2]}, k); got {tuple(idx.shape)}")
    return implementation("dsa", "dsa_attn", backend, q.device)(q, k, v, idx, scale=scale)


def dsa_index_kl(q, k, index_q, index_w, index_k, idx, *, scale: float | None = None, backend: str = "auto") -> torch.Tensor:
    """The indexer's training loss: mean over (B, T) of KL(p_main || p_index) over each query's
    selected tokens, p_main the main attention (q (B, H, T, D) against k (B, G, S, D)) summed over
    the H heads and L1-normalised, detached; p_index the softmax of the index scores. Gradients
    reach index_q, index_w, index_k only (DeepSeek V3.2's sparse training stage)."""
    return implementation("dsa", "dsa_index_kl", backend, q.device)(q, k, index_q, index_w, index_k, idx, scale=scale)
