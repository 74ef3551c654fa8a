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
        local_E = expert_counts(expert_NK.flatten(), E)
        if self.counting:
            self.counts[layer] = self.counts[layer] + local_E if layer in self.counts else local_E
            return probs_NE.new_zeros(())
        counts_E = self.counts.get(layer)
        if counts_E is None:
            counts_E = self.reduce(local_E) if self.reduce is not None else local_E
        routed_E = counts_E.to(probs_NE.dtype) / (self.n_tokens * K)
        return E * (routed_E * probs_NE.sum(0)).sum() / self.n_tokens


# Set (attnbench.training.distributed) while a step's global batch is split over processes or
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
        y_NC, counts_E = self.dispatch(x_NC, weight_NK, expert_NK)
        # (Dynamo cannot trace ContextVar.get: a compiled step, attnbench/training/step.py, is only
        # ever built for whole batches, where no routing is set)
        routing = None if torch.compiler.is_compiling() else GLOBAL_ROUTING.get()
        if routing is None:  # the whole batch is here
            routed_E = counts_E.to(x.dtype) / expert_NK.numel()
            balance = self.E * (routed_E * probs_NE.mean(0)).sum()
        else:  # a slice of a global batch: its share of the global batch's loss
            balance = routing.balance(self.layer, expert_NK, probs_NE)
        return y_NC.view_as(x), balance

    def dispatch(self, x_NC: torch.Tensor, weight_NK: torch.Tensor, expert_NK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (y_NC, the assignments per expert (E,) int64): sum_k weight_NK * expert_{expert_NK}(x_NC).

        The N K assignments sorted by expert (stable: token order inside an expert), one gather
        of their rows, each expert's two matmuls on its slice, and one index_add in that order,
        so a token's K contributions are summed in expert order. Every buffer has the same size
        at every call (N K rows), whatever the routing: per-expert buffers of n_e rows, a
        different size at each prefill chunk, split glibc's freed blocks into pieces too small to
        reuse, and the heap grew with every chunk of a long prefill (experiments/cpu_speedups,
        cases heap_growth and moe_fixed_buffers). Where ``grouped`` holds (fp32 on the CPU) the
        matmuls of all experts are one grouped GEMM each (``grouped_mm``), which also has no
        data-dependent Python (the compiled train step traces it: attnbench/training/step.py).
        """
        return self.dispatch_grouped(x_NC, weight_NK, expert_NK) if grouped(x_NC) else self.dispatch_loop(x_NC, weight_NK, expert_NK)

    def dispatch_grouped(self, x_NC: torch.Tensor, weight_NK: torch.Tensor, expert_NK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """dispatch with one grouped GEMM for the up and one for the down projection of all experts."""
        N, K = expert_NK.shape
        expert_A = expert_NK.flatten()  # A = N K assignments, token-major
        order_A = expert_A.argsort(stable=True)  # grouped by expert, token order inside each
        counts_E = expert_counts(expert_A, self.E)
        offs_E = counts_E.cumsum(0).to(torch.int32)  # end row of each expert's group
        token_A = order_A // K
        # fp32 on the CPU; bf16 operands on a CUDA device (the matmuls autocast would make bf16)
        dt = x_NC.dtype if x_NC.device.type == "cpu" else torch.bfloat16
        w_up_ECF, w_down_EFC = self.w_up_EFC.to(dt).transpose(1, 2), self.w_down_ECF.to(dt).transpose(1, 2)
        hidden_AF = F.gelu(grouped_mm(x_NC.index_select(0, token_A).to(dt), w_up_ECF, offs_E))
        out_AC = grouped_mm(hidden_AF, w_down_EFC, offs_E).to(x_NC.dtype) * weight_NK.flatten()[order_A][:, None]
        return torch.zeros_like(x_NC).index_add_(0, token_A, out_AC), counts_E

    # Each expert's rows depend on the routing (data-dependent shapes): a compiled graph
    # (Model.compile_prefill, attnbench/training/step.py) runs this loop eagerly between its parts.
    @torch.compiler.disable
    def dispatch_loop(self, x_NC: torch.Tensor, weight_NK: torch.Tensor, expert_NK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """dispatch with a Python loop over the experts' slices (any dtype and device)."""
        N, K = expert_NK.shape
        expert_A = expert_NK.flatten()  # A = N K assignments, token-major
        order_A = expert_A.argsort(stable=True)  # grouped by expert, token order inside each
        counts_E = torch.bincount(expert_A, minlength=self.E)
        token_A = order_A // K
        ends = counts_E.cumsum(0).tolist()
        spans = [(e, a, b) for e, (a, b) in enumerate(zip([0] + ends[:-1], ends)) if b > a]  # expert e: rows a..b-1
        hidden_AF = F.gelu(_per_expert(x_NC.index_select(0, token_A), self.w_up_EFC, spans))
        out_AC = _per_expert(hidden_AF, self.w_down_ECF, spans) * weight_NK.flatten()[order_A][:, None]
        return torch.zeros_like(x_NC).index_add_(0, token_A, out_AC), counts_E


def expert_counts(expert_A: torch.Tensor, E: int) -> torch.Tensor:
    """(E,) int64: how many of the assignments went to each expert. torch.bincount's output is
    sized by the largest id (a host read on a GPU); this one is sized by E."""
    return torch.zeros(E, dtype=torch.int64, device=expert_A.device).scatter_add_(0, expert_A, torch.ones_like(expert_A))


def grouped(x: torch.Tensor) -> bool:
    """Whether MoE.dispatch takes the grouped GEMM: fp32 on the CPU, where torch._grouped_mm runs
    and was checked (tests/test_model.py), and a CUDA device where its bf16 grouped GEMM runs
    (compute capability 9.0 or more, and a first call that agreed with the loop:
    ``cuda_grouped_ok``). Everything else (float64 truths, older GPUs) loops over the experts,
    which reads each expert's row count on the host."""
    if not GROUPED_MM:
        return False
    if x.device.type == "cpu":
        return x.dtype == torch.float32
    return x.device.type == "cuda" and x.dtype in (torch.float32, torch.bfloat16) and cuda_grouped_ok(x.device)


GROUPED_MM = True  # False: every dispatch loops over the experts (the eager reference of tests/test_train_speed.py)
_CUDA_GROUPED: dict[str, bool] = {}


def cuda_grouped_ok(device: torch.device) -> bool:
    """Whether torch._grouped_mm's bf16 path runs on this CUDA device and matches the per-expert
    loop in bf16 (forward and both gradients) on a small random case; checked once per device,
    the answer and its reason logged. Never run here (no GPU): a failure falls back to the loop."""
    key = str(device)
    if key not in _CUDA_GROUPED:
        import logging

        log = logging.getLogger(__name__)
        ok, why = False, ""
        try:
            if torch.cuda.get_device_capability(device) < (9, 0):
                why = f"compute capability {torch.cuda.get_device_capability(device)} < 9.0"
            else:
                g = torch.Generator(device="cpu").manual_seed(0)
                x = torch.randn(64, 32, generator=g).to(device, torch.bfloat16).requires_grad_()
                w = torch.randn(4, 32, 48, generator=g).to(device, torch.bfloat16).requires_grad_()
                offs = torch.tensor([10, 10, 40, 64], dtype=torch.int32, device=device)  # one empty group
                spans = [(0, 0, 10), (2, 10, 40), (3, 40, 64)]
                got = grouped_mm(x, w, offs)
                want = torch.cat([x[a:b] @ w[e] for e, a, b in spans])
                gx, gw = torch.autograd.grad(got.float().square().sum(), (x, w))
                hx, hw = torch.autograd.grad(want.float().square().sum(), (x, w))
                err = max(float((a.float() - b.float()).abs().max() / b.float().abs().max()) for a, b in ((got, want), (gx, hx), (gw, hw)))
                ok, why = err < 2e-2, f"largest relative difference to the loop {err:.1e}"
        except Exception as e:  # noqa: BLE001 - any failure: loop over the experts instead
            why = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        _CUDA_GROUPED[key] = ok
        log.info("moe: grouped GEMM on %s %s (%s)", device, "on" if ok else "off: the experts loop", why)
    return _CUDA_GROUPED[key]


# torch._grouped_mm computes fp32 on the CPU, but its fake-tensor rule accepts only bf16, so
# torch.compile could not trace it; as a custom op with its own fake and backward, the compiled
# train step keeps the whole MoE in its graph. (torch's own autograd formula for it is the same
# two grouped GEMMs as _grouped_mm_backward below.)
@torch.library.custom_op("attnbench::grouped_mm", mutates_args=())
def grouped_mm(x_AI: torch.Tensor, w_EIO: torch.Tensor, offs_E: torch.Tensor) -> torch.Tensor:
    """(A, O): the rows of group e (offs_E[e - 1] .. offs_E[e] - 1, offs_E int32 ends) times w_EIO[e] (I, O)."""
    return torch._grouped_mm(x_AI, w_EIO, offs=offs_E)


@grouped_mm.register_fake
def _grouped_mm_fake(x_AI, w_EIO, offs_E):
    return x_AI.new_empty(x_AI.shape[0], w_EIO.shape[2])


@torch.library.custom_op("attnbench::grouped_mm_weight_grad", mutates_args=())
def grouped_mm_weight_grad(x_AI: torch.Tensor, g_AO: torch.Tensor, offs_E: torch.Tensor) -> torch.Tensor:
    """(E, I, O): for each group e, x_AI[group e]^T g_AO[group e] (zeros for an empty group)."""
    return torch._grouped_mm(x_AI.t(), g_AO, offs=offs_E)


@grouped_mm_weight_grad.register_fake
def _grouped_mm_weight_grad_fake(x_AI, g_AO, offs_E):
    return x_AI.new_empty(offs_E.shape[0], x_AI.shape[1], g_AO.shape[1])


def _grouped_mm_setup(ctx, inputs, output):
    x_AI, w_EIO, offs_E = inputs
    ctx.save_for_backward(x_AI, w_EIO, offs_E)


def _grouped_mm_backward(ctx, g_AO):
    x_AI, w_EIO, offs_E = ctx.saved_tensors
    g_AO = g_AO.contiguous()
    g_x = grouped_mm(g_AO, w_EIO.transpose(1, 2), offs_E) if ctx.needs_input_grad[0] else None
    g_w = grouped_mm_weight_grad(x_AI, g_AO, offs_E) if ctx.needs_input_grad[1] else None
    return g_x, g_w, None


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_mm_setup)


def _per_expert(x_AI: torch.Tensor, w_EOI: torch.Tensor, spans: list[tuple[int, int, int]]) -> torch.Tensor:
    """(A, O): rows a..b-1 of x times expert e's weight, for each (e, a, b) in spans (which cover all A rows)."""
    if torch.is_grad_enabled() and (x_AI.requires_grad or w_EOI.requires_grad):  # autograd cannot differentiate out=
        return torch.cat([x_AI[a:b] @ w_EOI[e].T for e, a, b in spans])
    out_AO = x_AI.new_empty(x_AI.shape[0], w_EOI.shape[1])
    for e, a, b in spans:
        torch.mm(x_AI[a:b], w_EOI[e].T, out=out_AO[a:b])
    return out_AO
