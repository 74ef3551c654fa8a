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
        y_NC = torch.zeros_like(x_NC)
        for e in range(self.E):
            token, slot = (expert_NK == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            h = F.gelu(x_NC[token] @ self.w_up_EFC[e].T) @ self.w_down_ECF[e].T  # (n, C)
            y_NC = y_NC.index_add(0, token, h * weight_NK[token, slot, None])
        routed_E = torch.bincount(expert_NK.flatten(), minlength=self.E).to(x.dtype) / expert_NK.numel()
        balance = self.E * (routed_E * probs_NE.mean(0)).sum()
        return y_NC.view_as(x), balance
