"""Keep freed memory in the process's heap, so large tensors are not paged in afresh on every op.

A streaming prefill allocates and frees the same few 1-100 MB activations thousands of times.
glibc's malloc by default maps blocks of 32 MiB and more with mmap and unmaps them on free, and
trims the top of its heap when a large block is freed there: every new tensor then faults its
pages in again (about 2 us a 4 KiB page here), which made the elementwise ops of the hybrid's prefill run
at a fraction of memory speed (experiments/cpu_speedups, case prefill_heap).

``keep_freed_memory()`` raises both thresholds with mallopt: blocks below MMAP_THRESHOLD come
from the heap, and the heap keeps up to TRIM_THRESHOLD of freed memory for the next tensor. Blocks
above MMAP_THRESHOLD (a long KV cache) are still mapped and returned on free, so a run's resident
memory grows by at most TRIM_THRESHOLD over its working set. Written here because no library
exposes mallopt, and glibc's MALLOC_*_ environment variables are read only at process start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

MMAP_THRESHOLD = 256 << 20  # bytes: larger blocks are still mmapped (returned to the system on free)
TRIM_THRESHOLD = 1 << 30  # bytes of freed memory the heap may keep
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def keep_freed_memory() -> bool:
    """Set glibc's malloc thresholds for this process. True if set; False where it does not apply
    (not Linux, or a C library other than glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
