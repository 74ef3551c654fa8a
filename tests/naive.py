"""Naive formulas the tests need beyond the attention ops (whose naive truths live beside
their references, kernels/<op>/naive.py, imported as attnbench.kernels.<op>.naive)."""

from __future__ import annotations

import torch


def moe_naive(moe, x):
    """The MoE layer token by token: softmax router, top-k, renormalised weights, GELU experts."""
    x_NC = x.reshape(-1, x.shape[-1])
    y = torch.zeros_like(x_NC)
    for n in range(x_NC.shape[0]):
        probs = torch.softmax(moe.router.weight @ x_NC[n], dim=-1)
        w, e = probs.topk(moe.K)
        w = w / w.sum()
        for wk, ek in zip(w, e.tolist()):
            h = torch.nn.functional.gelu(moe.w_up_EFC[ek] @ x_NC[n])
            y[n] += wk * (moe.w_down_ECF[ek] @ h)
    return y.view_as(x)
