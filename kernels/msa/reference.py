"""MiniMax Sparse Attention (MSA), plain torch: block selection and block-sparse attention.

Selection. One index query head per KV group and one shared index key head score every past token, s(t, j) =
(qI_t . kI_j) / sqrt(Di); a block's score is the max over its tokens (or, with pool="mean", the score against
the block's mean key, MoBA-style). Each query keeps its local block t // bs first, then the top (k - 1)
earlier blocks by score, descending; -1 pads. Scores are computed tile by tile (all G index heads of a few
hundred queries x a few hundred keys: one GEMM of about 1 MB) and max-pooled at once, so the T x T token-score
matrix never exists; the (T, T / bs) block scores exist one query tile at a time.

Attention. Exact softmax over the keys j <= t inside the selected blocks; all heads of a KV
group share their group's selection. Small problems build the token mask and call SDPA
(``_dense``); large ones (``_sparse``) keep softmax sums per query (a reference max m, sum
l and unnormalised output o, as in FlashAttention):
  - ``_local`` starts them with the query's own block, causal, every query block at once;
  - ``_remote`` adds in the earlier selected blocks "block-major": (query, block) pairs are
    sorted by block, so each key block meets all the queries that chose it in one GEMM, with
    no causal mask (those blocks lie wholly in the past) and no per-query copy of keys; the
    local block's max stays the reference unless a block's scores pass it by RESCALE_ABOVE.
Every temporary is one block's worth (cache-sized: large fresh buffers cost page faults on every call);
cost O(T * top_k * bs * D) time, O(T * H * D) memory beyond the inputs.

Training (``_Gathered``, when a gradient is needed): the block-major loop above would run through autograd one
block at a time, so training takes a "row-gathered" path instead. A row is one (batch, group, query) with its
Hg heads; each row gathers its top_k key and value blocks, tile by tile (GATHER_ROWS rows), and takes an exact
softmax over the (top_k * bs) keys. It is a torch.autograd.Function in FlashAttention's form: the forward
keeps only the output and the log-sum-exp per row and head, the backward regathers the blocks and recomputes
the probabilities, so memory beyond the inputs is O(T * H) plus one tile. The tile functions are broadcast
products and sums, which torch.compile fuses with the gather (the gathered blocks never reach memory); without
a compiler they run eagerly. A compiled training step never traces the selection (data-dependent tile bounds)
or the gathered attention (torch.compiler.disable): traced inline, it ran slower (experiments/train_speed).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from ..backend import COMPILE  # COMPILE: torch.compile the gathered tiles (ATTNBENCH_COMPILE=0: eager)
from ..softmax.reference import causal_mask

SELECT_ROWS = 512  # index-head x query rows per score tile (all G heads of SELECT_ROWS // G queries)
SELECT_KEYS = 512  # keys per score tile (rounded to whole blocks)
DENSE_LIMIT = 1 << 17  # T * S up to which msa_attn uses a dense masked SDPA (the sparse path wins from T ~ 512)
QUERY_CHUNK = 4096  # queries per local-block pass (bounds its (queries, H, bs) scores)
GATHER_ROWS = 1024  # (batch, group, query) rows per tile of the gathered (training) path
RESCALE_ABOVE = 30.0  # a remote score this far over its query's reference moves the reference (exp(30) ~ 1e13: far from fp32's 3e38)
_compiled: dict = {}  # the tile functions _run compiled (None: compiling one failed, it runs eagerly)


@torch.compiler.disable  # never traced (module docstring)
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
            mean_keys = ik[b, : n_full * bs].view(n_full, bs, Di).mean(dim=1)  # (NB, Di) block mean keys
        for t0 in range(0, T, q_step):
            t1 = min(T, t0 + q_step)
            local = pos[t0:t1] // bs  # (Tq,)
            # local[-1] and local[0] without a host read: candidate blocks 0 .. n_cand - 1 (all complete,
            # all in the past); blocks before lo (the tile's first local block) are earlier for every query
            n_cand, lo = (offset + t1 - 1) // bs, (offset + t0) // bs
            if n_cand == 0:
                continue
            qt = iq[b, :, t0:t1].reshape(G * (t1 - t0), Di)  # (G * Tq, Di): the G heads fold into rows
            if pool == "max":
                # keys as rows: the max over a block's bs rows is an elementwise max of rows
                # (vectorised along the queries), about 3x faster in a probe than a max along each row
                block_T = qt.new_empty(n_cand, G * (t1 - t0))
                for j0 in range(0, n_cand * bs, k_step):
                    j1 = min(n_cand * bs, j0 + k_step)
                    tile = ik[b, j0:j1] @ qt.T  # (j1 - j0, G * Tq)
                    torch.amax(tile.view(-1, bs, tile.shape[1]), dim=1, out=block_T[j0 // bs : j1 // bs])
                scores = block_T.T  # (G * Tq, n_cand), a strided view: topk reads it as it is
            else:
                scores = qt @ mean_keys[:n_cand].T  # (G * Tq, n_cand)
            scores = scores.view(G, t1 - t0, n_cand).mul_(scale)
            later = torch.arange(lo, n_cand, device=iq.device)[None, :] >= local[:, None]  # not strictly earlier
            scores[..., lo:].masked_fill_(later, float("-inf"))
            val, idx = top_blocks(scores, min(top_k - 1, n_cand))  # (G, Tq, kk), descending
            out[b, :, t0:t1, 1 : 1 + val.shape[-1]] = idx.masked_fill(val == float("-inf"), -1)
    return out


def top_blocks(scores, kk: int):
    """The kk highest scores along the last dim and their ids, descending; ties go to the lowest
    id (MiniMax's reference: a stable sort). fp32 scores: one topk over int64 keys whose high 32
    bits order as the score and whose low 32 bits are the id reversed, so equal scores come out
    lowest id first with no tie repair and no host read (dsa_select at 1K-16K about 2x faster than
    with topk, tie repair and two sorts: experiments/cpu_speedups). Other dtypes: the stable sort
    of every row (the same result)."""
    if scores.dtype != torch.float32 or scores.shape[-1] >= 1 << 32:
        return tuple(t[..., :kk] for t in scores.sort(dim=-1, descending=True, stable=True))
    bits = (scores + 0.0).view(torch.int32)  # + 0.0: -0.0 becomes +0.0 (equal scores, equal keys)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)  # int order = float order
    ids = torch.arange(scores.shape[-1], device=scores.device)
    top = ((ordered << 32) | (0xFFFFFFFF - ids)).topk(kk, dim=-1).values
    idx = 0xFFFFFFFF - (top & 0xFFFFFFFF)
    return scores.gather(-1, idx), idx


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


def _ones(vb):
    """(..., bs, D) blocks -> (..., bs, D + 1) with a column of ones: p @ it gives p v and p's
    row sums in one GEMM; [q, -m] @ it^T gives q . k - m. A decode step pads only the blocks it
    reads (7 of a cache's thousands)."""
    return F.pad(vb, (0, 1), value=1.0)


def _local(qs, kb, vb, p0: int):
    """Causal attention of queries to their own block, every query block at once.

    qs (B, G, Tc, Hg, D) pre-scaled queries at absolute positions p0 .. p0 + Tc - 1; kb, vb (B,
    G, NB, bs, D). Returns the softmax statistics over each query's local block: ol (B, G, Tc,
    Hg, D + 1), the output unnormalised (relative to m) with the sum l as its last column, and
    m (B, G, Tc, Hg).
    """
    B, G, Tc, Hg, D = qs.shape
    bs = kb.shape[3]
    front = p0 % bs  # positions of p0's block before p0 (padding)
    n_q = -(-(front + Tc) // bs)  # query blocks touched
    qp = F.pad(qs, (0, 0, 0, 0, front, n_q * bs - front - Tc)).view(B, G, n_q, bs * Hg, D)
    b0 = p0 // bs
    s = qp @ kb[:, :, b0 : b0 + n_q].transpose(-1, -2)  # (B, G, n_q, bs * Hg, bs); row = lane * Hg + head
    lane = torch.arange(bs, device=qs.device)
    s.masked_fill_(lane[None, :] > lane.repeat_interleave(Hg)[:, None], float("-inf"))  # key lane <= query lane
    m = s.amax(-1, keepdim=True)
    ol = s.sub_(m).exp_() @ _ones(vb[:, :, b0 : b0 + n_q])  # (B, G, n_q, bs * Hg, D + 1)
    keep = slice(front, front + Tc)
    return ol.view(B, G, n_q * bs, Hg, D + 1)[:, :, keep], m.view(B, G, n_q * bs, Hg)[:, :, keep]


def _remote(ol, qa, ka, vb1, sel, p0: int):
    """Add each query's selected earlier blocks into its softmax sums, block-major.

    For one (batch, group): ol (T, Hg, D + 1) from _local, updated in place; qa (T, Hg, D + 1)
    the pre-scaled queries at positions p0 .. with -m (m: the local block's max, each query's
    reference) as last column; ka, vb1 (NB, bs, D + 1) key and value blocks with a column of
    ones; sel (T, top_k) block ids. (query, block) pairs are sorted by block, so each key block
    meets all the queries that chose it in one GEMM; those blocks lie wholly in the past (no
    mask), and every buffer is one block's worth (cache-sized).

    qa @ ka^T is q . k - m: one GEMM gives scores relative to the reference; exp of it times [v, 1]
    (p v and its row sums in one GEMM) is added onto ol as it is, with no rescale of what came
    before (softmax does not depend on the reference; it only keeps exp in range, and scores far
    below m underflow only beside the local max's own exp(0) = 1). A block whose sums pass
    exp(RESCALE_ABOVE) (or overflow) is redone after moving those rows' reference up
    (FlashAttention's online rescale; random and trained scores rarely need it).
    """
    T, Hg, D1 = qa.shape
    D, bs = D1 - 1, ka.shape[1]
    local = torch.arange(p0, p0 + T, device=qa.device) // bs
    valid = (sel >= 0) & (sel < local[:, None])  # earlier blocks only
    t, slot = valid.nonzero(as_tuple=True)
    blk = sel[t, slot]
    order = torch.argsort(blk, stable=True)
    t, blk = t[order], blk[order]  # pairs sorted by block; a query appears at most once per block
    limit = math.exp(RESCALE_ABOVE)
    start = 0
    for n, cnt in enumerate(torch.bincount(blk, minlength=ka.shape[0]).tolist()):
        if not cnt:
            continue
        rows = t[start : start + cnt]
        start += cnt
        q_rows = qa.index_select(0, rows).view(cnt * Hg, D1)
        pv = (q_rows @ ka[n].T).exp_() @ vb1[n]  # exp(q . k - m) @ [v, 1]: (cnt * Hg, D + 1)
        if not float(pv[:, D].max()) <= limit:  # also catches inf and NaN
            s = q_rows @ ka[n].T  # (cnt * Hg, bs): q . k - m
            up = s.amax(-1, keepdim=True).clamp_(min=0)  # how far the new reference lies over the old
            qa[:, :, D].index_add_(0, rows, -up.view(cnt, Hg))
            ol.index_copy_(0, rows, ol.index_select(0, rows) * torch.exp(-up).view(cnt, Hg, 1))
            pv = s.sub_(up).exp_() @ vb1[n]
        ol.index_add_(0, rows, pv.view(cnt, Hg, D1))


def _sparse(q, k, v, block_idx, block_size, scale):
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    Hg, bs, offset = H // G, block_size, S - T
    kb, vb = _blocks(k, bs), _blocks(v, bs)  # (B, G, NB, bs, D)
    qa = q.new_empty(B, G, T, Hg, D + 1)  # pre-scaled queries, then -m in the last column (_remote)
    torch.mul(q.view(B, G, Hg, T, D).transpose(2, 3), scale, out=qa[..., :D])  # one pass: scale and relayout
    qs = qa[..., :D]  # (B, G, T, Hg, D)
    step = max(bs, QUERY_CHUNK // bs * bs)  # queries per local pass (bounds its (.., bs) scores)
    ol = qs.new_empty(B, G, T, Hg, D + 1)
    for c0 in range(0, T, step):
        ol[:, :, c0 : c0 + step], m = _local(qs[:, :, c0 : c0 + step], kb, vb, offset + c0)
        torch.neg(m, out=qa[:, :, c0 : c0 + step, :, D])
    for b in range(B):
        for g in range(G):
            ka, vb1 = _ones(kb[b, g]), _ones(vb[b, g])  # (NB, bs, D + 1), once per group
            _remote(ol[b, g], qa[b, g], ka, vb1, block_idx[b, g], offset)
    o = torch.empty(B, G, Hg, T, D, dtype=q.dtype, device=q.device)
    torch.div(ol[..., :D].transpose(2, 3), ol[..., D:].transpose(2, 3), out=o)  # one pass into the heads' layout
    return o.view(B, H, T, D)


# ---------------------------------------------------------------- gathered rows (training)


def gather_rows(block_idx, S: int, T: int):
    """Per (batch, group, query) row: base (N,) offset of its (batch, group) in a flat list of
    blocks, t (N,) absolute query position, sel (N, top_k) block ids (-1 pads). N = B * G * T."""
    B, G, _, top_k = block_idx.shape
    dev = block_idx.device
    base = torch.arange(B * G, device=dev).repeat_interleave(T)  # (batch, group) index; times NB by the caller
    t = torch.arange(S - T, S, device=dev).repeat(B * G)
    return base, t, block_idx.reshape(-1, top_k)


def _tile_scores(qs, kb, sel, fi, t):
    """Scores of one tile. qs (R, Hg, D) pre-scaled; kb (NBT, bs, D) flat key blocks;
    sel (R, k) block ids (-1 pads), fi (R, k) their rows in kb; t (R,) query positions.
    Returns scores s (R, Hg, k * bs) with -inf where a key is not selected or lies after t."""
    R, Hg, D = qs.shape
    bs = kb.shape[1]
    keys = kb[fi].view(R, 1, -1, D)  # (R, 1, k * bs, D)
    s = (qs[:, :, None, :] * keys).sum(-1)  # (R, Hg, k * bs)
    pos = sel[:, :, None] * bs + torch.arange(bs, device=qs.device)  # (R, k, bs) key positions
    ok = (sel[:, :, None] >= 0) & (pos <= t[:, None, None])
    return s.masked_fill(~ok.view(R, 1, -1), float("-inf"))


def _tile_fwd(qs, kb, vb, sel, fi, t):
    """One tile of the gathered forward: o (R, Hg, D) and lse (R, Hg)."""
    R, Hg, D = qs.shape
    s = _tile_scores(qs, kb, sel, fi, t)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = (p[..., None] * vb[fi].view(R, 1, -1, D)).sum(-2)
    return o, lse


def _tile_bwd(qs, kb, vb, sel, fi, t, lse, do, delta, dkb, dvb):
    """One tile of the gathered backward: dqs (R, Hg, D) for the pre-scaled queries; the
    gradients of the gathered key and value blocks are added into dkb, dvb (NBT, bs, D)."""
    R, Hg, D = qs.shape
    bs = kb.shape[1]
    p = torch.exp(_tile_scores(qs, kb, sel, fi, t) - lse[..., None])  # (R, Hg, J)
    keys, values = kb[fi].view(R, 1, -1, D), vb[fi].view(R, 1, -1, D)
    dp = (do[:, :, None, :] * values).sum(-1)  # (R, Hg, J)
    ds = p * (dp - delta[..., None])
    dkeys = (ds[..., None] * qs[:, :, None, :]).sum(1)  # (R, J, D): the Hg heads of a group add up
    dvalues = (p[..., None] * do[:, :, None, :]).sum(1)
    dkb.index_put_((fi.reshape(-1),), dkeys.reshape(-1, bs, D), accumulate=True)
    dvb.index_put_((fi.reshape(-1),), dvalues.reshape(-1, bs, D), accumulate=True)
    return (ds[..., None] * keys).sum(-2)


def _run(fn, *args, blocks=()):
    """fn(*args) under torch.compile when COMPILE (one kernel per function, reused for every tile;
    the block tensors' length, varying with B, T and S, left dynamic); eager when compiling is
    off or fails (no C++ compiler: a warning, once), and inline inside a compiled caller."""
    if not COMPILE or _compiled.get(fn, False) is None or torch.compiler.is_compiling():
        return fn(*args)
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn)
    for i in blocks:  # the positions of the block tensors in args
        torch._dynamo.maybe_mark_dynamic(args[i], 0)
    try:
        return _compiled[fn](*args)
    except Exception as err:  # noqa: BLE001 - any compiler failure: the eager function is the same math
        warnings.warn(f"msa: torch.compile of {fn.__name__} failed ({type(err).__name__}: {err}); running it eagerly")
        _compiled[fn] = None
        return fn(*args)


def _tiles(N: int, *rows):
    """(r0, r1, tile of each of rows) for row ranges of GATHER_ROWS. A short last tile is padded
    by repeating its first row (a valid row: no NaN), so every tile has one shape (one kernel)."""
    for r0 in range(0, N, GATHER_ROWS):
        r1 = min(N, r0 + GATHER_ROWS)
        yield (
            r0,
            r1,
            [
                x[r0:r1] if r1 - r0 == GATHER_ROWS else torch.cat([x[r0:r1], x[r0 : r0 + 1].expand(GATHER_ROWS - (r1 - r0), *x.shape[1:])])
                for x in rows
            ],
        )


class _Gathered(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, block_idx, block_size, scale):
        B, H, T, D = q.shape
        G, S = k.shape[1], k.shape[2]
        Hg, bs = H // G, block_size
        kb, vb = (_blocks(x, bs) for x in (k.detach(), v.detach()))  # (B, G, NB, bs, D)
        NB = kb.shape[2]
        kb, vb = kb.reshape(-1, bs, D), vb.reshape(-1, bs, D)
        qs = (q.detach() * scale).view(B, G, Hg, T, D).transpose(2, 3).reshape(B * G * T, Hg, D)
        base, t, sel = gather_rows(block_idx, S, T)
        fi = sel.clamp(min=0) + (base * NB)[:, None]  # rows of kb
        N = qs.shape[0]
        o, lse = qs.new_empty(N, Hg, D), qs.new_empty(N, Hg)
        for r0, r1, (qt, st, ft, tt) in _tiles(N, qs, sel, fi, t):
            o_t, l_t = _run(_tile_fwd, qt, kb, vb, st, ft, tt, blocks=(1, 2))
            o[r0:r1], lse[r0:r1] = o_t[: r1 - r0], l_t[: r1 - r0]
        ctx.save_for_backward(qs, kb, vb, sel, fi, t, o, lse)
        ctx.dims = (B, H, T, D, G, S, NB, bs, scale)
        return o.view(B, G, T, Hg, D).transpose(2, 3).reshape(B, H, T, D)

    @staticmethod
    def backward(ctx, do):
        qs, kb, vb, sel, fi, t, o, lse = ctx.saved_tensors
        B, H, T, D, G, S, NB, bs, scale = ctx.dims
        Hg, N = H // G, qs.shape[0]
        do = do.reshape(B, G, Hg, T, D).transpose(2, 3).reshape(N, Hg, D)
        delta = (do * o).sum(-1)  # (N, Hg): rowsum(dO * O) = sum_j p_j dp_j
        dqs, dkb, dvb = torch.empty_like(qs), torch.zeros_like(kb), torch.zeros_like(vb)
        for r0, r1, (qt, st, ft, tt, lt, dt, det) in _tiles(N, qs, sel, fi, t, lse, do, delta):
            n = r1 - r0
            if n < GATHER_ROWS:  # padding rows must not add into dk, dv
                dt = torch.cat([dt[:n], dt.new_zeros(GATHER_ROWS - n, *dt.shape[1:])])
                det = torch.cat([det[:n], det.new_zeros(GATHER_ROWS - n, *det.shape[1:])])
            dqs[r0:r1] = _run(_tile_bwd, qt, kb, vb, st, ft, tt, lt, dt, det, dkb, dvb, blocks=(1, 2, 9, 10))[:n]
        dq = (dqs * scale).view(B, G, T, Hg, D).transpose(2, 3).reshape(B, H, T, D)
        dk = dkb.view(B, G, NB * bs, D)[:, :, :S]
        dv = dvb.view(B, G, NB * bs, D)[:, :, :S]
        return dq, dk, dv, None, None, None


def _tile_kl(qs, kb, sel, fi, t, iq, ikb, fii, iscale: float):
    """One tile of the index loss: per row KL(p_main || p_index) over its selected keys, and
    its gradient with respect to the index scores, p_index - p_main (R, k * bs).

    qs, kb, sel, fi, t as in _tile_scores (main branch); iq (R, Di) the row's index query;
    ikb (B * NB, bs, Di) index key blocks, fii (R, k) rows of ikb."""
    R, Di = iq.shape
    s = _tile_scores(qs, kb, sel, fi, t)  # (R, Hg, J), -inf off the selection
    p_main = torch.softmax(s, dim=-1).mean(1)  # (R, J): the group's mean attention
    z = (iq[:, None, :] * ikb[fii].view(R, -1, Di)).sum(-1) * iscale
    z = z.masked_fill(s[:, 0] == float("-inf"), float("-inf"))
    log_p_index = torch.log_softmax(z, dim=-1)
    kl = (torch.special.xlogy(p_main, p_main) - torch.where(p_main > 0, p_main * log_p_index, 0.0)).sum(-1)
    return kl, torch.exp(log_p_index) - p_main


def _tile_kl_bwd(iq, ikb, fii, dz, dikb):
    """diq (R, Di) for dz (R, J); the gradient of the gathered index key blocks is added into dikb."""
    R, Di = iq.shape
    bs = ikb.shape[1]
    dikb.index_put_((fii.reshape(-1),), (dz[..., None] * iq[:, None, :]).view(-1, bs, Di), accumulate=True)
    return (dz[..., None] * ikb[fii].view(R, -1, Di)).sum(1)


class _IndexKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, iq, ik, q, k, block_idx, block_size, scale):
        B, H, T, D = q.shape
        G, S, Di = k.shape[1], k.shape[2], iq.shape[-1]
        Hg, bs = H // G, block_size
        kb = _blocks(k.detach(), bs)
        NB = kb.shape[2]
        kb = kb.reshape(-1, bs, D)
        ikb = _blocks(ik.detach().unsqueeze(1), bs).reshape(-1, bs, Di)  # (B * NB, bs, Di)
        qs = (q.detach() * scale).view(B, G, Hg, T, D).transpose(2, 3).reshape(B * G * T, Hg, D)
        iqr = iq.detach().reshape(B * G * T, Di)
        base, t, sel = gather_rows(block_idx, S, T)
        fi = sel.clamp(min=0) + (base * NB)[:, None]
        fii = sel.clamp(min=0) + (base // G * NB)[:, None]
        N = qs.shape[0]
        kl, dz = qs.new_empty(N), qs.new_empty(N, sel.shape[1] * bs)
        for r0, r1, (qt, st, ft, tt, it, fit) in _tiles(N, qs, sel, fi, t, iqr, fii):
            kl_t, dz_t = _run(_tile_kl, qt, kb, st, ft, tt, it, ikb, fit, 1.0 / math.sqrt(Di), blocks=(1, 6))
            kl[r0:r1], dz[r0:r1] = kl_t[: r1 - r0], dz_t[: r1 - r0]
        ctx.save_for_backward(iqr, ikb, fii, dz)
        ctx.dims = (B, G, T, S, NB, bs, Di)
        return kl.mean()

    @staticmethod
    def backward(ctx, grad):
        iqr, ikb, fii, dz = ctx.saved_tensors
        B, G, T, S, NB, bs, Di = ctx.dims
        N = iqr.shape[0]
        dz = dz * (grad / (N * math.sqrt(Di)))  # d mean / d kl_row, and z = iscale * (iq . ik)
        diq, dikb = torch.empty_like(iqr), torch.zeros_like(ikb)
        for r0, r1, (it, fit, dzt) in _tiles(N, iqr, fii, dz):
            if r1 - r0 < GATHER_ROWS:  # padding rows must not add into dik
                dzt = torch.cat([dzt[: r1 - r0], dzt.new_zeros(GATHER_ROWS - (r1 - r0), dzt.shape[1])])
            diq[r0:r1] = _run(_tile_kl_bwd, it, ikb, fit, dzt, dikb, blocks=(1, 4))[: r1 - r0]
        return diq.view(B, G, T, Di), dikb.view(B, NB * bs, Di)[:, :S], None, None, None, None, None


def index_kl(q, k, iq, ik, block_idx, block_size: int, scale: float):
    """Mean over (B, G, T) of KL(p_main || p_index) on each query's selected tokens, by rows
    (the dense formula: attnbench/model/msa.py index_kl_dense). Gradients flow to iq and ik only.

    q (B, H, T, D), k (B, G, S, D) main branch; iq (B, G, T, Di), ik (B, S, Di) index branch."""
    return _IndexKL.apply(iq, ik, q, k, block_idx, int(block_size), float(scale))


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    T, S, D = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if T * S <= DENSE_LIMIT:
        return _dense(q, k, v, block_idx, block_size, scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _gathered(q, k, v, block_idx, block_size, scale)
    return _sparse(q, k, v, block_idx, block_size, scale)


_gathered = torch.compiler.disable(_Gathered.apply)  # never traced (module docstring)
