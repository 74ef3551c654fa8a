"""MiniMax Sparse Attention (MSA), plain torch: block selection and block-sparse attention.

Selection. One index query head per KV group and one shared index key head score every past
token, s(t, j) = (qI_t . kI_j) / sqrt(Di); a block's score is the max over its tokens (or,
with pool="mean", the score against the block's mean key, MoBA-style). Each query keeps its
local block t // bs first, then the top (k - 1) earlier blocks by score, descending; -1 pads.
Scores are computed tile by tile (all G index heads of a few hundred queries x a few hundred
keys: one GEMM of about 1 MB) and max-pooled at once, so the T x T token-score matrix never
exists; the (T, T / bs) block scores exist one query tile at a time.

Attention. Exact softmax over the keys j <= t inside the selected blocks; all heads of a KV
group share their group's selection. Small problems build the token mask and call SDPA
(``_dense``); large ones (``_sparse``) keep an online softmax per query (running max m, sum
l and unnormalised output o, as in FlashAttention):
  - ``_local`` starts it with the query's own block, causal, every query block at once;
  - ``_remote`` folds in the earlier selected blocks "block-major": (query, block) pairs are
    sorted by block, so each key block meets all the queries that chose it in one GEMM, with
    no causal mask (those blocks lie wholly in the past) and no per-query copy of keys.
Every temporary is one block's worth (cache-sized: large fresh buffers cost page faults on
every call); cost O(T * top_k * bs * D) time, O(T * H * D) memory beyond the inputs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..softmax.reference import causal_mask

SELECT_ROWS = 512  # index-head x query rows per score tile (all G heads of SELECT_ROWS // G queries)
SELECT_KEYS = 512  # keys per score tile (rounded to whole blocks)
DENSE_LIMIT = 1 << 17  # T * S up to which msa_attn uses a dense masked SDPA (the sparse path wins from T ~ 512)
QUERY_CHUNK = 4096  # queries per local-block pass (bounds its (queries, H, bs) scores)


def msa_select(index_q, index_k, block_size: int, top_k: int, *, pool: str = "max"):
    """index_q (B, G, T, Di); index_k (B, S, Di), S >= T, queries aligned to the last T keys.

    Returns block_idx int64 (B, G, T, top_k): local block first, then earlier blocks by score.
    """
    if pool not in ("max", "mean"):
        raise ValueError(f"pool must be 'max' or 'mean'; got {pool!r}")
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
    q_step = max(16, SELECT_ROWS // G)  # queries per tile
    k_step = max(bs, SELECT_KEYS // bs * bs)  # keys per tile, whole blocks
    for b in range(B):
        if pool == "mean":
            n_full = S // bs  # only complete blocks can be "earlier" blocks of any query
            keys_T = ik[b, : n_full * bs].view(n_full, bs, Di).mean(dim=1).T  # (Di, NB) block mean keys
        else:
            keys_T = ik[b].T  # (Di, S)
        for t0 in range(0, T, q_step):
            t1 = min(T, t0 + q_step)
            local = pos[t0:t1] // bs  # (Tq,)
            n_cand = int(local[-1])  # candidate blocks 0 .. n_cand - 1 (all complete, all in the past)
            if n_cand == 0:
                continue
            qt = iq[b, :, t0:t1].reshape(G * (t1 - t0), Di)  # (G * Tq, Di): the G heads fold into rows
            if pool == "max":
                scores = qt.new_empty(G * (t1 - t0), n_cand)
                for j0 in range(0, n_cand * bs, k_step):
                    j1 = min(n_cand * bs, j0 + k_step)
                    tile = qt @ keys_T[:, j0:j1]  # (G * Tq, j1 - j0)
                    torch.amax(tile.view(tile.shape[0], -1, bs), dim=-1, out=scores[:, j0 // bs : j1 // bs])
            else:
                scores = qt @ keys_T[:, :n_cand]  # (G * Tq, n_cand)
            scores = scores.view(G, t1 - t0, n_cand).mul_(scale)
            later = torch.arange(n_cand, device=iq.device)[None, :] >= local[:, None]  # not strictly earlier
            scores.masked_fill_(later, float("-inf"))
            kk = min(top_k - 1, n_cand)
            val, idx = scores.topk(kk, dim=-1)  # (G, Tq, kk), descending
            out[b, :, t0:t1, 1 : 1 + kk] = idx.masked_fill(val == float("-inf"), -1)
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


def _blocks(x, bs: int):
    """(B, G, S, D) -> (B, G, NB, bs, D), zero-padded to whole blocks (a view when S % bs == 0)."""
    B, G, S, D = x.shape
    pad = -S % bs
    return (F.pad(x, (0, 0, 0, pad)) if pad else x).view(B, G, (S + pad) // bs, bs, D)


def _local(qs, kb, vb, p0: int):
    """Causal attention of queries to their own block, every query block at once.

    qs (B, G, Tc, Hg, D) pre-scaled queries at absolute positions p0 .. p0 + Tc - 1; kb, vb
    (B, G, NB, bs, D). Returns the softmax statistics over each query's local block:
    o (B, G, Tc, Hg, D) unnormalised (relative to m), m and l (B, G, Tc, Hg).
    """
    B, G, Tc, Hg, D = qs.shape
    bs = kb.shape[3]
    front = p0 % bs  # positions of p0's block before p0 (padding)
    n_q = -(-(front + Tc) // bs)  # query blocks touched
    qp = F.pad(qs, (0, 0, 0, 0, front, n_q * bs - front - Tc)).view(B, G, n_q, bs * Hg, D)
    b0 = p0 // bs
    s = qp @ kb[:, :, b0 : b0 + n_q].transpose(-1, -2)  # (B, G, n_q, bs * Hg, bs); row = lane * Hg + head
    lane = torch.arange(bs, device=qs.device)
    s = s.masked_fill(lane[None, :] > lane.repeat_interleave(Hg)[:, None], float("-inf"))  # key lane <= query lane
    m = s.detach().amax(-1, keepdim=True)  # the merged result is invariant to m: no gradient through it
    p = torch.exp(s - m)
    o = p @ vb[:, :, b0 : b0 + n_q]  # (B, G, n_q, bs * Hg, D)
    keep = slice(front, front + Tc)
    return (o.view(B, G, n_q * bs, Hg, D)[:, :, keep], m.view(B, G, n_q * bs, Hg)[:, :, keep],
            p.sum(-1).view(B, G, n_q * bs, Hg)[:, :, keep])


def _remote(o, m, l, qs, kb, vb, sel, p0: int):
    """Fold each query's selected earlier blocks into its running softmax, block-major.

    For one (batch, group): o (T, Hg, D), m and l (T, Hg) the running statistics (from the
    local block), updated in place; qs (T, Hg, D) pre-scaled queries at absolute positions
    p0 ..; kb, vb (NB, bs, D); sel (T, top_k) block ids. (query, block) pairs are sorted by
    block, so each key block meets all the queries that chose it in one GEMM; those blocks lie
    wholly in the past (no mask), and every buffer is one block's worth (cache-sized).
    """
    T, Hg, D = qs.shape
    bs = kb.shape[1]
    local = torch.arange(p0, p0 + T, device=qs.device) // bs
    valid = (sel >= 0) & (sel < local[:, None])  # earlier blocks only
    t, slot = valid.nonzero(as_tuple=True)
    blk = sel[t, slot]
    order = torch.argsort(blk, stable=True)
    t, blk = t[order], blk[order]  # pairs sorted by block; a query appears at most once per block
    start = 0
    for n, cnt in enumerate(torch.bincount(blk, minlength=kb.shape[0]).tolist()):
        if not cnt:
            continue
        rows = t[start : start + cnt]
        start += cnt
        s = qs.index_select(0, rows).view(cnt * Hg, D) @ kb[n].T  # (cnt * Hg, bs)
        m_old = m.index_select(0, rows)  # (cnt, Hg)
        with torch.no_grad():  # the result is invariant to the reference max
            m_new = torch.maximum(m_old, s.amax(-1).view(cnt, Hg))
        p = torch.exp(s - m_new.view(-1, 1))
        alpha = torch.exp(m_old - m_new)  # rescales what was accumulated so far
        o.index_copy_(0, rows, o.index_select(0, rows) * alpha[..., None] + (p @ vb[n]).view(cnt, Hg, D))
        l.index_copy_(0, rows, l.index_select(0, rows) * alpha + p.sum(-1).view(cnt, Hg))
        m.index_copy_(0, rows, m_new)


def _sparse(q, k, v, block_idx, block_size, scale):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    Hg, bs, offset = H // G, block_size, S - T
    kb, vb = _blocks(k, bs), _blocks(v, bs)  # (B, G, NB, bs, D)
    qs = (q * scale).view(B, G, Hg, T, D).transpose(2, 3).contiguous()  # (B, G, T, Hg, D)
    step = max(bs, QUERY_CHUNK // bs * bs)  # queries per local pass (bounds its (.., bs) scores)
    parts = [_local(qs[:, :, c0 : c0 + step], kb, vb, offset + c0) for c0 in range(0, T, step)]
    o, m, l = (torch.cat(x, dim=2).contiguous() if len(parts) > 1 else x[0].contiguous() for x in zip(*parts))
    for b in range(B):
        for g in range(G):
            _remote(o[b, g], m[b, g], l[b, g], qs[b, g], kb[b, g], vb[b, g], block_idx[b, g], offset)
    o = o / l[..., None] if o.requires_grad else o.div_(l[..., None])  # (B, G, T, Hg, D)
    return o.transpose(2, 3).reshape(B, H, T, D)


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    T, S, D = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if T * S <= DENSE_LIMIT:
        return _dense(q, k, v, block_idx, block_size, scale)
    return _sparse(q, k, v, block_idx, block_size, scale)
