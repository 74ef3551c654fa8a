"""Mixture of experts: top-k routing over E GELU MLP experts with a load-balancing loss.

Identical for every design. Tensors carry their shapes in their names (torchtitan style):
N tokens, C d_model, F expert hidden, E experts, K experts per token.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:  # the schemas; at run time a layer gets the composed DictConfig node
    from attnbench.config import ModelConfig


class GlobalRouting:
    """The balance loss of a slice of a global batch (one process's rows, one micro-batch).

    The loss of a whole batch, E * sum_e f_e P_e (f_e: fraction of the top-k assignments that
    went to expert e, P_e: mean router probability of e), is not a sum over rows: the slices'
    own losses do not add up to it. With the global batch's f_e (a constant: top-k passes no
    gradient), each slice contributes E * sum_e f_e * (sum of its probs_e) / n_tokens, and the
    contributions of all slices sum to the global batch's loss, value and gradient.

    f_e comes from ``counts`` (layer -> assignments per expert in the global batch, gathered by
    a counting pass: ``counting=True``), or, when each process forwards its rows in one slice,
    from this slice's counts summed over the processes by ``reduce`` (an all-reduce).
    """

    def __init__(self, n_tokens: int, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.n_tokens = n_tokens  # tokens of the global batch
        self.reduce = reduce
        self.counting = False
        self.counts: dict[int, torch.Tensor] = {}  # layer -> (E,) int64

    def balance(self, layer: int, expert_NK: torch.Tensor, probs_NE: torch.Tensor) -> torch.Tensor:
        E, K = probs_NE.shape[1], expert_NK.shape[1]
        local_E = torch.bincount(expert_NK.flatten(), minlength=E)
        if self.counting:
            self.counts[layer] = self.counts[layer] + local_E if layer in self.counts else local_E
            return probs_NE.new_zeros(())
        counts_E = self.counts.get(layer)
        if counts_E is None:
            counts_E = self.reduce(local_E) if self.reduce is not None else local_E
        routed_E = counts_E.to(probs_NE.dtype) / (self.n_tokens * K)
        return E * (routed_E * probs_NE.sum(0)).sum() / self.n_tokens


# Set (attnbench.distributed) while a step's global batch is split over processes or
# micro-batches; None: the batch is whole here, and the loss is computed as it always was.
GLOBAL_ROUTING: ContextVar[GlobalRouting | None] = ContextVar("attnbench_global_routing", default=None)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.layer = layer
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
        # per expert: its (token, slot) pairs in token order, one gather of their rows, the expert's
        # two matmuls, and an in-place index_add of the weighted outputs; the experts run in order,
        # so a token's K contributions are summed in expert order. (Measured faster on the CPU than
        # one argsort-based dispatch for all experts: experiments/cpu_speedups.)
        y_NC = torch.zeros_like(x_NC)
        counts = []
        for e in range(self.E):
            token, slot = (expert_NK == e).nonzero(as_tuple=True)  # (n_e,) each
            counts.append(token.numel())
            if counts[-1]:
                h = F.gelu(x_NC.index_select(0, token) @ self.w_up_EFC[e].T) @ self.w_down_ECF[e].T  # (n_e, C)
                y_NC.index_add_(0, token, h * weight_NK[token, slot][:, None])
        routing = GLOBAL_ROUTING.get()
        if routing is None:  # the whole batch is here
            routed_E = torch.tensor(counts, dtype=x.dtype, device=x.device) / expert_NK.numel()
            balance = self.E * (routed_E * probs_NE.mean(0)).sum()
        else:  # a slice of a global batch: its share of the global batch's loss
            balance = routing.balance(self.layer, expert_NK, probs_NE)
        return y_NC.view_as(x), balance
