"""Cost model: FLOPs, bytes moved and kernel launches per op, and a roofline time per hardware.

Every op is costed for two phases:
    prefill  a whole causal sequence of n tokens from an empty cache
    decode   one token against a cache of n tokens
and two implementations:
    fused      one ideal GPU kernel (FlashAttention-style tiles kept on chip, chunked lightning):
               FLOPs of the algorithm, compulsory traffic (inputs and outputs once), 1-2 launches.
               Used for GPU projections and the triton backend.
    reference  the plain-torch code of kernels/<op>/reference.py as written: the same FLOPs
               plus its intermediate tensors (each written and read), its torch ops (launches:
               the dispatcher's count, views included) and the fresh allocations of big
               intermediates (page faults on the CPU). The constants are read from those modules,
               so a changed reference changes the model; tests/test_costmodel.py holds the counts
               to the dispatcher's and the predicted times to the measured ones.

A Cost is a list of Terms (kernels or groups of identical kernels). Predicted time:

    sum over terms of  max(flops / rate(kind), bytes / mem_bandwidth)
                       + launches * launch_s + module_ops * module_op_s
                       + alloc / alloc_bandwidth   (fresh tensors >= alloc_min_bytes; CPU only)

with rate(mm) = peak FLOP/s of large matmuls (fused attention kernels count as mm),
rate(small) = peak x small_matmul_efficiency (batched matmuls with a dimension <= 128),
rate(matvec) = peak x matvec_efficiency (one query row against many keys: decode on a CPU),
rate(vec) = infinite (elementwise work is bound by its bytes), rate(exp) = exponentials per
second (softmax; FlashAttention-3's observation that exp, not matmul, can bound attention).

Serving's costs (prefix caching, rollback, verifying drafts) are in costmodel_serving.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable


from attnbench.designs import DESIGNS, of, spec_of

from .memory import dtype_bytes
from .cost_terms import Cost
from attnbench.bench.presets import Arch

IMPLS = ("fused", "reference")
PHASES = ("prefill", "decode")


def costs() -> dict[str, Callable[..., Cost]]:
    """Every cost-model entry by name: each design's spec names its own (Spec.costs: its op's,
    and its parts', such as msa_select); the registry designs' formulas are in op_costs.py. Read
    from the registry on every call, so a design registered later is costed too."""
    return {name: fn for d in DESIGNS.values() for name, fn in d.behaviour().costs().items()}


def op_cost(op: str, phase: str, n: int, arch: Arch, *, batch: int = 1, dtype: str = "float32", impl: str = "fused") -> Cost:
    """Cost of one call of an attention op (not the projections) for `batch` sequences."""
    if op not in costs():
        raise ValueError(f"op {op!r}: one of {', '.join(costs())}")
    if phase not in PHASES or impl not in IMPLS:
        raise ValueError(f"phase {phase!r} / impl {impl!r}: phases {PHASES}, impls {IMPLS}")
    return costs()[op](phase, int(n), arch, int(batch), dtype_bytes(dtype), impl)


# --- layers and whole models ---------------------------------------------------------


def linear_params(arch: Arch, letter: str, moe: tuple[int, int, int] | None) -> float:
    """Parameters one token multiplies by in one layer outside the attention op itself.

    Scaled models (moe = (E, top_k, d_expert)): the layer's projections and its active experts.
    Presets (moe None): the published active parameters spread evenly over the layers.
    """
    if moe is None:
        return arch.active_params / arch.n_layers
    C = arch.d_model
    E, K, F = moe
    attn = spec_of(letter).projection_params(arch)
    return attn + C * E + K * 2 * C * F


def layer_cost(
    letter: str,
    phase: str,
    n: int,
    arch: Arch,
    *,
    batch: int = 1,
    dtype: str = "float32",
    impl: str = "fused",
    moe: tuple[int, int, int] | None = None,
) -> Cost:
    """One whole layer (attention op + projections + MoE) for `batch` sequences.

    Linear work: 2 FLOPs per active parameter per token; weights read once per call (all experts
    in a long prefill, only the active ones for one decoded token), activations in and out.
    """
    T = n if phase == "prefill" else 1
    e = dtype_bytes(dtype)
    P = linear_params(arch, letter, moe)
    if moe is not None:
        E, K, F = moe
        touched = P - K * 2 * arch.d_model * F + min(E, K * batch * T) * 2 * arch.d_model * F
    else:
        touched = P
    module_ops = 0.0
    if impl == "reference":  # torch ops outside the attention op (counted with a dispatch counter):
        E, K = (moe[0], moe[1]) if moe is not None else (1, 1)  # norms, projections, RoPE, cache, MoE loop
        module_ops = of(letter).glue_ops + (14 * E if T > 1 else 2 * E + 12 * K)
    kind = "matvec" if impl == "reference" and batch * T == 1 else "mm"  # one token: matrix-vector products
    linear = Cost().add(
        "projections + MoE",
        2 * P * batch * T,
        e * (touched + 8 * batch * T * arch.d_model),
        0 if impl == "reference" else 10,
        kind=kind,
        module_ops=module_ops,
    )
    return op_cost(of(letter).cost, phase, n, arch, batch=batch, dtype=dtype, impl=impl) + linear


def model_cost(
    arch: Arch, phase: str, n: int, *, batch: int = 1, dtype: str = "bfloat16", impl: str = "fused", attention_only: bool = False, moe=None
) -> Cost:
    """All layers of a model; attention_only drops the projections and MoE."""
    total = Cost()
    for letter in sorted(set(arch.layout)):
        count = arch.count(letter)
        if attention_only:
            one = op_cost(of(letter).cost, phase, n, arch, batch=batch, dtype=dtype, impl=impl)
        else:
            one = layer_cost(letter, phase, n, arch, batch=batch, dtype=dtype, impl=impl, moe=moe)
        total = total + Cost([replace(t, what=f"{letter}: {t.what}") for t in one.scaled(count).terms])
    return total


def op_arch(op: str, H: int, Hkv: int, D: int, window: int = 0, block_size: int = 0, top_k: int = 0, index_dim: int = 0) -> Arch:
    """The one-layer Arch of a kernel experiment's op shape (one index head a KV group)."""
    return Arch(
        name=op,
        layout="S",
        d_model=H * D,
        n_heads=H,
        n_kv_heads=Hkv,
        head_dim=D,
        window=window,
        block_size=block_size,
        top_k=top_k,
        index_heads=Hkv,
        index_dim=index_dim,
    )


def selection_cost(op: str, n: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode query's selection at context n, at the kernel experiments' op
    shape (config.KernelShapes): the terms of op's cost that are not the sparse attention itself
    (dsa: its indexer's scores, ReLU and top-k; msa: its block scores)."""
    from attnbench.config.schema import KernelShapes

    s = KernelShapes()
    arch = op_arch(op, s.heads, s.kv_heads, s.head_dim, block_size=s.block_size, top_k=s.top_k, index_dim=s.index_dim)
    terms = [x for x in op_cost(op, "decode", n, arch).terms if not x.what.startswith("sparse attention")]
    return sum(x.flops for x in terms), sum(x.bytes for x in terms)
