"""Typed config schemas (registered in Hydra's ConfigStore) and start-of-run validation.

The schemas make a mistyped key or a wrong type fail while Hydra composes; ``validate`` then
checks what types cannot (allowed names, divisibility, ranges) before any work starts. Every
failure is a ``ConfigError`` naming the field, the value, and what is allowed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from attnbench.tasks.batches import Stage as StageConfig  # one stage type: the schema is the generator's own

LAYOUT_LETTERS = "SLWM"
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "reference", "triton")
INDEX_POOLS = ("max", "mean")
DTYPES = ("float32", "bfloat16", "float16", "float8")
BENCH_SCOPES = ("op", "layer")
WANDB_MODES = ("offline", "online", "disabled")
LOCK_MODES = ("wait", "refuse")
MAX_SEED = 2**32 - 1  # numpy's seed range (attnbench.runner.seed_everything seeds numpy too)
KERNEL_OPS = ("softmax", "sliding_window", "lightning", "msa")
KERNEL_DTYPES = ("float32", "float16", "bfloat16")
KERNEL_BASELINES = ("sdpa", "flash_attn", "flex", "fla", "reference")
# Position schemes of the softmax-type layers (S, W, M): RoPE on the whole head, on
# model.rotary_frac of it (Text-01's half-head RoPE), none, or partial RoPE with a learned
# s * log(n) logit scale (Scalable-Softmax), n the number of keys a query can see.
POSITIONS = ("rope", "partial", "nope", "logn", "nope_logn")
# train.parallel: one process (today's path), or one model across the processes torchrun (or a
# SLURM job through submitit) starts: DistributedDataParallel, or FSDP2's fully_shard.
PARALLEL = ("none", "ddp", "fsdp")
# TrainConfig fields that say how training is spread over processes, not what it computes:
# they stay out of checkpoint keys and run hashes, so a run resumes on any number of processes.
TRAIN_EXECUTION = ("parallel", "micro_batch", "collective_timeout")
# TrainConfig fields added after checkpoints were keyed, whose default reproduces the old
# behaviour: out of keys and hashes while at that default (shipped checkpoints stay valid).
TRAIN_ADDED_AT_DEFAULT = {"max_len": 0}
STAGE_ADDED_AT_DEFAULT = {"hops": 0}  # stage fields added later: left out of keys at their default


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
    n_layers: int = 0  # layers of this design's model (0: model.n_layers), e.g. 16 for LLLLLLLS x 2
    lightning_heads: int = 0  # L: heads of the lightning layers (0: model.n_heads), same total width
    position: str = "partial"  # S/W/M: rope | partial | nope | logn | nope_logn (see POSITIONS)
    qkv_conv: int = 0  # L: kernel of a short causal depthwise conv on q, k, v (0: none, the faithful Text-01 layer)


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
class TaskConfig:
    """The shared token vocabulary and haystack of every task (attnbench/tasks)."""

    n_keys: int = 64
    n_values: int = 16  # see default_stages: a larger value vocabulary stalled training here
    n_filler: int = 64
    haystack: str = "noise"  # noise (i.i.d. filler) | markov (a fixed random bigram language)
    value_noise: float = 0.05  # fraction of haystack positions holding a random value token


def default_stages() -> list:
    # docs/DESIGN.md: a small key vocabulary first, then keys 16 -> 32 -> 64, then pairs 4 -> 8,
    # then length and the evaluation format (filler with value noise), ending on lengths mixed
    # from 128 to 1,024 tokens (training only on long sequences does not generalise: Based).
    # The value vocabulary stays at 16: growing it (16 -> 32) stalled every variant we tried
    # at ~50% accuracy (the new value tokens are never predicted), while growing the keys
    # passed in a few hundred steps (experiments/curriculum_probe/README.md).
    return [
        StageConfig(n_keys=16, n_values=16, n_filler=16, n_pairs=4, context_len=24, n_queries=4),
        StageConfig(n_keys=32, n_values=16, n_filler=32, n_pairs=4, context_len=24, n_queries=4),
        StageConfig(n_keys=64, n_values=16, n_filler=64, n_pairs=4, context_len=32, n_queries=4),
        StageConfig(n_keys=64, n_values=16, n_filler=64, n_pairs=8, context_len=64, n_queries=8),
        StageConfig(n_keys=64, n_values=16, n_filler=64, n_pairs=8, context_len=128, n_queries=8, value_noise=0.05),
        StageConfig(n_keys=64, n_values=16, n_filler=64, n_pairs=8, context_len=128, n_queries=8, value_noise=0.05,
                    max_context_len=1024),
    ]


@dataclass
class TrainConfig:
    """Training of the task models: AdamW, warm-up + cosine, clipping, a curriculum.

    The fair rule (issue: every design an experiment compares trains under it): the same
    curriculum, optimiser and seed, the same token budget and the same patience per stage.
    ``patience`` is longer than the step at which any design was seen to leave a stage (the
    3:1 lightning hybrid left stage 1 near step 2,900; docs/DESIGN.md), so no design is stopped
    before another escaped; ``budget`` (wall clock) is only a safety net and is recorded.
    """

    max_steps: int = 30000  # the cosine's horizon and a hard cap
    batch: int = 64  # sequences per step, up to tokens_per_step tokens
    tokens_per_step: int = 16384  # longer sequences get fewer rows: batch = min(batch, tokens_per_step // seq_len)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.0
    beta2: float = 0.95
    grad_clip: float = 1.0
    advance_at: float = 0.9  # rolling query accuracy that moves the curriculum to the next stage
    floor: float = 0.95  # rolling accuracy at the last stage that ends training early
    window: int = 25  # steps in the rolling accuracy
    patience: int = 5000  # stop when no stage was passed for this many steps (status "stalled")
    token_budget: int = 40_000_000  # stop after this many training tokens (status "tokens")
    checkpoint_every: int = 100
    log_every: int = 10
    budget: str = "6h"  # wall-clock safety net per design (status "budget"); not part of the rule
    force: bool = False  # retrain even if a cached or shipped checkpoint matches
    stages: List[StageConfig] = field(default_factory=default_stages)
    max_len: int = 0  # > 0: the last stage's lengths run up to this context (the GPU presets: 2048); 0: its own
    # Distributed training (attnbench/distributed.py; README "Beyond one machine"). `batch` and
    # `tokens_per_step` stay the GLOBAL batch: its rows are split over the processes.
    parallel: str = "none"  # none | ddp | fsdp (launch with torchrun, or a SLURM job with tasks_per_node > 1)
    micro_batch: int = 0  # rows per forward pass and process; a process's further rows accumulate gradients (0: all at once)
    collective_timeout: str = "10m"  # a collective (a lost or stuck process) waiting this long ends the job


@dataclass
class EvalConfig:
    """Streaming evaluation far past the training length."""

    context_lens: List[int] = field(default_factory=lambda: [1024, 4096])
    depths: List[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    haystacks: int = 2  # haystacks per (design, length); each holds one needle per depth
    haystacks_short: int = 0  # haystacks per cell at lengths <= short_len (0: eval.haystacks)
    short_len: int = 16384  # lengths every design gets before any design's longer cells (longctx.plan_grid)
    variant: str = "multikey"  # niah variant (single | multikey | multivalue | multiquery)
    hops: List[int] = field(default_factory=lambda: [1, 2, 3, 4])
    hop_tasks: List[str] = field(default_factory=lambda: ["chain"])
    chains: int = 3  # chains per haystack (one probe each); chains x (hops + 1) <= the 16 value symbols
    chunk: int = 65536  # prefill chunk, tokens
    train_len_samples: int = 200  # probes of the sanity check at the training length
    memory_fraction: float = 0.5  # a cell may use at most this fraction of the available memory


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
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    design: Optional[str] = None  # run only this design of the experiment (sweeps: design=a,b)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "auto"  # kernel backend for every op: auto | reference | triton
    threads: int = 0  # torch CPU threads (0: torch's default), at most the machine's cores
    lock: str = "wait"  # another run holds the run directory: wait for it, or refuse (attnbench/rundir.py)
    force: bool = False  # the run directory holds another config's records: set them aside and start afresh
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


def _duration(field_name: str, value: Any) -> None:
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ConfigError(field_name, value, "a duration such as 90s, 15m, 2h or 1h30m") from None
    if not seconds > 0:
        raise ConfigError(field_name, value, "a duration > 0 such as 90s, 15m, 2h or 1h30m")


def smoke_bytes(cfg) -> int:
    """A lower bound on what exp.seq_len costs a training step: fp32 logits and their gradient
    (2 x V per token) and the residual stream kept for backward (d_model per layer and token)."""
    m = cfg.model
    return 4 * cfg.exp.batch * cfg.exp.seq_len * (2 * m.vocab_size + m.n_layers * m.d_model)


def validate_memory(cfg) -> None:
    """Lengths whose tensors cannot fit in this machine's memory stop here, before allocating."""
    import psutil

    if cfg.exp.name != "smoke":  # smoke holds its whole sequence at once; needle_4m and multihop plan
        return  # each length against memory (attnbench.plan), the cost experiments against bench.max_call_s
    need, have = smoke_bytes(cfg), psutil.virtual_memory().total
    if need > have:
        raise ConfigError("exp.seq_len", cfg.exp.seq_len, f"needs at least {need / 2**30:,.1f} GiB at exp.batch="
                          f"{cfg.exp.batch}; this machine has {have / 2**30:,.1f} GiB")


def validate_design(name: str, d, n_layers: int, used: bool = True) -> None:
    """One design's settings; ``used``: the run builds it, so its layout must tile its depth."""
    where = f"attention.{name}"
    if d.name != name:
        raise ConfigError(f"{where}.name", d.name, f"must equal its key {name!r}")
    bad = sorted(set(d.layout) - set(LAYOUT_LETTERS))
    if not d.layout or bad:
        raise ConfigError(f"{where}.layout", d.layout, f"one letter a layer from {LAYOUT_LETTERS} (S softmax, L lightning, W sliding window, M msa)")
    if d.n_layers < 0:
        raise ConfigError(f"{where}.n_layers", d.n_layers, "must be >= 0 (0: model.n_layers)")
    n_layers = d.n_layers or n_layers
    if used and n_layers % len(d.layout):
        raise ConfigError(f"{where}.layout", d.layout, f"length must divide the design's layer count {n_layers} (it is tiled)")
    for key in ("window", "block_size", "top_k", "index_dim"):
        _positive(f"{where}.{key}", getattr(d, key))
    if d.lightning_heads < 0:
        raise ConfigError(f"{where}.lightning_heads", d.lightning_heads, "must be >= 0 (0: model.n_heads)")
    if d.index_pool not in INDEX_POOLS:
        raise ConfigError(f"{where}.index_pool", d.index_pool, f"one of {', '.join(INDEX_POOLS)}")
    if d.position not in POSITIONS:
        raise ConfigError(f"{where}.position", d.position, f"one of {', '.join(POSITIONS)}")
    if d.qkv_conv < 0:
        raise ConfigError(f"{where}.qkv_conv", d.qkv_conv, "must be >= 0 (0: no convolution)")


def _no_unknown_keys(node, where: str) -> None:
    """`+key=value` opens even typed nodes; refuse keys their schema does not have (e.g. a
    `_target_`: attnbench never instantiates anything a config names)."""
    import dataclasses

    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, ListConfig):
        for i in range(len(node)):
            _no_unknown_keys(node._get_node(i), f"{where}[{i}]")
        return
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key in node:
        if key == "hydra" and not where:
            continue
        path = f"{where}.{key}" if where else str(key)
        if fields is not None and key not in fields:
            raise ConfigError(path, OmegaConf.select(node, str(key), throw_on_missing=False),
                              f"unknown key; allowed: {', '.join(sorted(fields))}")
        _no_unknown_keys(node._get_node(key), path)


def validate(cfg) -> None:
    """Check a composed config; raise ConfigError on the first problem found."""
    import dataclasses

    from attnbench.experiments import EXPERIMENTS

    known_top = {f.name for f in dataclasses.fields(RootConfig)} | {"hydra"}
    for key in cfg:
        if key not in known_top:
            raise ConfigError(str(key), cfg[key], f"unknown top-level key; allowed: {', '.join(sorted(known_top - {'hydra'}))}")
    _no_unknown_keys(cfg, "")

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
    in_use = set(cfg.exp.designs or cfg.attention) | ({cfg.design} if cfg.design else set())
    for name, d in cfg.attention.items():
        validate_design(name, d, m.n_layers, used=name in in_use)
        width = m.n_heads * m.head_dim
        if d.lightning_heads and width % d.lightning_heads:
            raise ConfigError(f"attention.{name}.lightning_heads", d.lightning_heads,
                              f"must divide the attention width model.n_heads x model.head_dim = {width}")
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
    if cfg.backend == "triton":  # Triton tiles (tl.arange) need power-of-two block sizes
        for name, d in cfg.attention.items():
            if d.block_size & (d.block_size - 1):
                raise ConfigError(f"attention.{name}.block_size", d.block_size, "a power of two with backend=triton")
    cores = os.cpu_count() or 1
    if not 0 <= cfg.threads <= cores:
        raise ConfigError("threads", cfg.threads, f"0 (torch's default) or 1 .. {cores} (this machine's CPU cores)")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError("seed", cfg.seed, f"an integer in 0 .. {MAX_SEED}")
    if cfg.lock not in LOCK_MODES:
        raise ConfigError("lock", cfg.lock, f"one of {', '.join(LOCK_MODES)} (when another run holds the run directory)")
    _duration("exp.budget", cfg.exp.budget)
    for key in ("batch", "seq_len", "prefill_chunk"):
        _positive(f"exp.{key}", getattr(cfg.exp, key))
    validate_memory(cfg)
    if cfg.wandb.mode not in WANDB_MODES:
        raise ConfigError("wandb.mode", cfg.wandb.mode, f"one of {', '.join(WANDB_MODES)}")
    if not cfg.wandb.project or "/" in cfg.wandb.project:
        raise ConfigError("wandb.project", cfg.wandb.project, "a non-empty W&B project name without '/'")
    for key, value in (("wandb.timeout_s", cfg.wandb.timeout_s), ("report.pdf_timeout_s", cfg.report.pdf_timeout_s)):
        if not value > 0:
            raise ConfigError(key, value, "must be > 0 seconds")
    validate_tasks(cfg)
    validate_kernels(cfg.kernels)
    validate_hardware("hardware", cfg.hardware)
    validate_bench(cfg.bench)


def validate_tasks(cfg) -> None:
    """Task vocabulary, curriculum and evaluation grid."""
    from omegaconf import OmegaConf
    from attnbench.tasks.generate import HOP_TASKS, NIAH_VARIANTS
    from attnbench.tasks.vocab import MAX_HOPS, Vocab

    t = cfg.task
    for key in ("n_keys", "n_values", "n_filler"):
        _positive(f"task.{key}", getattr(t, key))
    if t.haystack not in ("noise", "markov"):
        raise ConfigError("task.haystack", t.haystack, "one of noise, markov")
    if not 0.0 <= t.value_noise < 1.0:
        raise ConfigError("task.value_noise", t.value_noise, "a fraction in [0, 1)")
    size = Vocab(t.n_keys, t.n_values, t.n_filler).size
    if size > cfg.model.vocab_size:
        raise ConfigError("model.vocab_size", cfg.model.vocab_size, f"must be >= the task vocabulary ({size} tokens)")
    tr = cfg.train
    for key in ("max_steps", "batch", "tokens_per_step", "window", "patience", "token_budget", "checkpoint_every", "log_every"):
        _positive(f"train.{key}", getattr(tr, key))
    if not tr.lr > 0:
        raise ConfigError("train.lr", tr.lr, "must be > 0")
    for key in ("advance_at", "floor"):
        if not 0.0 < getattr(tr, key) <= 1.0:
            raise ConfigError(f"train.{key}", getattr(tr, key), "a fraction in (0, 1]")
    _duration("train.budget", tr.budget)
    _duration("train.collective_timeout", tr.collective_timeout)
    if tr.parallel not in PARALLEL:
        raise ConfigError("train.parallel", tr.parallel, f"one of {', '.join(PARALLEL)} (ddp, fsdp: launch with torchrun)")
    if not isinstance(tr.micro_batch, int) or tr.micro_batch < 0:
        raise ConfigError("train.micro_batch", tr.micro_batch, "rows per forward pass, >= 0 (0: a process's rows at once)")
    if not tr.stages:
        raise ConfigError("train.stages", [], "at least one curriculum stage")
    if tr.max_len:
        last = tr.stages[-1]
        if tr.max_len < 2 * last.context_len:
            raise ConfigError("train.max_len", tr.max_len, f"0 (the stages' own) or at least 2 x the last stage's context_len = {2 * last.context_len}")
        if tr.max_len + last.n_queries > tr.tokens_per_step:
            raise ConfigError("train.tokens_per_step", tr.tokens_per_step, f"must hold one sequence of train.max_len ({tr.max_len + last.n_queries} tokens)")
    for i, st in enumerate(tr.stages):
        where = f"train.stages[{i}]"
        for key in ("n_keys", "n_values", "n_filler", "n_pairs", "context_len", "n_queries"):
            _positive(f"{where}.{key}", getattr(st, key))
        if st.n_keys > t.n_keys or st.n_values > t.n_values or st.n_filler > t.n_filler:
            raise ConfigError(where, f"keys={st.n_keys} values={st.n_values} filler={st.n_filler}",
                              f"at most the task vocabulary ({t.n_keys} keys, {t.n_values} values, {t.n_filler} filler)")
        if st.max_context_len and st.max_context_len < 2 * st.context_len:
            raise ConfigError(f"{where}.max_context_len", st.max_context_len,
                              f"0 (one length) or at least 2 x context_len = {2 * st.context_len}")
        longest = StageConfig(**OmegaConf.to_container(st, resolve=True)).longest
        if longest + st.n_queries > tr.tokens_per_step:
            raise ConfigError("train.tokens_per_step", tr.tokens_per_step, f"must hold one sequence of {where} ({longest + st.n_queries} tokens)")
        if not st.n_queries <= st.n_pairs <= min(st.n_keys, (st.context_len - 2) // 2):
            raise ConfigError(f"{where}.n_pairs", st.n_pairs, "need n_queries <= n_pairs <= min(n_keys, (context_len - 2) // 2)")
    e = cfg.eval
    if not e.context_lens:
        raise ConfigError("eval.context_lens", [], "at least one context length in tokens (>= 16)")
    for i, n in enumerate(e.context_lens):
        if not isinstance(n, int) or n < 16:
            raise ConfigError(f"eval.context_lens[{i}]", n, "a context length in tokens, >= 16")
    for i, d in enumerate(e.depths):
        if not 0.0 <= d <= 1.0:
            raise ConfigError(f"eval.depths[{i}]", d, "a depth in [0, 1]")
    for key in ("haystacks", "chains", "chunk", "train_len_samples"):
        _positive(f"eval.{key}", getattr(e, key))
    if e.haystacks_short < 0:
        raise ConfigError("eval.haystacks_short", e.haystacks_short, "must be >= 0 (0: eval.haystacks)")
    if e.variant not in NIAH_VARIANTS:
        raise ConfigError("eval.variant", e.variant, f"one of {', '.join(NIAH_VARIANTS)}")
    for i, h in enumerate(e.hops):
        if not 1 <= h <= MAX_HOPS:
            raise ConfigError(f"eval.hops[{i}]", h, f"1 .. {MAX_HOPS}")
    need = e.chains * (max(e.hops, default=0) + 1)
    if need > min(t.n_keys, t.n_values):
        raise ConfigError("eval.chains", e.chains, f"chains x (max hops + 1) = {need} must be <= min(task.n_keys, task.n_values) = {min(t.n_keys, t.n_values)}")
    for i, name in enumerate(e.hop_tasks):
        if name not in HOP_TASKS:
            raise ConfigError(f"eval.hop_tasks[{i}]", name, f"one of {', '.join(HOP_TASKS)}")
    if not 0.0 < e.memory_fraction <= 1.0:
        raise ConfigError("eval.memory_fraction", e.memory_fraction, "a fraction in (0, 1]")


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


def execution_free(train: dict) -> dict:
    """A train config (as a dict) without what only says how it runs (TRAIN_EXECUTION) and
    without fields added later while at their default: what checkpoint keys and run hashes see."""
    out = {k: v for k, v in train.items()
           if k not in TRAIN_EXECUTION and not (k in TRAIN_ADDED_AT_DEFAULT and v == TRAIN_ADDED_AT_DEFAULT[k])}
    if "stages" in out:
        out["stages"] = [{k: v for k, v in dict(s).items() if not (k in STAGE_ADDED_AT_DEFAULT and v == STAGE_ADDED_AT_DEFAULT[k])}
                         for s in out["stages"]]
    return out


def selected_designs(cfg) -> list[str]:
    """The designs this run covers: exp.designs (all when empty), narrowed by `design=`."""
    names = list(cfg.exp.designs) or sorted(cfg.attention)
    if cfg.design is not None:
        names = [cfg.design]
    return names
