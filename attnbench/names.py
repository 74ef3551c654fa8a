"""Names as leaf data: the fixed sets a config value is checked against, each written once.

Config validation (attnbench.config), the launcher checks (attnbench.training.distributed) and the
report read these names without importing what they name: this module imports nothing, so
none of them loads torch, a model, a trainer or an experiment's runner to learn a name. The
code the names belong to imports them from here (attnbench.experiments, kernels/backend.py,
model/engine.py), and a test holds the preset names equal to bench/presets.py's table.
"""

from __future__ import annotations

import enum

# exp.name -> the module of attnbench.experiments that runs it (attnbench.experiments.runner
# imports it on demand). Names map only to modules of that package: a config can never make
# attnbench import or call anything else.
EXPERIMENTS = {
    "smoke": "attnbench.experiments.smoke",
    "train": "attnbench.experiments.train",
    "plateau_probe": "attnbench.experiments.train",  # the same runner on the first stage only (conf/exp/plateau_probe.yaml)
    "train_gpu": "attnbench.experiments.train",  # the same runner: model=small on CUDA (conf/exp/train_gpu.yaml)
    "needle_4m": "attnbench.experiments.needle_4m",
    "position_probe": "attnbench.experiments.needle_4m",  # the needle flow on small models (conf/exp/position_probe.yaml)
    "multihop": "attnbench.experiments.multihop",
    "capacity": "attnbench.experiments.capacity",
    "scale": "attnbench.experiments.scale",
    "kernels_cpu": "attnbench.experiments.kernels_cpu",
    "kernels_gpu": "attnbench.experiments.kernels_gpu",
    "kv_memory": "attnbench.experiments.kv_memory",
    "crossover": "attnbench.experiments.crossover",
    "msa_speedup": "attnbench.experiments.msa_speedup",
    "presets": "attnbench.experiments.param_counts",
    "serving": "attnbench.experiments.serving",
    "needle_external": "attnbench.experiments.external",
    "multihop_external": "attnbench.experiments.external",
}
EXTERNAL = tuple(
    name for name, module in EXPERIMENTS.items() if module == "attnbench.experiments.external"
)  # external.model names the model
TRAINER = "attnbench.experiments.train"  # the runner that trains one model (train.parallel needs it)

# Experiments that read and write $ATTNBENCH_CACHE (checkpoints, task samples), by their runner
# module: the CLI checks that the cache directory is writable before they start.
CACHE_USERS = tuple(
    name
    for name, module in EXPERIMENTS.items()
    if module.rsplit(".", 1)[1] in ("train", "needle_4m", "multihop", "capacity", "serving", "scale")
)

# Experiments whose measurements mean something only on CUDA (conf/exp/train_gpu.yaml sets
# device=cuda). Where torch sees no CUDA device they still run, on the CPU, and record every
# design ``skipped`` with the reason (experiments/train.py), so CI runs every experiment end to end.
NEEDS_CUDA = ("train_gpu",)

# The kernel backends of every op (kernels/backend.py decides between them; attnbench.config's
# Backend enum is built from this tuple).
BACKENDS = ("auto", "reference", "triton", "native")

# The production presets of bench/presets.py (its PRESETS table, in order; bench.presets names
# are checked against it: tests/test_layers.py).
PRESETS = ("minimax_text01", "minimax_m1", "minimax_m2", "minimax_m27", "minimax_m3", "deepseek_v32", "gemma3_27b")

# The storage formats a serving cache may be kept in (model/engine.py; exp=serving and its tables).
SERVING_FORMATS = ("float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")

# the task generators (tasks/generate.py): needle variants and multi-hop tasks
NIAH_VARIANTS = ("single", "multikey", "multivalue", "multiquery")
HOP_TASKS = ("chain", "vartrack")


class SkipReason(enum.Enum):
    """Why a cell, or a haystack of it, was skipped: the plan's three reasons, and LATE. Its value
    is recorded as the skip record's ``skip_reason`` (the report reads it, not the note)."""

    MEMORY = "memory"  # a haystack needs more memory than allowed
    BUDGET = "budget"  # the budget left, or its design's share of it, does not cover the cell
    UNLEARNED = "unlearned"  # its design passed no curriculum stage: its long cells got only the leftovers
    LATE = "late"  # a planned haystack the budget left no longer covered when its turn came (GridRun.skip_late)
