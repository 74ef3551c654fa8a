"""Typed config schemas (registered in Hydra's ConfigStore) and start-of-run validation.

The schemas make a mistyped key or a wrong type fail while Hydra composes; ``validate`` then
checks what types cannot (allowed names, divisibility, ranges) before any work starts. Every
failure is a ``ConfigError`` naming the field, the value, and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

LAYOUT_LETTERS = "SLWM"
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "reference", "triton")
INDEX_POOLS = ("max", "mean")
KERNEL_OPS = ("softmax", "sliding_window", "lightning", "msa")
KERNEL_DTYPES = ("float32", "float16", "bfloat16")
KERNEL_BASELINES = ("sdpa", "flash_attn", "flex", "fla", "reference")


class ConfigError(ValueError):
    """A config value that cannot run: ``field=value: what is allowed``."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r}: {allowed}")


@dataclass
class DesignConfig:
    """One attention design: a layer layout plus the attention hyperparameters it uses."""

    name: str = MISSING
    layout: str = MISSING  # one letter a layer (S softmax, L lightning, W sliding window, M msa); a period is tiled
    description: str = ""
    window: int = 64  # W: keys each query sees (itself included)
    block_size: int = 16  # M: tokens per key block
    top_k: int = 4  # M: blocks per query (the local block included)
    index_dim: int = 32  # M: index head dim Di
    index_pool: str = "max"  # M: block score = max over the block, or "mean" (score of the mean key)
    index_rope: bool = True  # M: RoPE on the index heads (same fraction as the main heads)
    index_loss_weight: float = 1.0  # M: weight of the index KL loss in training


@dataclass
class ModelConfig:
    """The shared MoE backbone (identical for every design)."""

    name: str = "tiny"
    d_model: int = 64
    n_layers: int = 8
    n_heads: int = 2
    n_kv_heads: int = 1
    head_dim: int = 32
    rotary_frac: float = 0.5  # fraction of each head that gets RoPE (MiniMax: 64 of 128)
    rope_base: float = 10000.0
    n_experts: int = 4
    top_k_experts: int = 2
    d_expert: int = 128
    balance_coef: float = 0.01
    vocab_size: int = 256
    tie_embeddings: bool = True
    init_std: float = 0.02


@dataclass
class ExpConfig:
    """What an experiment runs. ``name`` picks the runner in attnbench.experiments."""

    name: str = ""
    description: str = ""
    designs: List[str] = field(default_factory=list)  # names in `attention`; empty = all
    budget: str = "15m"  # wall-clock budget of the whole run (a duration: 90s, 15m, 2h)
    batch: int = 2
    seq_len: int = 64
    prefill_chunk: int = 24


@dataclass
class KernelShapes:
    """Op shapes of the kernel experiments (kernels_cpu, kernels_gpu)."""

    batch: int = 1
    heads: int = 8
    kv_heads: int = 2  # KV heads of softmax / sliding window; index groups of msa
    head_dim: int = 64
    lengths: List[int] = field(default_factory=lambda: [1024, 4096, 16384])  # T of the forward timings
    grad_lengths: List[int] = field(default_factory=list)  # T of the forward + backward timings
    check_lengths: List[int] = field(default_factory=lambda: [1024])  # T of the checks (forward + backward)
    check_fwd_lengths: List[int] = field(default_factory=list)  # T of forward-only checks (long T)
    window: int = 1024  # sliding window
    block_size: int = 64  # msa
    top_k: int = 8  # msa
    index_dim: int = 64  # msa


@dataclass
class KernelsConfig:
    """exp kernels_cpu (references vs SDPA on CPU) and kernels_gpu (Triton kernels on CUDA)."""

    ops: List[str] = field(default_factory=lambda: ["softmax", "sliding_window", "lightning", "msa"])
    dtypes: List[str] = field(default_factory=lambda: ["float32"])  # of the timings and checks
    shapes: KernelShapes = field(default_factory=KernelShapes)
    dry_run: KernelShapes = field(default_factory=KernelShapes)  # kernels_gpu on device=cpu (interpreter)
    min_run_time: float = 1.0  # seconds of repeats per timing (CPU; do_bench's rep on CUDA)
    baselines: List[str] = field(default_factory=lambda: ["sdpa"])  # kernels_gpu: sdpa, flash_attn, flex, fla


@dataclass
class RootConfig:
    exp: ExpConfig = field(default_factory=ExpConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    attention: Dict[str, DesignConfig] = field(default_factory=dict)
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    design: Optional[str] = None  # run only this design of the experiment (sweeps: design=a,b)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "auto"  # kernel backend for every op: auto | reference | triton
    threads: int = 0  # torch CPU threads (0: torch's default)


def register() -> None:
    ConfigStore.instance().store(name="attnbench_schema", node=RootConfig)


def parse_duration(text: str) -> float:
    """'90s', '15m', '2h', '1h30m', or a bare number of seconds -> seconds."""
    import re

    s = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", s)
    if not s or parts is None:
        raise ValueError(text)
    h, m, sec = (float(p) if p else 0.0 for p in parts.groups())
    return h * 3600 + m * 60 + sec


def _positive(field_name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(field_name, value, "must be an integer >= 1")


def validate_design(name: str, d, n_layers: int) -> None:
    where = f"attention.{name}"
    if d.name != name:
        raise ConfigError(f"{where}.name", d.name, f"must equal its key {name!r}")
    bad = sorted(set(d.layout) - set(LAYOUT_LETTERS))
    if not d.layout or bad:
        raise ConfigError(f"{where}.layout", d.layout, f"one letter a layer from {LAYOUT_LETTERS} (S softmax, L lightning, W sliding window, M msa)")
    if n_layers % len(d.layout):
        raise ConfigError(f"{where}.layout", d.layout, f"length must divide model.n_layers={n_layers} (it is tiled)")
    for key in ("window", "block_size", "top_k", "index_dim"):
        _positive(f"{where}.{key}", getattr(d, key))
    if d.index_pool not in INDEX_POOLS:
        raise ConfigError(f"{where}.index_pool", d.index_pool, f"one of {', '.join(INDEX_POOLS)}")


def validate(cfg) -> None:
    """Check a composed config; raise ConfigError on the first problem found."""
    import dataclasses

    from attnbench.experiments import EXPERIMENTS

    known_top = {f.name for f in dataclasses.fields(RootConfig)} | {"hydra"}
    for key in cfg:
        if key not in known_top:
            raise ConfigError(str(key), cfg[key], f"unknown top-level key; allowed: {', '.join(sorted(known_top - {'hydra'}))}")

    if cfg.exp.name not in EXPERIMENTS:
        raise ConfigError("exp", cfg.exp.name or None, f"choose one with +exp=NAME: {', '.join(sorted(EXPERIMENTS))}")
    m = cfg.model
    for key in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_experts", "top_k_experts", "d_expert", "vocab_size"):
        _positive(f"model.{key}", getattr(m, key))
    if m.n_heads % m.n_kv_heads:
        raise ConfigError("model.n_kv_heads", m.n_kv_heads, f"must divide model.n_heads={m.n_heads}")
    if m.top_k_experts > m.n_experts:
        raise ConfigError("model.top_k_experts", m.top_k_experts, f"must be <= model.n_experts={m.n_experts}")
    if not 0.0 <= m.rotary_frac <= 1.0:
        raise ConfigError("model.rotary_frac", m.rotary_frac, "must be in [0, 1]")
    for name, d in cfg.attention.items():
        validate_design(name, d, m.n_layers)
    known = sorted(cfg.attention)
    for i, name in enumerate(cfg.exp.designs):
        if name not in cfg.attention:
            raise ConfigError(f"exp.designs[{i}]", name, f"one of {', '.join(known)}")
    if cfg.design is not None and cfg.design not in cfg.attention:
        raise ConfigError("design", cfg.design, f"one of {', '.join(known)}")
    if cfg.device not in DEVICES:
        raise ConfigError("device", cfg.device, f"one of {', '.join(DEVICES)}")
    if cfg.backend not in BACKENDS:
        raise ConfigError("backend", cfg.backend, f"one of {', '.join(BACKENDS)}")
    if cfg.threads < 0:
        raise ConfigError("threads", cfg.threads, "must be >= 0 (0: torch's default)")
    try:
        parse_duration(cfg.exp.budget)
    except ValueError:
        raise ConfigError("exp.budget", cfg.exp.budget, "a duration such as 90s, 15m, 2h or 1h30m") from None
    for key in ("batch", "seq_len", "prefill_chunk"):
        _positive(f"exp.{key}", getattr(cfg.exp, key))
    validate_kernels(cfg.kernels)


def validate_kernels(k) -> None:
    for i, op in enumerate(k.ops):
        if op not in KERNEL_OPS:
            raise ConfigError(f"kernels.ops[{i}]", op, f"one of {', '.join(KERNEL_OPS)}")
    for i, dt in enumerate(k.dtypes):
        if dt not in KERNEL_DTYPES:
            raise ConfigError(f"kernels.dtypes[{i}]", dt, f"one of {', '.join(KERNEL_DTYPES)}")
    for i, b in enumerate(k.baselines):
        if b not in KERNEL_BASELINES:
            raise ConfigError(f"kernels.baselines[{i}]", b, f"one of {', '.join(KERNEL_BASELINES)}")
    if not k.min_run_time > 0:
        raise ConfigError("kernels.min_run_time", k.min_run_time, "must be > 0 seconds")
    for part in ("shapes", "dry_run"):
        sh = k[part]
        for key in ("batch", "heads", "kv_heads", "head_dim", "window", "block_size", "top_k", "index_dim"):
            _positive(f"kernels.{part}.{key}", sh[key])
        if sh.heads % sh.kv_heads:
            raise ConfigError(f"kernels.{part}.kv_heads", sh.kv_heads, f"must divide kernels.{part}.heads={sh.heads}")
        for key in ("lengths", "grad_lengths", "check_lengths", "check_fwd_lengths"):
            for i, n in enumerate(sh[key]):
                _positive(f"kernels.{part}.{key}[{i}]", n)


def selected_designs(cfg) -> list[str]:
    """The designs this run covers: exp.designs (all when empty), narrowed by `design=`."""
    names = list(cfg.exp.designs) or sorted(cfg.attention)
    if cfg.design is not None:
        names = [cfg.design]
    return names
