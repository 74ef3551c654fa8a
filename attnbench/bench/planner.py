"""Estimates for budget planning: seconds and bytes of a training step or an evaluation of a
scaled model, from the cost model (no timing). For the tasks/eval planner:

    hw = planner.machine()                         # this CPU, calibrated once per process
    s = planner.step_seconds(cfg.model, cfg.attention[name], hw, batch=64, seq_len=256, train=True)
    s = planner.prefill_seconds(cfg.model, cfg.attention[name], hw, batch=1, n=65536)
    s = planner.decode_seconds(cfg.model, cfg.attention[name], hw, batch=1, n=65536)
    b = planner.cache_bytes(cfg.model, cfg.attention[name], n=65536, dtype="float32")

Training is costed as 3x the forward (backward ~ 2x forward, the usual 6N-vs-2N FLOPs rule);
embedding and output head are added as one matmul each. These are estimates for deciding what
fits a budget (exp=crossover measures how close the model is on this machine: within 2x for the
ops), not measurements.
"""

from __future__ import annotations

from functools import lru_cache

from attnbench.designs import of, spec_of

from . import costmodel, memory
from attnbench.bench.presets import from_model


@lru_cache(maxsize=1)
def machine():
    """This CPU's calibrated roofline (measured once per process, a few seconds)."""
    from .calibrate import calibrate, load_profile

    return calibrate(load_profile("cpu"), min_run_time=0.1)[0]


def _moe(m):
    return (m.n_experts, m.top_k_experts, m.d_expert)


def forward_cost(
    model_cfg, design_cfg, phase: str, n: int, *, batch: int = 1, dtype: str = "float32", impl: str = "reference"
) -> costmodel.Cost:
    """Every layer plus the embedding lookup and the output head, for `batch` sequences."""
    arch = from_model(model_cfg, design_cfg)
    cost = costmodel.model_cost(arch, phase, n, batch=batch, dtype=dtype, impl=impl, moe=_moe(model_cfg))
    T = n if phase == "prefill" else 1
    e = memory.dtype_bytes(dtype)
    V, C = model_cfg.vocab_size, model_cfg.d_model
    return cost.add("head", 2 * batch * T * C * V, e * (V * C + batch * T * (C + V)), 3)


def prefill_cost(model_cfg, design_cfg, n: int, *, batch: int = 1, dtype: str = "float32", impl: str = "reference") -> costmodel.Cost:
    """What Model.prefill of n tokens computes: every layer but the last in full; the last only
    fills its cache (K and V projections, msa's index keys; a lightning layer runs its attention
    to update its state, but not its MoE); no output head."""
    from dataclasses import replace

    arch = from_model(model_cfg, design_cfg)
    moe = _moe(model_cfg)
    body = replace(arch, layout=arch.layout[:-1])
    cost = costmodel.model_cost(body, "prefill", n, batch=batch, dtype=dtype, impl=impl, moe=moe) if body.layout else costmodel.Cost()
    last, C = arch.layout[-1], model_cfg.d_model
    e = memory.dtype_bytes(dtype)
    spec = spec_of(last)
    if spec.fill_runs_op:  # a layer with a state runs its attention to update it
        cost = cost + costmodel.op_cost(of(last).cost, "prefill", n, arch, batch=batch, dtype=dtype, impl=impl)
    width = spec.fill_width(arch)  # the projections it runs to fill its cache
    return cost.add("last layer: cache", 2 * batch * n * C * width, e * batch * n * (C + width), 3)


def step_seconds(
    model_cfg, design_cfg, hw, *, batch: int, seq_len: int, train: bool = True, dtype: str = "float32", impl: str = "reference"
) -> float:
    """One training step (forward + backward) or one full-sequence forward pass."""
    fwd = forward_cost(model_cfg, design_cfg, "prefill", seq_len, batch=batch, dtype=dtype, impl=impl).seconds(hw, dtype)
    return 3 * fwd if train else fwd


def train_flops(model_cfg, design_cfg, *, batch: int, seq_len: int, answers: int) -> float:
    """FLOPs of one training step of `batch` rows: 3x the forward of every layer (the fused
    implementation's count: the algorithm's FLOPs, none of a reference's extra passes) plus the
    output head at the `answers` positions the loss reads (train.answer_logits)."""
    arch = from_model(model_cfg, design_cfg)
    layers = costmodel.model_cost(arch, "prefill", seq_len, batch=batch, dtype="float32", impl="fused", moe=_moe(model_cfg)).flops
    return 3 * (layers + 2 * answers * model_cfg.d_model * model_cfg.vocab_size)


def prefill_seconds(model_cfg, design_cfg, hw, *, batch: int = 1, n: int, dtype: str = "float32", impl: str = "reference") -> float:
    return forward_cost(model_cfg, design_cfg, "prefill", n, batch=batch, dtype=dtype, impl=impl).seconds(hw, dtype)


def decode_seconds(model_cfg, design_cfg, hw, *, batch: int = 1, n: int, dtype: str = "float32", impl: str = "reference") -> float:
    """One generated token against a cache of n tokens."""
    return forward_cost(model_cfg, design_cfg, "decode", n, batch=batch, dtype=dtype, impl=impl).seconds(hw, dtype)


def cache_bytes(model_cfg, design_cfg, *, n: int, dtype: str = "float32", batch: int = 1) -> int:
    """Bytes the model's cache holds after n tokens (exactly what ModelCache.nbytes() reports)."""
    return batch * memory.cache_bytes(from_model(model_cfg, design_cfg), n, dtype)
