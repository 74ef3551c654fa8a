"""Experiments, one module each with ``run(ctx: RunContext)``; ``exp.name`` picks one.

The registry (``EXPERIMENTS``, with ``CACHE_USERS`` and ``NEEDS_CUDA``) is leaf data in
attnbench/names.py, so config validation reads the names without importing a runner; it maps
names to modules of this package only: a config can never make attnbench import or call
anything else.
"""

from __future__ import annotations

import importlib

from attnbench.names import CACHE_USERS, EXPERIMENTS, NEEDS_CUDA

__all__ = ["CACHE_USERS", "EXPERIMENTS", "NEEDS_CUDA", "runner"]


def runner(name: str):
    return importlib.import_module(EXPERIMENTS[name]).run
