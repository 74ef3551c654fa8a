"""The attention ops at benchmark shapes: inputs, calls, baselines, naive truths, selection gaps.

Shared by exp kernels_cpu (the plain-torch references against causal SDPA on CPU) and exp
kernels_gpu (the Triton kernels against the references and the fastest baselines on CUDA).
Every op is called through attnbench.kernels with an explicit backend, never imported from
a backend module, so the one backend switch stays the only place that picks code; the naive
truths (kernels/<op>/naive.py) are no backend and are imported directly. Errors are judged by
kernels/tolerance.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import attnbench.kernels as K
from attnbench.designs import KERNEL_OPS as OPS
from attnbench.kernels.lightning import naive as lightning_naive
from attnbench.kernels.msa import naive as msa_naive
from attnbench.kernels.sliding_window import naive as sliding_naive
from attnbench.kernels.softmax import naive as softmax_naive
from attnbench.model.lightning import decay_rates

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    B: int
    H: int
    Hkv: int  # KV heads of softmax / sliding window; index groups G of msa (lightning has H)
    T: int
    D: int
    window: int
    block_size: int
    top_k: int
    index_dim: int

    def label(self) -> str:
        return f"B{self.B} H{self.H}/{self.Hkv} T{self.T} D{self.D}"


def make_inputs(op: str, sh: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """Random inputs of ``op`` at ``sh`` (unit-scale q, k, v; lightning's q, k scaled by 0.3)."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g) * scale).to(device=device, dtype=dtype)

    if op == "lightning":
        return dict(
            q=rnd(sh.B, sh.H, sh.T, sh.D, scale=0.3),
            k=rnd(sh.B, sh.H, sh.T, sh.D, scale=0.3),
            v=rnd(sh.B, sh.H, sh.T, sh.D),
            decay=decay_rates(sh.H, 0, 2).to(device),
        )
    x = dict(q=rnd(sh.B, sh.H, sh.T, sh.D), k=rnd(sh.B, sh.Hkv, sh.T, sh.D), v=rnd(sh.B, sh.Hkv, sh.T, sh.D))
    if op == "msa":
        x["index_q"] = rnd(sh.B, sh.Hkv, sh.T, sh.index_dim)
        x["index_k"] = rnd(sh.B, sh.T, sh.index_dim)
    return x


def run(op: str, backend: str, x: dict, sh: Shape, **kw) -> torch.Tensor:
    """The op's output (msa: selection then attention) with ``backend``."""
    if op == "softmax":
        return K.softmax_attn(x["q"], x["k"], x["v"], backend=backend)
    if op == "sliding_window":
        return K.sliding_window_attn(x["q"], x["k"], x["v"], sh.window, backend=backend)
    if op == "lightning":
        if backend == "reference" and kw:
            return lightning_reference(x, **kw)[0]
        return K.lightning_attn(x["q"], x["k"], x["v"], x["decay"], backend=backend)[0]
    if op == "msa":
        idx = x.get("block_idx")
        if idx is None:
            idx = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend=backend)
        return K.msa_attn(x["q"], x["k"], x["v"], idx, sh.block_size, backend=backend)
    raise ValueError(f"op={op!r}: allowed {', '.join(OPS)}")


def lightning_reference(x: dict, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """The lightning reference with its extra keywords (compute_dtype: plain torch in bf16 / fp16)."""
    from attnbench.kernels.lightning.reference import lightning_attn

    return lightning_attn(x["q"], x["k"], x["v"], x["decay"], **kw)


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
    if name == "reference":
        return (lambda: run(op, "reference", x, sh)), [x["q"], x["k"], x["v"]]
    if name == "flash_attn" and op in ("softmax", "sliding_window"):
        from flash_attn import flash_attn_func

        q, k, v = (x[n].detach().transpose(1, 2).contiguous().requires_grad_(grad) for n in ("q", "k", "v"))  # (B, T, H, D)
        window = (sh.window - 1, 0) if op == "sliding_window" else (-1, -1)
        return (lambda: flash_attn_func(q, k, v, causal=True, window_size=window)), [q, k, v]
    if name == "flex" and op in ("softmax", "sliding_window"):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        w = sh.window if op == "sliding_window" else sh.T + 1

        def band(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx < w)

        mask = create_block_mask(band, B=None, H=None, Q_LEN=sh.T, KV_LEN=sh.T, device=x["q"].device)
        flex = torch.compile(flex_attention)

        def fn():
            return flex(x["q"], x["k"], x["v"], block_mask=mask, enable_gqa=sh.H != sh.Hkv)

        fn()  # compile now, outside the timing
        return fn, [x["q"], x["k"], x["v"]]
    if name == "fla" and op == "lightning":
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
    """The op's naive formula (kernels/<op>/naive.py) on x cast to ``dtype``: the truth in float64
    (dense, O(T^2) time and memory: moderate T only), plain torch in x's own dtype. msa selects
    with its naive selection unless x holds a block_idx."""
    z = {n: (t.to(dtype) if t.is_floating_point() else t) for n, t in x.items()}
    q, k, v = z["q"], z["k"], z["v"]
    if op == "softmax":
        return softmax_naive.softmax_attn(q, k, v)
    if op == "sliding_window":
        return sliding_naive.sliding_window_attn(q, k, v, sh.window)
    if op == "lightning":
        return lightning_naive.lightning_attn(q, k, v, z["decay"])[0]
    if op == "msa":
        idx = z.get("block_idx")
        if idx is None:
            idx = msa_naive.msa_select(z["index_q"], z["index_k"], sh.block_size, sh.top_k)
        return msa_naive.msa_attn(q, k, v, idx, sh.block_size)
    raise ValueError(f"op={op!r}: allowed {', '.join(OPS)}")


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
