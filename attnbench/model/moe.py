"""Mixture of experts: top-k routing over E GELU MLP experts with a load-balancing loss.

Identical for every design. Tensors carry their shapes in their names (torchtitan style):
N tokens, C d_model, F expert hidden, E experts, K experts per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.E, self.K = cfg.n_experts, cfg.top_k_experts
        C, Fh = cfg.d_model, cfg.d_expert
        self.router = nn.Linear(C, self.E, bias=False)
        self.w_up_EFC = nn.Parameter(torch.empty(self.E, Fh, C))
        self.w_down_ECF = nn.Parameter(torch.empty(self.E, C, Fh))
        nn.init.normal_(self.w_up_EFC, std=cfg.init_std)
        nn.init.normal_(self.w_down_ECF, std=cfg.init_std)

    def forward(self, x: torch.Tensor):
        """x (B, T, C) -> (y (B, T, C), load-balancing loss E * sum_e f_e P_e, 1.0 when balanced)."""
        x_NC = x.reshape(-1, x.shape[-1])
        probs_NE = torch.softmax(self.router(x_NC), dim=-1)
        weight_NK, expert_NK = probs_NE.topk(self.K, dim=-1)
        weight_NK = weight_NK / weight_NK.sum(-1, keepdim=True)
        # dispatch once: the (token, slot) pairs sorted by expert (stable: each expert's tokens in
        # order), one gather of their rows; each expert multiplies a contiguous slice; one
        # index_add sums the K contributions of a token in expert order (as a loop over experts would)
        order = torch.argsort(expert_NK.flatten(), stable=True)
        counts = torch.bincount(expert_NK.flatten(), minlength=self.E).tolist()
        token = order // self.K
        x_rows = x_NC.index_select(0, token)
        w_rows = weight_NK.flatten().index_select(0, order)[:, None]
        h_rows, start = [], 0
        for e, n in enumerate(counts):
            if n:
                h_rows.append(F.gelu(x_rows[start : start + n] @ self.w_up_EFC[e].T) @ self.w_down_ECF[e].T)  # (n, C)
            start += n
        y_NC = torch.zeros_like(x_NC).index_add_(0, token, torch.cat(h_rows) * w_rows)
        routed_E = torch.tensor(counts, dtype=x.dtype, device=x.device) / expert_NK.numel()
        balance = self.E * (routed_E * probs_NE.mean(0)).sum()
        return y_NC.view_as(x), balance
