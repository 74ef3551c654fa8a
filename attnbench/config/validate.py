"""Start-of-run validation: what the schema's types cannot check.

The schema (schema.py, choices.py) already refused unknown keys of typed nodes, wrong types
and values outside a fixed set while Hydra composed. ``validate`` checks the rest (names that
must exist, divisibility, ranges, durations, memory) before any work starts. Every failure is
a ``ConfigError`` naming the field, the value, and what is allowed.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any, cast

from attnbench.designs import LAYOUT_LETTERS, describe_letters

from .choices import MAX_SEED, Dtype
from .schema import RootConfig, StageConfig


class ConfigError(ValueError):
    """A config value that cannot run: ``field=value: what is allowed``."""

    def __init__(self, field: str, value: Any, allowed: str):
        value = str(value) if isinstance(value, Enum) else value  # 'ddp', not <Parallel.ddp: 'ddp'>
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r}: {allowed}")


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
        raise ConfigError(
            "exp.seq_len",
            cfg.exp.seq_len,
            f"needs at least {need / 2**30:,.1f} GiB at exp.batch={cfg.exp.batch}; this machine has {have / 2**30:,.1f} GiB",
        )


def validate_design(name: str, d, n_layers: int, used: bool = True) -> None:
    """One design's settings; ``used``: the run builds it, so its layout must tile its depth."""
    where = f"attention.{name}"
    if d.name != name:
        raise ConfigError(f"{where}.name", d.name, f"must equal its key {name!r}")
    bad = sorted(set(d.layout) - set(LAYOUT_LETTERS))
    if not d.layout or bad:
        raise ConfigError(f"{where}.layout", d.layout, f"one letter a layer from {LAYOUT_LETTERS} ({describe_letters()})")
    if d.n_layers < 0:
        raise ConfigError(f"{where}.n_layers", d.n_layers, "must be >= 0 (0: model.n_layers)")
    n_layers = d.n_layers or n_layers
    if used and n_layers % len(d.layout):
        raise ConfigError(f"{where}.layout", d.layout, f"length must divide the design's layer count {n_layers} (it is tiled)")
    for key in ("window", "block_size", "top_k", "index_dim"):
        _positive(f"{where}.{key}", getattr(d, key))
    if d.lightning_heads < 0:
        raise ConfigError(f"{where}.lightning_heads", d.lightning_heads, "must be >= 0 (0: model.n_heads)")
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
        path = f"{where}.{key!s}" if where else str(key)
        if fields is not None and key not in fields:
            raise ConfigError(
                path, OmegaConf.select(node, str(key), throw_on_missing=False), f"unknown key; allowed: {', '.join(sorted(fields))}"
            )
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
            raise ConfigError(
                f"attention.{name}.lightning_heads",
                d.lightning_heads,
                f"must divide the attention width model.n_heads x model.head_dim = {width}",
            )
    known = sorted(cfg.attention)
    for i, name in enumerate(cfg.exp.designs):
        if name not in cfg.attention:
            raise ConfigError(f"exp.designs[{i}]", name, f"one of {', '.join(known)}")
    if cfg.design is not None and cfg.design not in cfg.attention:
        raise ConfigError("design", cfg.design, f"one of {', '.join(known)}")
    if cfg.backend == "triton":  # Triton tiles (tl.arange) need power-of-two block sizes
        for name, d in cfg.attention.items():
            if d.block_size & (d.block_size - 1):
                raise ConfigError(f"attention.{name}.block_size", d.block_size, "a power of two with backend=triton")
    cores = os.cpu_count() or 1
    if not 0 <= cfg.threads <= cores:
        raise ConfigError("threads", cfg.threads, f"0 (torch's default) or 1 .. {cores} (this machine's CPU cores)")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError("seed", cfg.seed, f"an integer in 0 .. {MAX_SEED}")
    _duration("exp.budget", cfg.exp.budget)
    for key in ("batch", "seq_len", "prefill_chunk"):
        _positive(f"exp.{key}", getattr(cfg.exp, key))
    validate_memory(cfg)
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
    from attnbench.tasks.vocab import MAX_HOPS, Vocab

    t = cfg.task
    for key in ("n_keys", "n_values", "n_filler"):
        _positive(f"task.{key}", getattr(t, key))
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
    if not isinstance(tr.micro_batch, int) or tr.micro_batch < 0:
        raise ConfigError("train.micro_batch", tr.micro_batch, "rows per forward pass, >= 0 (0: a process's rows at once)")
    if not tr.stages:
        raise ConfigError("train.stages", [], "at least one curriculum stage")
    if tr.max_len:
        last = tr.stages[-1]
        if tr.max_len < 2 * last.context_len:
            raise ConfigError(
                "train.max_len", tr.max_len, f"0 (the stages' own) or at least 2 x the last stage's context_len = {2 * last.context_len}"
            )
        if tr.max_len + last.n_queries > tr.tokens_per_step:
            raise ConfigError(
                "train.tokens_per_step",
                tr.tokens_per_step,
                f"must hold one sequence of train.max_len ({tr.max_len + last.n_queries} tokens)",
            )
    for i, st in enumerate(tr.stages):
        where = f"train.stages[{i}]"
        for key in ("n_keys", "n_values", "n_filler", "n_pairs", "context_len", "n_queries"):
            _positive(f"{where}.{key}", getattr(st, key))
        if st.n_keys > t.n_keys or st.n_values > t.n_values or st.n_filler > t.n_filler:
            raise ConfigError(
                where,
                f"keys={st.n_keys} values={st.n_values} filler={st.n_filler}",
                f"at most the task vocabulary ({t.n_keys} keys, {t.n_values} values, {t.n_filler} filler)",
            )
        if st.max_context_len and st.max_context_len < 2 * st.context_len:
            raise ConfigError(
                f"{where}.max_context_len", st.max_context_len, f"0 (one length) or at least 2 x context_len = {2 * st.context_len}"
            )
        longest = StageConfig(**cast(dict, OmegaConf.to_container(st, resolve=True))).longest
        if longest + st.n_queries > tr.tokens_per_step:
            raise ConfigError(
                "train.tokens_per_step", tr.tokens_per_step, f"must hold one sequence of {where} ({longest + st.n_queries} tokens)"
            )
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
    for i, h in enumerate(e.hops):
        if not 1 <= h <= MAX_HOPS:
            raise ConfigError(f"eval.hops[{i}]", h, f"1 .. {MAX_HOPS}")
    need = e.chains * (max(e.hops, default=0) + 1)
    if need > min(t.n_keys, t.n_values):
        raise ConfigError(
            "eval.chains",
            e.chains,
            f"chains x (max hops + 1) = {need} must be <= min(task.n_keys, task.n_values) = {min(t.n_keys, t.n_values)}",
        )
    if not 0.0 < e.memory_fraction <= 1.0:
        raise ConfigError("eval.memory_fraction", e.memory_fraction, "a fraction in (0, 1]")


def validate_kernels(k) -> None:
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
    bad = sorted(set(hw.flops) - set(Dtype))
    if bad:
        raise ConfigError(f"{where}.flops", bad, f"keys from {', '.join(Dtype)}")
    for key in ("small_matmul_efficiency", "matvec_efficiency"):
        if not 0 < getattr(hw, key) <= 1:
            raise ConfigError(f"{where}.{key}", getattr(hw, key), "in (0, 1]")
    for key in (
        "mem_bandwidth",
        "memory_bytes",
        "cache_bytes",
        "launch_s",
        "module_op_s",
        "alloc_bandwidth",
        "alloc_min_bytes",
        "exp_rate",
    ):
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
    for key in ("batch", "repeats", "validate_from"):
        _positive(f"bench.{key}", getattr(b, key))
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
