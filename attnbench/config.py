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
DTYPES = ("float32", "bfloat16", "float16", "float8")
BENCH_SCOPES = ("op", "layer")


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
class HardwareConfig:
    """A roofline profile (conf/hardware/): peak rates from a data sheet, or measured (cpu).

    Predicted time of a piece of work = max(FLOPs / rate, bytes / mem_bandwidth) summed over
    its kernels, plus launch_s per kernel launch (attnbench.bench.costmodel).
    """

    name: str = "cpu"
    description: str = ""
    flops: Dict[str, float] = field(default_factory=dict)  # dense FLOP/s of large matmuls, by dtype
    small_matmul_efficiency: float = 1.0  # fraction of `flops` that batched small (<= 128) matmuls reach
    matvec_efficiency: float = 1.0  # fraction of `flops` that one-row products (decode: q . K^T) reach
    mem_bandwidth: float = 0.0  # bytes/s, main memory (HBM on a GPU)
    exp_rate: float = 0.0  # exponentials/s (special-function units); 0 = not a limit
    memory_bytes: float = 0.0  # capacity of one device
    cache_bytes: float = 0.0  # cache private to one core / SM group that re-reads hit (CPU: L2); 0 = none
    launch_s: float = 5e-6  # fixed cost per kernel launch (GPU) or torch op dispatch (CPU)
    module_op_s: float = 0.0  # cost per torch op issued from nn.Module code (CPU eager); 0 = launch_s
    alloc_bandwidth: float = 0.0  # bytes/s of first-touching a fresh big tensor (CPU page faults); 0 = free
    alloc_min_bytes: float = 33554432.0  # tensors this big are mapped fresh each time (glibc's top mmap threshold)
    calibrate: bool = False  # cpu: measure flops, small_matmul_efficiency, bandwidths, launch_s at run start
    source: str = ""


@dataclass
class BenchConfig:
    """What the cost experiments (kv_memory, crossover, msa_speedup) measure and project."""

    prefill_lens: List[int] = field(default_factory=lambda: [256, 1024, 4096, 16384, 65536])
    decode_lens: List[int] = field(default_factory=lambda: [256, 1024, 4096, 16384, 65536])
    scopes: List[str] = field(default_factory=lambda: ["op", "layer"])  # time ops alone and whole layers
    batch: int = 1
    dtype: str = "float32"  # timing dtype (fp32 on CPU, bf16 on GPU)
    min_run_time: float = 0.3  # seconds of timing per cell (torch.utils.benchmark)
    repeats: int = 3  # at least this many timed calls per cell
    max_call_s: float = 20.0  # skip (recorded) a cell whose predicted single call is longer
    validate_from: int = 4096  # cost-model error is recorded (and held to max_rel_error) for T >= this
    max_rel_error: float = 2.0  # predicted/measured must lie in [1/x, x]
    profiles: List[str] = field(default_factory=lambda: ["h200", "h100", "a100"])  # projections
    presets: List[str] = field(default_factory=list)  # production presets (attnbench.bench.presets); empty = all
    memory_dtypes: List[str] = field(default_factory=lambda: ["bfloat16", "float8", "float32"])
    memory_lens: List[int] = field(default_factory=lambda: [131072, 1048576, 4194304])
    check_ops: bool = True  # correctness gate: time only ops that match the dense formula first


@dataclass
class RootConfig:
    exp: ExpConfig = field(default_factory=ExpConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    attention: Dict[str, DesignConfig] = field(default_factory=dict)
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
    validate_hardware("hardware", cfg.hardware)
    validate_bench(cfg.bench)


def hardware_profiles() -> list[str]:
    """Names of the profiles in conf/hardware/ (the files shipped with the package)."""
    from importlib import resources

    folder = resources.files("attnbench.conf").joinpath("hardware")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def validate_hardware(where: str, hw) -> None:
    if not hw.calibrate:
        if not hw.flops or any(not v or v <= 0 for v in hw.flops.values()):
            raise ConfigError(f"{where}.flops", dict(hw.flops), "peak FLOP/s > 0 by dtype (or calibrate: true)")
        if hw.mem_bandwidth <= 0:
            raise ConfigError(f"{where}.mem_bandwidth", hw.mem_bandwidth, "bytes/s > 0 (or calibrate: true)")
    bad = sorted(set(hw.flops) - set(DTYPES))
    if bad:
        raise ConfigError(f"{where}.flops", bad, f"keys from {', '.join(DTYPES)}")
    for key in ("small_matmul_efficiency", "matvec_efficiency"):
        if not 0 < getattr(hw, key) <= 1:
            raise ConfigError(f"{where}.{key}", getattr(hw, key), "in (0, 1]")
    for key in ("mem_bandwidth", "memory_bytes", "cache_bytes", "launch_s", "module_op_s", "alloc_bandwidth",
                "alloc_min_bytes", "exp_rate"):
        if getattr(hw, key) < 0:
            raise ConfigError(f"{where}.{key}", getattr(hw, key), "must be >= 0")


def validate_bench(b) -> None:
    from attnbench.bench.presets import PRESETS

    for key in ("prefill_lens", "decode_lens", "memory_lens"):
        values = list(getattr(b, key))
        if not values:
            raise ConfigError(f"bench.{key}", values, "at least one context length")
        for i, n in enumerate(values):
            _positive(f"bench.{key}[{i}]", n)
        if values != sorted(set(values)):
            raise ConfigError(f"bench.{key}", values, "strictly increasing context lengths")
    for i, s in enumerate(b.scopes):
        if s not in BENCH_SCOPES:
            raise ConfigError(f"bench.scopes[{i}]", s, f"one of {', '.join(BENCH_SCOPES)}")
    for key in ("batch", "repeats", "validate_from"):
        _positive(f"bench.{key}", getattr(b, key))
    if b.dtype not in DTYPES[:3]:
        raise ConfigError("bench.dtype", b.dtype, f"one of {', '.join(DTYPES[:3])} (timing dtype)")
    for i, d in enumerate(b.memory_dtypes):
        if d not in DTYPES:
            raise ConfigError(f"bench.memory_dtypes[{i}]", d, f"one of {', '.join(DTYPES)}")
    for key in ("min_run_time", "max_call_s"):
        if not getattr(b, key) > 0:
            raise ConfigError(f"bench.{key}", getattr(b, key), "seconds > 0")
    if not b.max_rel_error > 1:
        raise ConfigError("bench.max_rel_error", b.max_rel_error, "a factor > 1")
    known = hardware_profiles()
    for i, name in enumerate(b.profiles):
        if name not in known:
            raise ConfigError(f"bench.profiles[{i}]", name, f"one of {', '.join(known)} (conf/hardware/)")
    for i, name in enumerate(b.presets):
        if name not in PRESETS:
            raise ConfigError(f"bench.presets[{i}]", name, f"one of {', '.join(PRESETS)}")


def selected_designs(cfg) -> list[str]:
    """The designs this run covers: exp.designs (all when empty), narrowed by `design=`."""
    names = list(cfg.exp.designs) or sorted(cfg.attention)
    if cfg.design is not None:
        names = [cfg.design]
    return names
