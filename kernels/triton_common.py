"""What every Triton kernel module shares: device checks, dtype rules, tile sizes.

Imported only by kernels/<op>/triton.py, so only when backend="triton" is chosen (triton is a
Linux x86-64 dependency; the CPU path never imports it).

Dtype rule of every kernel here: loads keep the input dtype (fp32, fp16 or bf16), products
accumulate in fp32, softmax statistics and linear-attention states are fp32, and fp32 inputs
multiply in full fp32 ("ieee", never TF32). Two exceptions exist only under Triton's CPU
interpreter (TRITON_INTERPRET=1, used by the tests): its bf16 arithmetic is wrong and its
fp32 -> bf16 stores truncate, so with bf16 inputs the kernels upcast their loads to fp32 and
write fp32 buffers that torch rounds to bf16 (``upcast``, ``store_dtype``).
"""

from __future__ import annotations

import os

import torch


def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter (read when a kernel is defined)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_device(*tensors: torch.Tensor) -> None:
    """Triton kernels need CUDA tensors, or CPU tensors under TRITON_INTERPRET=1, of a supported dtype."""
    for x in tensors:
        if x is None:
            continue
        if x.device.type != "cuda" and not interpreting():
            raise RuntimeError(
                f"backend='triton' got a {x.device.type} tensor: Triton kernels run on a CUDA device, "
                "or on CPU under TRITON_INTERPRET=1 (tests only, ~1 ms per program); use backend='reference' on CPU"
            )
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32):
            raise TypeError(
                f"backend='triton' supports fp32, fp16 and bf16 tensors (int64 and int32 for indices "
                f"such as msa's block_idx); got {x.dtype}"
            )


def upcast(dtype: torch.dtype) -> bool:
    """Cast loads to fp32 inside the kernel (bf16 under the interpreter only)."""
    return interpreting() and dtype == torch.bfloat16


def store_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel writes its outputs in (fp32 for bf16 under the interpreter)."""
    return torch.float32 if upcast(dtype) else dtype


def pow2(n: int, least: int = 16) -> int:
    """The next power of two >= max(n, least): tile extents (tl.arange and tl.dot need them)."""
    p = least
    while p < n:
        p *= 2
    return p
