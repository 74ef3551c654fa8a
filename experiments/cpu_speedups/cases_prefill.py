"""measure.py's prefill cases: the heap's thresholds, transparent huge pages, the MoE's buffers, chunks, the compiled prefill and the hybrid's whole prefill, each in a fresh process where the heap matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from experiments.cpu_speedups.harness import BASE, ROOT, alternate, close, load, old_module


HEAP_CHILD = """
import sys, time, torch
sys.path.insert(0, {tests!r})
from attnbench.heap import keep_freed_memory
from attnbench.training.trainer import get_model
from helpers import compose_cfg
if {keep}:
    assert keep_freed_memory()
torch.set_num_threads({threads})
cfg = compose_cfg(["+exp=needle_4m"])
model = get_model(cfg, {design!r}, torch.device("cpu")).model.eval()
x = torch.randint(cfg.model.vocab_size, (1, {n}), generator=torch.Generator().manual_seed(0))
def go():
    cache = model.new_cache()
    cache.reserve({n})
    start = time.perf_counter()
    with torch.no_grad():
        for s0 in range(0, {n}, {chunk}):
            model.prefill(x[:, s0 : s0 + {chunk}], cache)
    return time.perf_counter() - start
go()  # warm-up
print(go())
"""


def prefill_heap(calls: int, design: str = "lightning_hybrid_h8", n: int = 262144, chunk: int = 16384):
    """Model.prefill of n tokens in a fresh process with glibc's default malloc settings against
    one that called attnbench.heap.keep_freed_memory() (a process-wide setting, so each timed
    call is its own process: a warm-up prefill, then one timed prefill; processes alternate)."""
    return [
        dict(
            design=design,
            metric="speedup/prefill",
            unit="x",
            context_len=n,
            chunk=chunk,
            what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
            old="glibc's default malloc thresholds",
            new="attnbench.heap.keep_freed_memory()",
            **alternate(_heap_child(design, n, chunk, keep=False), _heap_child(design, n, chunk, keep=True), calls, time_one=lambda f: f()),
        )
    ]


def _heap_child(design: str, n: int, chunk: int, keep: bool, thp: bool = False):
    """A call of HEAP_CHILD in a fresh process (keep: attnbench.heap's thresholds; thp: torch's
    THP_MEM_ALLOC_ENABLE=1, read once at start): returns its timed prefill's seconds."""
    src = HEAP_CHILD.format(tests=str(ROOT / "tests"), keep=keep, threads=torch.get_num_threads(), design=design, n=n, chunk=chunk)
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | ({"THP_MEM_ALLOC_ENABLE": "1"} if thp else {})
    return lambda: float(
        subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout.split()[-1]
    )


def prefill_thp(calls: int, design: str = "lightning_hybrid_h8", n: int = 131072, chunk: int = 16384):
    """Model.prefill of n tokens in a fresh process with torch's CPU allocator as it comes against
    one told to back large tensors with transparent huge pages (THP_MEM_ALLOC_ENABLE=1: 2 MiB
    aligned blocks, madvise(MADV_HUGEPAGE); read once at start, so one process a call, as
    prefill_heap). Both keep freed memory (attnbench.heap). On this machine THP is madvise-only,
    so nothing else gets huge pages; a matmul probe had shown per-process spread that THP removed."""
    return [
        dict(
            design=design,
            metric="speedup/prefill",
            unit="x",
            context_len=n,
            chunk=chunk,
            what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
            old="torch's CPU allocator as it comes",
            new="THP_MEM_ALLOC_ENABLE=1 (huge pages for large tensors)",
            **alternate(
                _heap_child(design, n, chunk, keep=True), _heap_child(design, n, chunk, keep=True, thp=True), calls, time_one=lambda f: f()
            ),
        )
    ]


PER_EXPERT = "9e2ba07"  # main before the MoE's fixed-size buffers and the compiled prefill

PREFILL_CHILD = """
import sys, time, types, torch
sys.path.insert(0, {tests!r}); sys.path.insert(0, {here!r})
from attnbench.heap import keep_freed_memory
from attnbench.training.trainer import get_model
from helpers import compose_cfg
from harness import old_module
assert keep_freed_memory()
torch.set_num_threads({threads})
cfg = compose_cfg(["+exp=needle_4m"])
model = get_model(cfg, {design!r}, torch.device("cpu")).model.eval()
if {old_moe}:  # the per-expert dispatch at PER_EXPERT: one gather, two matmuls and one index_add for each expert's n_e rows
    old = old_module("attnbench/model/moe.py", "old_moe", rev={rev!r})
    for b in model.blocks:
        b.moe.forward = types.MethodType(old.MoE.forward, b.moe)
if {compiled}:
    model.compile_prefill({chunk})
x = torch.randint(cfg.model.vocab_size, (1, {n}), generator=torch.Generator().manual_seed(0))
cache = model.new_cache()
cache.reserve({n})
ends = [time.perf_counter()]
with torch.no_grad():
    for s0 in range(0, {n}, {chunk}):
        model.prefill(x[:, s0 : s0 + {chunk}], cache)
        ends.append(time.perf_counter())
print(json.dumps({{"seconds": ends[-1] - ends[0], "chunk_s": [b - a for a, b in zip(ends, ends[1:])], **heap_stats()}}))
"""

HEAP_STATS = """
import ctypes, json
class _Info(ctypes.Structure):  # glibc's struct mallinfo2 (malloc.h)
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
def heap_stats():
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Info
    m = libc.mallinfo2()
    return {"heap_bytes": m.arena, "heap_free_bytes": m.fordblks, "heap_free_blocks": m.ordblks, "heap_used_bytes": m.uordblks}
"""


def _prefill_run(n: int, chunk: int, old_moe: bool, compiled: bool, design: str = "lightning_hybrid_h8") -> dict:
    """One Model.prefill of n tokens in a fresh process (the heap's history is part of what is
    measured): its seconds, each chunk's seconds, and glibc's heap counters (mallinfo2) after it."""
    src = HEAP_STATS + PREFILL_CHILD.format(
        tests=str(ROOT / "tests"),
        here=str(Path(__file__).parent),
        threads=torch.get_num_threads(),
        design=design,
        old_moe=old_moe,
        rev=PER_EXPERT,
        compiled=compiled,
        chunk=chunk,
        n=n,
    )
    return json.loads(
        subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines()[-1]
    )


def _prefill_child(n: int, chunk: int, old_moe: bool, compiled: bool, design: str = "lightning_hybrid_h8"):
    return lambda: _prefill_run(n, chunk, old_moe, compiled, design)["seconds"]


def heap_growth(calls: int, n: int = 1 << 20, chunk: int = 16384, compiled: bool = False):
    """What the heap holds after one Model.prefill of n tokens from a fresh process (eager, or
    with Model.compile_prefill), with the MoE's per-expert buffers (PER_EXPERT) and with buffers
    of one size; and how much slower the last quarter of the chunks ran than the first. One
    record per process."""
    out = []
    for _ in range(calls):
        for old_moe in (True, False):
            r = _prefill_run(n, chunk, old_moe, compiled)
            q = len(r["chunk_s"]) // 4
            out.append(
                dict(
                    design="lightning_hybrid_h8",
                    metric="heap/free_bytes",
                    unit="bytes",
                    value=r["heap_free_bytes"],
                    context_len=n,
                    chunk=chunk,
                    code="old" if old_moe else "new",
                    what=f"glibc heap after one {'compiled' if compiled else 'eager'} Model.prefill of {n} tokens, fresh process",
                    compiled=compiled,
                    old=f"{PER_EXPERT}: MoE dispatch with buffers of each expert's n_e rows",
                    new="MoE dispatch with buffers of N K rows (sorted by expert)",
                    heap_bytes=r["heap_bytes"],
                    heap_free_blocks=r["heap_free_blocks"],
                    heap_used_bytes=r["heap_used_bytes"],
                    seconds=r["seconds"],
                    first_quarter_s=sum(r["chunk_s"][:q]),
                    last_quarter_s=sum(r["chunk_s"][-q:]),
                    load=round(load(), 2),
                )
            )
    return out


def prefill_chunks(calls: int, n: int = 1 << 22, chunk: int = 16384):
    """Does a compiled Model.prefill slow down as it goes? One process a call (fresh heap), the
    seconds of each quarter of its chunks. Not a ratio: one record per process."""
    out = []
    for _ in range(calls):
        r = _prefill_run(n, chunk, False, True)
        q = len(r["chunk_s"]) // 4
        quarters = [sum(r["chunk_s"][i * q : (i + 1) * q]) for i in range(4)]
        out.append(
            dict(
                design="lightning_hybrid_h8",
                metric="prefill/seconds",
                unit="s",
                value=r["seconds"],
                context_len=n,
                chunk=chunk,
                what=f"one compiled Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, fresh process",
                quarter_s=quarters,
                chunk_s=r["chunk_s"],
                heap_bytes=r["heap_bytes"],
                load=round(load(), 2),
            )
        )
        print(f"prefill_chunks: {r['seconds']:.1f} s; quarters " + ", ".join(f"{x:.1f}" for x in quarters), flush=True)
    return out


def moe_fixed_buffers(calls: int, n: int = 1 << 20, chunk: int = 16384):
    """Model.prefill of n tokens (eager), the MoE dispatch with per-expert buffers (PER_EXPERT)
    against fixed-size buffers; one process a call, so each starts from a fresh heap."""
    return [
        dict(
            design="lightning_hybrid_h8",
            metric="speedup/prefill",
            unit="x",
            context_len=n,
            chunk=chunk,
            what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, eager, one process a call",
            old=f"{PER_EXPERT}: MoE dispatch with buffers of each expert's n_e rows",
            new="MoE dispatch with buffers of N K rows (sorted by expert)",
            **alternate(_prefill_child(n, chunk, True, False), _prefill_child(n, chunk, False, False), calls, time_one=lambda f: f()),
        )
    ]


def prefill_compiled(calls: int, n: int = 1 << 20, chunk: int = 16384):
    """Model.prefill of n tokens, eager against Model.compile_prefill (compiled before the timed
    prefill: the compile time is not in the ratio), both with the fixed-size MoE buffers; one process a call."""
    return [
        dict(
            design="lightning_hybrid_h8",
            metric="speedup/prefill",
            unit="x",
            context_len=n,
            chunk=chunk,
            what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
            old="eager",
            new="Model.compile_prefill (torch.compile'd lightning blocks, chunks of 16384)",
            **alternate(_prefill_child(n, chunk, False, False), _prefill_child(n, chunk, False, True), calls, time_one=lambda f: f()),
        )
    ]


def prefill(calls: int, design: str = "lightning_hybrid_h8", n: int = 262144, chunk: int = 16384, old_chunk: int = 65536):
    """Model.prefill of a shipped-size model over n tokens (old: lightning reference and MoE at BASE, and
    BASE's eval.chunk; the lightning layer's one contiguous copy of q, k, v is in both)."""
    import types as _types

    from attnbench.kernels.backend import _function
    from attnbench.kernels.lightning import reference as lref
    from attnbench.training.trainer import get_model
    from helpers import compose_cfg

    old_l = old_module("kernels/lightning/reference.py", "old_lightning_reference")
    old_m = old_module("attnbench/model/moe.py", "old_moe")
    cfg = compose_cfg(["+exp=needle_4m"])
    model = get_model(cfg, design, torch.device("cpu")).model.eval()  # the shipped model (random weights run slower)
    x = torch.randint(cfg.model.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))

    def run(use_old):
        def go():
            saved = lref.lightning_attn
            if use_old:
                lref.lightning_attn = old_l.lightning_attn
                for b in model.blocks:
                    b.moe.forward = _types.MethodType(old_m.MoE.forward, b.moe)
            _function.cache_clear()  # the backend caches the function it resolved first
            try:
                cache = model.new_cache()
                cache.reserve(n)
                with torch.no_grad():
                    step = old_chunk if use_old else chunk
                    for s0 in range(0, n, step):
                        model.prefill(x[:, s0 : s0 + step], cache)
                return cache
            finally:
                lref.lightning_attn = saved
                _function.cache_clear()
                for b in model.blocks:
                    b.moe.__dict__.pop("forward", None)

        return go

    a, b = run(True)(), run(False)()
    for la, lb in zip(a.layers, b.layers):
        if getattr(la, "state", None) is not None:
            close(lb.state, la.state, "state")
    return [
        dict(
            design=design,
            metric="speedup/prefill",
            unit="x",
            context_len=n,
            chunk=chunk,
            old_chunk=old_chunk,
            what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1",
            old=f"{BASE}: lightning reference and MoE, eval.chunk {old_chunk}",
            new=f"current, eval.chunk {chunk}",
            **alternate(run(True), run(False), calls),
        )
    ]
