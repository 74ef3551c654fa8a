"""The cost model's building blocks: a Term (one kernel or a group of identical kernels), a Cost
(a list of Terms with its roofline time on a hardware profile), and the counting helpers every
op's cost uses (causal pairs, window sums, K/V reads, one attention kernel). The model itself
(per-op costs, layers, whole models) is bench/costmodel.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


F32 = 4


@dataclass
class Term:
    what: str
    flops: float = 0.0  # for kind "exp": the number of exponentials
    bytes: float = 0.0  # moved through main memory
    launches: float = 0.0
    kind: str = "mm"  # mm | small | matvec | vec | exp
    alloc: float = 0.0  # bytes of fresh output tensors of the reference code (page faults on a CPU)
    alloc_each: float = 0.0  # size of one such tensor: only tensors >= hw.alloc_min_bytes are mapped fresh
    module_ops: float = 0.0  # torch ops issued from nn.Module code (norms, projections, MoE routing)
    reread: float = 0.0  # bytes read again (per query head) ...
    reread_fits: float = 0.0  # ... free when this working set fits in hw.cache_bytes


@dataclass
class Cost:
    terms: list[Term] = field(default_factory=list)

    def add(
        self, what: str, flops=0.0, bytes=0.0, launches=0.0, kind="mm", alloc=0.0, alloc_each=0.0, module_ops=0.0
    ) -> "Cost":  # reread / reread_fits are set by attention()
        self.terms.append(Term(what, float(flops), float(bytes), float(launches), kind, float(alloc), float(alloc_each), float(module_ops)))
        return self

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.terms + other.terms)

    def scaled(self, k: float) -> "Cost":
        return Cost(
            [
                replace(
                    t,
                    flops=t.flops * k,
                    bytes=t.bytes * k,
                    launches=t.launches * k,
                    alloc=t.alloc * k,
                    module_ops=t.module_ops * k,
                    reread=t.reread * k,
                )
                for t in self.terms
            ]
        )

    @property
    def flops(self) -> float:
        """Arithmetic FLOPs (matmuls); exponentials are counted apart (`exps`)."""
        return sum(t.flops for t in self.terms if t.kind != "exp")

    @property
    def exps(self) -> float:
        return sum(t.flops for t in self.terms if t.kind == "exp")

    @property
    def bytes(self) -> float:
        return sum(t.bytes for t in self.terms)

    @property
    def launches(self) -> float:
        return sum(t.launches for t in self.terms)

    def term_seconds(self, hw, dtype: str) -> dict[str, float]:
        """Predicted seconds of each term (same `what` summed)."""
        peak = peak_flops(hw, dtype)
        rate = {
            "mm": peak,
            "small": peak * hw.small_matmul_efficiency,
            "matvec": peak * hw.matvec_efficiency,
            "vec": math.inf,
            "exp": hw.exp_rate or math.inf,
        }
        out: dict[str, float] = {}
        for t in self.terms:
            moved = t.bytes + (t.reread if t.reread_fits > hw.cache_bytes else 0.0)
            s = max(t.flops / rate[t.kind], moved / hw.mem_bandwidth) + t.launches * hw.launch_s
            s += t.module_ops * (hw.module_op_s or hw.launch_s)
            if t.alloc and hw.alloc_bandwidth and t.alloc_each >= hw.alloc_min_bytes:
                s += t.alloc / hw.alloc_bandwidth
            out[t.what] = out.get(t.what, 0.0) + s
        return out

    def seconds(self, hw, dtype: str) -> float:
        return sum(self.term_seconds(hw, dtype).values())


def peak_flops(hw, dtype: str) -> float:
    """Peak FLOP/s for dtype; a dtype without its own entry runs at the fp32 (or best listed) rate."""
    flops = dict(hw.flops)
    if dtype in flops:
        return float(flops[dtype])
    if dtype == "float8" and "bfloat16" in flops:  # no fp8 units (A100): bf16 rate
        return float(flops["bfloat16"])
    if "float32" in flops:
        return float(flops["float32"])
    raise ValueError(f"hardware {hw.name!r} lists no FLOP/s for {dtype}")


# --- per-op costs ----------------------------------------------------------------------
# Shapes: B batch, H query heads, G KV heads, D head dim, e input bytes, n context length.
# Reference terms list the big tensors the code creates (`fresh`: each one a new allocation).


def causal_pairs(T: int, tile: int = 0) -> float:
    """(query, key) pairs a causal kernel computes: T (T + 1) / 2, plus half a tile per row of
    tiles for the diagonal tiles computed whole."""
    return T * (T + 1) / 2 + T * tile / 2


def sum_window(T: int, w: int) -> float:
    """sum over t < T of min(t + 1, w): keys a causal window-w query sees."""
    ramp = min(T, w)
    return ramp * (ramp + 1) / 2 + max(0, T - w) * w


def kv_reads(B, H, G, n, D, e, per_head: bool) -> tuple[float, float, float]:
    """(bytes, re-read bytes, working set) of the K and V one decode step reads. A fused kernel,
    or SDPA given a KV group's query heads as its queries, reads each KV head once; torch's CPU
    SDPA with enable_gqa (per_head) reads them once per query head, and those re-reads are free
    only while one head's K and V fit in a core's cache."""
    once = e * B * 2 * G * n * D
    if not per_head or H == G:
        return once, 0.0, 0.0
    return once, once * (H // G - 1), e * 2 * n * D


def attention(c: "Cost", what: str, B, H, D, pairs, bytes, launches, fresh=0.0, kv=(0.0, 0.0, 0.0), kind: str = "mm") -> "Cost":
    """A fused softmax-attention kernel over `pairs` (query, key) pairs per head: QK^T and PV
    matmuls (4 D FLOPs a pair) and one exp a pair. kv: kv_reads(...) added to the bytes; kind
    "matvec" for one query row (a decode step of torch's CPU SDPA)."""
    c.add(what, 4 * B * H * D * pairs, bytes + kv[0], launches, kind=kind, alloc=fresh, alloc_each=fresh)
    c.terms[-1].reread, c.terms[-1].reread_fits = kv[1], kv[2]
    return c.add(f"{what} (exp)", B * H * pairs, 0, 0, kind="exp")
