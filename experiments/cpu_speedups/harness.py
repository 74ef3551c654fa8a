"""What every case of measure.py shares: the old code loaded from git beside the new, the
machine's load, one timed call, old and new calls alternated, and the equality check before timing."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import types
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark

ROOT = Path(__file__).resolve().parents[2]
BASE = "de2a40e"  # main before the 2026-12-01 prefill changes (issue 13)
sys.path.insert(0, str(ROOT / "tests"))


def old_module(path: str, name: str, replace: dict[str, str] | None = None, rev: str = BASE) -> types.ModuleType:
    """kernels/... or attnbench/... at BASE (or rev), loaded as a fresh module (relative imports made absolute)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
    for a, b in (replace or {}).items():
        src = src.replace(a, b)
    mod = types.ModuleType(name)
    mod.__file__ = f"{rev}:{path}"
    sys.modules[name] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def load() -> float:
    return os.getloadavg()[0]


def timed(f) -> float:
    """Seconds of one call of f (torch.utils.benchmark, this process's threads)."""
    return benchmark.Timer(stmt="f()", globals={"f": f}, num_threads=torch.get_num_threads()).timeit(1).median


def alternate(old, new, calls: int, time_one=timed) -> dict:
    """Time old() and new() alternately `calls` times each (one call per measurement); time_one(f)
    gives the seconds of one call (a case that runs each call in its own process passes its own)."""
    if time_one is timed:
        old(), new()  # warm-up (and compile)
    t_old, t_new = [], []
    before = load()
    for _ in range(calls):
        t_old.append(time_one(old))
        t_new.append(time_one(new))
    after = load()
    ratios = [a / b for a, b in zip(t_old, t_new)]
    return {
        "value": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "old_s": statistics.median(t_old),
        "old_s_min": min(t_old),
        "old_s_max": max(t_old),
        "new_s": statistics.median(t_new),
        "new_s_min": min(t_new),
        "new_s_max": max(t_new),
        "calls": calls,
        "load_before": round(before, 2),
        "load_after": round(after, 2),
        "noisy": max(before, after) > (os.cpu_count() or 1),
    }


def close(a, b, what, rtol=1e-4, atol=1e-5):
    a, b = a.detach().double(), b.detach().double()
    err = float(((a - b).abs() - rtol * b.abs()).max())
    if err > atol:
        raise AssertionError(f"{what}: old and new disagree by {err:.3g} beyond rtol {rtol}")


# ---------------------------------------------------------------- cases
