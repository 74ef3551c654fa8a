"""The one backend switch for every op in ``attnbench.kernels``.

Backends:
  ``reference``  the fast plain-torch path (kernels/<op>/reference.py), the one used on CPU.
                 (The truth of each op is kernels/<op>/naive.py, which is no backend.)
  ``triton``     Triton kernels (kernels/<op>/triton.py): for CUDA devices, or the CPU under
                 ``TRITON_INTERPRET=1`` (tests only: ~1 ms per program).
  ``auto``       triton on a CUDA device when the op has a Triton kernel and triton imports,
                 the reference everywhere else; except softmax, whose reference (SDPA, i.e.
                 FlashAttention on CUDA) is the fast path everywhere: its Triton kernel is the
                 like-for-like baseline of the other kernels, chosen only by name.

The choice is made here and only here; the model never asks "use triton?". Tests and the
CLI can force a backend for every ``auto`` call with :func:`force` or ``ATTNBENCH_BACKEND``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from functools import lru_cache
from typing import Callable, Iterator

import torch

BACKENDS = ("auto", "reference", "triton")
OPS = ("softmax", "lightning", "sliding_window", "msa")
AUTO_TRITON = ("lightning", "sliding_window", "msa")  # ops whose Triton kernel "auto" prefers on CUDA

_forced: str | None = None


def _env_forced() -> str | None:
    value = os.environ.get("ATTNBENCH_BACKEND") or None
    if value is not None and value not in BACKENDS:
        raise ValueError(f"ATTNBENCH_BACKEND={value!r}: allowed {', '.join(BACKENDS)}")
    return None if value == "auto" else value


@contextlib.contextmanager
def force(backend: str | None) -> Iterator[None]:
    """Make every ``backend="auto"`` call use ``backend`` inside the block (tests, CLI)."""
    global _forced
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: allowed {', '.join(BACKENDS)}")
    previous, _forced = _forced, (None if backend == "auto" else backend)
    try:
        yield
    finally:
        _forced = previous


@lru_cache(maxsize=None)
def has_triton_kernel(op: str) -> bool:
    """True when triton imports and kernels/<op>/triton.py exists."""
    if importlib.util.find_spec("triton") is None:
        return False
    return importlib.util.find_spec(f"attnbench.kernels.{op}.triton") is not None


def choose(op: str, backend: str, device: torch.device) -> str:
    """Resolve ``backend`` for ``op`` on ``device`` to ``"reference"`` or ``"triton"``."""
    if op not in OPS:
        raise ValueError(f"op={op!r}: allowed {', '.join(OPS)}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: allowed {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = _forced or _env_forced() or "auto"
    if backend == "auto":
        return "triton" if device.type == "cuda" and op in AUTO_TRITON and has_triton_kernel(op) else "reference"
    if backend == "triton" and not has_triton_kernel(op):
        raise NotImplementedError(
            f"backend='triton' for op {op!r}: no Triton kernel is available "
            "(triton not installed, or kernels/{op}/triton.py missing)"
        )
    return backend


def implementation(op: str, name: str, backend: str, device: torch.device) -> Callable:
    """The function ``name`` of ``op`` for the resolved backend (triton imported lazily)."""
    chosen = choose(op, backend, device)
    module = importlib.import_module(f"attnbench.kernels.{op}.{'reference' if chosen == 'reference' else 'triton'}")
    return getattr(module, name)
