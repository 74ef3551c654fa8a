"""The typed config schema: dataclasses registered in Hydra's ConfigStore.

A mistyped key, a wrong type or a value outside a fixed set (choices.py) fails while Hydra
composes; attnbench.config.validate checks what types cannot (names, divisibility, ranges:
each numeric field's in ranges.py).
A design's own settings are declared in its spec (attnbench/specs/settings.py); DesignConfig
gathers those of every registered design (design_config).
What goes into checkpoint keys and run hashes is decided here too (execution_free).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from attnbench.designs import settings_classes
from attnbench.tasks.stage import Stage as StageConfig  # one stage type: the schema is the generator's own

from .choices import (
    Backend,
    BenchScope,
    Device,
    Dtype,
    Haystack,
    HopTask,
    KernelBaseline,
    KernelOp,
    LockMode,
    NiahVariant,
    Parallel,
    TorchDtype,
    WandbMode,
)

# TrainConfig fields that say how training is spread over processes, not what it computes:
# they stay out of checkpoint keys and run hashes, so a run resumes on any number of processes.
TRAIN_EXECUTION = ("parallel", "micro_batch", "collective_timeout", "compile")
# TrainConfig fields added after checkpoints were keyed, whose default reproduces the old
# behaviour: out of keys and hashes while at that default (shipped checkpoints stay valid).
TRAIN_ADDED_AT_DEFAULT = {"max_len": 0, "chain_token_budget": 0}
STAGE_ADDED_AT_DEFAULT = {"hops": 0}  # stage fields added later: left out of keys at their default


@dataclass
class DesignBase:
    """What every attention design has: a layer layout and its depth. The settings of its layers
    are declared by each design in its spec (attnbench/specs/settings.py) and joined in DesignConfig."""

    name: str = MISSING
    layout: str = MISSING  # one letter a layer (attnbench/designs.py: S softmax, L lightning, ...); a period is tiled
    description: str = ""
    n_layers: int = 0  # layers of this design's model (0: model.n_layers), e.g. 16 for LLLLLLLS x 2


def design_fields() -> dict[str, tuple[Any, dataclasses.Field]]:
    """Every registered design's settings by name: (type, field). Designs share a setting by sharing
    the class that declares it (dsa reads msa's); two declarations of one name are refused."""
    out: dict[str, tuple[Any, dataclasses.Field]] = {}
    base = {f.name for f in dataclasses.fields(DesignBase)}
    for cls in settings_classes():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if "help" not in f.metadata:  # its range and key rule would be missing unnoticed
                raise TypeError(f"{cls.__name__}.{f.name}: declare it with attnbench.specs.settings.setting")
            if f.name in base or (f.name in out and out[f.name][1] is not f):
                raise TypeError(f"{cls.__name__}.{f.name}: declared by another design too; share its settings class instead")
            out[f.name] = (hints[f.name], f)
    return out


def design_config() -> type:
    """One attention design's config: DesignBase plus the settings of every registered design (a
    hybrid holds those of each of its letters), each with its default, range and help (metadata)."""
    fields = [(n, tp, field(default=f.default, metadata=f.metadata)) for n, (tp, f) in design_fields().items()]
    return dataclasses.make_dataclass("DesignConfig", fields, bases=(DesignBase,), namespace={"__module__": __name__})


if TYPE_CHECKING:
    DesignConfig = Any  # built from the registry at import: its fields are the designs' settings
else:
    DesignConfig = design_config()
_BUILT_FROM = settings_classes()  # the settings DesignConfig holds (register: has the registry changed since?)


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
    haystack: Haystack = Haystack.noise  # noise (i.i.d. filler) | markov (a fixed random bigram language)
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
        StageConfig(n_keys=64, n_values=16, n_filler=64, n_pairs=8, context_len=128, n_queries=8, value_noise=0.05, max_context_len=1024),
    ]


@dataclass
class TrainConfig:
    """Training of the task models: AdamW, warm-up + cosine, clipping, a curriculum.

    The fair rule (every design an experiment compares trains under it): the same
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
    # > 0: stop after this many tokens counted from the first chain stage (hops > 0; status
    # "chain_tokens"), the same for every design whatever its needle stages cost; 0: none
    chain_token_budget: int = 0
    checkpoint_every: int = 100
    log_every: int = 10
    budget: str = "6h"  # wall-clock safety net per design (status "budget"); not part of the rule
    force: bool = False  # retrain even if a cached or shipped checkpoint matches
    compile: bool = True  # the step's loss through torch.compile, a graph per batch shape (attnbench/training/step.py; one process; CUDA graphs on a GPU)
    stages: List[StageConfig] = field(default_factory=default_stages)
    max_len: int = 0  # > 0: the last stage's lengths run up to this context (the GPU presets: 2048); 0: its own
    # Distributed training (attnbench/training/distributed.py; docs/clusters.md). `batch` and
    # `tokens_per_step` stay the GLOBAL batch: its rows are split over the processes.
    parallel: Parallel = Parallel.none  # none | ddp | fsdp (launch with torchrun, or a SLURM job with tasks_per_node > 1)
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
    variant: NiahVariant = NiahVariant.multikey  # niah variant (single | multikey | multivalue | multiquery)
    hops: List[int] = field(default_factory=lambda: [1, 2, 3, 4])
    hop_tasks: List[HopTask] = field(default_factory=lambda: [HopTask.chain])
    chains: int = 3  # chains per haystack (one probe each); chains x (hops + 1) <= the 16 value symbols
    chunk: int = 65536  # prefill chunk, tokens (linear designs take at most plan.LINEAR_CHUNK)
    # prefill full chunks through torch.compile'd lightning blocks (Model.compile_prefill; ATTNBENCH_COMPILE=0 also turns it off)
    compile: bool = True
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

    mode: WandbMode = WandbMode.offline  # offline (files under RUN_DIR/wandb, `wandb sync` later) | online | disabled
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

    ops: List[KernelOp] = field(default_factory=lambda: list(KernelOp))  # every registered op, in the registry's order
    dtypes: List[TorchDtype] = field(default_factory=lambda: [TorchDtype.float32])  # of the timings and checks
    shapes: KernelShapes = field(default_factory=KernelShapes)
    dry_run: KernelShapes = field(default_factory=KernelShapes)  # kernels_gpu on device=cpu (interpreter)
    min_run_time: float = 1.0  # seconds of repeats per timing (CPU; do_bench's rep on CUDA)
    baselines: List[KernelBaseline] = field(default_factory=lambda: [KernelBaseline.sdpa])  # kernels_gpu: sdpa, flash_attn, flex, fla


@dataclass
class HardwareConfig:
    """A roofline profile (conf/hardware/): peak rates from a data sheet, or measured (cpu).

    Predicted time of a piece of work = max(FLOPs / rate, bytes / mem_bandwidth) summed over
    its kernels, plus launch_s per kernel launch (attnbench.bench.costmodel).
    """

    name: str = "cpu"
    description: str = ""
    flops: Dict[str, float] = field(default_factory=dict)  # dense FLOP/s of large matmuls, by dtype (choices.Dtype: validate)
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
    scopes: List[BenchScope] = field(default_factory=lambda: [BenchScope.op, BenchScope.layer])  # time ops alone and whole layers
    batch: int = 1
    dtype: TorchDtype = TorchDtype.float32  # timing dtype (fp32 on CPU, bf16 on GPU)
    min_run_time: float = 0.3  # seconds of timing per cell (torch.utils.benchmark)
    repeats: int = 3  # at least this many timed calls per cell
    max_call_s: float = 20.0  # skip (recorded) a cell whose predicted single call is longer
    validate_from: int = 4096  # cost-model error is recorded (and held to max_rel_error) for T >= this
    max_rel_error: float = 2.0  # predicted/measured must lie in [1/x, x]
    profiles: List[str] = field(default_factory=lambda: ["h200", "h100", "a100"])  # projections
    presets: List[str] = field(default_factory=list)  # production presets (attnbench.bench.presets); empty = all
    memory_dtypes: List[Dtype] = field(default_factory=lambda: [Dtype.bfloat16, Dtype.float8, Dtype.float32])
    memory_lens: List[int] = field(default_factory=lambda: [131072, 1048576, 4194304])
    check_ops: bool = True  # correctness gate: time only ops that match the dense formula first


@dataclass
class ScaleConfig:
    """exp=scale: the width ladder (attnbench/experiments/scale.py).

    Each width's backbone follows one rule from ``model`` (the base, conf/model/tiny.yaml):
    conf/model/w*.yaml write it out. Every width's token budgets are the base width's times
    the reference design's active parameters at that width over those at the base, so the
    tokens per active parameter are the same at every width and the base width keeps its
    budgets (and finds the models trained under them)."""

    widths: List[int] = field(default_factory=lambda: [16, 32, 64])  # model.d_model of each rung (128, 256: GPU rungs)
    seeds: List[int] = field(default_factory=lambda: [0, 1])
    budget_scaling: str = "fixed"  # fixed: fair-v1's budgets at every width; active_params: scaled by the reference's active parameters
    reference: str = "softmax"  # the design whose active parameters size a rung's token budget (budget_scaling=active_params)
    needle_token_budget: int = 40_000_000  # the needle curriculum's budget at the base width (needle_4m's: train.token_budget's default)
    needle_probes: int = 100  # single-needle contexts a length, one needle each
    multikey_haystacks: int = 20  # multi-key haystacks a length (eval.depths needles each)
    chain_haystacks: int = 34  # chain haystacks a hop count (eval.chains chains each)
    factors: List[int] = field(default_factory=lambda: [1, 4, 16])  # needle lengths, in multiples of the training length


@dataclass
class ExternalConfig:
    """exp=needle_external / multihop_external: the tasks against a model attnbench did not train
    in-process (attnbench/external/sources.py, attnbench/experiments/external.py)."""

    model: str = ""  # attnbench:<checkpoint folder> | hf:<local model folder> | endpoint:<base URL, e.g. http://host:8000/v1>
    served_name: str = ""  # the endpoint's model name (empty: the first the server lists)
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable the endpoint's key is read from; the key is written nowhere
    render: str = (
        "tokens"  # tokens: attnbench's token tasks as words (attnbench models, exported or not); text: as prose (external/prose.py)
    )
    tokenizer: str = ""  # render=text: a local tokenizer folder to count lengths in (an endpoint's model; empty: the hf folder's own)
    dtype: str = "float32"  # hf: the weights' dtype
    batch: int = 8  # hf / attnbench: prompts of one length a forward pass
    concurrency: int = 4  # endpoint: requests in flight
    retries: int = 3  # endpoint: the client's retries (with backoff) before a request is recorded failed
    timeout_s: float = 120.0  # endpoint: seconds a request may take
    max_new_tokens: int = 2  # greedy tokens generated a request; the first is scored


# Root sections added after run hashes were first recorded: left out of a run's config hash
# while at their default, so the runs of every other experiment keep their hashes.
ROOT_ADDED_AT_DEFAULT = {"scale": ScaleConfig, "external": ExternalConfig}
SECTION_ADDED_AT_DEFAULT = {"external": {"tokenizer": ""}}  # fields added to a root section later: left out of the hash at their default


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
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    external: ExternalConfig = field(default_factory=ExternalConfig)
    design: Optional[str] = None  # run only this design of the experiment (sweeps: design=a,b)
    seed: int = 0
    device: Device = Device.auto  # auto | cpu | cuda
    backend: Backend = Backend.auto  # kernel backend for every op: auto | reference | triton
    threads: int = 0  # torch CPU threads (0: torch's default), at most the machine's cores
    lock: LockMode = LockMode.wait  # another run holds the run directory: wait for it, or refuse (attnbench/records/rundir.py)
    force: bool = False  # the run directory holds another config's records: set them aside and start afresh
    wandb: WandbConfig = field(default_factory=WandbConfig)
    report: ReportConfig = field(default_factory=ReportConfig)


def register() -> None:
    """Store the root schema in Hydra's ConfigStore. DesignConfig follows the registry: where a
    design with settings of its own was registered after this module was imported (a test's
    throwaway design), it is rebuilt first, and RootConfig's attention entries (typed by name:
    ``Dict[str, DesignConfig]``) compose its settings like the others'."""
    global DesignConfig, _BUILT_FROM
    if settings_classes() != _BUILT_FROM:
        DesignConfig, _BUILT_FROM = design_config(), settings_classes()
    ConfigStore.instance().store(name="attnbench_schema", node=RootConfig)


def hashed_sections(cfg: dict) -> dict:
    """A root config (as a dict) without the sections of ROOT_ADDED_AT_DEFAULT while they are at
    their default: what a run's config hash sees (runner.config_hash)."""
    from omegaconf import OmegaConf

    out = dict(cfg)
    for key, schema in ROOT_ADDED_AT_DEFAULT.items():
        if key in out and out[key] == OmegaConf.to_container(OmegaConf.structured(schema), enum_to_str=True):
            del out[key]
    for key, added in SECTION_ADDED_AT_DEFAULT.items():
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if not (k in added and v == added[k])}
    return out


def execution_free(train: dict) -> dict:
    """A train config (as a dict) without what only says how it runs (TRAIN_EXECUTION) and
    without fields added later while at their default: what checkpoint keys and run hashes see."""
    out = {
        k: v for k, v in train.items() if k not in TRAIN_EXECUTION and not (k in TRAIN_ADDED_AT_DEFAULT and v == TRAIN_ADDED_AT_DEFAULT[k])
    }
    if "stages" in out:
        out["stages"] = [
            {k: v for k, v in dict(s).items() if not (k in STAGE_ADDED_AT_DEFAULT and v == STAGE_ADDED_AT_DEFAULT[k])}
            for s in out["stages"]
        ]
    return out
