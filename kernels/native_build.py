"""Build the CPU's native kernels (kernels/<op>/native.cpp) on first use, and say why not where they cannot be.

torch.utils.cpp_extension compiles each with the machine's gcc and ninja (``-O3 -march=native``:
AVX2/FMA where the CPU has them, plain loops elsewhere) into torch's extension cache, about a
minute once per machine and source. ``load`` returns the module, or a one-line reason (a str)
that the op's native.py logs before it runs the reference instead. ATTNBENCH_NATIVE=0 turns
every native kernel off.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)
KERNELS = Path(__file__).parent
_said: set[tuple[str, str]] = set()


@lru_cache(maxsize=None)
def load(op: str):
    """kernels/<op>/native.cpp built (the module), or the reason it is not (a str)."""
    if os.environ.get("ATTNBENCH_NATIVE", "1") == "0":
        return "ATTNBENCH_NATIVE=0"
    try:
        from torch.utils import cpp_extension

        return cpp_extension.load(
            name=f"attnbench_{op}_native",
            sources=[str(KERNELS / op / "native.cpp")],
            extra_include_paths=[str(KERNELS)],  # native_gemm.h, the kernels' shared micro-kernel
            extra_cflags=["-O3", "-march=native", "-ffp-contract=fast"],
            verbose=False,
        )
    except Exception as ex:  # noqa: BLE001 - a compiler, ninja or header problem: any of them means "use the reference"
        text = str(ex).strip()
        return f"build failed: {type(ex).__name__}: {text.splitlines()[-1] if text else ''}"[:300]


def why_not(op: str, built, q: torch.Tensor, *tensors: torch.Tensor | None) -> str | None:
    """None when op's native kernel runs for these inputs, else the reason the reference runs
    (logged once per op and reason). built: load(op)'s answer."""
    if q.device.type != "cpu":
        reason = f"device {q.device.type} (a CPU kernel)"
    elif torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, *tensors)):
        reason = "a gradient is asked for (forward only)"
    elif isinstance(built, str):
        reason = built
    else:
        return None
    if (op, reason) not in _said:
        _said.add((op, reason))
        log.warning("%s native kernel not used (%s): the reference runs", op, reason)
    return reason
