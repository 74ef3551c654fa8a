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


def task_loss_naive(model, design, cfg, x, y):
    """train.task_loss as first written: logits at every position, then the answer positions by a mask."""
    import torch.nn.functional as F

    from attnbench.tasks.batches import IGNORE

    out = model(x)
    mask = y != IGNORE
    logits = out.logits[mask]  # (n_answers, V)
    ce = F.cross_entropy(logits, y[mask])
    loss = ce + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss
    return loss, ce, (logits.argmax(-1) == y[mask]).float().mean(), out
