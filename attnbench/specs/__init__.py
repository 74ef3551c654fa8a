"""One spec per design: what the benchmark side needs from a design, in one place.

The registry (attnbench/designs.py) names each design's spec ("module:SPEC"); every module that
would otherwise branch on a letter or an op asks the spec instead:

    example inputs at a shape      inputs(sh, rnd)           bench/ops, bench/gate, bench/workloads
    the op and its naive truth     call(x, sh, backend)      the timed or gated call
                                   naive(x, sh)              kernels/<op>/naive.py on the same inputs
    its cache                      token_elements(arch)      bench/memory, costmodel (prefix, rollback)
                                   layer_bytes(arch, n, ..)
                                   fill_cache(attn, ..)      bench/workloads (decode timing)
    its cost-model entries         costs()                   costmodel.op_cost
                                   projection_params(arch)   costmodel.linear_params
                                   fill_width(arch)          bench/planner (the last layer's prefill)
    what it is                     grows, state, ring, quadratic, compiled_prefill, settings, ...

A spec is a plain object without state; Spec holds the defaults a design overrides. Adding a
design is a registry entry, its layer, and a spec module here (tests/test_designs.py fails on
a letter or op branch anywhere else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

    from attnbench.bench.presets import Arch

Rnd = Callable[..., "torch.Tensor"]  # rnd(*shape, scale=1.0): random tensor of the caller's dtype and device


@dataclass(frozen=True)
class OpShape:
    """One op call's sizes: T queries against S keys (S = 0: as many keys as queries, a prefill)."""

    B: int
    H: int
    Hkv: int  # KV heads of softmax / sliding window; index groups G of msa (lightning has H)
    T: int
    D: int
    window: int
    block_size: int
    top_k: int
    index_dim: int
    S: int = 0

    @property
    def keys(self) -> int:
        return self.S or self.T

    def label(self) -> str:
        return f"B{self.B} H{self.H}/{self.Hkv} T{self.T} D{self.D}"


def cast(x: dict, dtype: Any) -> dict:
    """x with its floating-point tensors in ``dtype`` (integer ones, such as a selection, as they are)."""
    return {n: (t.to(dtype) if t.is_floating_point() else t) for n, t in x.items()}


class Spec:
    """Defaults: a design whose cache holds every token it has seen (token_elements each)."""

    name: str = ""
    op: str | None = None  # its op in attnbench.kernels (None: costed only)
    grows: bool = True  # its cache grows with every token (False: a fixed state or a ring of the last w)
    state: bool = False  # it keeps a fixed-size state per sequence (rounded each time a cache is stored)
    ring: bool = False  # a fixed-size cache of the last window tokens (else, when it does not grow: a state)
    quadratic: bool = False  # a prefill attends every pair of tokens (cost ~ T^2 when it is not the last layer)
    fill_runs_op: bool = False  # as a model's last layer in a prefill it still runs its op (to update its state)
    compiled_prefill: bool = False  # Model.compile_prefill compiles its blocks (model/backbone.py)
    shape_settings: tuple[str, ...] = ()  # settings its op shape reads (crossover times a hybrid's with the single design's)
    baselines: tuple[str, ...] = ()  # other libraries' kernels of the same op (bench/ops.baseline)
    cpu_flex: bool = False  # kernels_cpu also times compiled FlexAttention on it
    outputs: tuple[str, ...] = ("o",)  # what call and naive return, in order (kernels_gpu's tensor names)
    selects: bool = False  # it selects blocks before it attends (msa): the selection is checked alone
    gqa_inputs: bool = True  # its q, k, v are softmax-shaped (GQA): SDPA, the baseline, runs on them
    part_names: tuple[str, ...] = ()  # the names parts() returns
    plain_kw: bool = False  # its reference takes compute_dtype (plain torch in 16 bit, kernels_gpu)

    # --- cache ------------------------------------------------------------------------
    def token_elements(self, arch: Arch) -> int:
        """Cache elements one token adds to one layer (0 for fixed-size layers)."""
        raise NotImplementedError

    def held(self, arch: Arch, n: int) -> int:
        """Tokens the cache holds after n (a ring: at most its window)."""
        return n

    def layer_bytes(self, arch: Arch, n: int, e: int, state_e: int) -> int:
        """Bytes one sequence's cache of one layer holds after n tokens (e, state_e: element bytes)."""
        return self.held(arch, n) * self.token_elements(arch) * e

    def fill_cache(self, attn: Any, cache: Any, n: int, batch: int, rnd: Rnd) -> None:
        """Fill a fresh cache of ``attn`` with n tokens of random entries (decode timing)."""
        raise NotImplementedError(f"{self.name}: no layer to fill")

    # --- cost model ---------------------------------------------------------------------
    def projection_params(self, arch: Arch) -> int:
        """Parameters of the layer's attention projections one token multiplies by."""
        raise NotImplementedError(f"{self.name}: no scaled layer")

    def costs(self) -> dict[str, Callable[..., Any]]:
        """Its cost-model entries by name (its op's, and its parts'): fn(phase, n, arch, B, e, impl) -> Cost."""
        return {}

    def fill_width(self, arch: Arch) -> int:
        """Width of the projections a last layer runs in a prefill to fill its cache (Model.prefill)."""
        raise NotImplementedError(f"{self.name}: no scaled layer")

    # --- the op ---------------------------------------------------------------------------
    def band(self, sh: OpShape) -> int | None:
        """Banded softmax baselines (flash_attn, flex): the window, None for full causal."""
        return None

    def inputs(self, sh: OpShape, rnd: Rnd) -> dict:
        raise NotImplementedError(f"{self.name}: no op")

    def prepare(self, x: dict, sh: OpShape, backend: str) -> dict | None:
        """x with anything the op decides before it attends (msa: its selection); None: that part is wrong."""
        return x

    def call(self, x: dict, sh: OpShape, backend: str, **kw: Any) -> tuple:
        """The op's outputs with ``backend`` (the first is the attention output)."""
        raise NotImplementedError(f"{self.name}: no op")

    def naive(self, x: dict, sh: OpShape) -> tuple:
        """The op's naive formula (kernels/<op>/naive.py) on x, the same outputs as call."""
        raise NotImplementedError(f"{self.name}: no op")

    def parts(self, x: dict, sh: OpShape, backend: str) -> dict[str, Callable[[], Any]]:
        """Parts of the op timed alone beside it (msa: selection and attention), by name."""
        return {}
