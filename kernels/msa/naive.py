"""MiniMax Sparse Attention, naive: the one truth of msa_select and msa_attn.

Selection. Every token score s(t, j) = (qI_t . kI_j) / sqrt(Di), in float64 (the truth of the
ranking, whatever the inputs' dtype). A block's score is the max of its tokens' scores
(pool="max") or the score against its mean key (pool="mean"). A query's candidates are the
blocks wholly before its own block t // bs (so only complete blocks). It keeps its own block
first, then the top (k - 1) candidates by a stable descending sort of their scores: ties go to
the lowest block id. -1 pads when fewer candidates exist.

Attention. The masked softmax of softmax/naive.py; key j is allowed for query t when j's block
is among t's selected blocks and j <= t. All heads of a KV group share their group's
selection. Dense, O(T S), in the inputs' dtype (float64 for the truth).

reference.py is the fast plain-torch path (score tiles, top-k, block-major attention).
"""

from __future__ import annotations

import math

import torch

from ..softmax.naive import masked_attn, positions


def block_scores(index_q, index_k, block_size: int, *, pool: str = "max"):
    """index_q (B, G, T, Di); index_k (B, S, Di), queries the last T of S -> (B, G, T, S // block_size)
    float64 scores of the complete blocks, -inf where a block is not a candidate of the query."""
    B, G, T, Di = index_q.shape
    S = index_k.shape[1]
    nb = S // block_size
    iq = index_q.detach().double()
    ik = index_k.detach().double()[:, : nb * block_size].unflatten(1, (nb, block_size))  # (B, NB, bs, Di)
    if pool == "max":
        scores = torch.einsum("bgtd,bnjd->bgtnj", iq, ik).amax(-1) / math.sqrt(Di)  # (B, G, T, NB)
    elif pool == "mean":
        scores = torch.einsum("bgtd,bnd->bgtn", iq, ik.mean(2)) / math.sqrt(Di)
    else:
        raise ValueError(f"pool must be 'max' or 'mean'; got {pool!r}")
    t, _ = positions(T, S, iq.device)  # (T, 1)
    candidate = torch.arange(nb, device=iq.device)[None, :] < t // block_size  # (T, NB): strictly earlier blocks
    return scores.masked_fill(~candidate, float("-inf"))


def msa_select(index_q, index_k, block_size: int, top_k: int, *, pool: str = "max"):
    """-> block_idx int64 (B, G, T, top_k): the local block, then the best earlier blocks, -1 pads."""
    B, G, T, _ = index_q.shape
    S = index_k.shape[1]
    scores = block_scores(index_q, index_k, block_size, pool=pool)  # (B, G, T, NB)
    val, idx = scores.sort(dim=-1, descending=True, stable=True)  # stable: equal scores keep id order
    kk = min(top_k - 1, scores.shape[-1])
    t, _ = positions(T, S, index_q.device)
    out = torch.full((B, G, T, top_k), -1, dtype=torch.int64, device=index_q.device)
    out[..., 0] = t[:, 0] // block_size
    out[..., 1 : 1 + kk] = idx[..., :kk].masked_fill(val[..., :kk] == float("-inf"), -1)
    return out


def chosen_scores(block_idx, scores):
    """The scores (from block_scores) of a selection's earlier blocks, (B, G, T, top_k - 1)
    sorted descending, -inf for padding: selections that differ only between blocks of equal
    score have equal chosen_scores (how a kernel's selection is judged where scores tie). An
    id past the complete blocks scores +inf (no true selection has it)."""
    earlier = block_idx[..., 1:]
    nb = scores.shape[-1]
    padded = torch.cat([scores, torch.full_like(scores[..., :1], float("inf"))], dim=-1)  # (.., NB + 1)
    picked = padded.gather(-1, earlier.clamp(0, nb)).masked_fill(earlier < 0, float("-inf"))
    return picked.sort(dim=-1, descending=True).values


def selection_allowed(block_idx, block_size: int, S: int):
    """(B, G, T, S) bool: key j lies in one of query t's selected blocks and j <= t."""
    t, j = positions(block_idx.shape[2], S, block_idx.device)
    allowed = torch.zeros(*block_idx.shape[:3], S, dtype=torch.bool, device=block_idx.device)
    for c in range(block_idx.shape[-1]):  # -1 pads match no key (j // bs >= 0)
        allowed |= block_idx[..., c, None] == j // block_size
    return allowed & (j <= t)


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    H, G = q.shape[1], k.shape[1]
    allowed = selection_allowed(block_idx, block_size, k.shape[2]).repeat_interleave(H // G, dim=1)  # (B, H, T, S)
    return masked_attn(q, k, v, allowed, scale)
