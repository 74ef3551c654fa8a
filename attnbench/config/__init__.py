"""The run config: typed schema (schema.py, with the fixed sets in choices.py and the numeric
ranges in ranges.py) and start-of-run validation (validate.py). ``from attnbench.config import X`` keeps working for every name here."""

from __future__ import annotations

from .choices import (
    MAX_SEED,
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
from .schema import (
    STAGE_ADDED_AT_DEFAULT,
    TRAIN_ADDED_AT_DEFAULT,
    TRAIN_EXECUTION,
    BenchConfig,
    DesignConfig,
    EvalConfig,
    ExpConfig,
    HardwareConfig,
    KernelsConfig,
    KernelShapes,
    ModelConfig,
    ReportConfig,
    RootConfig,
    StageConfig,
    TaskConfig,
    TrainConfig,
    WandbConfig,
    default_stages,
    execution_free,
    register,
)
from .errors import ConfigError, parse_duration
from .validate import (
    hardware_profiles,
    smoke_bytes,
    validate,
    validate_bench,
    validate_design,
    validate_hardware,
    validate_kernels,
    validate_memory,
)
from .validate_tasks import validate_tasks


def selected_designs(cfg) -> list[str]:
    """The designs this run covers: exp.designs (all when empty), narrowed by `design=`."""
    names = list(cfg.exp.designs) or sorted(cfg.attention)
    if cfg.design is not None:
        names = [cfg.design]
    return names


__all__ = [
    "MAX_SEED",
    "STAGE_ADDED_AT_DEFAULT",
    "TRAIN_ADDED_AT_DEFAULT",
    "TRAIN_EXECUTION",
    "Backend",
    "BenchScope",
    "Device",
    "Dtype",
    "Haystack",
    "HopTask",
    "KernelBaseline",
    "KernelOp",
    "LockMode",
    "NiahVariant",
    "Parallel",
    "TorchDtype",
    "WandbMode",
    "BenchConfig",
    "DesignConfig",
    "EvalConfig",
    "ExpConfig",
    "HardwareConfig",
    "KernelsConfig",
    "KernelShapes",
    "ModelConfig",
    "ReportConfig",
    "RootConfig",
    "StageConfig",
    "TaskConfig",
    "TrainConfig",
    "WandbConfig",
    "ConfigError",
    "default_stages",
    "execution_free",
    "hardware_profiles",
    "parse_duration",
    "register",
    "selected_designs",
    "smoke_bytes",
    "validate",
    "validate_bench",
    "validate_design",
    "validate_hardware",
    "validate_kernels",
    "validate_memory",
    "validate_tasks",
]
