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
WANDB_MODES = ("offline", "online", "disabled")


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
class WandbConfig:
    """W&B tracking: one run per (experiment, design, seed), logged from the run's records at its end.

    It runs in a child process killed after ``timeout_s``: W&B being absent, offline or failing
    never fails a run. No key belongs here: online mode reads WANDB_API_KEY from the environment.
    """

    mode: str = "offline"  # offline (files under RUN_DIR/wandb, `wandb sync` later) | online | disabled
    project: str = "attnbench"
    entity: Optional[str] = None
    group: Optional[str] = None  # default: the experiment name
    tags: List[str] = field(default_factory=list)
    timeout_s: float = 20.0  # hard cap on the whole W&B step of a run


@dataclass
class ReportConfig:
    """The decision report written into the run directory at the end of every run."""

    enabled: bool = True  # write report.html (and report.pdf) at the end of every exp run
    pdf: bool = True  # print report.pdf with headless Chromium (skipped, saying why, where it is missing)
    pdf_timeout_s: float = 60.0


@dataclass
class RootConfig:
    exp: ExpConfig = field(default_factory=ExpConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    attention: Dict[str, DesignConfig] = field(default_factory=dict)
    design: Optional[str] = None  # run only this design of the experiment (sweeps: design=a,b)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "auto"  # kernel backend for every op: auto | reference | triton
    threads: int = 0  # torch CPU threads (0: torch's default)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    report: ReportConfig = field(default_factory=ReportConfig)


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
    if cfg.wandb.mode not in WANDB_MODES:
        raise ConfigError("wandb.mode", cfg.wandb.mode, f"one of {', '.join(WANDB_MODES)}")
    if not cfg.wandb.project or "/" in cfg.wandb.project:
        raise ConfigError("wandb.project", cfg.wandb.project, "a non-empty W&B project name without '/'")
    for key, value in (("wandb.timeout_s", cfg.wandb.timeout_s), ("report.pdf_timeout_s", cfg.report.pdf_timeout_s)):
        if not value > 0:
            raise ConfigError(key, value, "must be > 0 seconds")


def selected_designs(cfg) -> list[str]:
    """The designs this run covers: exp.designs (all when empty), narrowed by `design=`."""
    names = list(cfg.exp.designs) or sorted(cfg.attention)
    if cfg.design is not None:
        names = [cfg.design]
    return names
