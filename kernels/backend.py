"""The one backend switch for every op in ``attnbench.kernels``.

Backends:
  ``reference``  the fast plain-torch path (kernels/<op>/reference.py), the one used on CPU.
                 (The truth of each op is kernels/<op>/naive.py, which is no backend.)
  ``triton``     Triton kernels (kernels/<op>/triton.py): for CUDA devices, or the CPU under
                 ``TRITON_INTERPRET=1`` (tests only: ~1 ms per program).
  ``native``     fused C++ forward kernels for the CPU (kernels/<op>/native.py and .cpp, built
                 on first use with the machine's gcc), chosen by name: an op without one, a
                 gradient, another device or a failed build runs the reference (the reason logged).
  ``auto``       triton on a CUDA device when the op has a Triton kernel and triton imports,
                 the reference everywhere else; except softmax, whose reference (SDPA, i.e.
                 FlashAttention on CUDA) is the fast path everywhere: its Triton kernel is the
                 like-for-like baseline of the other kernels, chosen only by name (the
                 registry's ``triton_on_auto``, attnbench/designs.py).

The choice is made here and only here; the model never asks "use triton?". It is made once,
not per call: ``ATTNBENCH_BACKEND`` is read on first use, the CLI forces ``backend=`` for the
whole run with :func:`force` at its start, and each (op, backend, device type) resolves once
and is cached with the function it picks. :func:`reset` forgets all of it (tests that change
the environment).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from functools import lru_cache
from typing import Callable, Iterator

import torch

from attnbench.designs import DESIGNS, kernel_ops
from attnbench.names import BACKENDS  # the one list (leaf data): attnbench.config's Backend enum is built from it

_forced: str | None = None
# torch.compile anywhere in attnbench (msa's gathered tiles, the compiled prefill of eval.compile);
# ATTNBENCH_COMPILE=0 runs everything eagerly (the tests: a compile per test shape costs seconds).
COMPILE = os.environ.get("ATTNBENCH_COMPILE", "1") != "0"


# device_paths() is on: ``sync_free`` holds on the CPU too (a list: set without a global statement)
_DEVICE_PATHS = [False]


def sync_free(t: torch.Tensor) -> bool:
    """Whether an op handling ``t`` must take its branch without host reads of device values
    (``.item()``, ``bool(t)``, data-sized outputs): on an accelerator, where each read stalls the
    host until the device's queue drains, or under :func:`device_paths`. On the CPU a read is
    free, and a reference may keep a cheaper data-dependent branch there (none does at present:
    msa's top-k tie repair, the last, became one read-free topk).
    The guard that finds such reads is attnbench/training/sync.py's."""
    return _DEVICE_PATHS[0] or t.device.type != "cpu"


@contextlib.contextmanager
def device_paths() -> Iterator[None]:
    """Take the accelerator's read-free branches on the CPU too (tests: tests/test_sync_free.py)."""
    before = _DEVICE_PATHS[0]
    _DEVICE_PATHS[0] = True
    try:
        yield
    finally:
        _DEVICE_PATHS[0] = before


@lru_cache(maxsize=1)
def env_backend() -> str | None:
    """``ATTNBENCH_BACKEND``, read once per process (None: unset or auto)."""
    value = os.environ.get("ATTNBENCH_BACKEND") or None
    if value is not None and value not in BACKENDS:
        raise ValueError(f"ATTNBENCH_BACKEND={value!r}: allowed {', '.join(BACKENDS)}")
    return None if value == "auto" else value


def reset() -> None:
    """Forget the resolved backends and the environment's choice (tests that change either)."""
    env_backend.cache_clear()
    _resolve.cache_clear()
    _IMPLEMENTATIONS.clear()
    has_triton_kernel.cache_clear()
    has_native_kernel.cache_clear()


@contextlib.contextmanager
def force(backend: str | None) -> Iterator[None]:
    """Make every ``backend="auto"`` call use ``backend`` inside the block (the CLI for a whole run, tests)."""
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


@lru_cache(maxsize=None)
def has_native_kernel(op: str) -> bool:
    """True when kernels/<op>/native.py exists (whether it builds is the kernel's own question)."""
    return importlib.util.find_spec(f"attnbench.kernels.{op}.native") is not None


def choose(op: str, backend: str, device: torch.device) -> str:
    """Resolve ``backend`` for ``op`` on ``device`` to ``"reference"``, ``"triton"`` or ``"native"``."""
    if op not in kernel_ops():  # the registry as it is now (a design registered at run time included)
        raise ValueError(f"op={op!r}: allowed {', '.join(kernel_ops())}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: allowed {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = _forced or env_backend() or "auto"
    return _resolve(op, str(backend), torch.device(device).type)


@lru_cache(maxsize=None)
def _resolve(op: str, backend: str, device_type: str) -> str:
    if backend == "auto":
        auto_triton = any(d.op == op and d.triton_on_auto for d in DESIGNS.values())  # "auto" runs its Triton kernel on CUDA
        return "triton" if device_type == "cuda" and auto_triton and has_triton_kernel(op) else "reference"
    if backend == "native":  # the CPU's fused kernels where an op has one, its reference elsewhere
        return "native" if has_native_kernel(op) else "reference"
    if backend == "triton" and not has_triton_kernel(op):
        raise NotImplementedError(
            f"backend='triton' for op {op!r}: no Triton kernel is available (triton not installed, or kernels/{{op}}/triton.py missing)"
        )
    return backend


def for_layout(layout: str, backend: str, device: torch.device) -> dict[str, str]:
    """{op: the backend it runs with} for the layers of a layout string (attnbench/designs.py letters)."""
    ops = sorted({op for c in layout if (op := DESIGNS[c].op) is not None})  # preset-only letters have no op
    return {op: choose(op, backend, device) for op in ops}


def label(ran: dict[str, str]) -> str:
    """Records' ``backend`` of a model from {op: backend that ran}: one name when every op agrees,
    else "op:backend" pairs ("lightning:triton,softmax:reference")."""
    kinds = set(ran.values())
    return kinds.pop() if len(kinds) == 1 else ",".join(f"{op}:{b}" for op, b in sorted(ran.items()))


# (op, name, backend asked, forced backend, device type) -> the function. A plain dict, not an
# lru_cache, so torch.compile reads a call's function from it and traces into the op (it cannot
# trace the import behind a first lookup; Model.compile_prefill looks every op up before compiling).
_IMPLEMENTATIONS: dict[tuple, Callable] = {}


def implementation(op: str, name: str, backend: str, device: torch.device) -> Callable:
    """The function ``name`` of ``op`` for the resolved backend (triton imported lazily)."""
    key = (op, name, backend, _forced, device.type)
    fn = _IMPLEMENTATIONS.get(key)
    if fn is None:
        fn = _IMPLEMENTATIONS[key] = _function(op, name, choose(op, backend, device))
    return fn


@lru_cache(maxsize=None)
def _function(op: str, name: str, chosen: str) -> Callable:
    return getattr(importlib.import_module(f"attnbench.kernels.{op}.{chosen}"), name)
