"""Lightning attention (linear attention with per-head exponential decay), plain torch.

Recurrence, per head h with decay rate s_h > 0:
    S_t = exp(-s_h) S_{t-1} + k_t^T v_t        S is (Dk, Dv), S_{-1} = initial_state or 0
    o_t = q_t S_t                               (the current token included)

Computed block-wise (Lightning Attention-2): inside a chunk of C tokens, an intra-chunk
masked-decay product ((q k^T) * M) v with M[i, j] = exp(-s (i - j)) for j <= i; across
chunks, the state carried in float64 and returned as fp32 (over 2^22 / C chunk additions an
fp32 carry drifts ~1e-3 relative). Every exponent is of a non-positive number, so nothing
overflows however long the sequence (never exp(+s t)). Cost O(T C D + T D^2), memory
independent of T beyond the inputs (tiles of at most SEGMENT_BYTES of scores are in flight).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Chunk length C = 2 D within [32, 64]: the intra-chunk (C x C) work per token grows with C,
# the per-chunk (D x D) state work per token with D^2 / C. Fastest on the 2-core CPU for D = 8
# and 32 (experiments/cpu_speedups); at D = 64, C = 64 (the least FLOPs: as much intra-chunk as
# state work) is 1.12x faster than 128 at 64K tokens on one thread (case lightning_chunk64_d64).
# The Triton kernel keeps its own CHUNK.
CHUNK_MIN, CHUNK_MAX = 32, 64
# Tokens in flight: a tile's (pairs, tokens, C) scores stay within this many bytes, so the
# big intermediates stay close to the cores' caches and, without attnbench.heap's malloc
# settings, below glibc's 32 MiB mmap threshold (fresh pages to fault in on every call). 16 MiB
# holds a whole 16K-token prefill chunk of the hybrid (H 8, C 32) in one tile; for D 64 (C 128)
# tiles of 2,048 and 4,096 tokens time the same (experiments/cpu_speedups, lightning_op_16k).
SEGMENT_BYTES = 16 << 20
SCAN_GROUP = 8  # chunks per group of the state scan (fastest of 4, 8, 16, 32 on this CPU for D 8 and 64: experiments/cpu_speedups)


def chunk_for(head_dim: int) -> int:
    """The reference's chunk length for a head dim (see CHUNK_MIN)."""
    return max(CHUNK_MIN, min(CHUNK_MAX, 2 * head_dim))


def segment_for(batch_heads: int, chunk: int, element_bytes: int = 4, budget: int = SEGMENT_BYTES) -> int:
    """Tokens a segment holds: whole chunks whose (B H, tokens, C) scores fit `budget` bytes."""
    return max(chunk, budget // (batch_heads * chunk * element_bytes) // chunk * chunk)


def tile_for(pairs: int, T: int, chunk: int, segment: int | None = None) -> tuple[int, int]:
    """(pairs, tokens) of a tile of the (B H, T) grid: tiles are contiguous slices of the
    (B H, T, D) inputs, so no tile is copied. A tile spans all T with as many (batch, head)
    pairs as SEGMENT_BYTES of scores allow, or one pair with `segment` tokens (default: a
    SEGMENT_BYTES tile) when all T do not fit."""
    tokens = T if segment is None and T * chunk * 4 <= SEGMENT_BYTES else min(T, segment or segment_for(1, chunk))
    return (max(1, min(pairs, SEGMENT_BYTES // (T * chunk * 4))) if tokens == T else 1), tokens


def _chunks(q, k, v, s, state, out=None, fresh=False):
    """q, k (P, N, C, Dk), v (P, N, C, Dv) in the compute dtype, P (batch, head) pairs; s (P,) fp32;
    state (P, Dk, Dv) float64; out: an fp32 (P, N, C, Dv) tensor to write o into, or None;
    fresh: the state is known to be zero (no initial state, nothing absorbed yet).

    Returns o (P, N, C, Dv) fp32 and the state after the last chunk. The products run in
    q's dtype (fp32 by default); chunk contributions are added to the float64 state.
    """
    C, dt = q.shape[2], q.dtype
    s4 = s.view(-1, 1, 1, 1)  # (P, 1, 1, 1)
    i = torch.arange(C, device=q.device, dtype=torch.float32)
    gap = i[:, None] - i[None, :]  # (C, C): i - j
    intra_decay = torch.exp(-s4 * gap.clamp(min=0)) * (gap >= 0)  # (P, 1, C, C)
    scores = (q @ k.transpose(-1, -2)).mul_(intra_decay.to(dt))  # (P, N, C, C); in place: nothing saves q k^T
    o = torch.matmul(scores, v, out=out).float()  # (P, N, C, Dv)

    k_to_end = k * torch.exp(-s4 * (C - 1 - i)[:, None]).to(dt)  # decay from j to the chunk's end
    kv = (k_to_end.transpose(-1, -2) @ v).float()  # (P, N, Dk, Dv): each chunk's own contribution
    if fresh and q.shape[1] == 1:
        # One chunk entered by a zero state (a training row no longer than a chunk): the entering
        # state's term q S_in is exactly zero and the state after it is the chunk's own kv, so
        # the scan and the inter-chunk product are skipped: the same values, bit for bit, without
        # the scan's small float64 ops, which weigh on the first curriculum stage's 24-token rows.
        return o, kv[:, 0].double()
    S_in, state = _scan(kv, s.double() * C, state)  # (P, N, Dk, Dv) fp32, state float64
    q_from_start = q * torch.exp(-s4 * (i + 1)[:, None]).to(dt)  # decay of the entering state at i
    inter = (q_from_start.flatten(0, 1), S_in.to(dt).flatten(0, 1))  # (P N, C, Dk), (P N, Dk, Dv)
    if o.dtype == dt:  # fp32: the GEMM adds onto o itself (no temporary, no extra pass)
        o.flatten(0, 1).baddbmm_(*inter)
    else:
        o.add_(torch.bmm(*inter).view_as(o).float())
    return o, state


def _scan(kv, rate, state):
    """States entering each chunk, S_n = a S_{n-1} + kv_{n-1} with a = exp(-rate) per head.

    kv (P, N, Dk, Dv) fp32; rate (P,) float64 (decay per chunk, s * C); state (P, Dk, Dv) float64.
    Returns (S_in (P, N, Dk, Dv) fp32, the state after the last chunk, float64).

    Two levels of matrix products instead of a loop over chunks (the naive loop is
    kernels/lightning/naive.py's lightning_recurrent). Chunks form groups of g = SCAN_GROUP:
    inside a group, S_in[j] = a^j E + sum_{m<j} a^(j-1-m) kv_m, the sum one fp32 product with
    the (g, g) decay matrix; the states entering the groups, E_G, come from the groups' own sums
    by the same product one level up, in float64, so the carry across groups and calls does not
    drift (over 2^22 / C additions an fp32 carry drifts ~1e-3 relative). Every weight is a^m with
    m >= 0: nothing overflows, tiny weights underflow to the zero they stand for.
    """
    P, N, Dk, Dv = kv.shape
    g = min(N, SCAN_GROUP)
    groups = -(-N // g)
    last = N - (groups - 1) * g  # chunks of the last group (zero kv pads it to g)
    part = kv.reshape(P, N, Dk * Dv)
    if groups * g > N:
        part = F.pad(part, (0, 0, 0, groups * g - N))
    part = part.view(P, groups, g, Dk * Dv)
    rate = rate.view(P, 1, 1)
    a = torch.exp(-rate)  # (P, 1, 1) float64
    W = _decay_matrix(rate, g).to(kv.dtype)  # (P, g, g): row j weighs chunk m by a^(j-1-m), m < j
    inner = W[:, None] @ part  # (P, groups, g, Dk Dv): S_in from the group's own earlier chunks
    ends = inner[:, :, -1].double() * a + part[:, :, -1].double()  # (P, groups, Dk Dv): a group's kv at its end
    Wg = _decay_matrix(rate * g, groups)  # (P, groups, groups) float64: the same one level up
    E = Wg @ ends + _powers(rate * g, groups)[:, :, None] * state.view(P, 1, Dk * Dv)  # (P, groups, Dk Dv) entering each group
    # after chunk N - 1 = chunk last - 1 of the last group, from its float64 entering state
    final = E[:, -1] * a[:, 0] ** last + inner[:, -1, last - 1].double() * a[:, 0] + part[:, -1, last - 1].double()
    S_in = inner.add_(_powers(rate, g).to(kv.dtype)[:, None, :, None] * E[:, :, None].to(kv.dtype))  # in place: inner is fresh
    return S_in.view(P, groups * g, Dk, Dv)[:, :N], final.view(P, Dk, Dv)


def _powers(rate, n):
    """(P, n) float64: a^j = exp(-rate j) for j < n; rate (P, 1, 1)."""
    return torch.exp(-rate[:, :, 0] * torch.arange(n, dtype=torch.float64, device=rate.device))


def _decay_matrix(rate, n):
    """(P, n, n) float64: W[j, m] = a^(j - 1 - m) for m < j, else 0; rate (P, 1, 1)."""
    j = torch.arange(n, dtype=torch.float64, device=rate.device)[:, None]
    m = torch.arange(n, dtype=torch.float64, device=rate.device)[None, :]
    gap = j - 1 - m
    return torch.exp(-rate * gap.clamp(min=0)) * (gap >= 0)


def lightning_attn(
    q, k, v, decay, *, initial_state=None, chunk: int | None = None, segment: int | None = None, compute_dtype: torch.dtype = torch.float32
):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv), final_state (B, H, Dk, Dv) fp32).

    chunk: tokens per chunk (default chunk_for(Dk)); segment: tokens a tile (default: tile_for).

    compute_dtype: the dtype of the products (the state always accumulates in float64). fp32 is
    the fast path's default and the truth of the GPU checks at long T; bf16 / fp16 is "plain
    torch in that dtype", the yardstick of the kernels' error (kernels/tolerance.py).
    """
    B, H, T, Dk = q.shape
    Dv, P = v.shape[-1], B * H
    dtype = q.dtype
    s = decay.to(device=q.device, dtype=torch.float32).repeat(B)  # (P,): pair p = b H + h
    if initial_state is None:
        state = q.new_zeros(P, Dk, Dv, dtype=torch.float64)
    else:
        state = initial_state.to(torch.float64).reshape(P, Dk, Dv)
    chunk = chunk or chunk_for(Dk)
    pairs, tokens = tile_for(P, T, chunk, segment)
    qf, kf, vf = (x.to(compute_dtype).reshape(P, T, -1) for x in (q, k, v))  # a copy only if strided
    # Without autograd, each tile's scores @ v writes straight into the output (no cat at the end).
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, initial_state))
    o_all = torch.empty(P, T, Dv, device=q.device, dtype=torch.float32) if compute_dtype == torch.float32 and not grad else None
    finals, rows = [], []
    for p0 in range(0, P, pairs):
        ps = slice(p0, min(P, p0 + pairs))
        st, row = state[ps], []
        fresh = initial_state is None  # st is zeros until a chunk has been absorbed
        for t0 in range(0, T, tokens):
            L = min(T, t0 + tokens) - t0
            C = min(chunk, L)
            N, full = L // C, (L // C) * C
            for n, c, a, b in ((N, C, t0, t0 + full), (1, L - full, t0 + full, t0 + L)):  # full chunks, then a ragged tail
                if b > a:
                    dst = o_all[ps, a:b] if o_all is not None else None  # strided when a tile of several pairs has a tail
                    out = dst.view(-1, n, c, Dv) if dst is not None and dst.is_contiguous() else None
                    qt, kt, vt = (x[ps, a:b].view(-1, n, c, x.shape[-1]) for x in (qf, kf, vf))  # (pairs, N, C, D)
                    o, st = _chunks(qt, kt, vt, s[ps], st, out, fresh=fresh)
                    fresh = False
                    if dst is None:
                        row.append(o.view(-1, b - a, Dv))
                    elif out is None:
                        dst.copy_(o.view(-1, b - a, Dv))
        finals.append(st)
        if row:
            rows.append(torch.cat(row, dim=1))
    o = o_all if o_all is not None else torch.cat(rows, dim=0)
    return o.view(B, H, T, Dv).to(dtype), torch.cat(finals).view(B, H, Dk, Dv).float()
