"""Lightning attention (linear attention with per-head exponential decay), plain torch.

Recurrence, per head h with decay rate s_h > 0:
    S_t = exp(-s_h) S_{t-1} + k_t^T v_t        S is (Dk, Dv), S_{-1} = initial_state or 0
    o_t = q_t S_t                               (the current token included)

Computed block-wise (Lightning Attention-2): inside a chunk of C tokens, an intra-chunk
masked-decay product ((q k^T) * M) v with M[i, j] = exp(-s (i - j)) for j <= i; across
chunks, the state carried in float64 and returned as fp32 (over 2^22 / C chunk additions an
fp32 carry drifts ~1e-3 relative). Every exponent is of a non-positive number, so nothing
overflows however long the sequence (never exp(+s t)). Cost O(T C D + T D^2), memory
independent of T beyond the inputs (segments of at most SEGMENT_BYTES of scores are in flight).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Chunk length C = 2 D within [32, 128]: the intra-chunk (C x C) work per token grows with C,
# the per-chunk (D x D) state work per token with D^2 / C. Fastest on the 2-core CPU for D = 8,
# 32 and 64 (experiments/cpu_speedups); the Triton kernel keeps its own CHUNK.
CHUNK_MIN, CHUNK_MAX = 32, 128
# Tokens in flight: a segment's (B, H, tokens, C) scores stay within this many bytes, so the
# big intermediates stay close to the cores' caches and, without attnbench.heap's malloc
# settings, below glibc's 32 MiB mmap threshold (fresh pages to fault in on every call). 16 MiB
# holds a whole 16K-token prefill chunk of the hybrid (H 8, C 32) in one segment: each split
# costs three strided copies and a cat (experiments/cpu_speedups, case lightning_op_16k); for
# D 64 (C 128) segments of 2,048 and 4,096 tokens time the same.
SEGMENT_BYTES = 16 << 20
SCAN_EXPONENT = 500.0  # largest exponent of the chunk-state scan's growing factor (float64 max ~ e^709)


def chunk_for(head_dim: int) -> int:
    """The reference's chunk length for a head dim (see CHUNK_MIN)."""
    return max(CHUNK_MIN, min(CHUNK_MAX, 2 * head_dim))


def segment_for(batch_heads: int, chunk: int, element_bytes: int = 4, budget: int = SEGMENT_BYTES) -> int:
    """Tokens a segment holds: whole chunks whose (B H, tokens, C) scores fit `budget` bytes."""
    return max(chunk, budget // (batch_heads * chunk * element_bytes) // chunk * chunk)


def _chunks(q, k, v, s, state):
    """q, k (B, H, N, C, Dk), v (B, H, N, C, Dv) in the compute dtype; s (H,) fp32; state (B, H, Dk, Dv) float64.

    Returns o (B, H, N, C, Dv) fp32 and the state after the last chunk. The products run in
    q's dtype (fp32 by default); chunk contributions are added to the float64 state.
    """
    _N, C, dt = q.shape[2], q.shape[3], q.dtype
    s5 = s.view(1, -1, 1, 1, 1)  # (1, H, 1, 1, 1)
    i = torch.arange(C, device=q.device, dtype=torch.float32)
    gap = i[:, None] - i[None, :]  # (C, C): i - j
    intra_decay = torch.exp(-s5 * gap.clamp(min=0)) * (gap >= 0)  # (1, H, 1, C, C)
    scores = (q @ k.transpose(-1, -2)).mul_(intra_decay.to(dt))  # (B, H, N, C, C); in place: nothing saves q k^T
    o = (scores @ v).float()  # (B, H, N, C, Dv)

    k_to_end = k * torch.exp(-s5 * (C - 1 - i)[:, None]).to(dt)  # decay from j to the chunk's end
    kv = (k_to_end.transpose(-1, -2) @ v).float()  # (B, H, N, Dk, Dv): each chunk's own contribution
    S_in, state = _scan(kv, s.double() * C, state)  # (B, H, N, Dk, Dv) fp32, state float64
    q_from_start = q * torch.exp(-s5 * (i + 1)[:, None]).to(dt)  # decay of the entering state at i
    return o.add_((q_from_start @ S_in.to(dt)).float()), state  # in place: o is scores @ v's fresh output


def _scan(kv, rate, state):
    """States entering each chunk, S_n = a S_{n-1} + kv_{n-1} with a = exp(-rate) per head, in float64.

    kv (B, H, N, Dk, Dv); rate (H,) float64 (decay per chunk, s * C); state (B, H, Dk, Dv) float64.
    Returns (S_in (B, H, N, Dk, Dv) fp32, the state after the last chunk, float64).

    Written as a few tensor ops over groups of g chunks rather than a Python loop over chunks:
    inside group G, S_in[G, j] = a^j (E_G + sum_{m<j} a^-(m+1) kv_m), one cumulative sum for all
    groups at once; only the states entering the groups, E_{G+1} = a^g E_G + (group G's own
    sum), take a loop (N / g steps of two small ops). The growing factor a^-(m+1) <=
    exp(SCAN_EXPONENT) bounds g, so nothing overflows and float64 keeps ~1e-13 relative error;
    the naive loop is kernels/lightning/naive.py's lightning_recurrent.
    """
    B, H, N, Dk, Dv = kv.shape
    rate = rate.view(1, H, 1, 1, 1, 1)
    g = max(1, min(N, int(SCAN_EXPONENT / max(float(rate.max()), 1e-30))))
    groups = -(-N // g)
    g = -(-N // groups)  # the same number of groups, evened out: at most groups - 1 padding chunks
    last = N - (groups - 1) * g  # chunks of the last group (zero kv pads it to g)
    part = F.pad(kv.double(), (0, 0, 0, 0, 0, groups * g - N)).view(B, H, groups, g, Dk, Dv)
    m = torch.arange(g, dtype=torch.float64, device=kv.device).view(1, 1, 1, g, 1, 1)
    acc = torch.cumsum(part * torch.exp(rate * (m + 1)), dim=3)  # inclusive: sum_{m'<=m} a^-(m'+1) kv_m'
    a_g = torch.exp(-rate[:, :, 0, 0] * g)  # (1, H, 1, 1)
    own = acc[:, :, :, -1] * a_g[:, :, None]  # (B, H, groups, Dk, Dv): a group's kv, decayed to its end
    entering = [state]
    for G in range(groups - 1):
        entering.append(entering[-1] * a_g + own[:, :, G])
    E = torch.stack(entering, dim=2)[:, :, :, None]  # (B, H, groups, 1, Dk, Dv)
    before = torch.cat([E, acc[:, :, :, :-1] + E], dim=3)  # exclusive, E added (no subtraction: the newest term dominates)
    S_in = (before * torch.exp(-rate * m)).view(B, H, groups * g, Dk, Dv)[:, :, :N]  # times a^j
    final = (acc[:, :, -1, last - 1] + entering[-1]) * torch.exp(-rate[:, :, 0, 0] * last)
    return S_in.float(), final


def lightning_attn(
    q, k, v, decay, *, initial_state=None, chunk: int | None = None, segment: int | None = None, compute_dtype: torch.dtype = torch.float32
):
    """q, k (B, H, T, Dk); v (B, H, T, Dv); decay (H,) -> (o (B, H, T, Dv), final_state (B, H, Dk, Dv) fp32).

    chunk: tokens per chunk (default chunk_for(Dk)); segment: tokens in flight (default segment_for).

    compute_dtype: the dtype of the products (the state always accumulates in float64). fp32 is
    the fast path's default and the truth of the GPU checks at long T; bf16 / fp16 is "plain
    torch in that dtype", the yardstick of the kernels' error (kernels/tolerance.py).
    """
    B, H, T, Dk = q.shape
    Dv = v.shape[-1]
    dtype = q.dtype
    s = decay.to(device=q.device, dtype=torch.float32)
    if initial_state is None:
        state = q.new_zeros(B, H, Dk, Dv, dtype=torch.float64)
    else:
        state = initial_state.to(torch.float64)
    chunk = chunk or chunk_for(Dk)
    segment = segment or segment_for(B * H, chunk)
    outs = []
    for start in range(0, T, segment):
        seg = slice(start, min(T, start + segment))
        qs, ks, vs = (x[:, :, seg].to(compute_dtype).contiguous() for x in (q, k, v))  # strided inputs slow every op below
        L = qs.shape[2]
        C = min(chunk, L)
        N, full = L // C, (L // C) * C
        qc, kc, vc = (x[:, :, :full].reshape(B, H, N, C, -1) for x in (qs, ks, vs))
        o, state = _chunks(qc, kc, vc, s, state)
        outs.append(o.reshape(B, H, full, Dv))
        if full < L:  # ragged tail: one shorter chunk
            qc, kc, vc = (x[:, :, full:].unsqueeze(2) for x in (qs, ks, vs))
            o, state = _chunks(qc, kc, vc, s, state)
            outs.append(o.squeeze(2))
    o = torch.cat(outs, dim=2) if len(outs) != 1 else outs[0]
    return o.to(dtype), state.float()
