"""MiniMax Sparse Attention (MSA), plain torch: block selection and block-sparse attention.

Selection. One index query head per KV group and one shared index key head score every past
token, s(t, j) = (qI_t . kI_j) / sqrt(Di); a block's score is the max over its tokens (or,
with pool="mean", the score against the block's mean key, MoBA-style). Each query keeps its
local block t // bs first, then the top (k - 1) earlier blocks by score, descending; -1 pads.
Scores are computed tile by tile (queries x keys, a few MB each) and max-pooled at once, so
the T x T token-score matrix never exists.

Attention. Exact softmax over the keys j <= t inside the selected blocks; all heads of a KV
group share their group's selection. Small problems build the token mask and call SDPA;
large ones run "block-major": every (query, block) pair is sorted by block, so each key block
meets all the queries that chose it in one GEMM, and no per-query copy of keys is made.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..softmax.reference import causal_mask

SELECT_ROWS = 512  # (batch x group x queries) rows per score tile
SELECT_KEYS = 512  # keys per score tile (rounded to whole blocks)
DENSE_LIMIT = 1 << 22  # T * S up to which msa_attn uses a dense masked SDPA
QUERY_CHUNK = 16384  # queries per block-major pass (bounds the (T, k, Hg, bs) score buffer)


def msa_select(index_q, index_k, block_size: int, top_k: int, *, pool: str = "max"):
    """index_q (B, G, T, Di); index_k (B, S, Di), S >= T, queries aligned to the last T keys.

    Returns block_idx int64 (B, G, T, top_k): local block first, then earlier blocks by score.
    """
    B, G, T, Di = index_q.shape
    S = index_k.shape[1]
    bs, offset = block_size, S - T
    scale = 1.0 / math.sqrt(Di)
    iq, ik = index_q.detach().float(), index_k.detach().float()  # top-k passes no gradient
    out = torch.full((B, G, T, top_k), -1, dtype=torch.int64, device=iq.device)
    pos = torch.arange(offset, S, device=iq.device)  # absolute query positions
    out[..., 0] = pos // bs
    if top_k == 1:
        return out
    if pool == "mean":
        n_full = S // bs  # only complete blocks can be "earlier" blocks of any query
        block_keys = ik[:, : n_full * bs].view(B, n_full, bs, Di).mean(dim=2)  # (B, NB, Di)
    q_step = max(16, SELECT_ROWS // (B * G))
    k_step = max(bs, SELECT_KEYS // bs * bs)
    for t0 in range(0, T, q_step):
        t1 = min(T, t0 + q_step)
        local = pos[t0:t1] // bs  # (Tq,)
        n_cand = int(local[-1])  # candidate blocks 0 .. n_cand - 1 (all complete, all in the past)
        if n_cand == 0:
            continue
        qt = iq[:, :, t0:t1]  # (B, G, Tq, Di)
        if pool == "max":
            scores = qt.new_empty(B, G, t1 - t0, n_cand)
            for j0 in range(0, n_cand * bs, k_step):
                j1 = min(n_cand * bs, j0 + k_step)
                tile = qt @ ik[:, None, j0:j1].transpose(-1, -2)  # (B, G, Tq, j1 - j0)
                torch.amax(tile.unflatten(-1, (-1, bs)), dim=-1, out=scores[..., j0 // bs : j1 // bs])
        elif pool == "mean":
            scores = qt @ block_keys[:, None, :n_cand].transpose(-1, -2)  # (B, G, Tq, n_cand)
        else:
            raise ValueError(f"pool must be 'max' or 'mean'; got {pool!r}")
        scores = scores * scale
        later = torch.arange(n_cand, device=iq.device)[None, :] >= local[:, None]  # not strictly earlier
        scores.masked_fill_(later, float("-inf"))
        kk = min(top_k - 1, n_cand)
        val, idx = scores.topk(kk, dim=-1)  # descending
        out[:, :, t0:t1, 1 : 1 + kk] = idx.masked_fill(val == float("-inf"), -1)
    return out


def selection_mask(block_idx, block_size: int, S: int):
    """(B, G, T, S) bool token mask of msa_attn: key j in a selected block and j <= t."""
    B, G, T, _ = block_idx.shape
    nb = -(-S // block_size)
    chosen = torch.zeros(B, G, T, nb + 1, dtype=torch.bool, device=block_idx.device)
    chosen.scatter_(-1, block_idx.masked_fill(block_idx < 0, nb), True)  # -1 pads land in a spare column
    tokens = chosen[..., :nb].repeat_interleave(block_size, dim=-1)[..., :S]
    return tokens & causal_mask(T, S, block_idx.device)


def _dense(q, k, v, block_idx, block_size, scale):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    mask = selection_mask(block_idx, block_size, S)  # (B, G, T, S)
    mask = mask.repeat_interleave(H // G, dim=1)  # (B, H, T, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=G != H)


def _block_major(q, k, v, block_idx, block_size, scale):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    Hg, kk, bs, offset = H // G, block_idx.shape[-1], block_size, S - T
    nb = -(-S // bs)
    pad = nb * bs - S
    kb = F.pad(k, (0, 0, 0, pad)).view(B, G, nb, bs, D)
    vb = F.pad(v, (0, 0, 0, pad)).view(B, G, nb, bs, D)
    qg = q.view(B, G, Hg, T, D).transpose(2, 3)  # (B, G, T, Hg, D)
    lane = torch.arange(bs, device=q.device)
    out = []
    for b in range(B):
        per_group = []
        for g in range(G):
            chunks = []
            for c0 in range(0, T, QUERY_CHUNK):
                c1 = min(T, c0 + QUERY_CHUNK)
                Tc = c1 - c0
                flat = block_idx[b, g, c0:c1].reshape(-1)  # (Tc * kk,)  pair p = t * kk + slot
                valid = (flat >= 0).nonzero().squeeze(1)
                order = torch.argsort(flat[valid], stable=True)
                pair = valid[order]  # pairs sorted by block
                blk = flat[pair]
                t_loc = pair // kk
                counts = torch.bincount(blk, minlength=nb).tolist()
                Qp = qg[b, g, c0 + t_loc]  # (P, Hg, D)
                parts, start = [], 0
                for n, cnt in enumerate(counts):
                    if cnt:
                        parts.append(Qp[start : start + cnt] @ kb[b, g, n].T)  # (cnt, Hg, bs)
                        start += cnt
                Sp = torch.cat(parts) * scale  # (P, Hg, bs)
                key_pos = blk[:, None] * bs + lane  # (P, bs)
                seen = (key_pos <= (offset + c0 + t_loc)[:, None]) & (key_pos < S)
                Sp = Sp.masked_fill(~seen[:, None, :], float("-inf"))
                grid = Sp.new_full((Tc * kk, Hg, bs), float("-inf")).index_put((pair,), Sp)
                grid = grid.view(Tc, kk, Hg, bs).transpose(1, 2).reshape(Tc, Hg, kk * bs)
                prob = torch.softmax(grid, dim=-1).view(Tc, Hg, kk, bs).transpose(1, 2).reshape(Tc * kk, Hg, bs)
                Pp = prob[pair]
                parts, start = [], 0
                for n, cnt in enumerate(counts):
                    if cnt:
                        parts.append(Pp[start : start + cnt] @ vb[b, g, n])  # (cnt, Hg, D)
                        start += cnt
                chunks.append(q.new_zeros(Tc, Hg, D).index_add(0, t_loc, torch.cat(parts)))
            per_group.append(torch.cat(chunks))  # (T, Hg, D)
        out.append(torch.stack(per_group))  # (G, T, Hg, D)
    return torch.stack(out).transpose(2, 3).reshape(B, H, T, D)


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    T, S, D = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if T * S <= DENSE_LIMIT:
        return _dense(q, k, v, block_idx, block_size, scale)
    return _block_major(q, k, v, block_idx, block_size, scale)
