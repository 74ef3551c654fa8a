"""The range of every numeric field of the config schema (schema.py), by dataclass and field.

Every numeric field (lists of numbers included: each item) has its range here, or, for a
design's own settings, in the field's metadata (attnbench/specs/settings.py: a design declares
its settings with their ranges in its spec), checked by config.validate before anything else
(``check_ranges``), so nan, inf, negative sizes and weights never reach a run. A numeric field
without a range fails tests/test_config_property.py. Tighter rules that depend on other fields (divisibility, the
machine's cores and memory, a task's vocabulary) stay in validate.py / validate_tasks.py.
"""

from __future__ import annotations

from attnbench.basics import Range

from .choices import MAX_SEED


COUNT, SIZE, NONNEG, POS, FRACTION = Range(1), Range(1), Range(0), Range(0, lo_open=True), Range(0, 1)
# Sane upper bounds (docs/long-runs.md): a token length up to 2^30 (256 x needle_4m's 4M), a
# count of haystacks, chains, samples, repeats or sequences up to a million. Beyond them a run
# would only allocate or loop for days: refused before any work, naming the field.
MAX_LEN, MAX_COUNT = 2**30, 10**6
LENGTH, MANY = Range(1, MAX_LEN), Range(1, MAX_COUNT)
RANGES: dict[str, dict[str, Range]] = {
    "DesignConfig": {"n_layers": NONNEG},  # the fields every design has; each design's own: their metadata
    "ModelConfig": {
        "d_model": SIZE,
        "n_layers": COUNT,
        "n_heads": COUNT,
        "n_kv_heads": COUNT,
        "head_dim": SIZE,
        "rotary_frac": FRACTION,
        "rope_base": POS,
        "n_experts": COUNT,
        "top_k_experts": COUNT,
        "d_expert": SIZE,
        "balance_coef": NONNEG,
        "vocab_size": SIZE,
        "init_std": POS,
    },
    "TaskConfig": {"n_keys": COUNT, "n_values": COUNT, "n_filler": COUNT, "value_noise": Range(0, 1, hi_open=True)},
    "Stage": {
        "n_keys": COUNT,
        "n_values": COUNT,
        "n_filler": COUNT,
        "n_pairs": MANY,
        "context_len": LENGTH,
        "n_queries": MANY,
        "value_noise": Range(0, 1, hi_open=True),
        "max_context_len": NONNEG,
        "hops": NONNEG,
    },
    "TrainConfig": {
        "max_steps": COUNT,
        "batch": COUNT,
        "tokens_per_step": COUNT,
        "chain_token_budget": NONNEG,
        "lr": POS,
        "min_lr_ratio": FRACTION,
        "warmup": NONNEG,
        "weight_decay": NONNEG,
        "beta2": Range(0, 1, hi_open=True),
        "grad_clip": NONNEG,
        "advance_at": Range(0, 1, lo_open=True),
        "floor": Range(0, 1, lo_open=True),
        "window": COUNT,
        "patience": COUNT,
        "token_budget": COUNT,
        "checkpoint_every": COUNT,
        "log_every": COUNT,
        "max_len": NONNEG,
        "micro_batch": NONNEG,
    },
    "EvalConfig": {
        "context_lens": LENGTH,
        "depths": FRACTION,
        "haystacks": MANY,
        "haystacks_short": Range(0, MAX_COUNT),
        "short_len": LENGTH,
        "hops": MANY,
        "chains": MANY,
        "chunk": LENGTH,
        "train_len_samples": MANY,
        "memory_fraction": Range(0, 1, lo_open=True),
    },
    "ExpConfig": {"batch": MANY, "seq_len": LENGTH, "prefill_chunk": LENGTH},
    "ScaleConfig": {
        "widths": SIZE,
        "seeds": Range(0, MAX_SEED),
        "needle_token_budget": COUNT,
        "needle_probes": COUNT,
        "multikey_haystacks": COUNT,
        "chain_haystacks": COUNT,
        "factors": COUNT,
    },
    "ExternalConfig": {
        "batch": MANY,
        "concurrency": Range(1, 1024),
        "retries": Range(0, 100),
        "timeout_s": POS,
        "max_new_tokens": Range(1, 4096),
    },
    "WandbConfig": {"timeout_s": POS},
    "ReportConfig": {"pdf_timeout_s": POS},
    "KernelShapes": {
        "batch": COUNT,
        "heads": COUNT,
        "kv_heads": COUNT,
        "head_dim": SIZE,
        "lengths": SIZE,
        "grad_lengths": SIZE,
        "check_lengths": SIZE,
        "check_fwd_lengths": SIZE,
        "window": SIZE,
        "block_size": SIZE,
        "top_k": COUNT,
        "index_dim": SIZE,
    },
    "KernelsConfig": {"min_run_time": POS},
    "HardwareConfig": {
        "flops": NONNEG,
        "small_matmul_efficiency": Range(0, 1, lo_open=True),
        "matvec_efficiency": Range(0, 1, lo_open=True),
        "mem_bandwidth": NONNEG,
        "exp_rate": NONNEG,
        "memory_bytes": NONNEG,
        "cache_bytes": NONNEG,
        "launch_s": NONNEG,
        "module_op_s": NONNEG,
        "alloc_bandwidth": NONNEG,
        "alloc_min_bytes": NONNEG,
    },
    "BenchConfig": {
        "prefill_lens": LENGTH,
        "decode_lens": LENGTH,
        "batch": MANY,
        "min_run_time": POS,
        "repeats": MANY,
        "max_call_s": POS,
        "validate_from": LENGTH,
        "max_rel_error": Range(1, lo_open=True),
        "memory_lens": LENGTH,
    },
    "RootConfig": {"seed": Range(0, MAX_SEED), "threads": NONNEG},
}


def range_of(schema: type, name: str) -> Range | None:
    """The range of a field of a schema dataclass: its metadata's (a design's setting), else RANGES'."""
    import dataclasses

    declared = {f.name: f.metadata.get("range") for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    return declared.get(name) or RANGES.get(schema.__name__, {}).get(name)
