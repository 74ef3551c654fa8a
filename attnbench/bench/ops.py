"""The attention ops at benchmark shapes: inputs, calls, baselines, naive truths, selection gaps.

Shared by exp kernels_cpu (the plain-torch references against causal SDPA on CPU) and exp
kernels_gpu (the Triton kernels against the references and the fastest baselines on CUDA).
Every op is called through attnbench.kernels with an explicit backend, never imported from
a backend module, so the one backend switch stays the only place that picks code; the naive
truths (kernels/<op>/naive.py) are no backend and are imported directly. Errors are judged by
kernels/tolerance.py.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from attnbench.designs import DESIGNS, spec_of_op
from attnbench.specs import OpShape, cast

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
Shape = OpShape  # the benchmark shapes are op shapes with as many keys as queries


def design_of(op: str) -> str:
    """The design an op or a part of one belongs to (records need one): msa_select and msa_attn are msa's."""
    for d in DESIGNS.values():
        if d.op is not None and (op == d.op or op in d.behaviour().part_names):
            return d.name
    return op


def make_inputs(op: str, sh: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """Random inputs of ``op`` at ``sh`` (its spec's: unit-scale q, k, v; lightning's q, k scaled by 0.3)."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g) * scale).to(device=device, dtype=dtype)

    return spec_of_op(op).inputs(sh, rnd)


def run(op: str, backend: str, x: dict, sh: Shape, **kw) -> torch.Tensor:
    """The op's output (msa: selection then attention) with ``backend``; keywords go to
    lightning's reference (compute_dtype)."""
    return spec_of_op(op).call(x, sh, backend, **kw)[0]


def lightning_reference(x: dict, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """The lightning reference with its extra keywords (compute_dtype: plain torch in bf16 / fp16)."""
    return spec_of_op("lightning").call(x, None, "reference", **kw)


def sdpa_causal(x: dict) -> torch.Tensor:
    """The baseline every op is compared with: causal softmax attention through SDPA (GQA)."""
    q, k, v = x["q"], x["k"], x["v"]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def baseline(name: str, op: str, x: dict, sh: Shape) -> tuple[Callable, list] | None:
    """(forward, its input leaves) of baseline ``name`` for ``op``, or None where it has none.

    Imports and compiles happen here (an ImportError or a compile error propagates to the
    caller, which records the baseline as skipped). Layout copies are made here, outside the
    timed call; their leaves require grad when x's q does.
    """
    grad = x["q"].requires_grad
    spec = spec_of_op(op)
    if name not in spec.baselines:
        return None
    if name == "reference":
        return (lambda: run(op, "reference", x, sh)), [x["q"], x["k"], x["v"]]
    if name == "flash_attn":
        from flash_attn import flash_attn_func

        q, k, v = (x[n].detach().transpose(1, 2).contiguous().requires_grad_(grad) for n in ("q", "k", "v"))  # (B, T, H, D)
        band = spec.band(sh)
        window = (band - 1, 0) if band is not None else (-1, -1)
        return (lambda: flash_attn_func(q, k, v, causal=True, window_size=window)), [q, k, v]
    if name == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        w = spec.band(sh) or sh.T + 1

        def band(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx < w)

        mask = create_block_mask(band, B=None, H=None, Q_LEN=sh.T, KV_LEN=sh.T, device=x["q"].device)
        flex = torch.compile(flex_attention)

        def fn():
            return flex(x["q"], x["k"], x["v"], block_mask=mask, enable_gqa=sh.H != sh.Hkv)

        fn()  # compile now, outside the timing
        return fn, [x["q"], x["k"], x["v"]]
    if name == "fla":
        from fla.ops.lightning_attn import chunk_lightning_attn

        q, k, v = (x[n].detach().transpose(1, 2).contiguous().requires_grad_(grad) for n in ("q", "k", "v"))  # (B, T, H, D)
        return (lambda: chunk_lightning_attn(q, k, v, layer_idx=0, num_layers=2, scale=1.0)[0]), [q, k, v]
    return None


def with_backward(fn: Callable, leaves: list) -> Callable:
    """A zero-argument call running fn's forward and the backward to ``leaves``."""
    state = {}

    def step():
        out = fn()
        if "do" not in state:
            state["do"] = torch.randn_like(out)
        return torch.autograd.grad(out, leaves, state["do"])

    return step


def naive(op: str, x: dict, sh: Shape, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The op's naive formula (kernels/<op>/naive.py, through its spec) on x cast to ``dtype``:
    the truth in float64 (dense, O(T^2) time and memory: moderate T only), plain torch in x's
    own dtype. msa selects with its naive selection unless x holds a block_idx."""
    return spec_of_op(op).naive(cast(x, dtype), sh)[0]


def fwd_bwd(fn: Callable[[dict], torch.Tensor], x: dict, names: tuple[str, ...], do: torch.Tensor):
    """Output of fn(x) and the gradients of sum(out * do) with respect to x[names]."""
    leaves = {n: x[n].detach().requires_grad_(True) for n in names}
    out = fn({**x, **leaves})
    grads = torch.autograd.grad(out, [leaves[n] for n in names], do.to(out.dtype))
    return out.detach(), dict(zip(names, grads))


def selection_gap(
    got: torch.Tensor, want: torch.Tensor, index_q: torch.Tensor, index_k: torch.Tensor, block_size: int
) -> tuple[float, float, float]:
    """How two msa selections differ: (fraction of rows that differ, the largest gap between the
    sorted block scores the two chose on those rows, max |block score| there), scores in fp32.

    Rows may differ only where blocks tie to rounding: a large gap is a wrong selection.
    """
    rows = (got != want).any(-1).nonzero(as_tuple=True)  # (b, g, t) of differing rows
    frac = float(rows[0].numel()) / max(1, got[..., 0].numel())
    if rows[0].numel() == 0:
        return 0.0, 0.0, 0.0
    S = index_k.shape[1]
    q = index_q[rows].float()  # (R, Di)
    lane = torch.arange(block_size, device=got.device)

    def scores(sel):  # (R, k - 1) max-pooled scores of the chosen earlier blocks, sorted
        blk = sel[rows][:, 1:]
        j = (blk.clamp(min=0)[..., None] * block_size + lane).clamp(max=S - 1)  # (R, k-1, bs)
        keys = index_k[rows[0][:, None, None], j].float()  # (R, k-1, bs, Di)
        s = torch.einsum("rd,rkjd->rkj", q, keys).amax(-1)
        return s.masked_fill(blk < 0, float("-inf")).sort(-1, descending=True).values

    a, b = scores(got), scores(want)
    both = torch.isfinite(a) & torch.isfinite(b)
    if not bool((torch.isfinite(a) == torch.isfinite(b)).all()):
        return frac, float("inf"), float(b[torch.isfinite(b)].abs().max()) if bool(torch.isfinite(b).any()) else 0.0
    gap = float((a - b)[both].abs().max()) if bool(both.any()) else 0.0
    return frac, gap, float(b[both].abs().max()) if bool(both.any()) else 0.0
