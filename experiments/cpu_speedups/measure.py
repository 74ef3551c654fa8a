"""Old vs new code paths, timed side by side in one process (issue 13): ratios, not absolutes.

    python experiments/cpu_speedups/measure.py CASE [CASE ...] [--calls N] [--out PATH]

The "old" code is read from git at BASE (the commit issue 13 started from) and loaded as a
module beside the current one, so both run in the same process, on the same inputs, with the
same threads. Calls alternate old, new, old, new ... so a change of machine load hits both;
the speedup is the median over pairs of old_s / new_s, with its spread (min, max). Every
record carries the 1-minute load average before and after, and `noisy` when it exceeded the
core count. Outputs are checked equal (fp32 tolerance) before anything is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
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
    return {"value": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "old_s": statistics.median(t_old), "old_s_min": min(t_old), "old_s_max": max(t_old),
            "new_s": statistics.median(t_new), "new_s_min": min(t_new), "new_s_max": max(t_new),
            "calls": calls, "load_before": round(before, 2), "load_after": round(after, 2),
            "noisy": max(before, after) > (os.cpu_count() or 1)}


def close(a, b, what, rtol=1e-4, atol=1e-5):
    a, b = a.detach().double(), b.detach().double()
    err = float(((a - b).abs() - rtol * b.abs()).max())
    if err > atol:
        raise AssertionError(f"{what}: old and new disagree by {err:.3g} beyond rtol {rtol}")


# ---------------------------------------------------------------- cases


def msa_train_layer(calls: int, B: int = 16, T: int = 1024):
    """One msa layer's training ops, forward + backward: msa_attn and the index KL (tiny model
    shapes: H 2, Hkv 1, D 32, Di 32, block 16, top 4)."""
    from attnbench.kernels.msa import reference as new
    from attnbench.model.msa import index_kl, index_kl_dense

    old = old_module("kernels/msa/reference.py", "old_msa_reference",
                     {"from ..softmax.reference import": "from attnbench.kernels.softmax.reference import"})
    H, G, D, Di, bs, k = 2, 1, 32, 32, 16, 4
    g = torch.Generator().manual_seed(0)
    q, kk, v = (torch.randn(B, h, T, D, generator=g, requires_grad=True) for h in (H, G, G))
    iq = torch.randn(B, G, T, Di, generator=g, requires_grad=True)
    ik = torch.randn(B, T, Di, generator=g, requires_grad=True)
    idx = new.msa_select(iq, ik, bs, k)
    scale = 1 / math.sqrt(D)

    def step(attn, kl):
        def run():
            o = attn(q, kk, v, idx, bs, scale=scale)
            loss = (o * o).mean() + kl(q.detach(), kk.detach(), iq, ik, idx, bs, scale)
            grads = torch.autograd.grad(loss, [q, kk, v, iq, ik])
            return o, loss, grads
        return run

    o_step, n_step = step(old.msa_attn, index_kl_dense), step(new.msa_attn, index_kl)
    (oo, ol, og), (no, nl, ng) = o_step(), n_step()
    close(no, oo, "o"), close(nl, ol, "loss")
    for a, b, name in zip(ng, og, ["dq", "dk", "dv", "diq", "dik"]):
        close(a, b, name, atol=1e-6)
    return [dict(design="msa", metric="speedup/msa_train_layer", unit="x", context_len=T, batch=B,
                 what="msa_attn + index KL, forward + backward, one layer (H 2, Hkv 1, D 32, block 16, top 4)",
                 old=f"{BASE}: block-major loop through autograd + dense T x T index KL",
                 new="gathered rows (torch.autograd.Function, compiled tiles) + KL by rows",
                 **alternate(o_step, n_step, calls))]


def msa_train_step(calls: int, B: int = 16, T: int = 1024):
    """A whole training step (forward, loss, backward) of the 8-layer msa task model; and the
    softmax model's step beside it (new code both), for scale."""
    import attnbench.model.msa as model_msa
    from attnbench.kernels.msa import reference as new
    from attnbench.model import Model
    from helpers import compose_cfg

    old = old_module("kernels/msa/reference.py", "old_msa_reference",
                     {"from ..softmax.reference import": "from attnbench.kernels.softmax.reference import"})
    cfg = compose_cfg([])
    x = torch.randint(cfg.model.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))
    models = {}
    for name in ("msa", "softmax"):
        torch.manual_seed(0)
        models[name] = Model(cfg.model, cfg.attention[name]).train()

    def step(name, use_old=False):
        def run():
            saved = new.msa_attn, model_msa.index_kl
            if use_old:
                new.msa_attn, model_msa.index_kl = old.msa_attn, model_msa.index_kl_dense
            try:
                m = models[name]
                m.zero_grad(set_to_none=True)
                out = m(x)
                loss = torch.nn.functional.cross_entropy(out.logits[:, -8:].flatten(0, 1), x[:, -8:].flatten())
                loss = loss + out.balance_loss + out.index_loss
                loss.backward()
                return loss.detach()
            finally:
                new.msa_attn, model_msa.index_kl = saved
        return run

    close(step("msa")(), step("msa", True)(), "loss")
    common = dict(unit="x", context_len=T, batch=B, what="training step: forward, loss, backward (8 layers, tiny model)")
    return [dict(design="msa", metric="speedup/msa_train_step", old=f"{BASE} msa path", new="gathered rows",
                 **common, **alternate(step("msa", True), step("msa"), calls)),
            dict(design="msa", metric="ratio/softmax_over_msa_train_step", old="softmax step (current code)",
                 new="msa step (current code)", **common, **alternate(step("softmax"), step("msa"), calls))]


def lightning_op_16k(calls: int, H: int = 8, D: int = 8, T: int = 16384):
    """lightning_attn forward on one 16K-token prefill chunk of the hybrid: forced short tiles
    against the default tiles (tile_for); same code otherwise. Recorded when `segment=` meant the
    tokens of a segment of all heads (an 8 MiB bound: two segments, against one); since the
    reference's tiles (aa733d3) it means the tokens of a tile of one (batch, head) pair, and the
    labels below say so."""
    from attnbench.kernels.lightning.reference import SEGMENT_BYTES, chunk_for, lightning_attn, segment_for
    from attnbench.model.lightning import decay_rates

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.silu(torch.randn(1, H, T, D, generator=g)) for _ in range(3))
    decay = decay_rates(H, 0, 8)
    old_segment = segment_for(H, chunk_for(D), budget=8 << 20)

    def run(seg):
        return lambda: lightning_attn(q, k, v, decay, segment=seg)

    with torch.no_grad():
        (oo, os_), (no, ns) = run(old_segment)(), run(None)()
        close(no, oo, "o"), close(ns, os_, "state")
        return [dict(design="lightning", metric="speedup/lightning_op", unit="x", context_len=T, heads=H, head_dim=D,
                     what="lightning_attn forward, B 1, contiguous inputs",
                     old=f"tiles of one (batch, head) pair x {old_segment} tokens (segment={old_segment})",
                     new=f"tile_for: all {T} tokens of as many pairs as {SEGMENT_BYTES >> 20} MiB of scores allow",
                     **alternate(run(old_segment), run(None), calls))]


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
    return [dict(design=design, metric="speedup/prefill", unit="x", context_len=n, chunk=chunk,
                 what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
                 old="glibc's default malloc thresholds", new="attnbench.heap.keep_freed_memory()",
                 **alternate(_heap_child(design, n, chunk, keep=False), _heap_child(design, n, chunk, keep=True), calls,
                             time_one=lambda f: f()))]


def _heap_child(design: str, n: int, chunk: int, keep: bool, thp: bool = False):
    """A call of HEAP_CHILD in a fresh process (keep: attnbench.heap's thresholds; thp: torch's
    THP_MEM_ALLOC_ENABLE=1, read once at start): returns its timed prefill's seconds."""
    src = HEAP_CHILD.format(tests=str(ROOT / "tests"), keep=keep, threads=torch.get_num_threads(), design=design, n=n, chunk=chunk)
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | ({"THP_MEM_ALLOC_ENABLE": "1"} if thp else {})
    return lambda: float(subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout.split()[-1])


def prefill_thp(calls: int, design: str = "lightning_hybrid_h8", n: int = 131072, chunk: int = 16384):
    """Model.prefill of n tokens in a fresh process with torch's CPU allocator as it comes against
    one told to back large tensors with transparent huge pages (THP_MEM_ALLOC_ENABLE=1: 2 MiB
    aligned blocks, madvise(MADV_HUGEPAGE); read once at start, so one process a call, as
    prefill_heap). Both keep freed memory (attnbench.heap). On this machine THP is madvise-only,
    so nothing else gets huge pages; a matmul probe had shown per-process spread that THP removed."""
    return [dict(design=design, metric="speedup/prefill", unit="x", context_len=n, chunk=chunk,
                 what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
                 old="torch's CPU allocator as it comes", new="THP_MEM_ALLOC_ENABLE=1 (huge pages for large tensors)",
                 **alternate(_heap_child(design, n, chunk, keep=True), _heap_child(design, n, chunk, keep=True, thp=True), calls,
                             time_one=lambda f: f()))]


PER_EXPERT = "9e2ba07"  # main before the MoE's fixed-size buffers and the compiled prefill

PREFILL_CHILD = """
import sys, time, types, torch
sys.path.insert(0, {tests!r}); sys.path.insert(0, {here!r})
from attnbench.heap import keep_freed_memory
from attnbench.training.trainer import get_model
from helpers import compose_cfg
from measure import old_module
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
    src = HEAP_STATS + PREFILL_CHILD.format(tests=str(ROOT / "tests"), here=str(Path(__file__).parent), threads=torch.get_num_threads(),
                                            design=design, old_moe=old_moe, rev=PER_EXPERT, compiled=compiled, chunk=chunk, n=n)
    return json.loads(subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines()[-1])


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
            out.append(dict(design="lightning_hybrid_h8", metric="heap/free_bytes", unit="bytes", value=r["heap_free_bytes"],
                            context_len=n, chunk=chunk, code="old" if old_moe else "new",
                            what=f"glibc heap after one {'compiled' if compiled else 'eager'} Model.prefill of {n} tokens, fresh process",
                            compiled=compiled,
                            old=f"{PER_EXPERT}: MoE dispatch with buffers of each expert's n_e rows",
                            new="MoE dispatch with buffers of N K rows (sorted by expert)",
                            heap_bytes=r["heap_bytes"], heap_free_blocks=r["heap_free_blocks"], heap_used_bytes=r["heap_used_bytes"],
                            seconds=r["seconds"], first_quarter_s=sum(r["chunk_s"][:q]), last_quarter_s=sum(r["chunk_s"][-q:]),
                            load=round(load(), 2)))
    return out


def prefill_chunks(calls: int, n: int = 1 << 22, chunk: int = 16384):
    """Does a compiled Model.prefill slow down as it goes? One process a call (fresh heap), the
    seconds of each quarter of its chunks. Not a ratio: one record per process."""
    out = []
    for _ in range(calls):
        r = _prefill_run(n, chunk, False, True)
        q = len(r["chunk_s"]) // 4
        quarters = [sum(r["chunk_s"][i * q : (i + 1) * q]) for i in range(4)]
        out.append(dict(design="lightning_hybrid_h8", metric="prefill/seconds", unit="s", value=r["seconds"], context_len=n, chunk=chunk,
                        what=f"one compiled Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, fresh process",
                        quarter_s=quarters, chunk_s=r["chunk_s"], heap_bytes=r["heap_bytes"], load=round(load(), 2)))
        print(f"prefill_chunks: {r['seconds']:.1f} s; quarters " + ", ".join(f"{x:.1f}" for x in quarters), flush=True)
    return out


def moe_fixed_buffers(calls: int, n: int = 1 << 20, chunk: int = 16384):
    """Model.prefill of n tokens (eager), the MoE dispatch with per-expert buffers (PER_EXPERT)
    against fixed-size buffers; one process a call, so each starts from a fresh heap."""
    return [dict(design="lightning_hybrid_h8", metric="speedup/prefill", unit="x", context_len=n, chunk=chunk,
                 what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, eager, one process a call",
                 old=f"{PER_EXPERT}: MoE dispatch with buffers of each expert's n_e rows", new="MoE dispatch with buffers of N K rows (sorted by expert)",
                 **alternate(_prefill_child(n, chunk, True, False), _prefill_child(n, chunk, False, False), calls, time_one=lambda f: f()))]


def prefill_compiled(calls: int, n: int = 1 << 20, chunk: int = 16384):
    """Model.prefill of n tokens, eager against Model.compile_prefill (compiled before the timed
    prefill: the compile time is not in the ratio), both with the fixed-size MoE buffers; one process a call."""
    return [dict(design="lightning_hybrid_h8", metric="speedup/prefill", unit="x", context_len=n, chunk=chunk,
                 what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1, one process a call",
                 old="eager", new="Model.compile_prefill (torch.compile'd lightning blocks, chunks of 16384)",
                 **alternate(_prefill_child(n, chunk, False, False), _prefill_child(n, chunk, False, True), calls, time_one=lambda f: f()))]


def softmax_decode(calls: int, H: int = 8, G: int = 2, D: int = 64, S: int = 65536):
    """One softmax decode step against S cached keys (GQA, a cache reserved longer than S, as the
    model's): SDPA with enable_gqa (the reference before) against each KV group's query heads
    given as that group's queries (softmax_attn now)."""
    import torch.nn.functional as F

    from attnbench.kernels.softmax.reference import softmax_attn

    g = torch.Generator().manual_seed(0)
    kb, vb = (torch.randn(1, G, S + 1024, D, generator=g) for _ in range(2))
    k, v, q = kb[:, :, :S], vb[:, :, :S], torch.randn(1, H, 1, D, generator=g)

    def old():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def new():
        return softmax_attn(q, k, v)

    with torch.no_grad():
        close(new(), old(), "o")
        return [dict(design="softmax", metric="speedup/softmax_decode", unit="x", context_len=S, heads=H, kv_heads=G, head_dim=D,
                     what="softmax_attn, one query against the cache, B 1",
                     old="SDPA with enable_gqa", new="a KV group's query heads as its queries (no enable_gqa)",
                     **alternate(old, new, calls))]


def lightning_op(calls: int, H: int = 8, D: int = 8, T: int = 65536):
    """lightning_attn forward on one prefill chunk (the hybrid's shapes by default)."""
    from attnbench.kernels.lightning import reference as new
    from attnbench.model.lightning import decay_rates

    old = old_module("kernels/lightning/reference.py", "old_lightning_reference")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.silu(torch.randn(1, H, T, D, generator=g)) for _ in range(3))
    decay = decay_rates(H, 0, 8)
    with torch.no_grad():
        (oo, os_), (no, ns) = old.lightning_attn(q, k, v, decay), new.lightning_attn(q, k, v, decay)
    close(no, oo, "o"), close(ns, os_, "state")
    def run(f):
        return lambda: f(q, k, v, decay)

    with torch.no_grad():
        return [dict(design="lightning", metric="speedup/lightning_op", unit="x", context_len=T, heads=H, head_dim=D,
                     what="lightning_attn forward, B 1, contiguous inputs",
                     old=f"{BASE}: chunk 64, segments of 16384 tokens, a loop of cumulative sums per scan group",
                     new=f"chunk_for(D), segment_for ({new.SEGMENT_BYTES >> 20} MiB of scores), one cumulative sum for all scan groups",
                     **alternate(run(old.lightning_attn), run(new.lightning_attn), calls))]


SESSION_4 = "688e523"  # main before the lightning scan / tile and msa remote / selection changes


def lightning_scan(calls: int, H: int = 8, D: int = 64, T: int = 65536, layer: int = 0, layers: int = 2):
    """lightning_attn forward against SESSION_4's: kernels_cpu's shape by default (decay of
    layer 0 of 2, as bench/workloads.py), the hybrid's 16K prefill chunk as lightning_scan_16k."""
    from attnbench.kernels.lightning import reference as new
    from attnbench.model.lightning import decay_rates

    old = old_module("kernels/lightning/reference.py", "old_lightning_reference_s4", rev=SESSION_4)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g) * s for s in (0.1, 0.1, 1.0))
    decay = decay_rates(H, layer, layers)
    with torch.no_grad():
        (oo, os_), (no, ns) = old.lightning_attn(q, k, v, decay), new.lightning_attn(q, k, v, decay)
        close(no, oo, "o"), close(ns, os_, "state")

        def run(f):
            return lambda: f(q, k, v, decay)

        return [dict(design="lightning", metric="speedup/lightning_op", unit="x", context_len=T, heads=H, head_dim=D,
                     what="lightning_attn forward, B 1, contiguous inputs",
                     old=f"{SESSION_4}: float64 cumulative-sum scan, segments across all heads (copied), o assembled by cat",
                     new=f"decay-matrix scan (groups of {new.SCAN_GROUP} chunks), tiles that are contiguous slices, o written in place",
                     **alternate(run(old.lightning_attn), run(new.lightning_attn), calls))]


SESSION_10 = "6fbed1e"  # main before msa's remote pass took -m into its score GEMM (2026-12-04)
MSA_CHANGES = {  # (op, old commit) -> what the old code did, what the new one does
    ("select", SESSION_4): ("token scores as (queries, keys) tiles, max over each row's blocks",
                            "(keys, queries) tiles, max across rows (vectorised along the queries)"),
    ("attn", SESSION_4): ("remote blocks folded in by an online softmax (running max, rescale per block)",
                          "remote blocks added onto the local block's sums (index_add, rescale only past RESCALE_ABOVE)"),
    ("attn", SESSION_10): ("scores minus the gathered reference max in a pass of their own, ones padded per block",
                           "[q, -m] @ [k, 1]^T: the reference max inside the score GEMM; ones padded once per group"),
}


def msa_op(calls: int, op: str = "attn", T: int = 65536, rev: str = SESSION_4):
    """msa_select or msa_attn (no grad) against rev's, at kernels_cpu's shape (B 1, H 8,
    Hkv 2, D 64, index dim 64, block 64, top 8)."""
    from attnbench.kernels.msa import reference as new

    old = old_module("kernels/msa/reference.py", f"old_msa_reference_{rev}", {"from ..": "from attnbench.kernels."}, rev=rev)
    B, H, G, D, Di, bs, k = 1, 8, 2, 64, 64, 64, 8
    g = torch.Generator().manual_seed(0)
    q, kk, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, G, T, D, generator=g), torch.randn(B, G, T, D, generator=g)
    iq, ik = torch.randn(B, G, T, Di, generator=g), torch.randn(B, T, Di, generator=g)
    with torch.no_grad():
        idx = new.msa_select(iq, ik, bs, k)
        if op == "select":
            assert torch.equal(idx, old.msa_select(iq, ik, bs, k)), "old and new selections differ"

            def run(m):
                return lambda: m.msa_select(iq, ik, bs, k)
        else:
            close(new.msa_attn(q, kk, v, idx, bs), old.msa_attn(q, kk, v, idx, bs), "o")

            def run(m):
                return lambda: m.msa_attn(q, kk, v, idx, bs)

        how = MSA_CHANGES[op, rev]
        return [dict(design="msa", metric=f"speedup/msa_{op}", unit="x", context_len=T, heads=H, head_dim=D,
                     what=f"msa_{op} forward (no grad), B 1, H 8, Hkv 2, block 64, top 8",
                     old=f"{rev}: {how[0]}", new=how[1], **alternate(run(old), run(new), calls))]


def msa_select_tiles(calls: int, rows: int, keys: int, T: int = 32768):
    """msa_select with other score tiles (SELECT_ROWS x SELECT_KEYS) against the committed
    512 x 512, both the code at HEAD, at kernels_cpu's shape (index dim 64, block 64, top 8)."""
    B, G, Di, bs, k = 1, 2, 64, 64, 8
    old = old_module("kernels/msa/reference.py", "msa_reference_head", {"from ..": "from attnbench.kernels."}, rev="HEAD")
    new = old_module("kernels/msa/reference.py", f"msa_reference_{rows}_{keys}", {"from ..": "from attnbench.kernels."}, rev="HEAD")
    new.SELECT_ROWS, new.SELECT_KEYS = rows, keys
    g = torch.Generator().manual_seed(0)
    iq, ik = torch.randn(B, G, T, Di, generator=g), torch.randn(B, T, Di, generator=g)
    with torch.no_grad():
        assert torch.equal(new.msa_select(iq, ik, bs, k), old.msa_select(iq, ik, bs, k)), "selections differ"
        return [dict(design="msa", metric=f"speedup/msa_select_tiles_{rows}x{keys}", unit="x", context_len=T, heads=G, head_dim=Di,
                     what="msa_select (no grad), B 1, 2 index heads, index dim 64, block 64, top 8",
                     old=f"HEAD: score tiles of {old.SELECT_ROWS} rows x {old.SELECT_KEYS} keys",
                     new=f"score tiles of {rows} rows x {keys} keys",
                     **alternate(lambda: old.msa_select(iq, ik, bs, k), lambda: new.msa_select(iq, ik, bs, k), calls))]


def moe_forward(calls: int, T: int = 16384):
    """The MoE layer of the tiny backbone on one prefill chunk (no gradient)."""
    import types as _types

    from attnbench.model.moe import MoE
    from helpers import compose_cfg

    old = old_module("attnbench/model/moe.py", "old_moe")
    cfg = compose_cfg([])
    torch.manual_seed(0)
    moe = MoE(cfg.model)
    x = torch.randn(1, T, cfg.model.d_model)
    old_forward = _types.MethodType(old.MoE.forward, moe)
    with torch.no_grad():
        close(moe(x)[0], old_forward(x)[0], "y", rtol=0, atol=0)
        return [dict(design="-", metric="speedup/moe_forward", unit="x", context_len=T, what="MoE layer forward (E 4, top 2)",
                     old=f"{BASE}: one argsort dispatch for all experts, cat, one index_add",
                     new="per expert: nonzero, gather, in-place index_add", **alternate(lambda: old_forward(x), lambda: moe(x), calls))]


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
    return [dict(design=design, metric="speedup/prefill", unit="x", context_len=n, chunk=chunk, old_chunk=old_chunk,
                 what=f"Model.prefill of {n} tokens (the shipped 8-layer tiny model), B 1",
                 old=f"{BASE}: lightning reference and MoE, eval.chunk {old_chunk}", new=f"current, eval.chunk {chunk}",
                 **alternate(run(True), run(False), calls))]


CASES = {"msa_train_layer": msa_train_layer, "msa_train_layer_2048": lambda c: msa_train_layer(c, 16, 2048),
         "msa_train_step": msa_train_step, "lightning_op": lightning_op,
         "lightning_op_kernels": lambda c: lightning_op(c, 8, 64), "lightning_op_h2": lambda c: lightning_op(c, 2, 32),
         "moe_forward": moe_forward, "prefill_hybrid": prefill,
         "lightning_op_16k": lightning_op_16k, "prefill_heap": prefill_heap, "prefill_thp": prefill_thp,
         "softmax_decode": softmax_decode, "softmax_decode_256k": lambda c: softmax_decode(c, S=262144),
         "moe_fixed_buffers": moe_fixed_buffers, "prefill_compiled": prefill_compiled, "heap_growth": heap_growth,
         "heap_growth_compiled": lambda c: heap_growth(c, compiled=True),
         "lightning_scan": lightning_scan, "lightning_scan_16k": lambda c: lightning_scan(c, 8, 8, 16384, 0, 8),
         "msa_remote": msa_op, "msa_attn_fused_m": lambda c: msa_op(c, rev=SESSION_10), "msa_select_rows": lambda c: msa_op(c, "select"), "prefill_chunks": lambda c: prefill_chunks(1),  # one 4M prefill (~2 min)
         **{f"msa_select_tiles_{r}x{k}": (lambda c, r=r, k=k: msa_select_tiles(c, r, k))
            for r, k in ((512, 256), (256, 512), (1024, 256), (256, 1024), (1024, 512))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", choices=sorted(CASES))
    parser.add_argument("--calls", type=int, default=5, help="timed calls of each path (>= 3)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from attnbench.heap import keep_freed_memory
    from attnbench.records.write import Recorder
    from attnbench.basics import stable_hash

    heap = "kept" if keep_freed_memory() else "default"  # as in every attnbench run (attnbench/heap.py)
    config = {"base": BASE, "threads": args.threads, "calls": args.calls, "heap": heap}
    rec = Recorder(args.out, "cpu_speedups", config, stable_hash(config))
    start = time.perf_counter()
    for case in args.cases:
        for r in CASES[case](max(3, args.calls)):
            r = rec.record(layout="-", status="measured", backend="reference", device="cpu", dtype="float32",
                           threads=args.threads, case=case, **r)
            if "ratio_min" not in r:  # not an old/new ratio (heap_growth)
                print(f"{case}: {r['metric']} {r['value']} {r['unit']} ({r.get('code', '')})", flush=True)
                continue
            print(f"{case}: {r['metric']} {r['value']:.2f}x (pairs {r['ratio_min']:.2f}-{r['ratio_max']:.2f}; "
                  f"old {r['old_s']:.3f} s, new {r['new_s']:.3f} s; load {r['load_before']}-{r['load_after']}"
                  f"{', NOISY' if r['noisy'] else ''})", flush=True)
    rec.close("completed", time.perf_counter() - start)


if __name__ == "__main__":
    main()
