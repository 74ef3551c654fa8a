"""DeepSeek sparse attention (DSA, DeepSeek V3.2), naive: the one truth of dsa_select, dsa_attn
and the indexer's loss dsa_index_kl.

Indexer (the "lightning indexer"). H_I index heads with queries qI_{t,j} (dim Di), one shared
index key kI_s, and per-query head weights w_{t,j}:
    I(t, s) = sum_j w_{t,j} ReLU(qI_{t,j} . kI_s)                  in float64 here
Selection. A query's candidates are the tokens s <= t; it keeps the top_k by I(t, s), by a
stable descending sort: equal scores go to the lowest token id. -1 pads when fewer than top_k
tokens exist (all are then taken). One selection per query, shared by every head (DeepSeek's
MQA form of MLA; here every KV group reads the same tokens).

Attention. The masked softmax of softmax/naive.py over the selected tokens (GQA).

Indexer loss. With p_main(t, .) the main attention over the selected tokens summed over all H
heads and L1-normalised (the mean over heads), detached, and p_index(t, .) the softmax of I(t, .)
over the same tokens: KL(p_main || p_index), averaged over (batch, query). Dense, O(T S).

reference.py is the memory-bounded plain-torch path (query tiles, gathered tokens).
"""

from __future__ import annotations

import torch

from ..softmax.naive import masked_attn, positions


def index_scores(index_q, index_w, index_k):
    """index_q (B, HI, T, Di); index_w (B, T, HI); index_k (B, S, Di), queries the last T of S ->
    I (B, T, S) in the inputs' dtype, -inf where s > t."""
    dots = torch.relu(torch.einsum("bjtd,bsd->bjts", index_q, index_k))  # (B, HI, T, S)
    scores = torch.einsum("bjts,btj->bts", dots, index_w)
    t, s = positions(index_q.shape[2], index_k.shape[1], index_q.device)
    return scores.masked_fill(s > t, float("-inf"))


def dsa_select(index_q, index_w, index_k, top_k: int):
    """-> idx int64 (B, T, top_k): each query's top_k tokens s <= t by I(t, s), descending, -1 pads."""
    scores = index_scores(index_q.detach().double(), index_w.detach().double(), index_k.detach().double())
    val, idx = scores.sort(dim=-1, descending=True, stable=True)  # stable: equal scores keep id order
    B, T, S = scores.shape
    kk = min(top_k, S)
    out = torch.full((B, T, top_k), -1, dtype=torch.int64, device=scores.device)
    out[..., :kk] = idx[..., :kk].masked_fill(val[..., :kk] == float("-inf"), -1)
    return out


def chosen_scores(idx, scores):
    """The index scores (B, T, top_k) of a selection, sorted descending, -inf for padding:
    selections that differ only between tokens of equal score have equal chosen_scores."""
    return scores.gather(-1, idx.clamp(min=0)).masked_fill(idx < 0, float("-inf")).sort(dim=-1, descending=True).values


def selection_allowed(idx, S: int):
    """(B, T, S) bool: token s is among query t's selected tokens (the selection keeps s <= t)."""
    allowed = torch.zeros(*idx.shape[:2], S + 1, dtype=torch.bool, device=idx.device)
    allowed.scatter_(-1, idx.masked_fill(idx < 0, S), True)  # -1 pads land in a spare column
    return allowed[..., :S]


def dsa_attn(q, k, v, idx, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); idx (B, T, top_k) -> o (B, H, T, D)."""
    return masked_attn(q, k, v, selection_allowed(idx, k.shape[2])[:, None], scale)


def dsa_index_kl(q, k, index_q, index_w, index_k, idx, *, scale: float | None = None):
    """Mean over (B, T) of KL(p_main || p_index) on each query's selected tokens; gradients reach
    the indexer's inputs only. q (B, H, T, D), k (B, G, S, D) the main branch."""
    H, D = q.shape[1], q.shape[-1]
    allowed = selection_allowed(idx, k.shape[2])  # (B, T, S)
    scale = D**-0.5 if scale is None else scale
    with torch.no_grad():
        kh = k.repeat_interleave(H // k.shape[1], dim=1)  # (B, H, S, D)
        main = torch.einsum("bhtd,bhsd->bhts", q, kh) * scale
        p_main = torch.softmax(main.masked_fill(~allowed[:, None], float("-inf")), dim=-1).mean(1)  # (B, T, S)
    z = index_scores(index_q, index_w, index_k).masked_fill(~allowed, float("-inf"))
    log_p_index = torch.log_softmax(z, dim=-1).masked_fill(~allowed, 0.0)
    kl = torch.special.xlogy(p_main, p_main) - p_main * log_p_index
    return kl.sum(-1).mean()
