"""MSA, the fused native CPU forward of its block-sparse attention (native.cpp beside this file).

``msa_attn`` has the reference's contract and runs on a CPU tensor with no gradient asked for and
the extension built (kernels/native_build.py); everywhere else the reference runs, the reason
logged once. Computes in fp32 whatever the inputs' dtype; the output in q's dtype. The selection
(``msa_select``) is the reference's: it is already near its limit (experiments/roofline_cpu).
"""

from __future__ import annotations

import math

import torch.nn.functional as F

from .. import native_build as build
from . import reference
from .reference import msa_select  # noqa: F401 - the backend switch looks msa_select up in this module too


def extension():
    """The built module, or the reason it is not built (a str)."""
    return build.load("msa")


def msa_attn(q, k, v, block_idx, block_size: int, *, scale: float | None = None):
    """q (B, H, T, D); k, v (B, G, S, D); block_idx (B, G, T, top_k) -> o (B, H, T, D)."""
    if build.why_not("msa", extension(), q, k, v) is not None:
        return reference.msa_attn(q, k, v, block_idx, block_size, scale=scale)
    B, G, S, D = k.shape
    blocks = -(-S // block_size)
    qf, vf = q.float().contiguous(), v.float().contiguous()
    kb = F.pad(k.float(), (0, 0, 0, blocks * block_size - S)).view(B, G, blocks, block_size, D)
    ktb = kb.transpose(-1, -2).contiguous()  # (B, G, blocks, D, bs): a key block's transpose, contiguous
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    return extension().forward(qf, ktb, vf, block_idx.long().contiguous(), int(block_size), float(scale)).to(q.dtype)
