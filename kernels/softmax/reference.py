"""Causal GQA softmax attention, plain torch (SDPA): the reference and the CPU fast path."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_mask(T: int, S: int, device: torch.device) -> torch.Tensor:
    """(T, S) bool, True where query t (aligned to the last T of S keys) may see key j."""
    t = torch.arange(T, device=device)[:, None] + (S - T)
    j = torch.arange(S, device=device)[None, :]
    return j <= t


def softmax_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """q (B, H, T, D); k, v (B, Hkv, S, D), S >= T -> o (B, H, T, D)."""
    T, S = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if gqa and q.is_cuda and q.dtype == torch.float32:
        # fp32 with enable_gqa takes SDPA's unfused CUDA path, which materialises every head's
        # (T, S) scores (2 TiB at T = S = 131072, B 2, H 16: an H200 run of exp=kernels_gpu);
        # with the KV heads repeated the memory-efficient kernel takes it
        k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
        gqa = False
    if T == S:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    if T == 1:  # one query at the end sees every key: a KV group's query heads become its queries
        # (no mask, no repeated K/V: experiments/cpu_speedups, cases softmax_decode*)
        B, H, _, D = q.shape
        G = k.shape[1]
        return F.scaled_dot_product_attention(q.reshape(B, G, H // G, D), k, v, scale=scale).reshape(B, H, 1, v.shape[-1])
    if q.device.type == "cpu" and not (torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))):
        return _prefix_then_causal(q, k, v, scale)  # (no gradient: the flash op's backward ignores its log-sum-exp)
    mask = causal_mask(T, S, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def _prefix_then_causal(q, k, v, scale):
    """T queries after S - T cached keys, on the CPU: the cached keys, which every query sees (no
    mask), and the last T keys, causally, each by the CPU flash kernel, merged by their
    log-sum-exps. With the explicit (T, S) mask instead, SDPA takes its unfused path, which
    materialises the (T, S) scores of every head (32 GiB at T = 64K, S = 256K) and runs about 2x
    slower. SDPA does not return the log-sum-exp, so this calls the ATen flash op it dispatches to."""
    B, H, T, D = q.shape
    G, S, Dv = k.shape[1], k.shape[2], v.shape[-1]
    P, Hg = S - T, H // G
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    # the Hg query heads of a KV group see the same cached keys: stacked along the queries
    o_pre, lse_pre = flash(q.reshape(B, G, Hg * T, D), k[:, :, :P], v[:, :, :P], 0.0, False, scale=scale)
    k_new, v_new = (x[:, :, P:].repeat_interleave(Hg, dim=1) for x in (k, v))  # (B, H, T, D): T keys, cheap
    o_new, lse_new = flash(q, k_new, v_new, 0.0, True, scale=scale)
    lse_pre, o_pre = lse_pre.reshape(B, H, T, 1), o_pre.reshape(B, H, T, Dv)
    lse = torch.logaddexp(lse_pre, lse_new[..., None])  # (B, H, T, 1)
    return (o_pre * torch.exp(lse_pre - lse) + o_new * torch.exp(lse_new[..., None] - lse)).to(q.dtype)
