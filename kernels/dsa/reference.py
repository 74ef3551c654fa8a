"""DeepSeek sparse attention (DSA), plain torch: memory-bounded selection, attention and indexer loss.

Selection. The index scores I(t, s) = sum_j w_{t,j} ReLU(qI_{t,j} . kI_s) of one tile of
queries against the keys s < the tile's end, accumulated head by head into one (Tq, keys) fp32
buffer, so memory is O(Tq S) (Tq from SCORE_BYTES), never O(T S); the top_k of each row come
from msa's top_blocks (torch.topk, ties redone by a stable sort: equal scores go to the lowest id).

Attention. Small problems build the token mask and call SDPA; large ones, tile by tile of
queries, gather each query's top_k keys and values (O(Tq top_k D) a tile) and take an exact
softmax over them. Under autograd the gathered tiles are what the backward keeps: O(T top_k D)
in all, never O(T S).

Indexer loss. The same tiles: the main branch's probabilities over the gathered keys (no
gradient), the mean over heads, against the log-softmax of the gathered index scores.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..msa.reference import top_blocks

SCORE_BYTES = 4 << 20  # one tile's (Tq, keys) fp32 index scores: 4 MiB tiles ran twice as fast as 16 MiB ones at 16K (cache-sized)
GATHER_BYTES = 16 << 20  # one tile's gathered keys and values (B, Tq, top_k, G, D) fp32, twice
DENSE_LIMIT = 1 << 17  # T * S up to which dsa_attn always uses a dense masked SDPA
DENSE_KEYS = 2  # and where S <= DENSE_KEYS * top_k: dense costs T S, gathering T top_k, and gathering pays per token
# (probes, not recorded: top_k 512 without grad, dense 1.4x faster at 1K keys, about even at 2K, 2.3x slower at 4K)


@torch.compiler.disable  # data-dependent tiles; the selection passes no gradient
def dsa_select(index_q, index_w, index_k, top_k: int):
    """index_q (B, HI, T, Di); index_w (B, T, HI); index_k (B, S, Di), S >= T, queries the last T
    -> idx int64 (B, T, top_k): each query's tokens s <= t by index score, descending; -1 pads."""
    B, HI, T, _ = index_q.shape
    S = index_k.shape[1]
    iq, iw, ik = (x.detach().float() for x in (index_q, index_w, index_k))
    out = torch.full((B, T, top_k), -1, dtype=torch.int64, device=iq.device)
    step = max(16, min(T, SCORE_BYTES // (4 * S)))
    for b in range(B):
        for t0 in range(0, T, step):
            t1 = min(T, t0 + step)
            end = S - T + t1  # keys the tile can see
            scores = iq.new_zeros(t1 - t0, end)
            for j in range(HI):
                scores.addcmul_(torch.relu(iq[b, j, t0:t1] @ ik[b, :end].T), iw[b, t0:t1, j : j + 1])
            pos = torch.arange(S - T + t0, S - T + t1, device=iq.device)[:, None]  # absolute query positions
            scores.masked_fill_(torch.arange(end, device=iq.device)[None, :] > pos, float("-inf"))
            val, idx = top_blocks(scores, min(top_k, end))
            out[b, t0:t1, : val.shape[-1]] = idx.masked_fill(val == float("-inf"), -1)
    return out


def _gather(x, idx):
    """x (B, G, S, D); idx (B, Tq, k) token ids (-1 pads read token 0) -> (B, G, Tq, k, D): one
    index_select of whole D-rows from x as a (B G S, D) table (a view of a contiguous x), laid out so
    that each (batch, group, query) meets its keys in one small GEMM with no permuting copy."""
    B, G, S, D = x.shape
    base = (torch.arange(B, device=idx.device)[:, None] * G + torch.arange(G, device=idx.device)) * S  # (B, G)
    rows = idx.clamp(min=0)[:, None] + base[:, :, None, None]  # (B, G, Tq, k)
    return x.reshape(B * G * S, D).index_select(0, rows.reshape(-1)).view(*rows.shape, D)


def _tile_probs(q, k, idx, scale: float):
    """Softmax of q (B, H, Tq, D) over its gathered keys -> (B, G, Tq, Hg, k)."""
    B, H, Tq, D = q.shape
    G = k.shape[1]
    qg = q.reshape(B, G, H // G, Tq, D).transpose(2, 3)  # (B, G, Tq, Hg, D)
    s = torch.matmul(qg, _gather(k, idx).transpose(-1, -2)) * scale  # (B, G, Tq, Hg, k)
    return torch.softmax(s.masked_fill((idx < 0)[:, None, :, None, :], float("-inf")), dim=-1)


def _tile_rows(B: int, top_k: int, G: int, D: int, T: int) -> int:
    return max(16, min(T, GATHER_BYTES // max(1, 8 * B * top_k * G * D)))


@torch.compiler.disable  # a tile loop of gathers and small GEMMs: traced (dynamic shapes) a training step ran 10x slower
def dsa_attn(q, k, v, idx, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); idx (B, T, top_k) -> o (B, H, T, D)."""
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if T * S <= DENSE_LIMIT or S <= DENSE_KEYS * idx.shape[-1]:
        allowed = torch.zeros(B, T, S + 1, dtype=torch.bool, device=q.device)
        allowed.scatter_(-1, idx.masked_fill(idx < 0, S), True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None, :, :S], scale=scale, enable_gqa=G != H)
    step = _tile_rows(B, idx.shape[-1], G, D, T)
    k, v = k.contiguous(), v.contiguous()  # once: each tile's gather reads them as (B G S, D) tables
    outs = []
    for t0 in range(0, T, step):
        sel = idx[:, t0 : t0 + step]
        p = _tile_probs(q[:, :, t0 : t0 + step], k, sel, scale)  # (B, G, Tq, Hg, k)
        o = torch.matmul(p, _gather(v, sel))  # (B, G, Tq, Hg, D)
        outs.append(o.transpose(2, 3).reshape(B, H, sel.shape[1], D))
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]


@torch.compiler.disable  # the same tiles as dsa_attn
def dsa_index_kl(q, k, index_q, index_w, index_k, idx, *, scale: float | None = None):
    """Mean over (B, T) of KL(p_main || p_index) on each query's selected tokens, tile by tile;
    gradients reach index_q, index_w, index_k only (the main branch is detached)."""
    B, H, T, D = q.shape
    G = k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k = q.detach(), k.detach().contiguous()  # once: each tile's gather reads k as a (B G S, D) table
    ik = index_k.unsqueeze(1)  # (B, 1, S, Di): one shared index key head
    total = q.new_zeros(())
    for t0 in range(0, T, _tile_rows(B, idx.shape[-1], G, D, T)):
        t1 = min(T, t0 + _tile_rows(B, idx.shape[-1], G, D, T))
        sel = idx[:, t0:t1]
        with torch.no_grad():
            p_main = _tile_probs(q[:, :, t0:t1], k, sel, scale).mean((1, 3))  # (B, Tq, k)
        ikg = _gather(ik, sel)[:, 0]  # (B, Tq, k, Di)
        dots = torch.relu(torch.einsum("bjtd,btkd->btjk", index_q[:, :, t0:t1], ikg))  # (B, Tq, HI, k)
        z = (dots * index_w[:, t0:t1, :, None]).sum(2).masked_fill(sel < 0, float("-inf"))
        log_p_index = torch.log_softmax(z, dim=-1).masked_fill(sel < 0, 0.0)
        total = total + (torch.special.xlogy(p_main, p_main) - p_main * log_p_index).sum()
    return total / (B * T)
