"""The fixed sets a config value is one of, as ``enum.StrEnum`` types of the schema's fields.

OmegaConf checks an Enum-typed field while Hydra composes (``device=gpu`` fails there, and the
CLI turns it into the one-line ``device='gpu': one of auto, cpu, cuda``). A member's name is
its value, so OmegaConf (which converts a string by member name) and YAML dumps see the plain
string, and because a StrEnum is a ``str``, comparisons (``cfg.device == "cpu"``), f-strings and
JSON (config hashes, checkpoint keys, records) give the plain string too: nothing serialises
differently from the ``str`` fields they replace.

Sets that are written once elsewhere are read from there: backends from attnbench/names.py
(leaf data, shared with kernels/backend.py), kernel ops from the design registry, task variants
from the task generator (numpy only); a design's own sets (the softmax layers' Position, msa's
IndexPool) are declared with its settings in its spec. Nothing this package imports loads torch, a model or an
experiment (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import cast

from attnbench.designs import kernel_ops
from attnbench.names import BACKENDS, HOP_TASKS, NIAH_VARIANTS


def choices(name: str, values) -> type[StrEnum]:
    """A StrEnum whose members are named by their values (what OmegaConf converts by)."""
    return cast(type[StrEnum], StrEnum(name, {v: v for v in values}, module=__name__))


Device = choices("Device", ("auto", "cpu", "cuda"))
Backend = choices("Backend", BACKENDS)  # kernel backend of every op (attnbench/names.py, kernels/backend.py)
Haystack = choices("Haystack", ("noise", "markov"))  # i.i.d. filler, or a fixed random bigram language
NiahVariant = choices("NiahVariant", NIAH_VARIANTS)
HopTask = choices("HopTask", HOP_TASKS)
# train.parallel: one process, or one model across the processes torchrun (or a SLURM job
# through submitit) starts: DistributedDataParallel, or FSDP2's fully_shard.
Parallel = choices("Parallel", ("none", "ddp", "fsdp"))
Dtype = choices("Dtype", ("float32", "bfloat16", "float16", "float8"))  # memory tables, hardware peak rates
TorchDtype = choices("TorchDtype", ("float32", "float16", "bfloat16"))  # what ops are timed and checked in
BenchScope = choices("BenchScope", ("op", "layer"))  # time ops alone, or whole layers
KernelOp = choices("KernelOp", kernel_ops())  # attnbench/designs.py (an Enum: the ops registered at import)
KernelBaseline = choices("KernelBaseline", ("sdpa", "flash_attn", "flex", "fla", "reference"))
WandbMode = choices("WandbMode", ("offline", "online", "disabled"))
LockMode = choices("LockMode", ("wait", "refuse"))  # another run holds the run directory (attnbench/records/rundir.py)

MAX_SEED = 2**32 - 1  # numpy's seed range (attnbench.runner.seed_everything seeds numpy too)
