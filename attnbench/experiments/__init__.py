"""Experiments, one module each with ``run(ctx: RunContext)``; ``exp.name`` picks one.

The registry maps names to modules of this package only: a config can never make attnbench
import or call anything else.
"""

from __future__ import annotations

import importlib

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
    "presets": "attnbench.experiments.presets",
    "serving": "attnbench.experiments.serving",
}

# Experiments that read and write $ATTNBENCH_CACHE (checkpoints, task samples), by their runner
# module: the CLI checks that the cache directory is writable before they start.
CACHE_USERS = tuple(
    name
    for name, module in EXPERIMENTS.items()
    if module.rsplit(".", 1)[1] in ("train", "needle_4m", "multihop", "capacity", "serving", "scale")
)

# Experiments whose measurements mean something only on CUDA (conf/exp/train_gpu.yaml sets
# device=cuda). Where torch sees no CUDA device they still run, on the CPU, and record every
# design ``skipped`` with the reason (train.run), so CI runs every experiment end to end.
NEEDS_CUDA = ("train_gpu",)


def runner(name: str):
    return importlib.import_module(EXPERIMENTS[name]).run
