"""exp=kernels_cpu: how much faster than causal SDPA is each plain-torch reference, on this machine?

The references are what every CPU user runs. For each T in kernels.shapes.lengths, in this one
process: causal SDPA (the baseline, GQA), then lightning, sliding window and msa (selection plus
attention; the two parts are also timed alone), all forward, fp32, same B / H / Hkv / D. SDPA and the ops are timed call by call in turn (bench.timing.time_alternating: rounds of one
block of calls each), so drift hits both sides of every ratio, and each speedup is the median of
the round-by-round ratios with its spread; every timing is a median of at least 5 rounds, and every cell
records os.getloadavg() before and after (`noisy` when half a core above the core count), because the CPU
may be shared. Each timing also records its achieved GFLOP/s (the cost model's FLOP count of
the op) and its fraction of its roofline: the cost model's FLOPs at the fp32 matmul peak
calibrated at the start of the run for the threads used (``roofline_s``, ``peak_fraction``).
Beside it, the two-term roofline (bench.timing.two_term): the op's minimal FLOPs and bytes (the
cost model's fused kernel: inputs read once, outputs written once, msa's selected blocks), its
arithmetic intensity, which of compute and memory bounds it at the calibrated peak and copy
bandwidth, and its fraction of that limit (``min_flops``, ``min_bytes``, ``intensity``, ``bound``,
``limit_s``, ``limit_fraction``): a fraction of the matmul peak alone misjudges memory-bound work.

Beside each reference, the op's fused native CPU kernel where it has one (``backend=native``,
kernels/<op>/native.cpp, built on first use; timed in the same rounds, its own check first): a
build that fails is recorded ``skipped`` with its reason.

Correctness first: each op is checked at kernels.shapes.check_lengths against its naive truth
(kernels/<op>/naive.py, dense, in float64; msa with its naive selection) by the rule of
kernels/tolerance.py, plain torch being the same naive formula in the dtype checked; an op that
fails is recorded ``failed`` and never timed.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Callable

import torch

from attnbench.bench import costmodel
from attnbench.bench import ops as O
from attnbench.bench.timing import Timing, efficiency, round_ratios, time_alternating, time_fn, two_term
from attnbench.designs import BASELINE_OP, kernel_ops, spec_of_op
from attnbench.kernels import tolerance
from attnbench.kernels.backend import has_native_kernel

TIMED = tuple(op for op in kernel_ops() if op != BASELINE_OP)  # the baseline is timed as causal SDPA


def shape(cfg, T: int) -> O.Shape:
    s = cfg.kernels.shapes
    return O.Shape(s.batch, s.heads, s.kv_heads, T, s.head_dim, s.window, s.block_size, s.top_k, s.index_dim)


def op_flops(op: str, sh: O.Shape) -> float:
    """The cost model's FLOPs of one forward of op at shape sh (reference implementation)."""
    arch = costmodel.op_arch(op, sh.H, sh.Hkv, sh.D, sh.window, sh.block_size, sh.top_k, sh.index_dim)
    return costmodel.op_cost(op, "prefill", sh.T, arch, batch=sh.B, impl="reference").flops


def op_minimal(op: str, sh: O.Shape) -> tuple[float, float]:
    """(FLOPs, bytes) of one forward of op at shape sh as a fused kernel does it: the least it must compute and move."""
    arch = costmodel.op_arch(op, sh.H, sh.Hkv, sh.D, sh.window, sh.block_size, sh.top_k, sh.index_dim)
    c = costmodel.op_cost(op, "prefill", sh.T, arch, batch=sh.B, impl="fused")
    return c.flops, c.bytes


def _op(name: str) -> str:
    """The op a timed name stands for ("lightning (native)" -> "lightning")."""
    return name.split(" ")[0]


def check(ctx, op: str, T: int, dtype: torch.dtype, backend: str = "reference") -> bool:
    sh = shape(ctx.cfg, T)
    cell = ctx.cell(part="check", op=op, T=T, dtype=str(dtype), **({"backend": backend} if backend != "reference" else {}))
    x = O.make_inputs(op, sh, dtype, ctx.device)
    with torch.no_grad():
        ok, err, torch_err, bound = tolerance.check(O.run(op, backend, x, sh), O.naive(op, x, sh), O.naive(op, x, sh, dtype), dtype)
    cell.record(
        op,
        "kernels/check_err",
        err,
        "abs",
        "measured" if ok else "failed",
        layout="",
        op=op,
        backend=backend,
        dtype=str(dtype).removeprefix("torch."),
        context_len=T,
        tensor="o",
        bound=bound,
        torch_err=torch_err,
        note="forward vs the float64 naive formula",
    )
    cell.commit()
    ctx.console.print(f"  check {op:<15} {backend:<9} T={T:<6} err {err:.2e} <= {bound:.2e}? {'ok' if ok else 'FAILED'}")
    return ok


def timings(ctx, T: int, dtype: torch.dtype, ops: list[str], peak: float | None = None, bandwidth: float | None = None, natives=()) -> None:
    """Time SDPA, ops (their references and, for the ops in natives, their native kernels) at T."""
    cfg, dev = ctx.cfg, ctx.device
    sh = shape(cfg, T)
    cell = ctx.cell(part="time", T=T, dtype=str(dtype), ops=ops)
    if cell.done:
        ctx.console.print(f"  T={T}: already recorded in this run directory; skipped")
        return
    load_before = os.getloadavg()
    dt = str(dtype).removeprefix("torch.")
    common = dict(layout="", scope="op", dtype=dt, context_len=T)

    def report(name: str, backend: str, t) -> None:
        name = _op(name)
        flops = op_flops(name, sh)
        eff = efficiency(flops, t.median_ms / 1e3, peak) if dt == "float32" else {}
        roof = {"roofline_s": flops / peak} if eff and peak else {}  # the op's FLOPs at the calibrated peak
        two = two_term(*op_minimal(name, sh), t.median_ms / 1e3, peak, bandwidth) if dt == "float32" else {}
        cell.record(
            O.design_of(name),
            "latency/prefill_ms",
            t.median_ms,
            "ms",
            op=name,
            backend=backend,
            loadavg=load_before,
            **t.fields(),
            **eff,
            **roof,
            **two,
            **common,
        )
        ctx.console.print(
            f"  T={T:<6} {name:<15} {backend:<9} {t.median_ms:10.1f} ms  [{t.p25_ms:.1f}, {t.p75_ms:.1f}] n={t.n}"
            + (f"  {eff['gflop_per_s']:.1f} GFLOP/s" if eff else "")
            + (f" ({100 * eff['peak_fraction']:.0f}% of its roofline)" if "peak_fraction" in eff else "")
            + (f", {100 * two['limit_fraction']:.0f}% of its {two['bound']}-bound two-term limit" if two else "")
            + ("  NOISY (load > cores + 0.5)" if t.noisy else "")
        )

    def timed(name: str, backend: str, fn) -> float:  # one function alone (FlexAttention after its compile)
        with torch.no_grad():
            t = time_fn(fn, dev, min_run_time=cfg.kernels.min_run_time)
        report(name, backend, t)
        return t.median_ms

    xs, fns, got, rounds = _time_together(cfg, dev, sh, dtype, ops, natives)
    for name, (backend, _) in fns.items():
        report(name, backend, got[name])
    sdpa_ms = got[BASELINE_OP].median_ms
    for name in [*ops, *(f"{op} (native)" for op in ops if op in natives)]:  # each op's speedups: its reference, its native kernel
        op, backend = _op(name), fns[name][0]
        ratio = round_ratios(rounds, BASELINE_OP, name) if rounds else (sdpa_ms / got[name].median_ms, float("nan"), float("nan"))
        cell.record(
            op,
            "kernels/speedup",
            ratio[0],
            "x",
            op=op,
            backend=backend,
            baseline="sdpa",
            phase="fwd",
            loadavg=load_before,
            ratio_p25=ratio[1],
            ratio_p75=ratio[2],
            method="alternating, ratio round by round" if rounds else "each alone",
            **common,
        )
        if backend == "reference" and spec_of_op(op).cpu_flex and "flex" in cfg.kernels.baselines:
            flex(ctx, cell, op, xs[op], sh, sdpa_ms, timed, common, load_before)
    for rec in cell.pending:
        rec["loadavg_after"] = os.getloadavg()
    cell.commit()


def _time_together(
    cfg, dev, sh: O.Shape, dtype: torch.dtype, ops: list[str], natives: tuple[str, ...] = ()
) -> tuple[dict[str, dict], dict[str, tuple[str, Callable[[], object]]], dict[str, Timing], dict[str, list[float]]]:
    """(inputs by op, name -> (backend, call), timings by name, rounds) for SDPA, every op and its parts.

    SDPA and every op call by call in turn (bench.timing.time_alternating): drift in the
    machine hits both sides of every ratio alike; on CUDA, each alone (do_bench syncs and flushes).
    """
    fns: dict[str, tuple[str, Callable[[], object]]] = {}  # name -> (backend, the call)
    xs = {BASELINE_OP: O.make_inputs(BASELINE_OP, sh, dtype, dev)}
    fns[BASELINE_OP] = ("sdpa", partial(O.sdpa_causal, xs[BASELINE_OP]))
    for op in ops:
        xs[op] = x = O.make_inputs(op, sh, dtype, dev)
        fns[op] = ("reference", partial(O.run, op, "reference", x, sh))
        for part, fn in spec_of_op(op).parts(x, sh, "reference").items():  # msa: its two parts alone
            fns[part] = ("reference", fn)
        if op in natives:  # the fused native kernel (and its parts), in the same rounds
            fns[f"{op} (native)"] = ("native", partial(O.run, op, "native", x, sh))
            for part, fn in spec_of_op(op).parts(x, sh, "native").items():
                fns[f"{part} (native)"] = ("native", fn)
    with torch.no_grad():
        if dev.type == "cpu":
            got, rounds = time_alternating({n: f for n, (_, f) in fns.items()}, min_run_time=cfg.kernels.min_run_time, repeats=5)
        else:
            got, rounds = {n: time_fn(f, dev, min_run_time=cfg.kernels.min_run_time) for n, (_, f) in fns.items()}, {}
    return xs, fns, got, rounds


def flex(ctx, cell, op, x, sh, sdpa_ms, timed, common, load_before) -> None:
    """Compiled FlexAttention with the op's block mask (a sliding window): forward only (no CPU backward)."""
    import time

    start = time.perf_counter()
    try:
        with torch.no_grad():
            got = O.baseline("flex", op, x, sh)  # compiles (first call)
        if got is None:
            raise RuntimeError(f"flex has no {op} kernel")
        fn = got[0]
    except Exception as ex:  # noqa: BLE001 - torch.compile can fail in many ways
        cell.record(
            op, "latency/prefill_ms", None, "ms", "skipped", op=op, backend="flex", note=f"{type(ex).__name__}: {ex}"[:300], **common
        )
        return
    cell.record(op, "kernels/compile_s", time.perf_counter() - start, "s", op=op, backend="flex", **common)
    ms = timed(op, "flex", fn)
    cell.record(
        op, "kernels/speedup", sdpa_ms / ms, "x", op=op, backend="flex", baseline="sdpa", phase="fwd", loadavg=load_before, **common
    )


def _column(r: dict) -> str:
    return f"{r['op']} ({r['backend']})" if r.get("backend") in ("flex", "native") else r["op"]


def summary(ctx) -> str:
    """A markdown table of this run directory's timings: ms and speedup over causal SDPA."""
    from attnbench.records.read import load_records

    recs = [r for r in load_records([ctx.recorder.path]) if r["status"] == "measured"]
    ms = {(_column(r), r["context_len"]): r for r in recs if r["metric"] == "latency/prefill_ms"}
    lengths = sorted({T for _, T in ms})
    columns = [
        c
        for op in TIMED
        for c in (op, f"{op} (native)", f"{op} (flex)", *(f"{p}{n}" for p in spec_of_op(op).part_names for n in ("", " (native)")))
    ]  # an op, its twins, its parts
    ops = [BASELINE_OP] + [c for c in columns if any(o == c for o, _ in ms)]
    label = {BASELINE_OP: "causal SDPA"}
    head = "| T | " + " | ".join((label.get(op) or op) + " ms (x)" for op in ops) + " | load avg |"
    lines = [head, "|" + "---|" * (len(ops) + 2)]
    eff = [
        "",
        "Achieved GFLOP/s (fraction of the calibrated fp32 matmul peak), by the cost model's FLOP count:",
        "",
        "| T | " + " | ".join((label.get(op) or op) for op in ops) + " |",
        "|" + "---|" * (len(ops) + 1),
    ]
    noisy = False
    for T in lengths:
        base = ms.get((BASELINE_OP, T))
        cells, rates = [], []
        for op in ops:
            r = ms.get((op, T))
            mark = "*" if r is not None and r.get("noisy") else ""
            noisy |= bool(mark)
            if r is None:
                cells.append("-")
            elif op == BASELINE_OP or base is None:
                cells.append(f"{r['value']:.1f}{mark}")
            else:
                cells.append(f"{r['value']:.1f} ({base['value'] / r['value']:.1f}x){mark}")
            rates.append(
                "-"
                if r is None or "gflop_per_s" not in r
                else f"{r['gflop_per_s']:.1f}" + (f" ({100 * r['peak_fraction']:.0f}%)" if "peak_fraction" in r else "")
            )
        load = base["loadavg"] if base else None
        lines.append(f"| {T} | " + " | ".join(cells) + f" | {', '.join(f'{v:.2f}' for v in load) if load else '-'} |")
        eff.append(f"| {T} | " + " | ".join(rates) + " |")
    if noisy:
        lines += ["", "\\* noisy: the load average exceeded the core count by half a core while this was timed (an upper bound)."]
    return "\n".join(lines + eff) + "\n"


def _native_ok(ctx, op: str, dtype: torch.dtype) -> bool:
    """Whether op's native kernel builds and passes its checks; a build that fails is recorded ``skipped``."""
    if not has_native_kernel(op):
        return False
    import importlib

    built = importlib.import_module(f"attnbench.kernels.{op}.native").extension()
    if isinstance(built, str):
        ctx.record(op, "latency/prefill_ms", None, "ms", "skipped", key=("op", "backend"), layout="", op=op, backend="native", note=built)
        ctx.console.print(f"  {op} native kernel: {built}; not timed")
        return False
    return all(check(ctx, op, T, dtype, "native") for T in ctx.cfg.kernels.shapes.check_lengths)


def run(ctx) -> None:
    from attnbench.bench.calibrate import hardware_for_run

    kc = ctx.cfg.kernels
    torch.manual_seed(ctx.cfg.seed)
    hw = hardware_for_run(ctx) if ctx.device.type == "cpu" else None
    peak = hw.flops.get("float32") if hw else None  # fp32 matmul peak, run's threads
    bandwidth = hw.mem_bandwidth if hw else None  # copy bandwidth, the same process
    for dt_name in kc.dtypes:
        dtype = O.DTYPES[dt_name]
        ok = [op for op in kc.ops if op in TIMED and all(check(ctx, op, T, dtype) for T in kc.shapes.check_lengths)]
        for op in sorted(set(kc.ops) & set(TIMED) - set(ok)):
            ctx.record(
                op,
                "latency/prefill_ms",
                None,
                "ms",
                "skipped",
                key=("op", "dtype"),
                layout="",
                op=op,
                dtype=str(dtype).removeprefix("torch."),
                backend="reference",
                note="its check against the naive formula failed: never timed",
            )
        natives = tuple(op for op in ok if ctx.device.type == "cpu" and _native_ok(ctx, op, dtype))
        for T in kc.shapes.lengths:
            timings(ctx, T, dtype, ok, peak, bandwidth, natives)
    text = summary(ctx)
    (ctx.run_dir / "summary.md").write_text(text)
    ctx.console.print(text)
