"""Start-of-run validation: what the schema's types cannot check.

The schema (schema.py, choices.py) already refused unknown keys of typed nodes, wrong types
and values outside a fixed set while Hydra composed. ``validate`` checks the rest (names that
must exist, divisibility, ranges, durations, memory) before any work starts. Every failure is
a ``ConfigError`` naming the field, the value, and what is allowed.
"""

from __future__ import annotations

import os

from attnbench.designs import describe_letters, layout_letters, settings_classes
from attnbench.names import CACHE_USERS, EXPERIMENTS, PRESETS

from .choices import MAX_SEED, Dtype
from .errors import ConfigError, duration, positive
from .ranges import range_of
from .schema import RootConfig
from .validate_tasks import validate_tasks


def smoke_bytes(cfg) -> int:
    """A lower bound on what exp.seq_len costs a training step: fp32 logits and their gradient
    (2 x V per token) and the residual stream kept for backward (d_model per layer and token)."""
    m = cfg.model
    return 4 * cfg.exp.batch * cfg.exp.seq_len * (2 * m.vocab_size + m.n_layers * m.d_model)


WHOLE_SEQUENCE = ("smoke", "kv_memory")  # experiments that hold exp.batch x exp.seq_len tokens' logits at once


def listed_designs(exp: str) -> list[str]:
    """The designs conf/exp/<exp>.yaml lists (empty where it leaves exp.designs at "all")."""
    from importlib import resources

    from omegaconf import OmegaConf

    f = resources.files("attnbench.conf").joinpath("exp", f"{exp}.yaml")
    return [str(d) for d in OmegaConf.select(OmegaConf.create(f.read_text()), "exp.designs", default=None) or []] if f.is_file() else []


def validate_designs(cfg) -> None:
    """exp.designs: known names, each once; empty only where the experiment's own file leaves it empty (all)."""
    known = sorted(cfg.attention)
    for i, name in enumerate(cfg.exp.designs):
        if name not in cfg.attention:
            raise ConfigError(f"exp.designs[{i}]", name, f"one of {', '.join(known)}")
        if name in list(cfg.exp.designs)[:i]:
            raise ConfigError(
                f"exp.designs[{i}]", name, f"repeated (exp.designs[{list(cfg.exp.designs).index(name)}]); name each design once"
            )
    listed = listed_designs(cfg.exp.name) if not cfg.exp.designs else []
    if listed:
        raise ConfigError("exp.designs", [], f"at least one design (+exp={cfg.exp.name} runs {', '.join(listed)})")


def validate_memory(cfg) -> None:
    """Lengths whose tensors cannot fit in this machine's memory stop here, before allocating."""
    import psutil

    if cfg.exp.name not in WHOLE_SEQUENCE:  # needle_4m, multihop and serving plan each length against
        return  # memory (attnbench.evaluation.fit), the cost experiments against bench.max_call_s
    trains = cfg.exp.name == "smoke"  # kv_memory's prefill has no gradient: half the bound
    need, have = smoke_bytes(cfg) // (1 if trains else 2), psutil.virtual_memory().total
    if need > have:
        raise ConfigError(
            "exp.seq_len",
            cfg.exp.seq_len,
            f"needs at least {need / 2**30:,.1f} GiB at exp.batch={cfg.exp.batch}; this machine has {have / 2**30:,.1f} GiB",
        )


WEIGHTS_ONLY_ON_META = ("presets",)  # experiments that build their models on the meta device (no memory)


def weight_bytes(cfg) -> int:
    """A lower bound on what the largest model the run builds holds: its fp32 weights (the embedding
    and every layer's experts; attention and norms left out), twice for an experiment that may
    train (the gradients as well: smoke's training step, the experiments that train a missing model)."""
    m = cfg.model
    designs = [n for n in (cfg.exp.designs or cfg.attention) if n in cfg.attention]
    layers = max([cfg.attention[n].n_layers or m.n_layers for n in designs] or [m.n_layers])
    trains = cfg.exp.name == "smoke" or cfg.exp.name in CACHE_USERS
    return (2 if trains else 1) * 4 * (m.vocab_size * m.d_model + layers * m.n_experts * 2 * m.d_model * m.d_expert)


def check_ranges(node, where: str = "") -> None:
    """Every numeric field (and each item of a list or dict of numbers) inside its declared range
    (ranges.range_of: RANGES, or a design setting's own): nan, inf and out-of-range values stop
    here, naming the field."""
    import dataclasses

    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, ListConfig):
        for i in range(len(node)):
            check_ranges(node._get_node(i), f"{where}[{i}]")
        return
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    ranges, types = {}, {}
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        fields = dataclasses.fields(schema)
        ranges = {f.name: r for f in fields if (r := range_of(schema, f.name)) is not None}
        types = {f.name: str(f.type) for f in fields}
    for key in node:
        if key == "hydra" and not where:
            continue
        path = f"{where}.{key!s}" if where else str(key)
        if key not in ranges:
            check_ranges(node._get_node(key), path)
            continue
        value = node[key]
        items = (
            [(f"{path}[{i}]", v) for i, v in enumerate(value)]
            if isinstance(value, ListConfig)
            else [(f"{path}.{k!s}", v) for k, v in value.items()]
            if isinstance(value, DictConfig)
            else [(path, value)]
        )
        integer = "int" in types[str(key)] and "float" not in types[str(key)]
        for name, v in items:
            if v is not None and not ranges[key].holds(v):
                raise ConfigError(name, v, ranges[key].describe(integer))


def validate_design(name: str, d, cfg, used: bool = True) -> None:
    """One design's config; ``used``: the run builds it, so its layout must tile its depth. The
    ranges of its settings were checked (check_ranges); each design's settings class checks what
    ties them to the rest of the config (its ``check``, attnbench/specs/settings.py)."""
    where = f"attention.{name}"
    if d.name != name:
        raise ConfigError(f"{where}.name", d.name, f"must equal its key {name!r}")
    bad = sorted(set(d.layout) - set(layout_letters()))
    if not d.layout or bad:
        raise ConfigError(f"{where}.layout", d.layout, f"one letter a layer from {layout_letters()} ({describe_letters()})")
    if d.n_layers < 0:
        raise ConfigError(f"{where}.n_layers", d.n_layers, "must be >= 0 (0: model.n_layers)")
    n_layers = d.n_layers or cfg.model.n_layers
    if used and n_layers % len(d.layout):
        raise ConfigError(f"{where}.layout", d.layout, f"length must divide the design's layer count {n_layers} (it is tiled)")
    for settings in settings_classes():
        if hasattr(settings, "check"):
            settings.check(d, where, cfg)


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

    known_top = {f.name for f in dataclasses.fields(RootConfig)} | {"hydra"}
    for key in cfg:
        if key not in known_top:
            raise ConfigError(str(key), cfg[key], f"unknown top-level key; allowed: {', '.join(sorted(known_top - {'hydra'}))}")
    _no_unknown_keys(cfg, "")

    if cfg.exp.name not in EXPERIMENTS:
        raise ConfigError("exp", cfg.exp.name or None, f"choose one with +exp=NAME: {', '.join(sorted(EXPERIMENTS))}")
    check_ranges(cfg)
    m = cfg.model
    for key in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_experts", "top_k_experts", "d_expert", "vocab_size"):
        positive(f"model.{key}", getattr(m, key))
    if m.n_heads % m.n_kv_heads:
        raise ConfigError("model.n_kv_heads", m.n_kv_heads, f"must divide model.n_heads={m.n_heads}")
    if m.top_k_experts > m.n_experts:
        raise ConfigError("model.top_k_experts", m.top_k_experts, f"must be <= model.n_experts={m.n_experts}")
    if not 0.0 <= m.rotary_frac <= 1.0:
        raise ConfigError("model.rotary_frac", m.rotary_frac, "must be in [0, 1]")
    in_use = set(cfg.exp.designs or cfg.attention) | ({cfg.design} if cfg.design else set())
    for name, d in cfg.attention.items():
        validate_design(name, d, cfg, used=name in in_use)
    known = sorted(cfg.attention)
    validate_designs(cfg)
    if cfg.design is not None and cfg.design not in cfg.attention:
        raise ConfigError("design", cfg.design, f"one of {', '.join(known)}")
    cores = os.cpu_count() or 1
    if not 0 <= cfg.threads <= cores:
        raise ConfigError("threads", cfg.threads, f"0 (torch's default) or 1 .. {cores} (this machine's CPU cores)")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError("seed", cfg.seed, f"an integer in 0 .. {MAX_SEED}")
    duration("exp.budget", cfg.exp.budget)
    for key in ("batch", "seq_len", "prefill_chunk"):
        positive(f"exp.{key}", getattr(cfg.exp, key))
    if cfg.exp.name not in WEIGHTS_ONLY_ON_META:  # first: an impossible model names the model, not exp.seq_len
        import psutil

        need, have = weight_bytes(cfg), psutil.virtual_memory().total
        if need > have:
            raise ConfigError(
                "model",
                f"d_model={m.d_model}, n_layers={m.n_layers}, n_experts={m.n_experts}, d_expert={m.d_expert}, vocab_size={m.vocab_size}",
                f"its fp32 weights (and gradients, where it trains) need at least {need / 2**30:,.1f} GiB; this machine has {have / 2**30:,.1f} GiB",
            )
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


def validate_kernels(k) -> None:
    if not k.min_run_time > 0:
        raise ConfigError("kernels.min_run_time", k.min_run_time, "must be > 0 seconds")
    for part in ("shapes", "dry_run"):
        sh = k[part]
        for key in ("batch", "heads", "kv_heads", "head_dim", "window", "block_size", "top_k", "index_dim"):
            positive(f"kernels.{part}.{key}", sh[key])
        if sh.heads % sh.kv_heads:
            raise ConfigError(f"kernels.{part}.kv_heads", sh.kv_heads, f"must divide kernels.{part}.heads={sh.heads}")
        for key in ("lengths", "grad_lengths", "check_lengths", "check_fwd_lengths"):
            for i, n in enumerate(sh[key]):
                positive(f"kernels.{part}.{key}[{i}]", n)


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
    for key in ("prefill_lens", "decode_lens", "memory_lens"):
        values = list(getattr(b, key))
        if not values:
            raise ConfigError(f"bench.{key}", values, "at least one context length")
        for i, n in enumerate(values):
            positive(f"bench.{key}[{i}]", n)
        if values != sorted(set(values)):
            raise ConfigError(f"bench.{key}", values, "strictly increasing context lengths")
    for key in ("batch", "repeats", "validate_from"):
        positive(f"bench.{key}", getattr(b, key))
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
